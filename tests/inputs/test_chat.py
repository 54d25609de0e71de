"""Chat protocol and reasoning output (evalgate.inputs.chat): the ``chat:`` section of a config, the protocol it makes, the
refusal of mixed protocols (run: exit 2; compare: exit 3), the thought split, and the lm-eval adapter's chat hooks
with a fake engine whose tokenizer is the embedded hybrid's own (no vLLM)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from lm_eval.api.instance import Instance

from evalgate.commands.stored import check_comparable
from evalgate.errors import ConfigError, StoreError
from evalgate.inputs.chat import check_protocols, describe_difference, protocol, split_thought
from evalgate.inputs.config import Sampling, load_baseline, load_config
from evalgate.worker.lm_adapter import make_lm, request_key
from evalgate.worker.vllm_engine import Generation
from tests.taskfixtures import HybridTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "configs" / "chat" / "hybrid-chat.jinja"


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text, encoding="utf-8")
    return p


# ------------------------------------------------------------------------------------------------ thought split

def test_split_keeps_the_text_after_the_last_end_marker() -> None:
    t = split_thought("Q:", "<think>a</think>b</think> 42\n\nmore", "</think>", ["\n\n"])
    assert (t.thought, t.answer, t.truncated) == ("<think>a</think>b</think>", "42", False)


def test_an_opened_thought_without_its_end_is_truncated_and_scored_as_empty() -> None:
    t = split_thought("Q:", "<think>still thinking", "</think>", ["\n\n"])
    assert (t.thought, t.answer, t.truncated) == ("<think>still thinking", "", True)
    # the template opened it in the prompt: the output is all thought
    t = split_thought("Assistant: <think>\n", "hmm, 4", "</think>", [])
    assert (t.thought, t.answer, t.truncated) == ("hmm, 4", "", True)


def test_no_thought_leaves_the_answer_cut_at_the_stop_strings() -> None:
    t = split_thought("Assistant: <think></think>", " 42\n\nQ: next", "</think>", ["\n\n"])
    assert (t.thought, t.answer, t.truncated) == (None, " 42", False)


# ------------------------------------------------------------------------------------------------ protocol

def test_the_shipped_chat_pair_shares_one_chat_protocol() -> None:
    cand = load_config("chat/fp16-state", check_engine_args=False)
    base = load_baseline(cand, check_engine_args=False)
    assert base.name == "chat/baseline" and cand.chat.template_path == TEMPLATE
    sha = hashlib.sha256(TEMPLATE.read_bytes()).hexdigest()
    expected = {"mode": "chat", "template": "file", "template_sha256": sha, "template_kwargs": {"enable_thinking": False},
                "system_sha256": None, "fewshot_as_multiturn": True, "think_end": "</think>"}
    assert check_protocols(base, cand) == {"baseline": expected, "candidate": expected}
    # the protocol is part of the requested identity: a chat config never takes a completion config's name or results
    assert cand.identity()["chat"] == expected
    assert "chat" not in load_config("fp16-state", check_engine_args=False).identity()


def test_a_config_without_chat_sends_completion_prompts() -> None:
    cfg = load_config("fp16-state", check_engine_args=False)
    assert not cfg.chat.is_chat and protocol(cfg.chat) == {"mode": "completion"}
    assert cfg.chat.worker_spec() is None


def test_a_system_prompt_is_hashed_and_the_template_resolved_next_to_the_file_that_set_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    _write(tmp_path, "t.jinja", TEMPLATE.read_text())
    _write(tmp_path, "base.yaml", "model: embedded:nemotron-h-tiny\nchat: {template: t.jinja}\n")
    cfg = load_config(_write(tmp_path / "sub", "c.yaml", "extends: ../base.yaml\nchat: {system: Be brief.}\n"),
                      check_engine_args=False)
    assert cfg.chat.template_path == (tmp_path / "t.jinja").resolve()
    assert protocol(cfg.chat)["system_sha256"] == hashlib.sha256(b"Be brief.").hexdigest()


def test_run_refuses_a_baseline_and_candidate_with_different_protocols(tmp_path: Path) -> None:
    _write(tmp_path, "t.jinja", TEMPLATE.read_text())
    _write(tmp_path, "base.yaml", "model: embedded:nemotron-h-tiny\nchat: {template: t.jinja}\n")
    cand = load_config(_write(tmp_path, "c.yaml", "extends: base\nchat: {template_kwargs: {enable_thinking: true}}\n"),
                       check_engine_args=False)
    with pytest.raises(ConfigError) as e:
        check_protocols(load_baseline(cand, check_engine_args=False), cand)
    msg = str(e.value)
    assert "c.yaml" in msg and "chat" in msg
    assert 'template_kwargs: {} vs {"enable_thinking": true}' in msg


def test_describe_difference_names_each_key_and_reads_a_missing_protocol_as_completion() -> None:
    assert describe_difference(None, {"mode": "completion"}) is None
    assert describe_difference({"mode": "completion"}, {"mode": "chat", "template": "model"}) == (
        'mode: "completion" vs "chat"; template: null vs "model"')


def _manifest(proto: dict[str, Any] | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"name": "c", "device": {"kind": "cpu", "isa": "avx2"}}
    if proto is not None:
        cand["protocol"] = proto
    return {"suites": [{"name": "s", "tasks": ["t"], "content_hash": "h"}], "candidate": cand}


def test_compare_refuses_two_runs_whose_candidates_protocols_differ() -> None:
    dirs = {"a": Path("/runs/a"), "b": Path("/runs/b")}
    chat = {"mode": "chat", "template": "file", "template_sha256": "e" * 64}
    check_comparable({"a": {}, "b": {}}, {"a": _manifest(None), "b": _manifest({"mode": "completion"})}, dirs)
    with pytest.raises(StoreError) as e:
        check_comparable({"a": {}, "b": {}}, {"a": _manifest({"mode": "completion"}), "b": _manifest(chat)}, dirs)
    assert "candidate.protocol" in str(e.value) and 'mode: "completion" vs "chat"' in str(e.value)
    assert "template_sha256: null vs eeeeeeeeeeee" in str(e.value)


# ------------------------------------------------------------------------------------------------ the adapter

_Tok = HybridTokenizer  # the embedded hybrid's tokenizer, no template of its own


class _Engine:
    """Answers each prompt with ``outputs[prompt]``, recording the stop strings of every submission."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.sampling, self.outputs, self.stops = Sampling(max_tokens=64), outputs, []
        self.tok = _Tok()

    def tokenizer(self) -> Any:
        return self.tok

    def generate_stream(self, prompts: list[str], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> Any:
        self.stops.append(list(stop))
        yield [(i, Generation(self.outputs[p], 5, "length", [1], [2])) for i, p in enumerate(prompts)]


def _chat_spec(**over: Any) -> dict[str, Any]:
    return {"chat": True, "template": TEMPLATE.read_text(), "system": None, "template_kwargs": {"enable_thinking": True},
            "fewshot_as_multiturn": True, "think_end": "</think>", **over}


def test_the_adapter_renders_chat_with_the_given_template_and_kwargs() -> None:
    engine = _Engine({})
    lm = make_lm(engine, chat=_chat_spec())
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    assert lm.apply_chat_template(msgs) == "System: S\nUser: Q\nAssistant: <think>\n"
    lm_off = make_lm(engine, chat=_chat_spec(template_kwargs={"enable_thinking": False}))
    assert lm_off.apply_chat_template(msgs) == "System: S\nUser: Q\nAssistant: <think></think>"
    sha = hashlib.sha256(TEMPLATE.read_text().encode()).hexdigest()[:16]
    assert lm.tokenizer_name == f"evalgate-chat-{sha}"


def test_the_adapter_strips_the_thought_counts_tokens_and_flags_a_truncated_one() -> None:
    p1, p2 = "User: 1+1?\nAssistant: <think>\n", "User: 2+2?\nAssistant: <think>\n"
    engine = _Engine({p1: "one plus one</think> 2\n\nUser: x", p2: "two plus two is"})
    lm = make_lm(engine, chat=_chat_spec())
    gk = {"until": ["\n\n"], "max_gen_toks": 32}
    reqs = [Instance(request_type="generate_until", doc={}, arguments=(p, gk), idx=0, metadata=("t", i, 1))
            for i, p in enumerate((p1, p2))]
    assert lm.generate_until(reqs) == ["2", ""]
    assert engine.stops == [[]]  # no task stop reaches the engine while a thought may be running
    assert request_key(p1, [], 32) in lm.records
    enc = engine.tok.hf.encode
    r1 = lm.reasoning(p1, gk)
    assert r1 == {"thought": "one plus one</think>", "truncated_thought": False,
                  "thinking_tokens": len(enc("one plus one</think>", add_special_tokens=False)),
                  "answer_tokens": len(enc("2", add_special_tokens=False))}
    r2 = lm.reasoning(p2, gk)
    assert r2 == {"thought": "two plus two is", "truncated_thought": True, "answer_tokens": 0,
                  "thinking_tokens": len(enc("two plus two is", add_special_tokens=False))}
    assert r1["thinking_tokens"] > 0 and r2["thinking_tokens"] > 0


def test_the_model_template_is_refused_on_a_tokenizer_without_one() -> None:
    from evalgate.worker.lm_adapter import ChatTemplateFailure

    lm = make_lm(_Engine({}), chat=_chat_spec(template=None))
    # a config error on chat.template (exit 2 from the worker), naming the item's message, not an engine crash
    with pytest.raises(ChatTemplateFailure, match=r"chat.template: model, but the engine's tokenizer has no chat "
                                                  r"template \(its last message begins 'Q'\)"):
        lm.apply_chat_template([{"role": "user", "content": "Q"}])


# ------------------------------------------------------------------------------------------------ reasoning tokens

def test_paired_tokens_is_scipys_paired_t_interval() -> None:
    from scipy.stats import ttest_rel

    from evalgate.compare.reasoning import paired_tokens

    base, cand = [10, 20, 30, 40, 12], [14, 21, 35, 39, 20]
    got = paired_tokens(base, cand)
    ci = ttest_rel(cand, base).confidence_interval(0.95)
    assert (got["baseline"], got["candidate"], got["delta"]) == (22.4, 25.8, pytest.approx(3.4))
    assert (got["ci_low"], got["ci_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    one = paired_tokens([3], [5])
    assert (one["delta"], one["ci_low"], one["ci_high"]) == (2.0, None, None)


def _item(i: int, thinking: int | None, answer: int | None, truncated: bool = False, thought: str | None = None):
    from evalgate.results.records import ItemResult

    return ItemResult(task="t", item_id=i, item_hash=f"h{i}", prompt="p", target="1", output="1", score=1.0,
                      thought=thought, thinking_tokens=thinking, answer_tokens=answer, truncated_thought=truncated)


def test_reasoning_summary_counts_tokens_and_truncated_thoughts_per_side() -> None:
    from evalgate.compare.reasoning import reasoning_line, reasoning_summary
    from evalgate.report.verdict import Reasoning

    pairs = [(_item(0, 10, 2), _item(0, 12, 2)), (_item(1, 20, 4), _item(1, 30, 0, True)),
             (_item(2, 0, 3), _item(2, 2, 3))]
    r = reasoning_summary(pairs)
    assert r["n"] == 3 and r["truncated_thought"] == {"baseline": 0, "candidate": 1}
    assert (r["thinking_tokens"]["baseline"], r["thinking_tokens"]["candidate"], r["thinking_tokens"]["delta"]) == (
        10.0, pytest.approx(44 / 3), pytest.approx(14 / 3))
    assert (r["answer_tokens"]["baseline"], r["answer_tokens"]["candidate"], r["answer_tokens"]["delta"]) == (
        3.0, pytest.approx(5 / 3), pytest.approx(-4 / 3))
    line = reasoning_line(Reasoning.model_validate(r))
    assert line.startswith("thinking tokens/item 10.0 \u2192 14.7 (\u0394 +4.7, 95% CI [")
    assert "truncated thoughts 0 \u2192 1 of 3" in line and "paired t" in line
    assert reasoning_summary([(_item(0, None, None), _item(0, None, None))]) is None


def test_the_reports_show_the_reasoning_beside_the_delta_and_the_thoughts_escaped() -> None:
    import dataclasses

    from evalgate.report.outputs import render_markdown
    from evalgate.report.render import render_html, render_terminal
    from evalgate.results.records import TaskResult
    from runfixtures import EVIL_SCRIPT, document, task

    def with_thoughts(t: TaskResult, thinking: list[int], thought: str) -> TaskResult:
        items = tuple(dataclasses.replace(i, thought=thought, thinking_tokens=n, answer_tokens=1,
                                          truncated_thought=n > 30) for i, n in zip(t.items, thinking))
        return dataclasses.replace(t, items=items)

    base = with_thoughts(task("t1", "s", ["1", "2", "3"], [1.0, 1.0, 1.0]), [10, 10, 10], "base thought")
    cand = with_thoughts(task("t1", "s", ["1", "2", "x"], [1.0, 1.0, 0.0]), [12, 14, 40], EVIL_SCRIPT + "</think>")
    doc = document({"t1": base}, {"t1": cand})
    r = doc["tasks"][0]["reasoning"]
    assert (r["thinking_tokens"]["baseline"], r["thinking_tokens"]["delta"]) == (10.0, pytest.approx(12.0))  # (2 + 4 + 30) / 3
    assert r["truncated_thought"] == {"baseline": 0, "candidate": 1}
    flip = doc["tasks"][0]["flipped"][0]
    assert (flip["baseline_thought"], flip["candidate_thought"]) == ("base thought", EVIL_SCRIPT + "</think>")
    expect = "thinking tokens/item 10.0 \u2192 22.0 (\u0394 +12.0, 95% CI ["
    assert expect in render_terminal(doc)
    assert expect in render_markdown(doc)
    html = render_html(doc)
    assert expect in html and "truncated thoughts 0 \u2192 1 of 3" in html
    assert EVIL_SCRIPT not in html and "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&lt;/think&gt;" in html
    assert '<details class="thought"><summary class="muted">thoughts (stripped before scoring)</summary>' in html
