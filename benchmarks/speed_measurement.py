"""How far evalgate's speed measurement can be trusted on this machine: repeatability, A/A coverage, a real pair.

Run (wrap in the engine lock on a shared machine; about 10 minutes on 2 CPU cores with the defaults)::

    python benchmarks/speed_measurement.py [--aa-runs 20] [--repeats 3] [--input-len 64 --output-len 64
        --concurrency 16 --num-prompts 32] [--pair dense/baseline,dense/bf16] [--json out.json]

It uses evalgate's own machinery end to end (``runner.start_config`` workers with no suites, then
``speedrun.measure_speed``: interleaved ABBA repeats, a paired t interval on log ratios):

1. A/A: two engines of the same config (``--aa-config``, the hybrid baseline) measured against each other
   ``--aa-runs`` times; each run is a full speed comparison with ``--repeats`` repeats per side. Reported: the share
   of runs whose interval covers 1.0 (goal >= 90 %; nominal 95 %), the spread of the A/A ratio, and each side's
   coefficient of variation (repeatability) over all repeats.
2. A real pair (``--pair BASE,CAND``, default dense/baseline vs dense/bf16 on Gemma 3 270M): one speed comparison with
   its interval, whichever way it goes on this host. Whether BF16 is faster on a CPU depends on its ISA
   (AVX-512 BF16 / AMX): the CPU's flags are recorded with every result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _workers(names: list[str], tmp: Path, timeout: float) -> dict[str, object]:
    from evalgate.evaluate.runner import start_config
    from evalgate.inputs.config import load_config
    from evalgate.models.embedded import evalgate_home
    from evalgate.results.store import ResultStore

    store = ResultStore(evalgate_home() / "store")
    out = {}
    for role, name in zip(("baseline", "candidate"), names):
        cfg = load_config(name)
        out[role], _ = start_config(cfg, [], limit=None, store=store, log_path=tmp / f"{role}-{name.replace('/', '_')}.log",
                                    timeout_s=timeout, logprob_items=0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--aa-config", default="baseline")
    p.add_argument("--aa-runs", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--pair", default="dense/baseline,dense/bf16")
    p.add_argument("--pair-repeats", type=int, default=5)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from evalgate.engine.device import cpu_info
    from evalgate.speed.measure import measure_speed
    from evalgate.speed.speedup import TrafficProfile

    profile = TrafficProfile(input_len=args.input_len, output_len=args.output_len, concurrency=(args.concurrency,),
                             num_prompts=args.num_prompts, repeats=args.repeats)
    quiet = lambda _msg: None  # noqa: E731
    result: dict[str, object] = {"machine": cpu_info(), "profile": profile.as_dict()}
    with tempfile.TemporaryDirectory(prefix="evalgate-speed-") as d:
        tmp = Path(d)
        t0 = time.monotonic()
        workers = _workers([args.aa_config, args.aa_config], tmp, args.timeout)
        try:
            runs = []
            for i in range(args.aa_runs):
                block = measure_speed(workers, profile, progress=quiet)
                row = block.levels[0].model_dump(exclude_unset=True)  # the level as verdict.json writes it
                runs.append(row)
                print(f"A/A {i + 1}/{args.aa_runs}: ratio {row['ratio']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}] "
                      f"base {row['baseline']['output_tok_s']} cand {row['candidate']['output_tok_s']}", flush=True)
        finally:
            for w in workers.values():
                w.close()
        covered = sum(r["ci_low"] <= 1.0 <= r["ci_high"] for r in runs)
        every = {side: [v for r in runs for v in r[side]["output_tok_s"]] for side in ("baseline", "candidate")}
        cvs = {side: [r[side]["cv"] for r in runs] for side in ("baseline", "candidate")}
        result["aa"] = {
            "config": args.aa_config, "runs": len(runs), "covered": covered, "coverage": covered / len(runs),
            "ratios": [r["ratio"] for r in runs], "intervals": [[r["ci_low"], r["ci_high"]] for r in runs],
            "ratio_median": statistics.median(r["ratio"] for r in runs),
            "ratio_min": min(r["ratio"] for r in runs), "ratio_max": max(r["ratio"] for r in runs),
            "cv_within_run_median": {s: statistics.median(v) for s, v in cvs.items()},
            "cv_all_repeats": {s: statistics.stdev(v) / statistics.fmean(v) for s, v in every.items()},
            "median_output_tok_s": {s: statistics.median(v) for s, v in every.items()},
            "wall_s": time.monotonic() - t0,
        }
        print(f"A/A coverage: {covered}/{len(runs)} = {100 * covered / len(runs):.0f}% of intervals cover 1.0", flush=True)
        if args.pair:
            names = args.pair.split(",")
            t1 = time.monotonic()
            workers = _workers(names, tmp, args.timeout)
            try:
                pair_profile = TrafficProfile(input_len=args.input_len, output_len=args.output_len,
                                              concurrency=(args.concurrency,), num_prompts=args.num_prompts,
                                              repeats=args.pair_repeats)
                block = measure_speed(workers, pair_profile, progress=quiet)
            finally:
                for w in workers.values():
                    w.close()
            row = block.levels[0].model_dump(exclude_unset=True)  # the level as verdict.json writes it
            result["pair"] = {"baseline": names[0], "candidate": names[1], "row": row, "profile": pair_profile.as_dict(),
                              "wall_s": time.monotonic() - t1}
            print(f"{names[1]} vs {names[0]}: \u00d7{row['ratio']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}] "
                  f"({row['verdict']}); {row['baseline']['median']:.0f} -> {row['candidate']['median']:.0f} output tok/s",
                  flush=True)
    print("SPEED-JSON " + json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
