"""Serve-mode latency of a candidate config against its baseline: ``vllm serve`` + ``vllm bench serve``,
interleaved repeats (``evalgate.speed.serve.measure_serve``), a table of TTFT / TPOT / ITL p50 and p99 and output
tok/s with ratios and intervals, and the ``speed`` block as JSON.

    flock /tmp/evalgate-engine.lock .venv/bin/python benchmarks/serve_latency.py --config fp16-state \\
        --input-len 16 --output-len 8 --num-prompts 8 --concurrency 2 --repeats 3 --out /tmp/serve-latency

On one GPU pass ``--one-at-a-time`` (two servers would each claim ``gpu_memory_utilization`` of it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from evalgate.engine.platform import has_cuda
from evalgate.inputs.config import load_baseline, load_config
from evalgate.models.embedded import resolve_model
from evalgate.speed.block import SpeedBlock, SpeedLatency, SpeedLevel
from evalgate.speed.serve import LATENCY_FIELDS, ServeSide, measure_serve
from evalgate.speed.speedup import TrafficProfile


def _table(block: SpeedBlock) -> str:
    lines = [f"{'metric':<14} {'baseline':>10} {'candidate':>10} {'ratio':>7}  interval         verdict"]
    for row in block.levels:
        lines.append(f"-- concurrency {row.concurrency}")
        lines.append(f"{'output tok/s':<14} {row.baseline.median:>10.1f} {row.candidate.median:>10.1f} "
                     f"{row.ratio:>7.3f}  {_ci(row)}  {row.verdict}")
        for f in LATENCY_FIELDS:
            m = (row.latency or {})[f]
            lines.append(f"{f:<14} {m.baseline_median:>10.2f} {m.candidate_median:>10.2f} {m.ratio:>7.3f}  "
                         f"{_ci(m)}  {m.verdict}")
    return "\n".join(lines)


def _ci(d: SpeedLevel | SpeedLatency) -> str:
    return f"[{d.ci_low:.3f}, {d.ci_high:.3f}]" if d.ci_low is not None else "[no interval]   "


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--input-len", type=int, default=16)
    p.add_argument("--output-len", type=int, default=8)
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--concurrency", type=int, nargs="+", default=[2])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--one-at-a-time", action="store_true", help="one server at a time (restart when the side changes)")
    p.add_argument("--out", type=Path, default=Path("serve-latency"))
    a = p.parse_args(argv)
    cand = load_config(a.config)
    base = load_baseline(cand)
    a.out.mkdir(parents=True, exist_ok=True)
    sides = {role: ServeSide(resolve_model(c.model), c.engine_args, c.env, a.out / f"{role}-serve.log")
             for role, c in (("baseline", base), ("candidate", cand))}
    profile = TrafficProfile(input_len=a.input_len, output_len=a.output_len, concurrency=tuple(a.concurrency),
                             num_prompts=a.num_prompts, repeats=a.repeats, mode="serve")
    t0 = time.monotonic()
    block = measure_serve(sides, profile, together=not a.one_at_a_time, cuda=has_cuda(), progress=print)
    wall_s = round(time.monotonic() - t0, 1)
    (a.out / "speed.json").write_text(json.dumps({**block.model_dump(exclude_unset=True), "wall_s": wall_s}, indent=1),
                                      encoding="utf-8")
    print(f"{base.name} -> {cand.name}, {block.sides['baseline'].device}, {wall_s} s")
    print(_table(block))
    return 0


if __name__ == "__main__":  # vLLM's engine processes start with spawn
    sys.exit(main())
