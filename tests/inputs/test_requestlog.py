"""A recorded request log as the speed profile (``traffic.from``, issue 27 items 1 and 7): reading each format,
the in-flight concurrency from timestamps, the token-length quantiles, the profile the gate builds, the worker's
rendering through vLLM's custom-dataset loader, and what the report shows (counts and lengths, never text).
The bad-input cases run through the command line in tests/system/test_bad_inputs.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.requestlog import (
    concurrency_from_log,
    in_flight_counts,
    length_summary,
    nearest_rank,
    read_request_log,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "traffic"


def _log(tmp_path: Path, *records: object, name: str = "log.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return p


# ------------------------------------------------------------------------------------------ formats


def test_openai_chat_bodies_bare_and_wrapped(tmp_path: Path) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    p = _log(tmp_path,
             {"model": "m", "messages": msgs, "max_tokens": 7, "temperature": 0.3, "stream": True},
             {"timestamp": 5, "body": {"messages": msgs, "max_completion_tokens": 9, "max_tokens": 100}},
             {"start_time": 5, "request": json.dumps({"messages": msgs})},  # a gateway that logs the body's text
             {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                           {"role": "assistant", "content": None, "tool_calls": []}], "max_tokens": None})
    log = read_request_log(p)
    assert [r.kind for r in log.requests] == ["chat"] * 4
    assert log.requests[0].messages == tuple(msgs)
    # max_completion_tokens (OpenAI's current name) wins over the deprecated max_tokens; null = no budget
    assert [r.max_tokens for r in log.requests] == [7, 9, None, None]
    assert log.requests[3].messages == ({"role": "user", "content": "ab"}, {"role": "assistant", "content": ""})
    assert [r.line for r in log.requests] == [1, 2, 3, 4] and log.formats() == {"chat": 4}
    assert all(r.start is None for r in log.requests)  # times are read only when from-log asks for them


def test_completions_custom_and_sharegpt_records(tmp_path: Path) -> None:
    p = _log(tmp_path,
             {"model": "m", "prompt": "Once upon", "max_tokens": 12},
             "",  # blank lines are skipped; line numbers still count them
             {"prompt": "custom", "output_tokens": 3},
             {"prompt": "custom, no budget"},
             {"conversations": [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": "A."},
                                {"from": "human", "value": "later turns are not sent"}]},
             {"conversations": [{"from": "human", "value": "only a prompt"}]})
    log = read_request_log(p)
    assert [(r.line, r.kind, r.max_tokens) for r in log.requests] == [
        (1, "prompt", 12), (3, "prompt", 3), (4, "prompt", None), (5, "sharegpt", None), (6, "sharegpt", None)]
    assert log.requests[0].prompt == "Once upon"
    assert log.requests[3].messages == ({"role": "user", "content": "Q?"},) and log.requests[3].completion == "A."
    assert log.requests[4].completion is None
    assert log.formats() == {"prompt": 3, "sharegpt": 2}


def test_a_sharegpt_json_array_counts_records(tmp_path: Path) -> None:
    p = tmp_path / "sharegpt.json"
    p.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "x"}]},
                             {"id": "b", "conversations": [{"from": "human", "value": "y"},
                                                           {"from": "gpt", "value": "z"}]}]), encoding="utf-8")
    log = read_request_log(p)
    assert log.unit == "record" and [r.line for r in log.requests] == [1, 2]
    assert log.where(log.requests[1]) == "record 2"


def test_the_sha256_is_the_file_bytes(tmp_path: Path) -> None:
    import hashlib

    p = _log(tmp_path, {"prompt": "x"})
    assert read_request_log(p).sha256 == hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("record, field, fragment", [
    ({"messages": []}, "line 1: messages", "got an empty list"),
    ({"messages": [{"role": "", "content": "x"}]}, "line 1: messages[0].role", "non-empty string"),
    ({"messages": [{"role": "user"}]}, "line 1: messages[0].content", "missing"),
    ({"messages": [{"role": "user", "content": None}]}, "line 1: messages[0].content", "got null"),
    ({"messages": ["hi"]}, "line 1: messages[0]", "a mapping with role and content"),
    ({"prompt": ""}, "line 1: prompt", "non-empty string"),
    ({"prompt": [1, 2, 3]}, "line 1: prompt", "token ids is not supported"),
    ({"prompt": "x", "max_tokens": True}, "line 1: max_tokens", "got true"),
    ({"body": {"prompt": "x", "max_tokens": 1.0}}, "line 1: body.max_tokens", "got 1.0"),
    ({"body": [1]}, "line 1: body", "must be a JSON object, got a list"),
    ({"conversations": [{"from": "human", "value": ""}]}, "line 1: conversations[0].value", "is empty"),
    ({"input": "x"}, "line 1", "neither messages, prompt nor conversations (its keys: input)"),
])
def test_bad_records_name_the_file_line_and_field(tmp_path: Path, record: object, field: str, fragment: str) -> None:
    p = _log(tmp_path, record)
    with pytest.raises(ConfigError) as err:
        read_request_log(p)
    assert err.value.exit_code == ExitCode.USAGE
    assert str(err.value).startswith(f"{p}: {field}: "), str(err.value)
    assert fragment in err.value.message


def test_a_deeply_nested_line_is_one_clean_error(tmp_path: Path) -> None:
    p = _log(tmp_path, "[" * 100_000 + "]" * 100_000)  # a JSON array file whose only record nests too deeply
    with pytest.raises(ConfigError, match="nested too deeply"):
        read_request_log(p)


# ------------------------------------------------------------------------------------------ concurrency


def test_in_flight_counts_of_a_hand_computed_log() -> None:
    # A [0,10) B [1,3) C [2,5) D [4,6) E [10,12) F [10,11): on arrival A meets itself (1); B meets A (2); C meets A, B
    # (3); D meets A, C (B ended at 3) (3); E and F arrive together after A ended at 10: each meets both (2, 2).
    intervals = [(0, 10), (1, 3), (2, 5), (4, 6), (10, 12), (10, 11)]
    assert in_flight_counts(intervals) == [1, 2, 3, 3, 2, 2]


def test_a_zero_length_request_counts_itself() -> None:
    # Both arrive at 0. The instantaneous one meets the other and itself (2); it is in flight over [0, 0), an empty
    # interval, so the other meets only itself (1).
    assert in_flight_counts([(0, 0), (0, 1)]) == [2, 1]
    assert in_flight_counts([(5, 5)]) == [1]


def test_concurrency_from_log_of_the_shipped_example() -> None:
    log = read_request_log(EXAMPLES / "completions.jsonl", times=True)
    # Arrivals (s after the first) 0, .5, 1, 1.2, 3, 3.5; ends 2, 1.5, 4, 1.4, 5, 3.6. On arrival the requests meet
    # 1, 2, 3, 4, then at 3.0 requests 3 and 5 (2), at 3.5 requests 3, 5, 6 (3): median of 1 2 2 3 3 4 = 2.5 -> 3.
    assert in_flight_counts([(r.start, r.end) for r in log.requests]) == [1, 2, 3, 4, 2, 3]
    assert concurrency_from_log(log) == {"typical": 3, "peak": 4}


def test_iso_and_epoch_times_agree(tmp_path: Path) -> None:
    p = _log(tmp_path,
             {"timestamp": "2026-01-05T10:00:00Z", "end_time": "2026-01-05T10:00:02+00:00", "body": {"prompt": "a"}},
             {"timestamp": 1767607201.0, "duration_s": 0.5, "body": {"prompt": "b"}},
             {"start_time": "2026-01-05T10:00:01.5", "duration_s": 0, "body": {"prompt": "c"}})  # naive = UTC
    log = read_request_log(p, times=True)
    assert [(r.start, r.end) for r in log.requests] == [(1767607200.0, 1767607202.0), (1767607201.0, 1767607201.5),
                                                        (1767607201.5, 1767607201.5)]
    assert concurrency_from_log(log) == {"typical": 2, "peak": 2}


def test_concurrency_needs_times() -> None:
    with pytest.raises(ValueError):
        concurrency_from_log(read_request_log(EXAMPLES / "completions.jsonl"))


# ------------------------------------------------------------------------------------------ quantiles


def test_nearest_rank_quantiles_against_the_definition() -> None:
    values = [7, 3, 3, 11, 20, 1, 5, 8, 13, 2]
    ordered = sorted(values)  # 1 2 3 3 5 7 8 11 13 20
    for q, expected in ((50, 5), (90, 13), (99, 20), (10, 1), (100, 20)):
        assert nearest_rank(values, q) == expected == ordered[math.ceil(q / 100 * 10) - 1]
    assert length_summary(list(range(1, 101))) == {"p50": 50, "p90": 90, "p99": 99, "max": 100}
    assert length_summary([4]) == {"p50": 4, "p90": 4, "p99": 4, "max": 4}
    with pytest.raises(ValueError):
        nearest_rank([], 50)


# ------------------------------------------------------------------------------------------ the profile (parent)


def _profile(tmp_path: Path, traffic: str, configs: str = "", **options: object):
    from evalgate.inputs.options import RunOptions
    from evalgate.inputs.thresholds import load_thresholds
    from evalgate.speed.measure import speed_profile

    thr = tmp_path / "thresholds.yaml"
    thr.write_text(f"alpha: 0.05\ndefault: {{margin: 2.0}}\ntraffic: {traffic}\n{configs}", encoding="utf-8")
    return speed_profile(RunOptions(**options), load_thresholds(thr).policy("cand"))


def test_the_profile_of_a_log_with_from_log_concurrency(tmp_path: Path) -> None:
    import shutil

    shutil.copy(EXAMPLES / "completions.jsonl", tmp_path / "requests.jsonl")
    p = _profile(tmp_path, "{from: requests.jsonl, concurrency: from-log, output_len: 20, repeats: 2}")
    assert (p.prompts, p.input_len, p.output_len, p.repeats) == ("log", None, 20, 2)
    assert p.concurrency == (3, 4) and p.num_prompts == 6 and p.prompts_at(3) == 6  # typical, then peak; all requests
    assert p.requests["path"] == str(tmp_path / "requests.jsonl")  # relative to the thresholds file
    assert p.requests["requests"] == 6 and p.requests["formats"] == {"prompt": 6}
    assert p.requests["concurrency"] == {"source": "from-log", "typical": 3, "peak": 4}
    assert p.as_dict()["requests"]["sha256"] == read_request_log(tmp_path / "requests.jsonl").sha256


def test_the_command_line_concurrency_wins_and_needs_no_times(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b"}\n', encoding="utf-8")  # no timestamps
    p = _profile(tmp_path, "{from: r.jsonl, concurrency: from-log, num_prompts: 1}", concurrency=[2])
    assert p.concurrency == (2,) and p.num_prompts == 1
    assert p.requests["concurrency"] == {"source": "--concurrency"}


def test_a_configs_entry_can_set_the_log(tmp_path: Path) -> None:
    (tmp_path / "r.jsonl").write_text('{"prompt": "a"}\n', encoding="utf-8")
    p = _profile(tmp_path, "{concurrency: 2}", configs="configs:\n  cand: {traffic: {from: r.jsonl}}\n")
    assert p.requests["requests"] == 1 and p.concurrency == (2,)
    assert p.requests["concurrency"] == {"source": "traffic.concurrency"}


def test_a_synthetic_profile_keeps_its_keys(tmp_path: Path) -> None:
    p = _profile(tmp_path, "{input_len: 8, output_len: 8, concurrency: 2}")
    assert p.requests is None and "requests" not in p.as_dict() and p.input_len == 8


def test_a_log_larger_than_a_repeat_needs_num_prompts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evalgate.speed.measure

    monkeypatch.setattr(evalgate.speed.measure, "MAX_TRAFFIC_PROMPTS", 2)  # the bound where the log is read
    (tmp_path / "r.jsonl").write_text('{"prompt": "a"}\n' * 3, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"traffic.from: the request log holds 3 requests, more than 2 per repeat"):
        _profile(tmp_path, "{from: r.jsonl}")


# ------------------------------------------------------------------------------------------ the worker's side


class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.input_ids = ids


class _Tokenizer:
    """A tokenizer stand-in: one token per whitespace-separated word; a chat template that tags each turn."""

    chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # keeps a plain string's text

    def __call__(self, text: str) -> _Ids:
        return _Ids(list(range(len(text.split()))))

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool) -> str:
        assert add_generation_prompt and not tokenize
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"


def test_the_worker_sends_each_request_as_recorded_through_vllms_custom_loader(tmp_path: Path) -> None:
    pytest.importorskip("vllm.benchmarks.datasets", reason="needs vLLM")
    from evalgate.worker.replay import load_requests

    p = _log(tmp_path,
             {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "one two"}], "max_tokens": 5},
             {"prompt": "1234"},  # all digits: pandas must not turn it into a number
             {"conversations": [{"from": "human", "value": "q r s"}, {"from": "gpt", "value": "w x y z"}]},
             {"prompt": "a b c d e f", "output_tokens": 2})
    requests, summary = load_requests(_Tokenizer(), read_request_log(p), 4, 9, max_model_len=None)
    assert [q.prompt for q in requests] == ["<system> s <user> one two <assistant>", "1234",
                                            "<user> q r s <assistant>", "a b c d e f"]
    prompt_lens, budgets = [6, 1, 5, 6], [5, 9, 4, 2]  # words; recorded, default, the reply's length, recorded
    assert [q.prompt_len for q in requests] == prompt_lens
    assert [q.expected_output_len for q in requests] == budgets
    assert summary["requests"] == 4
    assert summary["input_tokens"] == {"p50": sorted(prompt_lens)[1], "p90": 6, "p99": 6, "max": 6}
    assert summary["output_tokens"] == {"p50": sorted(budgets)[1], "p90": 9, "p99": 9, "max": 9}
    assert summary["output_budget"] == {"recorded": 2, "reply": 1, "default": 1}
    again, same = load_requests(_Tokenizer(), read_request_log(p), 4, 9, max_model_len=None)
    assert same["requests_sha256"] == summary["requests_sha256"]  # the same requests on the other side
    _, fewer = load_requests(_Tokenizer(), read_request_log(p), 2, 9, max_model_len=None)  # num_prompts: the first
    assert fewer["requests"] == 2 and fewer["requests_sha256"] != summary["requests_sha256"]
    _, other = load_requests(_Tokenizer(), read_request_log(p), 4, 10, max_model_len=None)  # another default budget
    assert other["requests_sha256"] != summary["requests_sha256"]


def test_a_request_beyond_max_model_len_is_named_before_any_timed_pass(tmp_path: Path) -> None:
    pytest.importorskip("vllm.benchmarks.datasets", reason="needs vLLM")
    from evalgate.worker.replay import LogMismatch, load_requests

    p = _log(tmp_path, {"prompt": "a b", "max_tokens": 2}, {"timestamp": 1, "body": {"messages": [
        {"role": "user", "content": "a b c"}], "max_tokens": 4}})
    with pytest.raises(LogMismatch) as err:
        load_requests(_Tokenizer(), read_request_log(p), 2, 8, max_model_len=8)  # 2 + 2 fits; 5 + 4 does not
    assert str(err.value) == (f"{p}: line 2: messages: 5 prompt tokens + 4 output tokens exceed the engine's "
                              f"max_model_len 8")


def test_chat_requests_need_a_chat_template(tmp_path: Path) -> None:
    from evalgate.worker.replay import LogMismatch, render

    tok = _Tokenizer()
    tok.chat_template = None
    log = read_request_log(_log(tmp_path, {"prompt": "fine"}, {"messages": [{"role": "user", "content": "x"}]}))
    assert render(tok, log.requests[0]) == "fine"
    with pytest.raises(LogMismatch, match=r"log.jsonl: line 2: messages: the engine's tokenizer has no chat template"):
        render(tok, log.requests[1], f"{log.path}: line 2")


def test_the_warm_up_is_the_first_requests_with_a_short_budget() -> None:
    pytest.importorskip("vllm.benchmarks.datasets", reason="needs vLLM")
    from vllm.benchmarks.datasets import SampleRequest

    from evalgate.worker.replay import WARMUP_OUTPUT_LEN, warmup

    reqs = [SampleRequest(prompt=f"p{i}", prompt_len=1, expected_output_len=o) for i, o in enumerate((40, 3, 50))]
    got = warmup(reqs, 2)
    assert [(q.prompt, q.expected_output_len) for q in got] == [("p0", WARMUP_OUTPUT_LEN), ("p1", 3)]


# ------------------------------------------------------------------------------------------ what is reported

SENT = {"requests": 6, "input_tokens": {"p50": 14, "p90": 23, "p99": 23, "max": 23},
        "output_tokens": {"p50": 10, "p90": 20, "p99": 20, "max": 20}, "output_budget": {"recorded": 5, "default": 1},
        "requests_sha256": "ab" * 32}


class _LogWorker:
    """A worker answering request-log commands: the warm-up's reply carries the summary of the requests sent."""

    def __init__(self, role: str, sent: dict, calls: list) -> None:
        self.role, self.sent, self.calls = role, sent, calls
        self.info = {"event": "ready", "device": "test CPU", "isa": [], "versions": {"vllm": "x"}}

    def measure(self, cmd: dict) -> dict:
        self.calls.append((self.role, cmd))
        out = {"output_tok_s": 100.0 if self.role == "baseline" else 120.0 + len(self.calls) % 3, "total_tok_s": 300.0}
        return {**out, "requests_summary": dict(self.sent)} if cmd.get("warmup") else {**out, "elapsed_s": 1.0}


def _log_profile(path: str):
    from evalgate.speed.speedup import TrafficProfile

    return TrafficProfile(input_len=None, output_len=20, concurrency=(3, 4), num_prompts=6, repeats=2, prompts="log",
                          requests={"path": path, "sha256": "cd" * 32, "requests": 6, "formats": {"prompt": 6},
                                    "concurrency": {"source": "from-log", "typical": 3, "peak": 4}})


def test_the_speed_phase_sends_the_log_to_both_sides_and_records_what_was_sent() -> None:
    from evalgate.speed.measure import measure_speed

    calls: list = []
    workers = {r: _LogWorker(r, SENT, calls) for r in ("baseline", "candidate")}
    block = measure_speed(workers, _log_profile("/logs/requests.jsonl"), progress=lambda _: None)
    log_spec = {"path": "/logs/requests.jsonl", "sha256": "cd" * 32, "num_prompts": 6, "output_len": 20}
    assert all(cmd["log"] == log_spec for _, cmd in calls)  # every pass: the same log, count and default budget
    assert [(r, cmd["concurrency"], bool(cmd.get("warmup"))) for r, cmd in calls[:2]] == [
        ("baseline", 3, True), ("candidate", 3, True)]
    assert len(calls) == 2 * (2 + 2 * 2)  # per level: a warm-up and 2 repeats per side
    rq = block.profile.requests
    assert rq["sent"] == SENT and rq["same_requests"] is True and rq["requests"] == 6
    assert all("requests_summary" not in run for side in block.sides.values() for run in side.runs)


def test_sides_that_sent_different_requests_are_recorded_as_such() -> None:
    from evalgate.speed.measure import with_sent_requests
    from evalgate.speed.speedup import TrafficProfile

    p = TrafficProfile(input_len=None, output_len=8, concurrency=(1,), requests={"path": "x"})
    got = with_sent_requests(p, {"baseline": {"requests_sha256": "a"}, "candidate": {"requests_sha256": "b"}}).requests
    assert got["same_requests"] is False and got["sent_candidate"] == {"requests_sha256": "b"}


def _doc(path: str) -> dict:
    from evalgate.compare.pairing import compare_tasks
    from evalgate.gate import decide
    from evalgate.inputs.thresholds import Thresholds
    from evalgate.speed.measure import measure_speed
    from runfixtures import gate_document, manifest, side, task

    tasks = {"t": task("t", "s", ["ok"] * 40, [1.0] * 40)}
    thr = Thresholds(alpha=0.05, default_margin=10.0, bootstrap_resamples=1000)
    comps = compare_tasks(tasks, tasks, thr.policy(None))
    b, c = side("baseline", "float32"), side("cand", "bfloat16")
    decision = decide([(x.suite, x.task, x.comparison) for x in comps], thr.policy(None), baseline_effective=b["effective"],
                      candidate_effective=c["effective"])
    calls: list = []
    workers = {r: _LogWorker(r, SENT, calls) for r in ("baseline", "candidate")}
    block = measure_speed(workers, _log_profile(path), progress=lambda _: None)
    return gate_document(decision, comps, manifest(b, c, ["t"]), speed=block)


def test_every_output_gives_counts_and_lengths_escaped_and_no_request_text() -> None:
    from evalgate.report.outputs import render_junit, render_markdown
    from evalgate.report.render import render_html, render_terminal

    doc = _doc("/logs/<b onclick=x>.jsonl")  # a path is the user's, so untrusted like any text
    words = ("6 logged requests (&lt;b onclick=x&gt;.jsonl), input p50/p90/p99/max 14/23/23/23 tokens, "
             "output 10/20/20/20, concurrency from-log: typical 3, peak 4")
    assert f"speed ({words.replace('&lt;', '<').replace('&gt;', '>')}, 2 repeats, offline):" in render_terminal(doc)
    html = render_html(doc)
    assert "<b onclick" not in html and "/logs/&lt;b onclick=x&gt;.jsonl" in html
    assert "Only counts, lengths and the file" in html and "both sides sent the same requests" in html
    assert "typical (median in flight at an arrival) 3, peak 4" in html
    assert "<td class=\"l\">input (prompt)</td><td>14</td><td>23</td><td>23</td><td>23</td>" in html
    md = render_markdown(doc)
    assert words in md and "<b " not in md
    assert "6 logged requests" in render_junit(doc)
