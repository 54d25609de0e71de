"""``VllmEngine``: a started ``vllm.LLM`` for one config (in-process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the
config read back is the one the engine core runs with): generate, stream, teacher-forced scoring, log-likelihoods.

Keeping the engine busy: ``generate_stream`` hands a whole group of requests to the engine in one submission
(``LLM.enqueue`` + vLLM's own ``llm_engine.step()`` loop), so vLLM's scheduler batches them continuously.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evalgate.inputs.config import Sampling

# Sequences per teacher-forced scoring submission (bounds the returned top-k lists, not the engine's peak memory).
SCORE_BATCH = 64


@dataclass
class Generation:
    """One completion: ``text`` (untrusted), ``n_tokens`` generated, vLLM's ``finish_reason`` ("stop"/"length"),
    the token ids of prompt and output (to score the same sequence under another engine), and
    ``top_logprobs``: per output position, ``[[token id, logprob], ...]`` (the engine's top-k next-token
    log-probs, natural log, plus the generated token's), recorded while decoding. Decode-time log-probs see
    what prefill scoring cannot (an SSM state stored in FP16 between steps, a speculative-decoding path);
    ``evidence.decode_divergence`` compares them along the tokens both sides generated alike. ``spec_decode``:
    this request's own speculative-decoding counts (``spec_decode_num_drafts`` = verify steps with drafts,
    ``..._draft_tokens``, ``..._accepted_tokens``; vLLM's per-request metrics), None without speculative decoding
    or where the installed vLLM has no per-request metrics (0.26: only the engine-wide counters exist).
    Kept with the generation so a resumed or cached run still reports the acceptance of every item."""

    text: str
    n_tokens: int
    finish_reason: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    top_logprobs: list[list[list[float]]] | None = None
    spec_decode: dict[str, int] | None = None


class VllmEngine:
    """A started vLLM engine for one config.

    Args:
        model: local checkpoint path or hub name.
        engine_args: ``vllm.EngineArgs`` keyword arguments, spelled as vLLM spells them.
        sampling: the config's sampling parameters.
    Raises:
        Whatever vLLM raises on start; the runner turns it into ``EngineError`` with the log tail.
    """

    def __init__(self, model: str, engine_args: dict[str, Any], sampling: Sampling, *, sleep_mode: bool = False) -> None:
        from vllm import LLM

        from evalgate.inputs.config import engine_arg_names
        from evalgate.worker.engine_args import evalgate_extras

        self.sampling = sampling
        self.requested = dict(engine_args)
        extra, self.evidence_sources = evalgate_extras(engine_args, engine_arg_names())
        if sleep_mode:  # placement: alternate; not part of the config's identity (it does not change outputs)
            from vllm.platforms import current_platform

            if not current_platform.is_sleep_mode_available():
                raise RuntimeError(f"placement alternate: vLLM says sleep mode is not available on this platform "
                                   f"({type(current_platform).__name__})")
            extra["enable_sleep_mode"] = True
        self.llm = LLM(model=model, **{**engine_args, **extra})  # a config may set enable_sleep_mode itself

    def sleep_mode(self) -> bool:
        """Whether the engine runs with sleep mode, read back from the engine's model config (not the request)."""
        return bool(getattr(self.llm.llm_engine.vllm_config.model_config, "enable_sleep_mode", False))

    def sleep(self, level: int = 1) -> None:
        """``LLM.sleep(level)``: level 1 offloads the weights to host memory and drops the KV cache (no request may
        be in flight: evalgate sends none between passes)."""
        self.llm.sleep(level=level)

    def wake(self) -> None:
        """``LLM.wake_up()`` (weights and KV cache back; vLLM 0.26 returns None, 0.32 a bool: not read), then
        ``LLM.reset_prefix_cache()``: nothing cached before the sleep may serve a pass after it."""
        self.llm.wake_up()
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[Any], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> list[Generation]:
        """Greedy (or the config's) completions of ``prompts``, one engine submission, order preserved.

        ``logprobs`` > 0 records the top-``logprobs`` next-token log-probs at every output position (vLLM's raw
        log-probs: computed from the logits before sampling, so they do not change which token is generated).
        """
        out: list[Generation | None] = [None] * len(prompts)
        for finished in self.generate_stream(prompts, max_tokens=max_tokens, stop=stop, logprobs=logprobs):
            for i, gen in finished:
                out[i] = gen
        return [g for g in out if g is not None]  # generate_stream answers every index (or raises)

    def generate_stream(self, prompts: list[Any], *, max_tokens: int, stop: list[str],
                        logprobs: int = 0) -> Iterator[list[tuple[int, Generation]]]:
        """Submit every prompt to the engine at once; after each engine step, yield what finished in it.

        A prompt is a string, or vLLM's ``TextPrompt`` dict ``{"prompt": text, "multi_modal_data": {"image": ...}}``
        for a request with images (``lm_adapter.engine_prompt``); vLLM's own input processing renders both.

        One submission lets vLLM's scheduler batch all of them (continuous batching: a finished request's slot is
        refilled at once, no barrier). Requests are added with ``LLM.enqueue`` (vLLM's public add-without-running
        API, rendering prompts exactly as ``LLM.generate`` does; in 0.26 and 0.32) and driven by the same loop as
        ``LLM.generate``'s own ``_run_engine``: ``llm_engine.step()`` while ``has_unfinished_requests()`` (each step
        runs one batch: nothing polls or sleeps). Greedy outputs equal ``LLM.generate`` over the same prompts.

        Yields:
            Non-empty lists of ``(index into prompts, Generation)``, in completion order; every index exactly once.
        Raises:
            RuntimeError: the engine already holds unfinished requests, or finished without answering some.
            Closing the generator early (an error in the consumer, a kill) aborts the requests still in flight.
        """
        params = self._params(max_tokens, stop, logprobs)
        if not hasattr(self.llm, "enqueue"):  # vLLM older than LLM.enqueue: one blocking submission
            outs = self.llm.generate(prompts, params, use_tqdm=False)
            yield [(i, _generation(o, logprobs)) for i, o in enumerate(outs)]
            return
        core = self.llm.llm_engine
        if core.has_unfinished_requests():
            raise RuntimeError("the engine still holds unfinished requests of an earlier submission")
        ids = self.llm.enqueue(prompts, params, use_tqdm=False)
        # enqueue returns vLLM's internal ids ("<id>-<8 random chars>"); outputs carry the id the LLM assigned.
        index = {rid.split("-", 1)[0]: i for i, rid in enumerate(ids)}
        pending = dict(zip(index, ids))
        try:
            while core.has_unfinished_requests():
                finished = []
                for o in core.step():
                    if o.finished:
                        if o.request_id not in pending:
                            raise RuntimeError(f"the engine finished request {o.request_id!r}, not one of ours")
                        del pending[o.request_id]
                        finished.append((index[o.request_id], _generation(o, logprobs)))
                if finished:
                    yield finished
            if pending:
                raise RuntimeError(f"the engine stopped with {len(pending)} of {len(ids)} requests unanswered")
        finally:
            if pending:
                core.abort_request(list(pending.values()), internal=True)

    def _params(self, max_tokens: int, stop: list[str], logprobs: int) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=self.sampling.seed,
            max_tokens=max_tokens, stop=stop or None, logprobs=logprobs or None,
        )

    def score(self, sequences: list[tuple[list[int], list[int]]], k: int) -> list[list[dict[int, float]]]:
        """Teacher-forced log-probs: for each (prompt ids, output ids), the top-``k`` next-token log-probs at every
        output position (plus the actual token's), as ``{token id: logprob}`` per position.

        Uses vLLM's ``prompt_logprobs`` on prompt+output (one prefill per sequence, no decoding), ``SCORE_BATCH``
        sequences per engine submission. Memory: the engine's model runner computes the full-vocabulary
        log-softmax request by request over the tokens scheduled in a step (``_get_prompt_logprobs_dict``), so the
        transient peak is one request's chunk x vocabulary, as when scoring one at a time; the batch bounds only the
        returned top-k lists. Position j of the result is the distribution that predicted output token j.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=k)
        out: list[list[dict[int, float]]] = [[] for _ in sequences]
        todo = [i for i, (_, out_ids) in enumerate(sequences) if out_ids]
        for start in range(0, len(todo), SCORE_BATCH):
            group = todo[start:start + SCORE_BATCH]
            prompts = [TokensPrompt(prompt_token_ids=sequences[i][0] + sequences[i][1]) for i in group]
            for i, res in zip(group, self.llm.generate(prompts, params, use_tqdm=False)):
                positions = (res.prompt_logprobs or [])[-len(sequences[i][1]):]
                out[i] = [{int(t): float(lp.logprob) for t, lp in (pos or {}).items()} for pos in positions]
        return out

    def loglikelihood(self, sequences: list[tuple[list[int], int]]) -> list[list[tuple[float, bool]]]:
        """Prompt log-probs of each sequence's continuation: for each ``(token ids, n_context)``, per continuation
        token (positions ``n_context`` to the end), ``(logprob, is_greedy)`` in natural log, where ``is_greedy``
        means the token is the engine's top-1 there (vLLM's ``rank == 1``).

        One prefill per sequence, no decoding (``SamplingParams(max_tokens=1, prompt_logprobs=1)``: vLLM returns the
        actual token's log-prob and rank at every prompt position but the first). ``n_context`` must be >= 1.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids, _ in sequences], params, use_tqdm=False)
        result = []
        for (ids, n_ctx), out in zip(sequences, outs):
            positions = list(out.prompt_logprobs or [])
            result.append([_token_logprob(positions[j], ids[j]) for j in range(n_ctx, len(ids))])
        return result

    def tokenizer(self) -> Any:
        """The engine's tokenizer (a Hugging Face tokenizer: ``encode``, ``bos_token_id``, ``eos_token_id``)."""
        return self.llm.get_tokenizer()

    def max_model_len(self) -> int:
        """The longest sequence (prompt + output tokens) the engine accepts."""
        return int(self.llm.llm_engine.vllm_config.model_config.max_model_len)

    def effective_config(self) -> dict[str, Any]:
        """What the engine applied, for every watched key and every key the config requested
        (``readback.effective_config``)."""
        from evalgate.engine.readback import effective_config

        return effective_config(self.llm.llm_engine.vllm_config, self.requested)

    def spec_decode_counters(self) -> dict[str, float]:
        """vLLM's speculative-decoding counters (drafts, draft tokens, accepted tokens); empty when off."""
        totals = counter_totals(self.llm, "vllm:spec_decode") or {}
        return {name.removeprefix("vllm:"): value for name, value in totals.items()}


def counter_totals(llm: Any, prefix: str) -> dict[str, float] | None:
    """vLLM's metrics whose name starts with ``prefix`` and that carry a single ``value`` (counters, gauges), read
    through ``LLM.get_metrics`` and summed per name over their label sets (e.g. one per engine); None when the engine
    cannot say (no such method, or stats disabled: vLLM asserts), so a caller reports nothing rather than a 0 nobody
    measured."""
    get = getattr(llm, "get_metrics", None)
    if not callable(get):
        return None
    try:
        metrics = get()
    except Exception:  # noqa: BLE001 - stats disabled or unsupported: not measured
        return None
    out: dict[str, float] = {}
    for m in metrics:
        name = getattr(m, "name", None)
        if isinstance(name, str) and name.startswith(prefix) and hasattr(m, "value"):
            out[name] = out.get(name, 0.0) + float(m.value)
    return out


def _generation(out: Any, logprobs: int) -> Generation:
    """A finished ``RequestOutput`` (one sample) as a ``Generation``."""
    o = out.outputs[0]
    return Generation(o.text, len(o.token_ids), o.finish_reason, list(out.prompt_token_ids or []), list(o.token_ids),
                      _top_logprobs(o.logprobs) if logprobs else None,
                      _spec_counts(getattr(o, "spec_decode_metrics", None)))


def _top_logprobs(positions: Any) -> list[list[list[float]]]:
    """vLLM's per-position ``{token id: Logprob}`` as ``[[token id, logprob rounded to 1e-6], ...]`` (JSON-able;
    NaN and inf are kept: they are evidence)."""
    out = []
    for pos in positions or []:
        out.append([[int(t), _round(float(lp.logprob))] for t, lp in (pos or {}).items()])
    return out


def _token_logprob(position: Any, token: int) -> tuple[float, bool]:
    """``(logprob, is_greedy)`` of ``token`` at one prompt position (vLLM's ``{token id: Logprob}``)."""
    lp = position[token]
    rank = getattr(lp, "rank", None)
    greedy = rank == 1 if rank is not None else lp.logprob >= max(x.logprob for x in position.values())
    return float(lp.logprob), bool(greedy)


def _spec_counts(metrics: Any) -> dict[str, int] | None:
    """One request's speculative-decoding counts from vLLM's ``RequestSpecDecodeMetrics`` (None when absent).

    ``histogram[j]`` counts verify steps that accepted ``j`` draft tokens, so drafts = sum(histogram) and
    accepted = sum(j * histogram[j]) (vLLM ``RequestSpecDecodeMetrics.to_dict``).
    """
    if metrics is None:
        return None
    hist = list(getattr(metrics, "histogram", []) or [])
    return {"spec_decode_num_drafts": int(sum(hist)),
            "spec_decode_num_draft_tokens": int(getattr(metrics, "num_draft_tokens", 0)),
            "spec_decode_num_accepted_tokens": int(sum(j * c for j, c in enumerate(hist)))}


def _round(x: float) -> float:
    import math

    return round(x, 6) if math.isfinite(x) else x
