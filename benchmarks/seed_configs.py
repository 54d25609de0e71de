"""The seed's switches on the embedded hybrid, through the real engine: what each one did, measured in one run.

Run (about 6-10 minutes on 2 CPU cores at the defaults)::

    python benchmarks/seed_configs.py [--limit 30] [--suites docparse finance] [--out runs/seed-configs] \
        [--configs fp16-state mtp1 mtp3 async-sched omp1 flashinfer-mamba cline-recipe]

Each config is gated with ``evalgate run`` (same store: the baseline is computed once) and one table row is
read back from its run directory: the effective-config difference the engine reported, greedy identity, the
decode-time KL (mean over tokens along the common prefixes) beside the teacher-forced prefill KL, the
speculative-decoding acceptance rate and mean acceptance length, the verdict and exit code. A config refused
before any engine starts (exit 2) shows its one-line error. The table is printed as Markdown and written to
``<out>/seed_configs.md``; nothing here asserts: the tests do (tests/system/test_hybrid_gate.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SEED = ["fp16-state", "mtp1", "mtp3", "async-sched", "omp1", "flashinfer-mamba", "cline-recipe"]


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _row(config: str, run_dir: Path, code: int, stderr: str) -> str:
    verdict_path = run_dir / "verdict.json"
    if not verdict_path.is_file():
        err = (stderr.strip().splitlines() or ["(no output)"])[-1].replace("|", "\\|")
        return f"| {config} | - | - | - | - | - | error (exit {code}): {err} |"
    doc = json.loads(verdict_path.read_text(encoding="utf-8"))
    diff = "; ".join(f"{r['key']} {r['baseline']} → {r['candidate']}" for r in doc["effective_diff"]) or "none"
    n = sum(t["n"] for t in doc["tasks"])
    identical = sum(t["identical_outputs"] for t in doc["tasks"])
    dec = [t["evidence"]["decode"] for t in doc["tasks"] if t["evidence"].get("decode")]
    positions = sum(d["positions"] for d in dec if d["kl_mean"] is not None)
    kl = (sum(d["kl_mean"] * d["positions"] for d in dec if d["kl_mean"] is not None) / positions) if positions else None
    nonfinite = sum(d["nonfinite_items"] for d in dec)
    pre = [t["evidence"]["logit"]["kl_mean"] for t in doc["tasks"] if t["evidence"].get("logit")]
    sd = (doc.get("spec_decode") or {}).get("candidate")
    spec = "-" if not sd else f"{100 * sd['acceptance_rate']:.1f} % / {sd['mean_acceptance_length']:.2f}"
    return (f"| {config} | {diff} | {100 * identical / n:.1f} % of {n} | {_fmt(kl, '.2g')}"
            f"{f' ({nonfinite} NaN items)' if nonfinite else ''} | {_fmt(max(pre) if pre else None, '.1g')} | {spec} "
            f"| {doc['verdict']} (exit {code}) |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", nargs="+", default=SEED)
    p.add_argument("--limit", type=int, default=30)
    p.add_argument("--suites", nargs="+", default=["docparse", "finance"])
    p.add_argument("--out", default="runs/seed-configs")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| config | effective read-back (baseline → candidate) | identical outputs | decode KL (nats/token) "
            "| prefill KL (max) | acceptance rate / mean acc. length | verdict |", "|---|---|---|---|---|---|---|"]
    for config in args.configs:
        run_dir = out / config
        cmd = [sys.executable, "-m", "evalgate.cli", "run", "--config", config, "--limit", str(args.limit),
               "--suites", *args.suites, "--out", str(run_dir)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rows.append(_row(config, run_dir, proc.returncode, proc.stderr))
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    (out / "seed_configs.md").write_text(
        f"Seed configs on embedded:nemotron-h-tiny, --limit {args.limit}, suites {' '.join(args.suites)}\n\n{table}\n",
        encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
