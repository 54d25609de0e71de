"""Decision quality of evalgate's gate: A/A false blocks, planted-regression detection, and the anchors' rules.

Run (about 5-10 minutes on 2 CPU cores; ``--quick`` for a smoke run)::

    python benchmarks/decision_quality.py [--reps-aa 400] [--reps-planted 300] [--n 400 2000] [--json out.json]

What the data are, honestly. The embedded model's stored per-item results on this machine are few
(``benchmarks/data/embedded_pilot.json``): 72 real ``docparse_fields`` items of the FP32 baseline
(field accuracy 1.0 x34, 0.75 x22, 0.667 x13, 0.5 x3), and one real bf16-vs-FP32 run at ``--limit 3``
(9 paired items: 0 score changes, 3 changed outputs). ``finance_tableqa`` and ``coding_humaneval`` are
0/3 on the 270M model, so they cannot seed a "flip correct items to wrong" experiment. Each simulated
run therefore has three tasks, one per metric kind evalgate handles, all *resampled from the real
docparse items*:

* ``exact``   0/1, unclustered: an item is correct when all its fields are (real rate 34/72 = 47 %);
* ``cluster`` 0/1 in documents of 4 questions (like finance): per-document accuracy from a Beta with the
  same mean and intra-document correlation 0.3, and changes concentrated in a quarter of the documents
  (both are assumptions: no real clustered data exist yet);
* ``graded``  the real field-accuracy values themselves (like docparse).

The *discordance* (share of items whose score changes between two runs of equal quality) is 3 %: the
figure the issue uses; the real bf16 pilot (0 of 9 changed) only bounds it below 28 % (95 %). A/A: the
candidate has the same quality as the baseline (changes in both directions, expected delta 0). Planted
regression of e points: on top of that, k = e * n / 100 items that are correct in the candidate are set
to wrong (score 0), so the true delta is -e. Every run goes through ``compare.compare_tasks`` and
``gate.decide`` exactly as ``evalgate run`` does (Holm across the three tasks included;
``bootstrap_resamples`` 1000, the minimum thresholds allow, for speed).

The anchors, on the same data, each task alone (no pairing, no multiplicity correction), with the
baseline's score on the same items as the stored reference (kinder to them than a reference from an
older run, which adds its own noise):

* vLLM lm-eval CI: ``np.isclose(stored, measured, rtol=0.08)`` must hold (.buildkite/lm-eval-harness/
  test_lm_eval_correctness.py, ``DEFAULT_RTOL = 0.08``);
* TensorRT-LLM accuracy suite: fail when ``measured < stored - z_{1-alpha} * sigma * sqrt(2 / n)``,
  alpha 0.05, sigma 50, and its minimum detectable effect ``theta = (z_{1-alpha} + z_{1-beta}) * sigma *
  sqrt(2 / n)``, beta 0.2 (tests/integration/defs/accuracy/README.md, "Hypothesis Testing Methodology").
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalgate.compare.pairing import compare_tasks  # noqa: E402
from evalgate.gate import decide  # noqa: E402
from evalgate.inputs.thresholds import Thresholds  # noqa: E402
from evalgate.results.records import ItemResult, TaskResult  # noqa: E402

PILOT = Path(__file__).resolve().parent / "data" / "embedded_pilot.json"
TASKS = ("exact", "cluster", "graded")
DISCORDANCE = 0.03
CLUSTER_SIZE, ICC, PERTURBED_DOCS = 4, 0.3, 0.25
ALPHA, POWER = 0.05, 0.8
EFFECTS = (0.5, 1.0, 2.0, 5.0)
CONFIGS = ({"name": "baseline", "dtype": "float32"}, {"name": "candidate", "dtype": "bfloat16"})


def load_pilot() -> np.ndarray:
    """The real docparse field-accuracy values of the embedded model (shape ``(72,)``)."""
    data = json.loads(PILOT.read_text(encoding="utf-8"))
    return np.asarray(data["docparse_fields_float32"]["scores"], dtype=float)


# ------------------------------------------------------------------------------------------- data


def _symmetric_flips(y: np.ndarray, rate: np.ndarray | float, rng: np.random.Generator) -> np.ndarray:
    """0/1 scores after changes of total rate ``rate`` split evenly: 1->0 and 0->1 are equally many in
    expectation, so the candidate's expected accuracy equals the baseline's."""
    p = max(min(float(y.mean()), 1 - 1e-9), 1e-9)
    u = rng.random(y.size)
    down = (y == 1) & (u < np.asarray(rate) / (2 * p))
    up = (y == 0) & (u < np.asarray(rate) / (2 * (1 - p)))
    return np.where(down, 0.0, np.where(up, 1.0, y))


def make_pair(kind: str, n: int, pilot: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list]:
    """``(baseline, candidate, clusters)`` for one task of an A/A run (same quality, 3 % changed)."""
    if kind == "exact":
        base = (rng.choice(pilot, n) == 1.0).astype(float)
        return base, _symmetric_flips(base, DISCORDANCE, rng), [None] * n
    if kind == "cluster":
        g = n // CLUSTER_SIZE
        mean = float(np.mean(pilot == 1.0))
        total = 1 / ICC - 1  # Beta(a, b) with a + b = 1/ICC - 1 has intra-cluster correlation ICC
        acc = np.repeat(rng.beta(mean * total, (1 - mean) * total, g), CLUSTER_SIZE)
        base = (rng.random(n) < acc).astype(float)
        hit = np.repeat(rng.random(g) < PERTURBED_DOCS, CLUSTER_SIZE)
        cand = _symmetric_flips(base, np.where(hit, DISCORDANCE / PERTURBED_DOCS, 0.0), rng)
        return base, cand, [f"doc{i // CLUSTER_SIZE}" for i in range(n)]
    base = rng.choice(pilot, n)
    values, counts = np.unique(pilot, return_counts=True)
    p_change = 1 - float(np.sum((counts / counts.sum()) ** 2))  # a redraw from the same marginal changes the score
    redraw = rng.random(n) < DISCORDANCE / p_change
    cand = np.where(redraw, rng.choice(pilot, n), base)
    return base, cand, [None] * n


def plant(cand: np.ndarray, effect: float, rng: np.random.Generator) -> np.ndarray:
    """Set ``k = effect * n / 100`` candidate items that score 1 to 0: a loss of exactly ``effect`` points."""
    k = round(effect * cand.size / 100)
    correct = np.flatnonzero(cand == 1.0)
    out = cand.copy()
    out[rng.choice(correct, size=min(k, correct.size), replace=False)] = 0.0
    return out


def _task(name: str, scores: np.ndarray, clusters: list) -> TaskResult:
    return TaskResult(task=name, suite=name, metric="score", items=tuple(
        ItemResult(task=name, item_id=i, item_hash=f"{name}-{i}", prompt="", target="", output="", score=float(s),
                   cluster=c) for i, (s, c) in enumerate(zip(scores, clusters))))


# ---------------------------------------------------------------------------------------- rules


def vllm_blocks(stored: float, measured: float) -> bool:
    """vLLM's lm-eval CI: fail unless ``np.isclose(ground_truth, measured, rtol=0.08)`` (scores as fractions)."""
    return not bool(np.isclose(stored / 100, measured / 100, rtol=0.08))


def trtllm_threshold(n: int, sigma: float = 50.0, alpha: float = ALPHA) -> float:
    """TensorRT-LLM: points below the reference at which a run fails (``-Phi^-1(alpha) * sigma * sqrt(2/n)``)."""
    return float(norm.ppf(1 - alpha)) * sigma * math.sqrt(2 / n)


def trtllm_theta(n: int, sigma: float = 50.0, alpha: float = ALPHA, beta: float = 0.2) -> float:
    """TensorRT-LLM's minimum detectable effect in points."""
    return float(norm.ppf(1 - alpha) + norm.ppf(1 - beta)) * sigma * math.sqrt(2 / n)


def run_once(n: int, effect: float, planted: str | None, margin: float, pilot: np.ndarray,
             rng: np.random.Generator, resamples: int) -> dict[str, dict]:
    """One gated run of the three tasks; ``planted`` names the task that loses ``effect`` points."""
    base, cand = {}, {}
    for kind in TASKS:
        b, c, clusters = make_pair(kind, n, pilot, rng)
        if kind == planted:
            c = plant(c, effect, rng)
        base[kind], cand[kind] = _task(kind, b, clusters), _task(kind, c, clusters)
    thr = Thresholds(alpha=ALPHA, default_margin=margin, bootstrap_resamples=resamples, power=POWER,
                     on_inconclusive="warn", seed=int(rng.integers(2**31)))
    comps = compare_tasks(base, cand, thr.policy(None))
    decision = decide([(x.suite, x.task, x.comparison) for x in comps], thr.policy(None),
                      baseline_effective={"dtype": "float32"}, candidate_effective={"dtype": "bfloat16"})
    out = {}
    for td in decision.tasks:
        cmp = td.comparison
        out[td.task] = {"verdict": td.verdict.value, "mde": td.mde, "delta": cmp.delta,
                        "vllm": vllm_blocks(cmp.baseline_mean, cmp.candidate_mean),
                        "trtllm": cmp.candidate_mean < cmp.baseline_mean - trtllm_threshold(n)}
    out["_run"] = {"verdict": decision.verdict.value}
    return out


# --------------------------------------------------------------------------------------- tables


def _rate(xs: list[bool]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def _ci95(k: int, n: int) -> str:
    from scipy.stats import binomtest

    if n == 0:
        return ""
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return f"[{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps-aa", type=int, default=400, help="A/A runs per (n, margin); each run gates 3 tasks")
    p.add_argument("--reps-planted", type=int, default=300, help="runs per (n, margin, effect); the loss rotates "
                                                                 "over the 3 tasks")
    p.add_argument("--n", type=int, nargs="+", default=[400, 2000], help="items per task")
    p.add_argument("--margins", type=float, nargs="+", default=[1.0, 2.0], help="non-inferiority margins, points")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per task")
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--quick", action="store_true", help="a smoke run: 40 A/A and 30 planted runs per cell")
    p.add_argument("--json", default=None, help="also write the raw rates here")
    args = p.parse_args(argv)
    if args.quick:
        args.reps_aa, args.reps_planted = 40, 30
    pilot = load_pilot()
    rng = np.random.default_rng(args.seed)
    t0 = time.monotonic()
    aa_rows, planted_rows = [], []
    for margin in args.margins:
        for n in args.n:
            runs = [run_once(n, 0.0, None, margin, pilot, rng, args.resamples) for _ in range(args.reps_aa)]
            fam = [r["_run"]["verdict"] == "BLOCK" for r in runs]
            row = {"n": n, "margin": margin, "runs": len(runs), "family_block": _rate(fam),
                   "family_block_ci": _ci95(sum(fam), len(fam)),
                   "family_inconclusive": _rate([r["_run"]["verdict"] == "INCONCLUSIVE" for r in runs]),
                   "family_pass": _rate([r["_run"]["verdict"] == "PASS" for r in runs]), "tasks": {}}
            for kind in TASKS:
                row["tasks"][kind] = {
                    "block": _rate([r[kind]["verdict"] == "BLOCK" for r in runs]),
                    "pass": _rate([r[kind]["verdict"] == "PASS" for r in runs]),
                    "mde": statistics.median(r[kind]["mde"] for r in runs),
                    "vllm": _rate([r[kind]["vllm"] for r in runs]), "trtllm": _rate([r[kind]["trtllm"] for r in runs])}
            aa_rows.append(row)
            print(f"A/A n={n} margin={margin}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
            for effect in EFFECTS:
                res = []
                for i in range(args.reps_planted):
                    kind = TASKS[i % len(TASKS)]
                    res.append((kind, run_once(n, effect, kind, margin, pilot, rng, args.resamples)[kind]))
                for kind in (*TASKS, "all"):
                    sel = [r for k, r in res if kind in ("all", k)]
                    blocks = [r["verdict"] == "BLOCK" for r in sel]
                    claimed = [r["verdict"] == "BLOCK" for r in sel if r["mde"] < effect]
                    planted_rows.append({
                        "n": n, "margin": margin, "effect": effect, "task": kind, "runs": len(sel),
                        "mde": statistics.median(r["mde"] for r in sel), "block": _rate(blocks),
                        "inconclusive": _rate([r["verdict"] == "INCONCLUSIVE" for r in sel]),
                        "pass": _rate([r["verdict"] == "PASS" for r in sel]),
                        "claimed_runs": len(claimed), "block_when_mde_below": _rate(claimed),
                        "block_when_mde_below_ci": _ci95(sum(claimed), len(claimed)),
                        "vllm": _rate([r["vllm"] for r in sel]), "trtllm": _rate([r["trtllm"] for r in sel]),
                        "trtllm_theta": trtllm_theta(n)})
            print(f"planted n={n} margin={margin}: done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    print_tables(aa_rows, planted_rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"aa": aa_rows, "planted": planted_rows}, indent=1), encoding="utf-8")
    return 0


def print_tables(aa_rows: list[dict], planted_rows: list[dict], args: argparse.Namespace) -> None:
    print(f"\n### (a) A/A: same quality on both sides, {DISCORDANCE:.0%} of items change score "
          f"({args.reps_aa} runs per row, 3 tasks per run, alpha {ALPHA}, power {POWER})\n")
    print("| n / task | margin | evalgate BLOCK (run, any task) [95% CI] | PASS (run) | INCONCLUSIVE (run) | "
          "median MDE exact / cluster / graded | vLLM rtol 0.08 BLOCK | TRT-LLM BLOCK | criterion BLOCK <= alpha |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|:--:|")
    for r in aa_rows:
        t = r["tasks"]
        mdes = " / ".join(f"{t[k]['mde']:.2f}" for k in TASKS)
        vllm = max(t[k]["vllm"] for k in TASKS)
        trt = max(t[k]["trtllm"] for k in TASKS)
        ok = "yes" if r["family_block"] <= ALPHA else "NO"
        print(f"| {r['n']} | {r['margin']:g} | {_pct(r['family_block'])} {r['family_block_ci']} | "
              f"{_pct(r['family_pass'])} | {_pct(r['family_inconclusive'])} | {mdes} | {_pct(vllm)} (worst task) | "
              f"{_pct(trt)} (worst task) | {ok} |")
    print(f"\n### (b, c) Planted regressions: k = effect * n / 100 correct items set to wrong in one task "
          f"({args.reps_planted} runs per row, the loss rotating over the three tasks)\n")
    print("| n | margin | effect (pts) | median MDE | evalgate BLOCK | INCONCLUSIVE | PASS | BLOCK when MDE < effect "
          "[95% CI] (runs) | vLLM rtol 0.08 BLOCK | TRT-LLM BLOCK (theta) | criterion |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:--:|")
    for r in (x for x in planted_rows if x["task"] == "all"):
        need = r["claimed_runs"] > 0 and r["effect"] >= r["margin"]
        upper = float(r["block_when_mde_below_ci"].strip("[]").split(",")[1]) / 100 if need else math.nan
        crit = ("yes" if r["block_when_mde_below"] >= 0.95 else "within MC error" if upper >= 0.95 else "NO") \
            if need else ("n/a: within margin" if r["effect"] < r["margin"] else "n/a: MDE >= effect")
        print(f"| {r['n']} | {r['margin']:g} | {r['effect']:g} | {r['mde']:.2f} | {_pct(r['block'])} | "
              f"{_pct(r['inconclusive'])} | {_pct(r['pass'])} | {_pct(r['block_when_mde_below'])} "
              f"{r['block_when_mde_below_ci']} ({r['claimed_runs']}) | {_pct(r['vllm'])} | "
              f"{_pct(r['trtllm'])} ({r['trtllm_theta']:.1f}) | {crit} |")
    print("\nPer task (BLOCK rate; median MDE in parentheses):\n")
    print("| n | margin | effect | " + " | ".join(TASKS) + " |")
    print("|--:|--:|--:|" + "--:|" * len(TASKS))
    rows: dict[tuple, dict] = {}
    for r in planted_rows:
        if r["task"] != "all":
            rows.setdefault((r["n"], r["margin"], r["effect"]), {})[r["task"]] = r
    for (n, margin, effect), by in rows.items():
        cells = " | ".join(f"{_pct(by[k]['block'])} ({by[k]['mde']:.2f})" for k in TASKS)
        print(f"| {n} | {margin:g} | {effect:g} | {cells} |")


if __name__ == "__main__":
    sys.exit(main())
