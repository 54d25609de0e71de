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
    chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}A:"  # keeps a plain string's text

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
    chat = {"chat": True, "template": "writes-bos", "template_kwargs": {"enable_thinking": False}, "content": "string"}
    assert [len(ids) for ids in prompt_ids(tok, spec, chat)] == [3, 4, 4]
    assert tok.calls[0] == {"chat_template": "writes-bos", "enable_thinking": False}


def test_no_template_and_a_changed_log_are_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"messages": [{"role": "user", "content": "x"}]}, lines=[1])
    tok = _Tokenizer()
    tok.chat_template = None
    with pytest.raises(LogMismatch, match="line 1: messages: the engine's tokenizer has no chat template"):
        prompt_ids(tok, spec)
    assert len(prompt_ids(tok, spec, {"chat": True, "template": "t", "content": "string"})[0]) == 3  # a config template suffices
    Path(spec["path"]).write_text(json.dumps({"prompt": "other"}) + "\n", encoding="utf-8")
    with pytest.raises(LogMismatch, match="changed on disk"):
        chosen(spec)


# ------------------------------------------------------------------------------------ a parts-only template

QUESTION = "What is 2 + 3?"
# Idefics3's template (evalgate.models.idefics3_tiny.CHAT_TEMPLATE) on one user turn holding the question as a text
# part, spelled out by hand: "User" + ": " (the turn does not open with an image) + the text + its end marker.
EXPECTED = f"<|begin_of_text|>User: {QUESTION}<end_of_utterance>\nAssistant:"
EMPTY_TURN = "<|begin_of_text|>User: <end_of_utterance>\nAssistant:"  # what a plain string renders


def _idefics3_tokenizer():
    """A real transformers tokenizer (the embedded hybrid's) carrying Idefics3's chat template as its own, as the
    Idefics3 fixture of configs/vl/chat does."""
    from transformers import PreTrainedTokenizerFast

    from evalgate.models.idefics3_tiny import CHAT_TEMPLATE

    root = Path(__file__).resolve().parents[2]
    tok = PreTrainedTokenizerFast.from_pretrained(str(root / "evalgate" / "models" / "hybrid" / "checkpoint"))
    tok.chat_template = CHAT_TEMPLATE
    return tok, CHAT_TEMPLATE


def test_a_recorded_request_under_a_parts_only_template_keeps_its_question(tmp_path: Path) -> None:
    """configs/vl/chat (chat.template: model on the Idefics3 fixture): the replay gate and traffic.from must send
    the recorded question, not an empty "User: <end_of_utterance>" turn on both sides."""
    from evalgate.worker.replay import render

    tok, template = _idefics3_tokenizer()
    log = read_request_log(_spec(tmp_path, {"messages": [{"role": "user", "content": QUESTION}]}, lines=[1])["path"])
    request = log.requests[0]
    # the worker spec of configs/vl/chat: the local checkpoint's template, its form resolved by the parent
    vl_chat = {"chat": True, "template": template, "system": None, "template_kwargs": {}, "fewshot_as_multiturn": False,
               "think_end": None, "content": "parts"}
    assert render(tok, request, "r.jsonl: line 1", vl_chat) == EXPECTED
    # a hub model's own template (no template text in the spec, form not yet decided): probed here, same prompt
    assert render(tok, request, "r.jsonl: line 1", {**vl_chat, "template": None, "content": None}) == EXPECTED
    # traffic.from renders with the engine tokenizer's own template, no chat spec: the same prompt
    assert render(tok, request, "r.jsonl: line 1") == EXPECTED
    assert EXPECTED != EMPTY_TURN
    # the replay gate's token ids are those of the question's prompt (one BOS added by the tokenizer)
    spec = _spec(tmp_path, {"messages": [{"role": "user", "content": QUESTION}]}, lines=[1])
    assert prompt_ids(tok, spec, vl_chat) == [list(tok(EXPECTED).input_ids)]


def test_a_template_that_loses_the_text_either_way_is_refused_naming_the_line(tmp_path: Path) -> None:
    from evalgate.worker.replay import render

    tok, _ = _idefics3_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m['role'] }}]{% endfor %}"  # writes no content at all
    log = read_request_log(_spec(tmp_path, {"messages": [{"role": "user", "content": QUESTION}]}, lines=[1])["path"])
    with pytest.raises(LogMismatch) as e:
        render(tok, log.requests[0], "r.jsonl: line 1")
    assert str(e.value) == ("r.jsonl: line 1: messages: the chat template renders a message's text neither from a "
                            "plain string nor from content parts, so every recorded request would be sent without "
                            "its text")
