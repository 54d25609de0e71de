"""The gate's verdicts on the real vLLM CPU engine and the real embedded hybrid, at a size where they are knowable.

One task subset for all three (docparse, 100 items per task), so the FP32 baseline is computed once and served
from the store afterwards (run the tests in file order: the first pays for it):

- ``fp16-state`` PASSes: every task is powered (MDE <= margin) and non-inferior (LB >= -margin);
- a planted regression (the embedded checkpoint with seeded Gaussian noise on its weight matrices, as a bad
  quantization would leave them) BLOCKs on the loss it causes;
- the A/A run (``aa``: the baseline with engine seed 1) PASSes: at greedy decoding the seed picks nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from statistics import NormalDist

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402
from evalgate.suites import load_suite  # noqa: E402

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent
SUITE, LIMIT = "docparse", 100
ARGS = ["--suites", SUITE, "--limit", str(LIMIT)]
Z = NormalDist().inv_cdf(0.95) + NormalDist().inv_cdf(0.8)  # thresholds.yaml: alpha 0.05, power 0.8
MDE_FLOOR = Z * 100 / LIMIT  # 2.49 points: the least MDE of 100 items, whatever the outputs
# Noise on every weight matrix, relative to the matrix's own standard deviation (measured: see the BLOCK test).
NOISE_SCALE, NOISE_SEED = 0.0, 0


def noisy_checkpoint(dest: Path, scale: float, seed: int) -> Path:
    """Copy the packaged hybrid checkpoint to ``dest`` with ``W + scale * std(W) * N(0, 1)`` on every weight
    matrix (2-D tensors: embeddings, projections, LM head; norms, biases and SSM scalars untouched), seeded per
    tensor, stored in the checkpoint's own dtype. Returns ``dest``."""
    import torch
    from safetensors.torch import load_file, save_file

    from evalgate.hybrid import CHECKPOINT_DIR

    shutil.copytree(CHECKPOINT_DIR, dest)
    weights = load_file(CHECKPOINT_DIR / "model.safetensors")
    gen = torch.Generator().manual_seed(seed)
    for name in sorted(weights):
        w = weights[name]
        if w.ndim == 2:
            w32 = w.float()
            weights[name] = (w32 + scale * w32.std() * torch.randn(w32.shape, generator=gen)).to(w.dtype)
    save_file(weights, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


def _run(config: str, out: Path) -> tuple[int, dict, dict]:
    code = main(["run", "--config", config, *ARGS, "--out", str(out)])
    return code, json.loads((out / "verdict.json").read_text()), json.loads((out / "manifest.json").read_text())


def _margins(config: str) -> dict[str, float]:
    """Per task, the margin thresholds.yaml gives ``config`` on docparse (read from the YAML, by hand)."""
    import yaml

    raw = yaml.safe_load((ROOT / "thresholds.yaml").read_text())
    margin = raw["default"]["margin"]
    margin = raw.get("configs", {}).get(config, {}).get("margin", margin)
    margin = raw["suites"][SUITE]["margin"]
    margin = raw.get("configs", {}).get(config, {}).get("suites", {}).get(SUITE, {}).get("margin", margin)
    return {t: float(margin) for t in load_suite(SUITE).tasks}
