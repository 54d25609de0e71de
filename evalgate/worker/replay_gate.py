"""Worker side of the replay gate (``replay:``): the chosen recorded requests rendered, counted and answered greedily.

The parent sends ``{"path", "sha256", "lines", "budgets"}`` (``inputs.replay.ReplayPlan.spec``); the log is read
again here and must have the same SHA-256. A request is rendered as vLLM's OpenAI server renders it:

* ``messages`` (and a ShareGPT record's first turn) through the config's chat template (its ``chat:`` section), else
  the tokenizer's own, with ``add_generation_prompt=True`` and the request's ``tools`` for templates that take them
  (``evalgate.worker.replay.render``);
* a ``prompt`` as recorded;

then tokenized with the tokenizer's special tokens, except a BOS the rendered text already starts with (a template
that writes it): one BOS either way.

Generation is greedy (``temperature=0``), or the request's recorded temperature and top-p with a fixed seed
(``replay.sampling: recorded``: ``inputs.replay.ReplayPlan.sampling``), with the request's budget and the engine's top-``LOGPROBS_K`` log-probs at
every output position (for the decode-time KL), the same on both sides; ``response_format`` is not enforced
(no guided decoding), so valid JSON measures the model, not a grammar.
"""

from __future__ import annotations

from typing import Any

from evalgate.inputs.requestlog import LoggedRequest, read_request_log
from evalgate.worker.replay import LogMismatch, render


def chosen(spec: dict[str, Any]) -> tuple[list[LoggedRequest], str]:
    """The requests ``spec`` names, in its order, and the log's path. Raises LogMismatch: the log changed."""
    log = read_request_log(spec["path"])
    if log.sha256 != spec["sha256"]:
        raise LogMismatch(f"{log.path}: the request log changed on disk while evalgate was running; run again")
    by_line = {r.line: r for r in log.requests}
    return [by_line[n] for n in spec["lines"]], str(log.path)


def prompt_ids(tokenizer: Any, spec: dict[str, Any], chat: dict[str, Any] | None = None) -> list[list[int]]:
    """Each chosen request's prompt token ids (module docstring); ``chat``: the config's chat spec (None: none).

    Raises:
        LogMismatch: the log changed, or the tokenizer cannot render a chat request (no template; refused).
    """
    requests, path = chosen(spec)
    out = []
    for r in requests:
        text = render(tokenizer, r, f"{path}: line {r.line}", chat)
        bos = getattr(tokenizer, "bos_token", None)
        out.append(list(tokenizer(text, add_special_tokens=not (bos and text.startswith(bos))).input_ids))
    return out


def generate(llm: Any, spec: dict[str, Any], logprobs: int, chat: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Greedy answers of the chosen requests on a started ``vllm.LLM``: per request ``{"line", "text",
    "token_ids", "finish_reason", "top_logprobs"}`` (``top_logprobs`` as ``vllm_engine.Generation``'s), in order."""
    from vllm import SamplingParams

    from evalgate.worker.vllm_engine import _top_logprobs

    requests, _ = chosen(spec)
    ids = prompt_ids(llm.get_tokenizer(), spec, chat)
    sampling = spec.get("sampling") or [{"temperature": 0.0}] * len(spec["budgets"])
    params = [SamplingParams(**s, max_tokens=int(b), logprobs=logprobs) for b, s in zip(spec["budgets"], sampling)]
    outs = llm.generate([{"prompt_token_ids": p} for p in ids], params, use_tqdm=False)
    replies = []
    for r, o in zip(requests, outs):
        c = o.outputs[0]
        replies.append({"line": r.line, "text": c.text, "token_ids": list(c.token_ids),
                        "finish_reason": c.finish_reason,
                        "top_logprobs": _top_logprobs(c.logprobs) if c.logprobs else None})
    return replies
