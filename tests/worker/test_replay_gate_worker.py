"""The worker side of the replay gate without an engine: which requests it renders, with which template, one BOS,
the request's tools passed to the template, and a log that changed since the parent read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.inputs.requestlog import read_request_log
from evalgate.worker.replay import LogMismatch
from evalgate.worker.replay_gate import chosen, prompt_ids

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.input_ids = ids


class _Tokenizer:
    """One token per whitespace-separated word, ``<s>`` prepended with special tokens; the calls are recorded."""

    bos_token = "<s>"
    chat_template = "own"

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, text: str, add_special_tokens: bool = True) -> _Ids:
        words = (["<s>"] if add_special_tokens else []) + text.split()
        return _Ids(list(range(len(words))))

    def apply_chat_template(self, messages, add_generation_prompt: bool, tokenize: bool, **kw) -> str:
        self.calls.append(kw)
        head = "<s> " if kw.get("chat_template") == "writes-bos" else ""
        return head + " ".join(m["content"] for m in messages) + " A:"


def _spec(tmp_path: Path, *records: dict, lines: list[int]) -> dict:
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    log = read_request_log(p)
    return {"path": str(p), "sha256": log.sha256, "lines": lines, "budgets": [4] * len(lines)}


def test_prompt_ids_render_count_and_one_bos(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"prompt": "a b c"}, {"messages": [{"role": "user", "content": "x y"}], "tools": TOOLS},
                 {"messages": [{"role": "user", "content": "z"}]}, lines=[3, 1, 2])
    tok = _Tokenizer()
    # line 3: "z A:" + BOS = 3; line 1: the prompt as recorded + BOS = 4; line 2: "x y A:" + BOS = 4
    assert [len(ids) for ids in prompt_ids(tok, spec)] == [3, 4, 4]
    assert [c.get("tools") for c in tok.calls] == [None, TOOLS]  # the tool request's tools reach the template
    # the config's template (chat spec) wins over the tokenizer's; one that writes BOS gets no second one
    tok = _Tokenizer()
    chat = {"chat": True, "template": "writes-bos", "template_kwargs": {"enable_thinking": False}}
    assert [len(ids) for ids in prompt_ids(tok, spec, chat)] == [3, 4, 4]
    assert tok.calls[0] == {"chat_template": "writes-bos", "enable_thinking": False}


def test_no_template_and_a_changed_log_are_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"messages": [{"role": "user", "content": "x"}]}, lines=[1])
    tok = _Tokenizer()
    tok.chat_template = None
    with pytest.raises(LogMismatch, match="line 1: messages: the engine's tokenizer has no chat template"):
        prompt_ids(tok, spec)
    assert len(prompt_ids(tok, spec, {"chat": True, "template": "t"})[0]) == 3  # a config template suffices
    Path(spec["path"]).write_text(json.dumps({"prompt": "other"}) + "\n", encoding="utf-8")
    with pytest.raises(LogMismatch, match="changed on disk"):
        chosen(spec)
