"""Baseline accuracy of a config on named suite tasks: one engine, lm-eval, evalgate's engine adapter.

Measures what a task's ``metadata.evalgate.baseline_accuracy`` records (the primary metric's mean over the items
lm-eval evaluates), for the real-data tiers that near-zero tiny models make worth stating::

    flock /tmp/evalgate-engine.lock python benchmarks/real_data_baseline.py --config baseline \\
        --tasks coding_mbpp finance_tatqa finance_finqa [--limit N] [--out FILE.json]

Prints one line per task (items, primary metric, mean, every metric's mean, seconds) and writes them as JSON
with ``--out`` (after each task), plus each item's output for inspection. No store, no candidate: a
measurement, not a gate.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="config name in configs/ (e.g. baseline, dense/baseline)")
    p.add_argument("--tasks", nargs="+", required=True, help="task names of the suites under suites/")
    p.add_argument("--limit", type=int, default=None, help="items per task (default: all)")
    p.add_argument("--out", type=Path, default=None, help="write the results (and outputs) as JSON here")
    args = p.parse_args()

    from evalgate.inputs.config import load_config
    from evalgate.models.embedded import resolve_model
    from evalgate.suites.discovery import list_suites
    from evalgate.worker.engine_args import prepare_process_env
    from evalgate.worker.lm_adapter import make_lm
    from evalgate.worker.vllm_engine import VllmEngine

    cfg = load_config(args.config)
    prepare_process_env(cfg.env)
    primary = {t: s.primary_metric[t] for s in list_suites() for t in s.tasks}
    unknown = [t for t in args.tasks if t not in primary]
    if unknown:
        raise SystemExit(f"unknown task(s): {', '.join(unknown)}")
    t0 = time.monotonic()
    engine = VllmEngine(resolve_model(cfg.model), cfg.engine_args, cfg.sampling)
    print(f"engine started in {time.monotonic() - t0:.1f} s ({cfg.model})", flush=True)
    lm = make_lm(engine)

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(ROOT / "suites"), include_defaults=False)
    report = {"config": args.config, "model": cfg.model, "limit": args.limit, "tasks": {}}
    for task in args.tasks:
        t1 = time.monotonic()
        out = simple_evaluate(model=lm, tasks=[task], task_manager=manager, limit=args.limit, log_samples=True,
                              bootstrap_iters=0, confirm_run_unsafe_code=True, random_seed=cfg.sampling.seed,
                              numpy_random_seed=cfg.sampling.seed, torch_random_seed=cfg.sampling.seed,
                              fewshot_random_seed=cfg.sampling.seed)
        samples = out["samples"][task]
        metrics = sorted(samples[0]["metrics"]) if samples else []
        means = {m: sum(float(s[m]) for s in samples) / len(samples) for m in metrics}
        secs = time.monotonic() - t1
        report["tasks"][task] = {"n": len(samples), "primary": primary[task], "mean": means.get(primary[task]),
                                 "metrics": means, "seconds": round(secs, 1),
                                 "outputs": [s["resps"][0][0] for s in samples]}
        print(f"{task}: n={len(samples)} {primary[task]}={means.get(primary[task])} all={means} ({secs:.1f} s)",
              flush=True)
        if args.out:  # after every task: a long run stopped early keeps what it measured
            args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
