"""Pairing and per-task comparison (evalgate.compare.pairing): by item hash, fail closed on mismatches, values by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from evalgate.compare.pairing import compare_tasks, pair_items, plan_tasks
from evalgate.errors import StoreError
from evalgate.inputs.thresholds import Thresholds
from evalgate.results.records import ItemResult, TaskResult

THR = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=500)


def _task(scores: list[float], outputs: list[str] | None = None, name: str = "t", order: list[int] | None = None,
          decode: dict[int, dict] | None = None) -> TaskResult:
    outputs = outputs or ["o"] * len(scores)
    items = [ItemResult(task=name, item_id=i, item_hash=f"h{i}", prompt="p", target="y", output=outputs[i],
                        score=scores[i], decode=(decode or {}).get(i)) for i in range(len(scores))]
    if order is not None:
        items = [items[i] for i in order]
    return TaskResult(task=name, suite="s", metric="m", items=tuple(items))


def test_items_are_paired_by_hash_not_by_position() -> None:
    base = _task([1, 0, 1])
    cand = _task([0, 0, 1], order=[2, 0, 1])  # stored in another order
    pairs = pair_items(base, cand)
    assert [(b.item_hash, c.item_hash) for b, c in pairs] == [("h0", "h0"), ("h1", "h1"), ("h2", "h2")]
    assert [c.score for _, c in pairs] == [0, 0, 1]


def test_different_or_duplicated_items_are_not_comparable() -> None:
    base = _task([1, 1, 1])
    other = TaskResult("t", "s", "m", tuple(replace(i, item_hash=f"x{i.item_id}") for i in base.items))
    with pytest.raises(StoreError, match=r"different items \(3 vs 3; first unmatched baseline item \[0\]\)"):
        pair_items(base, other)
    dup = TaskResult("t", "s", "m", (base.items[0], base.items[0], base.items[2]))
    with pytest.raises(StoreError, match="duplicate items"):
        pair_items(base, dup)
    with pytest.raises(StoreError, match="different tasks"):
        compare_tasks({"t": base}, {"u": _task([1], name="u")}, THR.policy(None))
    empty = TaskResult("t", "s", "m", ())
    with pytest.raises(StoreError, match="no items were evaluated"):
        compare_tasks({"t": empty}, {"t": empty}, THR.policy(None))


def test_comparison_counts_flips_and_identical_outputs() -> None:
    base = _task([1, 1, 0, 1, 0, 1], ["a", "b", "c", "d", "e", "f"])
    cand = _task([0, 1, 1, 0, 0, 1], ["x", "b", "y", "z", "e", "f2"])
    (c,) = compare_tasks({"t": base}, {"t": cand}, THR.policy(None))
    assert (c.regressed, c.improved) == ((0, 3), (2,))
    assert c.identical_outputs == 2 and c.differing_outputs == (0, 2, 3, 5)
    # Δ in points: means 4/6 and 3/6.
    assert c.comparison.delta == pytest.approx(100 * (3 / 6 - 4 / 6))
    assert (c.comparison.n_regressed, c.comparison.n_improved, c.comparison.n) == (2, 1, 6)


def test_each_task_has_its_own_seeded_generator() -> None:
    rng = np.random.default_rng(7)
    b = [float(x) for x in rng.integers(0, 2, 40)]
    k = [float(x) for x in rng.integers(0, 2, 40)]
    alone = compare_tasks({"t": _task(b)}, {"t": _task(k)}, THR.policy(None))[0].comparison
    both = compare_tasks({"t": _task(b), "a": _task(k, name="a")}, {"t": _task(k), "a": _task(b, name="a")}, THR.policy(None))
    assert [c.task for c in both] == ["a", "t"]
    assert (both[1].comparison.boot_low, both[1].comparison.boot_high) == (alone.boot_low, alone.boot_high)


def test_agreement_counts_near_tie_flips_and_the_decode_kl() -> None:
    near = {"tie_gap": 0.001, "kl_mean": 0.5, "positions": 2, "kl_by_position": [0.4, 0.6], "kl_max": 0.6,
            "top1_agreement": 1.0, "max_abs_dlogprob": 0.1, "nonfinite": False, "common_prefix": 1}
    far = {**near, "tie_gap": 3.0, "kl_mean": 1.0, "positions": 1, "kl_by_position": [1.0], "kl_max": 1.0}
    base = _task([1, 1, 1, 1], ["a", "b", "c", "d"])
    cand = _task([1, 1, 1, 1], ["a2", "b2", "c", "d"], decode={0: near, 1: far})
    (c,) = compare_tasks({"t": base}, {"t": cand}, THR.policy(None))
    agree = c.agreement(near_tie=0.01)
    assert (agree.identical, agree.n, agree.differing, agree.tie_flips) == (2, 4, (0, 1), (0,))
    assert agree.share == 3 / 4
    # Token-weighted over the compared positions: (0.5 * 2 + 1.0 * 1) / 3.
    assert agree.kl_mean == pytest.approx(2.0 / 3)
    assert c.agreement().tie_flips == ()  # tolerance 0: no flip at a gap of 0.001 nats is a tie


def test_plan_without_any_change_gives_the_floor() -> None:
    from scipy.stats import norm

    base = _task([1.0] * 20)
    (p,) = plan_tasks({"t": base}, {"t": base}, THR.policy(None), margin=2.0, available={"t": 500})
    k = norm.ppf(0.95) + norm.ppf(0.8)
    assert (p.changed, p.basis, p.items_needed) == (0, "floor", math.ceil(100 * k / 2.0))
    assert p.available == 500 and not p.exceeds_suite
    assert p.se == pytest.approx(100 / 20)  # the SE floor 100 / n
