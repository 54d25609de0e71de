"""Worker side of ``traffic.from``: a checked request log (``evalgate.inputs.requestlog``) as vLLM benchmark requests.

The records are rendered to prompt text first, then handed to vLLM's own loader for its custom dataset
(``vllm.benchmarks.datasets.CustomDataset``, what ``vllm bench serve --dataset-name custom`` reads), which tokenizes
them and builds the ``SampleRequest``s the offline measurement (``engine.throughput.measure``) sends:

* ``messages`` (and a ShareGPT record's first turn, as one user message) are rendered with the engine's tokenizer
  chat template, ``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``: the call vLLM's
  ``CustomDataset.sample`` itself makes, which would only wrap a single ``prompt`` string as one user message, so
  a multi-turn chat log must be rendered before it reaches that loader;
* a ``prompt`` is sent as recorded (``skip_chat_template=True``), as ``/v1/completions`` receives it;
* the output budget is the record's own (``output_tokens`` of the custom format), else, for ShareGPT, the length of
  the recorded reply in tokens (as vLLM's ``ShareGPTDataset``), else ``traffic.output_len``.

The custom loader only reads a ``.jsonl`` file (pandas): the rendered rows go to a temporary file that is deleted
at once, and the loader's prompts are checked against the rendered ones (pandas must not have coerced a text).
Requests are kept in the log's order (``disable_shuffle``); the first ``num_prompts`` are sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

from evalgate.inputs.requestlog import LoggedRequest, RequestLog, length_summary, read_request_log

WARMUP_OUTPUT_LEN = 16  # as speedrun.WARMUP_OUTPUT_LEN: the warm-up's output budget per request


class LogMismatch(ValueError):
    """The log changed since the parent read it, or a request does not fit the engine."""


FIELD = {"chat": "messages", "prompt": "prompt", "sharegpt": "conversations"}  # the record field a problem names


def render(tokenizer: Any, request: LoggedRequest, where: str = "", chat: dict[str, Any] | None = None) -> str:
    """The prompt text of ``request``: a ``prompt`` as is, chat messages through a chat template: the config's
    (``chat`` = its ``chat:`` section as the worker gets it, ``{"template", "template_kwargs", "content", ...}``) when
    it has one, else ``tokenizer``'s own; the request's ``tools`` are passed to the template (templates that take them
    render them; others ignore them). The messages reach the template as lm-eval's do through the adapter
    (``chat.template_messages`` in the form ``chat.message_form`` resolves: the spec's ``content``, else the
    template's probe), so a template that reads only content parts (Idefics3's) gets each message's text as a text
    part, not an empty turn.

    Raises:
        LogMismatch: chat messages, and no template at all (``where``: ``file: line N``, named), or the template
            loses a message's text in both forms, or refused the messages.
    """
    from evalgate.inputs.chat import message_form, template_messages

    if request.kind == "prompt":
        return request.prompt or ""
    on = bool((chat or {}).get("chat"))
    template = (chat or {}).get("template") if on else None
    if template is None and hasattr(tokenizer, "chat_template") and not tokenizer.chat_template:
        raise LogMismatch(f"{where}: {FIELD[request.kind]}: the engine's tokenizer has no chat template, so chat "
                          f"requests cannot be rendered (vLLM's /v1/chat/completions refuses them too); log "
                          f"/v1/completions prompts for this model, or give the config a chat: template")
    try:
        extra = dict((chat or {}).get("template_kwargs") or {}) if on else {}
        if template is not None:
            extra["chat_template"] = template
        text = template if template is not None else str(getattr(tokenizer, "chat_template", "") or "")
        # the config's resolved form applies to the template the config renders with (its own or the model's)
        form = message_form(chat if on else None, text)
    except ValueError as exc:
        raise LogMismatch(f"{where}: {FIELD[request.kind]}: {exc}, so every recorded request would be sent "
                          f"without its text") from None
    try:
        if request.tools:  # templates that take tools render them
            extra["tools"] = [dict(t) for t in request.tools]
        messages = template_messages([dict(m) for m in request.messages or ()], form)
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra)
    except Exception as exc:  # noqa: BLE001 - a template that refuses these messages (e.g. roles out of order)
        reason = " ".join(str(exc).split())[:200]
        raise LogMismatch(f"{where}: {FIELD[request.kind]}: the engine's chat template refused these messages: "
                          f"{type(exc).__name__}: {reason}") from None


def budget(tokenizer: Any, request: LoggedRequest, default: int) -> tuple[int, str]:
    """``(output tokens, source)``: the record's ``recorded`` budget, the ShareGPT reply's length (``reply``), or
    ``default`` (``traffic.output_len``)."""
    if request.max_tokens is not None:
        return request.max_tokens, "recorded"
    if request.completion:
        return max(len(tokenizer(request.completion).input_ids), 1), "reply"
    return default, "default"


def load_requests(tokenizer: Any, log: RequestLog, num_prompts: int, default_output_len: int,
                  max_model_len: int | None) -> tuple[list[Any], dict[str, Any]]:
    """The first ``num_prompts`` requests of ``log`` as vLLM ``SampleRequest``s (module docstring), and their
    summary: ``{"requests", "input_tokens": {p50, p90, p99, max}, "output_tokens": {...}, "output_budget":
    {source: count}, "requests_sha256"}`` (the hash of the prompts and budgets sent; equal on two sides = the same
    requests). Lengths are in tokens of ``tokenizer`` (prompt tokens as vLLM's loader counts them).

    Raises:
        LogMismatch: a request's prompt plus output budget exceeds ``max_model_len`` (naming the file, the line and
            the field), or vLLM's loader did not return the rendered prompts unchanged.
    """
    from vllm.benchmarks.datasets import CustomDataset

    chosen = log.requests[:num_prompts]
    rows, sources = [], []
    for r in chosen:
        out, source = budget(tokenizer, r, default_output_len)
        rows.append({"prompt": render(tokenizer, r, f"{log.path}: {log.where(r)}"), "output_tokens": out})
        sources.append(source)
    fd, tmp = tempfile.mkstemp(prefix="evalgate-requests-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        dataset = CustomDataset(dataset_path=tmp, disable_shuffle=True)
        kwargs: dict[str, Any] = {"output_len": None, "skip_chat_template": True}
        requests = dataset.sample(tokenizer=tokenizer, num_requests=len(rows), **kwargs)
    finally:
        os.unlink(tmp)
    requests = list(requests)[:len(rows)]
    if len(requests) != len(rows) or any(q.prompt != row["prompt"] or q.expected_output_len != row["output_tokens"]
                                         for q, row in zip(requests, rows)):
        raise LogMismatch(f"{log.path}: vLLM's custom-dataset loader did not return the log's requests unchanged")
    if max_model_len is not None:
        for r, q in zip(chosen, requests):
            if q.prompt_len + q.expected_output_len > max_model_len:
                raise LogMismatch(f"{log.path}: {log.where(r)}: {FIELD[r.kind]}: {q.prompt_len} prompt tokens + "
                                  f"{q.expected_output_len} output tokens exceed the engine's max_model_len "
                                  f"{max_model_len}")
    digest = hashlib.sha256(json.dumps([[q.prompt, q.expected_output_len] for q in requests],
                                       ensure_ascii=False).encode("utf-8")).hexdigest()
    summary = {"requests": len(requests),
               "input_tokens": length_summary([q.prompt_len for q in requests]),
               "output_tokens": length_summary([q.expected_output_len for q in requests]),
               "output_budget": {s: sources.count(s) for s in ("recorded", "reply", "default") if s in sources},
               "requests_sha256": digest}
    return requests, summary


def prepare(llm: Any, log_spec: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``load_requests`` for a speed command's ``log`` (``{"path", "sha256", "num_prompts", "output_len"}``) on a
    started ``vllm.LLM``: the log is read again and must still have the parent's SHA-256.

    Raises:
        LogMismatch: the file changed since the gate read it, or ``load_requests``' reasons.
        ConfigError: the file no longer reads (``requestlog.read_request_log``).
    """
    log = read_request_log(log_spec["path"])
    if log.sha256 != log_spec["sha256"]:
        raise LogMismatch(f"{log.path}: the request log changed on disk while evalgate was running; run again")
    max_len = int(llm.llm_engine.vllm_config.model_config.max_model_len)
    return load_requests(llm.get_tokenizer(), log, int(log_spec["num_prompts"]), int(log_spec["output_len"]),
                         max_len)


def warmup(requests: list[Any], concurrency: int) -> list[Any]:
    """The warm-up pass: the first ``concurrency`` requests with at most ``WARMUP_OUTPUT_LEN`` output tokens."""
    import dataclasses

    return [dataclasses.replace(q, expected_output_len=min(q.expected_output_len, WARMUP_OUTPUT_LEN))
            for q in requests[:concurrency]]
