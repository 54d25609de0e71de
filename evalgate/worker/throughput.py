"""Worker side of the speed measurement: offline throughput of a started engine, with vLLM's own benchmark code.

Runs inside the engine worker (``evalgate.evaluate.runner``) after its suites, on the same ``vllm.LLM``: no second engine
start. The prompts come from vLLM's ``vllm.benchmarks.datasets.RandomDataset`` (random token prompts of exactly
``input_len`` tokens, as ``vllm bench throughput --dataset-name random``) or from the suites' own prompts; every
request uses ``vllm bench throughput``'s sampling parameters (``temperature=1.0, top_p=1.0, ignore_eos=True,
max_tokens=output_len``). With all prompts in flight at once (``num_prompts <= concurrency``) the timed call is
vLLM's own ``vllm.benchmarks.throughput._run_vllm_requests`` (the function behind ``vllm bench throughput``; same
signature in vLLM 0.26.0 and 0.32.0); with fewer slots than prompts, at most ``concurrency`` requests are in
flight: ``LLMEngine.add_request`` / ``step`` refill a slot as a request finishes (what ``vllm bench serve
--max-concurrency`` does against a server). Tokens are counted from the outputs, as ``throughput.main`` does.

Every pass also reports what the engine could hold: ``preemptions`` (vLLM's ``vllm:num_preemptions`` counter over
the pass, where ``LLM.get_metrics`` has it) and, for a refilled pass with a steady-state window, ``streams`` (the median number of
requests that got a token per engine step inside it). A side whose KV cache or SSM state cannot hold the level's
concurrency runs fewer streams than it was sent, or preempts: its throughput then measures its capacity as much as
its kernels, which the report says (``speed.speedup.capacity_note``).

A refilled pass also reports its **steady-state window** (``steady_window``): the output tokens generated from the
first request's completion (the initial fill is over, slots now turn over) to the last request's admission (after
it, the in-flight count only falls: the drain), when at least ``concurrency`` requests finish inside it, i.e. with
about three times as many prompts as slots or more. Its rate is the pass's ``output_tok_s``; the whole pass's,
fill and drain included, stays in ``pass_output_tok_s``. Why: a pass that fills once and drains measures the ramp
and the tail as much as the engine at the level's concurrency (a request log's long answers finish last, with few
requests in flight); vLLM's ``bench serve`` and ``bench throughput`` time the whole run, and MLPerf Inference makes
fill and drain negligible by a minimum run length (600 s) instead, which a gate that repeats passes cannot afford.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from evalgate.worker.vllm_engine import counter_totals

PROMPT_SEED = 0  # RandomDataset's seed: both sides get the same prompts
WARMUP_SEED = 1  # the warm-up prompts differ from the measured ones (as throughput.main: seed + 1)


def sample_requests(llm: Any, input_len: int, output_len: int, num_prompts: int, seed: int = PROMPT_SEED,
                    suite_prompts: list[list[int]] | None = None, range_ratio: float = 0.0) -> list[Any]:
    """``num_prompts`` vLLM ``SampleRequest``s of ``input_len`` prompt tokens and ``output_len`` output tokens.

    ``suite_prompts`` (token ids of the suites' prompts, for ``prompts: suites``) are cycled and cut or padded to
    ``input_len`` by repetition; otherwise ``RandomDataset(random_seed=seed).sample(...)`` makes them, with each
    request's lengths drawn from ``[len * (1 - range_ratio), len * (1 + range_ratio)]`` (vLLM's ``range_ratio``,
    0 <= range_ratio < 1; 0: exactly ``input_len`` / ``output_len``).

    Raises:
        ValueError: ``range_ratio`` with ``suite_prompts`` (the suites' prompts keep fixed lengths), or outside
            [0, 1) (vLLM's own check).
    """
    from vllm.benchmarks.datasets import RandomDataset, SampleRequest

    if suite_prompts:
        if range_ratio:
            raise ValueError("range_ratio applies to vLLM's random prompts only, not to the suites' prompts")
        out = []
        for i in range(num_prompts):
            ids = list(suite_prompts[i % len(suite_prompts)])
            ids = (ids * (input_len // max(len(ids), 1) + 1))[:input_len]
            out.append(SampleRequest(prompt={"prompt_token_ids": ids}, prompt_len=len(ids),
                                     expected_output_len=output_len, request_id=str(i)))
        return out
    tokenizer = llm.get_tokenizer()
    return RandomDataset(random_seed=seed).sample(tokenizer=tokenizer, num_requests=num_prompts, input_len=input_len,
                                                  output_len=output_len, range_ratio=range_ratio)


def measure(llm: Any, requests: list[Any], concurrency: int, *, detokenize: bool = True) -> dict[str, Any]:
    """Time one pass of ``requests`` through ``llm`` with at most ``concurrency`` in flight, the prefix cache reset
    first (``LLM.reset_prefix_cache``, where the engine has one): every repeat sends the same prompts, so without it
    a pass would find the previous pass's prefixes cached, and under ``placement: alternate`` (a wake resets the
    cache) the warm and cold passes of an interleaved pair would fall unevenly on the two sides.

    ``detokenize=False`` (random weights, ``load_format: dummy``) generates token ids only (vLLM's
    ``SamplingParams.detokenize=False``, as ``vllm bench throughput --disable-detokenize``): a config-only model's
    vocabulary (131,072) is larger than the tokenizer it borrows (2,048), so the ids it samples need not be
    decodable. The prompts stay the tokenizer's (``sample_requests``), so every prompt id is within both
    vocabularies.

    Returns:
        ``{"elapsed_s", "requests", "prompt_tokens", "output_tokens", "output_tok_s", "total_tok_s",
        "request_s"}``: seconds, counts, tokens per second and requests per second (all over the whole pass); with
        ``detokenize=False`` also ``"detokenize": False``. A refilled pass (more requests than ``concurrency``) with a
        steady-state window (``steady_window``) also has ``"window"`` (that dict) and ``"pass_output_tok_s"``, and
        its ``output_tok_s`` is the window's rate, and ``"streams"`` (``window_streams``); ``"preemptions"``
        (requests vLLM preempted during the pass, ``preemptions``) where the engine reports it.
    Raises:
        RuntimeError: the engine answered fewer requests than were sent.
    """
    reset = getattr(llm, "reset_prefix_cache", None)
    if callable(reset):
        reset()
    preempted_before = preemptions(llm)
    trace: PassTrace | None = None
    if len(requests) <= concurrency:
        from vllm.benchmarks.throughput import _run_vllm_requests

        elapsed, outputs = _run_vllm_requests(llm, requests, n=1, disable_detokenize=not detokenize,
                                              do_profile=False, prequeue_requests=False, enable_lora=False)
    else:
        elapsed, outputs, trace = _run_limited(llm, requests, concurrency, detokenize=detokenize)
    preempted_after = preemptions(llm)
    outputs = list(outputs or [])
    if len(outputs) != len(requests):
        raise RuntimeError(f"the engine answered {len(outputs)} of {len(requests)} benchmark requests")
    prompt_toks = sum(len(o.prompt_token_ids or []) for o in outputs)
    output_toks = sum(_tokens(o) for o in outputs)
    result = {"elapsed_s": elapsed, "requests": len(outputs), "prompt_tokens": prompt_toks,
              "output_tokens": output_toks, "output_tok_s": output_toks / elapsed,
              "total_tok_s": (prompt_toks + output_toks) / elapsed, "request_s": len(outputs) / elapsed,
              **({} if detokenize else {"detokenize": False})}
    if preempted_before is not None and preempted_after is not None:
        result["preemptions"] = max(int(preempted_after - preempted_before), 0)
    window = steady_window(trace.steps, trace.last_admit_s, concurrency) if trace is not None else None
    if window is not None:
        result.update(window=window, pass_output_tok_s=result["output_tok_s"], output_tok_s=window["output_tok_s"])
        streams = window_streams(trace, window)
        if streams is not None:
            result["streams"] = streams
    return result


PREEMPTIONS_METRIC = "vllm:num_preemptions"  # vLLM V1's counter (v1/metrics/loggers.py), 0.26.0 and 0.32.0


def preemptions(llm: Any) -> float | None:
    """vLLM's cumulative preemption count (``vllm:num_preemptions``, ``vllm_engine.counter_totals``), or None when the
    engine does not report it (stats disabled, another vLLM): then a pass reports no ``preemptions`` rather than a 0
    nobody measured."""
    return (counter_totals(llm, PREEMPTIONS_METRIC) or {}).get(PREEMPTIONS_METRIC)


def window_streams(trace: PassTrace, window: dict[str, Any]) -> float | None:
    """The median number of requests that got a token per engine step inside ``window`` (``steady_window``'s
    bounds: steps ending after ``start_s``, up to ``end_s``), from ``trace.decoding``; None without per-step counts.
    With every slot held this is the pass's concurrency; below it, the engine kept requests waiting (its KV cache or
    SSM state was full) or was still prefilling them."""
    if len(trace.decoding) != len(trace.steps):
        return None
    counts = [n for (t, _, _), n in zip(trace.steps, trace.decoding) if window["start_s"] < t <= window["end_s"]]
    return float(statistics.median(counts)) if counts else None


@dataclass
class PassTrace:
    """What a refilled pass (``_run_limited``) saw, step by step. ``steps``: one ``(t_s, new_output_tokens,
    finished)`` per engine step, ``t_s`` seconds from the pass's start at the step's end; ``decoding``: per step (same
    order) how many requests got output in it (the requests the engine ran that step, less any still prefilling);
    ``last_admit_s``: when the last request was admitted (the end of the step that freed its slot; 0.0 when all fit
    at once)."""

    steps: list[tuple[float, int, int]] = field(default_factory=list)
    decoding: list[int] = field(default_factory=list)
    last_admit_s: float | None = None


def steady_window(steps: Sequence[tuple[float, int, int]], last_admit_s: float | None,
                  concurrency: int) -> dict[str, Any] | None:
    """The steady-state window of a refilled pass: from the end of the first step in which a request finished to
    ``last_admit_s`` (the last admission; the drain follows), counting the output tokens of the steps that end
    inside it (after its start, up to and including its end).

    Args:
        steps: ``(t_s, new_output_tokens, finished)`` per engine step, in order (``PassTrace.steps``).
        last_admit_s: seconds from the pass's start to the last admission; None when not every request was admitted.
        concurrency: the pass's slots; the window counts only when at least this many requests finish inside it
            (every slot turned over once), so a short window does not stand for the pass.
    Returns:
        ``{"start_s", "end_s", "output_tokens", "finished", "output_tok_s"}`` (seconds from the pass's start,
        tokens, requests, tokens per second), or None when there is no such window (no refill, or too short).
    """
    first = next((t for t, _, finished in steps if finished), None)
    if first is None or last_admit_s is None or last_admit_s <= first:
        return None
    inside = [(tokens, finished) for t, tokens, finished in steps if first < t <= last_admit_s]
    done = sum(finished for _, finished in inside)
    if done < max(concurrency, 1):
        return None
    tokens = sum(n for n, _ in inside)
    return {"start_s": first, "end_s": last_admit_s, "output_tokens": tokens, "finished": done,
            "output_tok_s": tokens / (last_admit_s - first)}


def _tokens(output: Any) -> int:
    """Output tokens of one vLLM ``RequestOutput`` so far (its completions' ``token_ids``, cumulative)."""
    return sum(len(c.token_ids or []) for c in output.outputs if c is not None)


def _params(request: Any, detokenize: bool = True) -> Any:
    from vllm import SamplingParams

    # vllm.benchmarks.throughput._run_vllm_requests' parameters, so both paths measure the same work.
    return SamplingParams(n=1, temperature=1.0, top_p=1.0, ignore_eos=True, max_tokens=request.expected_output_len,
                          detokenize=detokenize)


def _prompt(request: Any) -> Any:
    from vllm.inputs import TextPrompt, TokensPrompt

    p = request.prompt
    if isinstance(p, dict) and "prompt_token_ids" in p:
        return TokensPrompt(prompt_token_ids=list(p["prompt_token_ids"]))
    return TextPrompt(prompt=p)


def _run_limited(llm: Any, requests: list[Any], concurrency: int, *,
                 detokenize: bool = True) -> tuple[float, list[Any], PassTrace]:
    """At most ``concurrency`` requests in flight; a finished one frees its slot for the next. Seconds, outputs
    and the pass's ``PassTrace`` (new output tokens per step: the engine's outputs are cumulative, vLLM's default
    ``RequestOutputKind.CUMULATIVE``, so a step's new tokens are the growth since the request's last output)."""
    engine = llm.llm_engine
    pending = list(enumerate(requests))
    pending.reverse()
    done: list[Any] = []
    seen: dict[str, int] = {}
    trace = PassTrace()
    in_flight = 0
    start = time.perf_counter()
    while pending or in_flight:
        while pending and in_flight < concurrency:
            i, req = pending.pop()
            engine.add_request(f"evalgate-speed-{i}-{time.monotonic_ns()}", _prompt(req), _params(req, detokenize))
            in_flight += 1
            if not pending:
                trace.last_admit_s = trace.steps[-1][0] if trace.steps else 0.0
        new = finished = 0
        outs = engine.step()
        for out in outs:
            tokens = _tokens(out)
            new += max(tokens - seen.get(out.request_id, 0), 0)
            seen[out.request_id] = tokens
            if getattr(out, "finished", False):
                done.append(out)
                in_flight -= 1
                finished += 1
        trace.steps.append((time.perf_counter() - start, new, finished))
        trace.decoding.append(len(outs))
        if in_flight and not engine.has_unfinished_requests():
            raise RuntimeError("the engine dropped benchmark requests")
    return time.perf_counter() - start, done, trace


def device_info() -> dict[str, Any]:
    """The device measured on: ``{"device": name, "isa": [...]}`` (GPU name, or CPU model and its SIMD flags)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"device": torch.cuda.get_device_name(0), "isa": [], "cuda": torch.version.cuda}
    except Exception:  # noqa: BLE001 - no torch CUDA: describe the CPU
        pass
    from evalgate.engine.device import cpu_info

    return cpu_info()
