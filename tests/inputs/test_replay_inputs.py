"""The replay gate's input (issue 27 items 2 and 7): the ``replay`` section of thresholds.yaml, a request's
``response_format`` and ``tools``, which requests are replayed, and the length check against ``max_model_len``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.replay import check_lengths, load_replay
from evalgate.inputs.requestlog import read_request_log
from evalgate.inputs.thresholds import load_thresholds

CHAT = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def _files(tmp_path: Path, replay: str, *records: object) -> Path:
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(f"alpha: 0.05\ndefault: {{margin: 2.0}}\nreplay: {replay}\n", encoding="utf-8")
    return thr


def test_section_defaults_and_selection(tmp_path: Path) -> None:
    thr = _files(tmp_path, "{from: r.jsonl}",
                 {"messages": CHAT, "max_tokens": 500},
                 {"messages": CHAT, "response_format": {"type": "json_object"}},
                 {"prompt": "x", "max_tokens": 7})
    t = load_thresholds(thr)
    assert (t.replay.limit, t.replay.max_tokens, t.replay.json_margin, t.replay.redact, t.replay.only) == (
        None, 256, 5.0, False, "all")
    assert t.replay_share_for("x") == 0.95  # lossless.min_identical_share's default
    plan = load_replay(t)
    assert [r.line for r in plan.requests] == [1, 2, 3]
    assert [plan.budget(r) for r in plan.requests] == [256, 256, 7]  # capped at max_tokens; none recorded -> the cap
    assert plan.spec() == {"path": str(tmp_path / "r.jsonl"), "sha256": plan.log.sha256, "lines": [1, 2, 3],
                           "budgets": [256, 256, 7], "sampling": [{"temperature": 0.0}] * 3}


def test_only_structured_and_limit(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    thr = _files(tmp_path, "{from: r.jsonl, only: structured, limit: 1, min_identical_share: 0.5}",
                 {"messages": CHAT}, {"messages": CHAT, "tools": tools},
                 {"messages": CHAT, "response_format": {"type": "json_object"}})
    t = load_thresholds(thr)
    plan = load_replay(t)
    assert [r.line for r in plan.requests] == [2] and plan.requests[0].tool_names == ("get_weather",)
    assert t.replay_share_for("x") == 0.5


def test_recorded_sampling_with_fixed_seeds(tmp_path: Path) -> None:
    thr = _files(tmp_path, "{from: r.jsonl, sampling: recorded, seed: 100}",
                 {"messages": CHAT, "temperature": 0.7, "top_p": 0.9, "seed": 5},
                 {"messages": CHAT, "temperature": 1},
                 {"prompt": "p"})
    plan = load_replay(load_thresholds(thr))
    assert plan.spec()["sampling"] == [{"temperature": 0.7, "top_p": 0.9, "seed": 5},  # as recorded
                                       {"temperature": 1.0, "top_p": 1.0, "seed": 102},  # seed: 100 + line 2
                                       {"temperature": 0.0, "top_p": 1.0, "seed": 103}]  # none recorded: greedy


def test_response_format_is_kept_and_checked(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    rf = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
    p.write_text(json.dumps({"messages": CHAT, "response_format": rf}) + "\n"
                 + json.dumps({"prompt": "p", "response_format": {"type": "text"}}) + "\n", encoding="utf-8")
    log = read_request_log(p)
    assert log.requests[0].wants_json and log.requests[0].json_schema == SCHEMA
    assert not log.requests[1].wants_json and log.requests[1].json_schema is None


@pytest.mark.parametrize("record, field, fragment", [
    ({"messages": CHAT, "response_format": {"type": "xml"}}, "line 1: response_format.type", "json_object"),
    ({"messages": CHAT, "response_format": {"type": "json_schema"}}, "line 1: response_format.json_schema.schema",
     "needs json_schema.schema"),
    ({"messages": CHAT, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}},
     "line 1: response_format.json_schema.schema", "not a valid JSON Schema"),
    ({"messages": CHAT, "tools": [{"type": "function", "function": {}}]}, "line 1: tools[0].function.name",
     "non-empty string"),
    ({"body": {"messages": CHAT, "tools": "x"}}, "line 1: body.tools", "must be a list"),
    ({"messages": CHAT, "temperature": -1}, "line 1: temperature", "a number >= 0"),
    ({"prompt": "p", "top_p": 0}, "line 1: top_p", "0 < top_p <= 1"),
    ({"messages": CHAT, "seed": 1.5}, "line 1: seed", "must be an integer"),
])
def test_bad_structured_fields_name_line_and_field(tmp_path: Path, record: dict, field: str, fragment: str) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        read_request_log(p)
    assert err.value.path == p and err.value.field == field and fragment in err.value.message
    assert err.value.exit_code == ExitCode.USAGE


def test_missing_log_names_the_thresholds_field(tmp_path: Path) -> None:
    thr = tmp_path / "thresholds.yaml"
    thr.write_text("alpha: 0.05\ndefault: {margin: 2.0}\nreplay: {from: nope.jsonl}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_replay(load_thresholds(thr))
    assert (err.value.path, err.value.field) == (thr, "replay.from") and "not found" in err.value.message


def test_nothing_left_after_only_is_refused(tmp_path: Path) -> None:
    thr = _files(tmp_path, "{from: r.jsonl, only: structured}", {"messages": CHAT})
    with pytest.raises(ConfigError) as err:
        load_replay(load_thresholds(thr))
    assert err.value.field == "replay.only" and "nothing is left to replay" in err.value.message


@pytest.mark.parametrize("text, field, fragment", [
    ("{limit: 3}", "replay.from", "replay.from is required"),
    ("{from: r.jsonl, limit: 0}", "replay.limit", "1 <="),
    ("{from: r.jsonl, only: some}", "replay.only", "must be one of all, structured"),
    ("{from: r.jsonl, redact: 1}", "replay.redact", "true or false"),
    ("{from: r.jsonl, min_identical_share: 1.5}", "replay.min_identical_share", "share"),
    ("{from: r.jsonl, json_margin: -1}", "replay.json_margin", "margin"),
    ("{from: r.jsonl, seeds: 3}", "replay.seeds", "unknown key 'seeds'; did you mean 'seed'?"),
    ("{from: r.jsonl, sampling: random}", "replay.sampling", "must be one of greedy, recorded"),
])
def test_bad_section_values(tmp_path: Path, text: str, field: str, fragment: str) -> None:
    thr = _files(tmp_path, text, {"messages": CHAT})
    with pytest.raises(ConfigError) as err:
        load_thresholds(thr)
    assert err.value.field == field and fragment in err.value.message


def test_too_long_for_max_model_len(tmp_path: Path) -> None:
    thr = _files(tmp_path, "{from: r.jsonl, max_tokens: 10}", {"messages": CHAT}, {"prompt": "x", "max_tokens": 4})
    plan = load_replay(load_thresholds(thr))
    check_lengths(plan, [90, 96], 100, "cand")  # 90 + 10 and 96 + 4 fit exactly
    with pytest.raises(ConfigError) as err:
        check_lengths(plan, [90, 97], 100, "cand")
    assert (err.value.path, err.value.field) == (tmp_path / "r.jsonl", "line 2: prompt")
    assert "97 prompt tokens + 4 output tokens exceed max_model_len 100 of cand's engine" in err.value.message
