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
"""

from __future__ import annotations

import time
from typing import Any

PROMPT_SEED = 0  # RandomDataset's seed: both sides get the same prompts
WARMUP_SEED = 1  # the warm-up prompts differ from the measured ones (as throughput.main: seed + 1)


def sample_requests(llm: Any, input_len: int, output_len: int, num_prompts: int, seed: int = PROMPT_SEED,
                    suite_prompts: list[list[int]] | None = None) -> list[Any]:
    """``num_prompts`` vLLM ``SampleRequest``s of ``input_len`` prompt tokens and ``output_len`` output tokens.

    ``suite_prompts`` (token ids of the suites' prompts, for ``prompts: suites``) are cycled and cut or padded to
    ``input_len`` by repetition; otherwise ``RandomDataset(random_seed=seed).sample(...)`` makes them.
    """
    from vllm.benchmarks.datasets import RandomDataset, SampleRequest

    if suite_prompts:
        out = []
        for i in range(num_prompts):
            ids = list(suite_prompts[i % len(suite_prompts)])
            ids = (ids * (input_len // max(len(ids), 1) + 1))[:input_len]
            out.append(SampleRequest(prompt={"prompt_token_ids": ids}, prompt_len=len(ids),
                                     expected_output_len=output_len, request_id=str(i)))
        return out
    tokenizer = llm.get_tokenizer()
    return RandomDataset(random_seed=seed).sample(tokenizer=tokenizer, num_requests=num_prompts, input_len=input_len,
                                                  output_len=output_len, range_ratio=0.0)


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
        "request_s"}``: seconds, counts, tokens per second and requests per second; with ``detokenize=False`` also
        ``"detokenize": False``.
    Raises:
        RuntimeError: the engine answered fewer requests than were sent.
    """
    reset = getattr(llm, "reset_prefix_cache", None)
    if callable(reset):
        reset()
    if len(requests) <= concurrency:
        from vllm.benchmarks.throughput import _run_vllm_requests

        elapsed, outputs = _run_vllm_requests(llm, requests, n=1, disable_detokenize=not detokenize,
                                              do_profile=False, prequeue_requests=False, enable_lora=False)
    else:
        elapsed, outputs = _run_limited(llm, requests, concurrency, detokenize=detokenize)
    outputs = list(outputs or [])
    if len(outputs) != len(requests):
        raise RuntimeError(f"the engine answered {len(outputs)} of {len(requests)} benchmark requests")
    prompt_toks = sum(len(o.prompt_token_ids or []) for o in outputs)
    output_toks = sum(len(c.token_ids or []) for o in outputs for c in o.outputs if c is not None)
    return {"elapsed_s": elapsed, "requests": len(outputs), "prompt_tokens": prompt_toks,
            "output_tokens": output_toks, "output_tok_s": output_toks / elapsed,
            "total_tok_s": (prompt_toks + output_toks) / elapsed, "request_s": len(outputs) / elapsed,
            **({} if detokenize else {"detokenize": False})}


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
                 detokenize: bool = True) -> tuple[float, list[Any]]:
    """At most ``concurrency`` requests in flight; a finished one frees its slot for the next. Seconds, outputs."""
    engine = llm.llm_engine
    pending = list(enumerate(requests))
    pending.reverse()
    done: list[Any] = []
    in_flight = 0
    start = time.perf_counter()
    while pending or in_flight:
        while pending and in_flight < concurrency:
            i, req = pending.pop()
            engine.add_request(f"evalgate-speed-{i}-{time.monotonic_ns()}", _prompt(req), _params(req, detokenize))
            in_flight += 1
        for out in engine.step():
            if getattr(out, "finished", False):
                done.append(out)
                in_flight -= 1
        if in_flight and not engine.has_unfinished_requests():
            raise RuntimeError("the engine dropped benchmark requests")
    return time.perf_counter() - start, done


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
