"""Which pass shape measures speed with less noise per GPU-second: one wave, or a refilled pass timed over its steady
window (issue 25, item 3: ``traffic.range_ratio``)?

Two engines of one config (an A/A: the second with engine seed 1; ``--placement alternate`` (default): both started
with vLLM's sleep mode, one awake at a time, as evalgate places the scale configs; ``together``: both resident) take interleaved ABBA pairs of two
pass shapes at one concurrency, the shapes alternating pair by pair (wave, refill, refill, wave, ...), so a slow drift
of the machine reaches both shapes alike:

- ``wave``: ``--wave-prompts`` requests (default = the concurrency) of exactly ``--input-len`` / ``--output-len``
  tokens: one wave that fills, decodes in lock-step and drains; timed whole (vLLM's own offline path, as evalgate's
  default profile).
- ``refill``: ``--refill-prompts`` requests (default and least 3 x the concurrency) with lengths drawn by vLLM's
  ``RandomDataset`` over ``[len (1 - r), len (1 + r)]`` (``--range-ratio``, default 0.5), at most the concurrency in
  flight, a finished request's slot refilled at once; timed over its steady window (first finish to last admission,
  ``worker.throughput.steady_window``), as vLLM's benchmarks and MLPerf exclude warm-up and drain.

Each pass goes through evalgate's own worker (``runner.start_config`` with no suites, ``Worker.measure``: the
commands ``speed.measure.measure_speed`` sends). Reported per shape: each side's per-pass CV, the standard deviation
``s`` of the pairs' log ratios, the mean seconds of a pair, the A/A ratio with its 95 % t interval, and what a
+/- ``--target`` interval would cost: ``n = (z s / ln(1 + target))^2`` pairs (the normal approximation of the
sample size for a mean's interval; Stein's rule, which evalgate uses, asks a little more after a small first stage)
times the mean pair seconds. The shape with fewer GPU-seconds to the target is the better default.

Run on the GPU from the repository root (after the GPU kit's install), e.g.::

    python benchmarks/pass_stability.py --config scale/baseline --concurrency 256 --pairs 4 \
        --max-seconds 900 --json /tmp/r/stability.json

On CPU, to try it: ``--config scale/cpu/baseline --placement together --input-len 32 --output-len 16 --concurrency 4 --pairs 2``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _workers(config: str, util: float | None, placement: str, tmp: Path, timeout: float) -> tuple[dict[str, Any], Any]:
    """Start the A/A pair: ``config`` as baseline and the same with engine seed 1 as candidate, placed by evalgate's
    own ``placement.Alternation`` (``together``: both resident; ``alternate``: sleep mode, one awake at a time).
    Returns the sides' proxies (``measure`` wakes the side first) and the alternation (its ``record()``)."""
    from evalgate.evaluate.placement import Alternation
    from evalgate.evaluate.runner import start_config
    from evalgate.inputs.config import load_config
    from evalgate.models.embedded import evalgate_home
    from evalgate.results.store import ResultStore

    store = ResultStore(evalgate_home() / "store")
    base = load_config(config)
    args = dict(base.engine_args)
    if util is not None:
        args["gpu_memory_utilization"] = util
    alternation = Alternation(placement)
    try:
        for role, seed in (("baseline", args.get("seed", 0) or 0), ("candidate", (args.get("seed", 0) or 0) + 1)):
            cfg = dataclasses.replace(base, engine_args={**args, "seed": seed}, placement=placement)
            t0 = time.monotonic()
            alternation.before_start(role)
            worker, _ = start_config(cfg, [], limit=None, store=store, log_path=tmp / f"{role}.log",
                                     timeout_s=timeout, logprob_items=0, sleep_mode=placement == "alternate")
            alternation.started(role, worker)
            print(f"{role} engine ready in {time.monotonic() - t0:.1f} s", flush=True)
    except BaseException:
        _close(alternation)
        raise
    return {role: alternation.proxy(role) for role in ("baseline", "candidate")}, alternation


def _close(alternation: Any) -> None:
    """Close every started worker, each even when closing another failed."""
    for w in list(alternation.workers.values()):
        try:
            w.close()
        except Exception as exc:  # noqa: BLE001 - the next worker must still be closed
            print(f"closing a worker failed: {exc!r}", flush=True)


def _check_limits(config: str, c: int, longest: int) -> None:
    """Refuse, before any engine starts, a concurrency above the config's ``max_num_seqs`` or a longest request
    (prompt + output tokens) above its ``max_model_len``: vLLM would queue or refuse them mid-run."""
    from evalgate.inputs.config import load_config

    args = load_config(config).engine_args
    if args.get("max_num_seqs") is not None and c > int(args["max_num_seqs"]):
        raise SystemExit(f"{config}: engine_args.max_num_seqs {args['max_num_seqs']} < --concurrency {c}")
    if args.get("max_model_len") is not None and longest > int(args["max_model_len"]):
        raise SystemExit(f"{config}: engine_args.max_model_len {args['max_model_len']} < the longest request "
                         f"({longest} tokens)")


def summarize(passes: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """One shape's figures from its pairs.

    Args:
        passes: ``{"pair", "baseline", "candidate", "seconds"}`` per pair: the two sides' output tok/s and the
            pair's wall seconds.
        target: the interval half-width aimed at, as a fraction (0.03 = +/- 3 %).
    Returns:
        ``cv`` per side (sample standard deviation / mean), ``s_log`` (sample standard deviation of
        ``ln(candidate / baseline)``), ``ratio`` with ``ci`` (95 % t interval of the mean log ratio, exponentiated),
        ``pair_s`` (mean seconds), ``pairs_needed`` (``ceil((1.96 s / ln(1 + target))^2)``, at least 2) and
        ``seconds_needed`` (``pairs_needed * pair_s``). Fewer than 2 pairs: only the raw figures.
    """
    from scipy import stats

    base = [p["baseline"] for p in passes]
    cand = [p["candidate"] for p in passes]
    logs = [math.log(c / b) for b, c in zip(base, cand)]
    out: dict[str, Any] = {"pairs": len(passes), "baseline": base, "candidate": cand,
                           "pair_s": statistics.fmean(p["seconds"] for p in passes)}
    if len(passes) < 2:
        return out
    s = statistics.stdev(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * s / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    needed = max(2, math.ceil((1.96 * s / math.log1p(target)) ** 2))
    out.update(cv={"baseline": statistics.stdev(base) / statistics.fmean(base),
                   "candidate": statistics.stdev(cand) / statistics.fmean(cand)},
               s_log=s, ratio=math.exp(mean), ci=[math.exp(mean - half), math.exp(mean + half)],
               pairs_needed=needed, seconds_needed=needed * out["pair_s"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="scale/baseline")
    p.add_argument("--util", type=float, default=None, help="gpu_memory_utilization per engine")
    p.add_argument("--placement", choices=("together", "alternate"), default="alternate")
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--wave-prompts", type=int, default=None)
    p.add_argument("--refill-prompts", type=int, default=None)
    p.add_argument("--range-ratio", type=float, default=0.5)
    p.add_argument("--pairs", type=int, default=4, help="pairs per shape")
    p.add_argument("--max-seconds", type=float, default=None, help="start no pair past this many seconds of pairs")
    p.add_argument("--target", type=float, default=0.03)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from evalgate.engine.device import cpu_info

    c = args.concurrency
    base_cmd = {"input_len": args.input_len, "output_len": args.output_len, "prompts": "random", "concurrency": c}
    shapes = {
        "wave": {**base_cmd, "num_prompts": args.wave_prompts or c},
        "refill": {**base_cmd, "num_prompts": args.refill_prompts or 3 * c, "range_ratio": args.range_ratio},
    }
    if shapes["refill"]["num_prompts"] < 3 * c:  # fewer leave too few finishes between fill and drain for a window
        raise SystemExit(f"--refill-prompts {shapes['refill']['num_prompts']} < 3 x --concurrency {c}: a refilled "
                         "pass needs that many for a steady window (worker.throughput.steady_window)")
    r = args.range_ratio
    _check_limits(args.config, c, int(args.input_len * (1 + r)) + int(args.output_len * (1 + r)) + 2)
    # No torch/CUDA in this process: a CUDA context here would take GPU memory from the engines (0.8 each).
    result: dict[str, Any] = {"machine": cpu_info(), "args": vars(args), "shapes": shapes}
    pairs: dict[str, list[dict[str, Any]]] = {name: [] for name in shapes}
    raw: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="evalgate-stability-") as d:
        t0 = time.monotonic()
        workers, alternation = _workers(args.config, args.util, args.placement, Path(d), args.timeout)
        result["start_s"] = time.monotonic() - t0
        result["workers"] = {role: {k: v for k, v in (w.info or {}).items() if k != "event"}
                             for role, w in alternation.workers.items()}  # device, versions, effective config
        try:
            for name, cmd in shapes.items():  # warm-up: each shape once per side, short outputs, excluded
                for role in ("baseline", "candidate"):
                    workers[role].measure({**cmd, "output_len": 16, "num_prompts": min(cmd["num_prompts"], c),
                                           "seed": 1, "label": f"warm-up {name}"})
            order = ["wave", "refill", "refill", "wave"]  # shapes ABBA too, pair by pair
            t1 = time.monotonic()
            k = 0
            while min(len(v) for v in pairs.values()) < args.pairs:
                if args.max_seconds is not None and time.monotonic() - t1 > args.max_seconds:
                    print(f"stopped: --max-seconds {args.max_seconds:g} s reached", flush=True)
                    result["stopped"] = "max_seconds"
                    break
                name = order[k % 4]
                k += 1
                if len(pairs[name]) >= args.pairs:
                    continue
                i = len(pairs[name])
                roles = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
                # The pair's first side is woken untimed, so every timed pair of either shape holds exactly one
                # switch (sleep + wake) between its two passes, as measure_speed's ABBA pairs do.
                alternation.use(roles[0])
                ps = time.monotonic()
                got = {}
                for role in roles:
                    wakes = alternation.record().get(role, {}).get("wakes", 0)
                    res = workers[role].measure({**shapes[name], "label": f"{name} {i + 1}"})
                    res.pop("requests_summary", None)
                    got[role] = res
                    woken = alternation.record().get(role, {}).get("wakes", 0) > wakes
                    raw.append({"shape": name, "pair": i, "role": role, "woken_before": woken, **res})
                if name == "refill" and not all("window" in got[role] for role in roles):
                    raise SystemExit(f"refill pair {i + 1}: a pass had no steady window "
                                     f"({ {role: 'window' in got[role] for role in roles} }); raise --refill-prompts")
                row = {"pair": i, "seconds": time.monotonic() - ps,
                       **{role: float(got[role]["output_tok_s"]) for role in roles}}
                pairs[name].append(row)
                print(f"{name} pair {i + 1}: baseline {row['baseline']:,.0f} candidate {row['candidate']:,.0f} "
                      f"output tok/s, {row['seconds']:.1f} s", flush=True)
        finally:
            result["placement"] = alternation.record()
            _close(alternation)
    result["passes"] = raw
    result["summary"] = {name: summarize(v, args.target) for name, v in pairs.items() if v}
    for name, s in result["summary"].items():
        if "s_log" in s:
            print(f"{name}: {s['pairs']} pairs, CV {100 * s['cv']['baseline']:.2f} % / {100 * s['cv']['candidate']:.2f} %, "
                  f"s(log ratio) {100 * s['s_log']:.2f} %, A/A x{s['ratio']:.3f} [{s['ci'][0]:.3f}, {s['ci'][1]:.3f}], "
                  f"{s['pair_s']:.1f} s a pair -> ~{s['pairs_needed']} pairs, ~{s['seconds_needed'] / 60:.1f} min "
                  f"for +/-{100 * args.target:g} %", flush=True)
    print("STABILITY-JSON " + json.dumps(result["summary"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
