"""What a started engine applied, read back from vLLM's resolved ``VllmConfig`` (never what was requested)."""

from __future__ import annotations

import enum
from typing import Any

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
# A switch vLLM renamed is recorded under its watched (old) name whichever name the config used, so that baseline and
# candidate spelling it differently still compare as one key (argnames.RENAMED_ENGINE_ARGS).
_RECORDED_AS = {"mamba_decode_backend": "mamba_backend"}
UNRESOLVED = "<not found in the engine's config>"
NO_SSM = "<inactive: the model has no SSM (Mamba) layers>"
# EngineArgs names that VllmConfig stores under another (section, attribute) (vllm/engine/arg_utils.py), tried in
# order: vLLM 0.26.0-0.34.0 keep the Mamba kernel in mamba_config.backend; vLLM after 0.34.0 in
# mamba_config.decode_backend (with backend an alias of it), set by mamba_decode_backend or its old name.
_RENAMED: dict[str, tuple[tuple[str, str], ...]] = {
    "kv_cache_dtype": (("cache_config", "cache_dtype"),),
    "mamba_backend": (("mamba_config", "backend"), ("mamba_config", "decode_backend")),
    "enable_mamba_cache_stochastic_rounding": (("mamba_config", "enable_stochastic_rounding"),),
    "mamba_cache_philox_rounds": (("mamba_config", "stochastic_rounding_philox_rounds"),),
}


def effective_config(vc: Any, requested: dict[str, Any]) -> dict[str, Any]:
    """What the engine applied (``vc``: its ``VllmConfig``), for every watched key and every key ``requested``.

    Returns:
        ``{"engine_args": {name: value}, "env": {...}, "model": {...}}`` with JSON-able values;
        a key vLLM's config does not hold maps to ``UNRESOLVED``; a renamed switch is recorded under its old name
        (``mamba_decode_backend`` as ``mamba_backend``).
    """
    keys = list(dict.fromkeys([*WATCHED_KEYS, *(_RECORDED_AS.get(k, k) for k in requested)]))
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


# EngineArgs names that vLLM keeps in ``model_config.multimodal_config`` (a ``MultiModalConfig``; None for a model
# without multimodal input), under the attribute named here; ``model_config`` holds them only as init arguments
# (read there, they are None whatever was applied).
_MULTIMODAL = {"limit_mm_per_prompt": "limit_per_prompt", "mm_processor_cache_gb": "mm_processor_cache_gb",
               "mm_processor_kwargs": "mm_processor_kwargs", "mm_processor_cache_type": "mm_processor_cache_type"}


def _multimodal(vc: Any, key: str) -> Any:
    """A multimodal engine arg as the model's ``MultiModalConfig`` applied it: ``limit_mm_per_prompt`` as
    ``{modality: item count}``; ``UNRESOLVED`` when the model has no multimodal config."""
    mm = getattr(vc.model_config, "multimodal_config", None)
    if mm is None or not hasattr(mm, _MULTIMODAL[key]):
        return UNRESOLVED
    value = getattr(mm, _MULTIMODAL[key])
    if key == "limit_mm_per_prompt" and hasattr(mm, "get_limit_per_prompt"):
        return {str(m): int(mm.get_limit_per_prompt(m)) for m in value}
    return _plain(value)


def _lookup(vc: Any, key: str) -> Any:
    if key in _MULTIMODAL:
        return _multimodal(vc, key)
    if key == "speculative_config":
        sc = vc.speculative_config
        if sc is None:
            return None
        out = {"method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens}
        if sc.method == "ngram":
            out.update(prompt_lookup_min=sc.prompt_lookup_min, prompt_lookup_max=sc.prompt_lookup_max)
        return out
    for section, attr in _RENAMED.get(key, ()):
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
