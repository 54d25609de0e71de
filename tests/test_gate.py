"""Tests of evalgate.gate: the non-inferiority rule with power and Holm, NO-OP, fail-closed cases, config diff."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from evalgate.gate import MISSING, Decision, Verdict, decide, effective_diff
from evalgate.stats import BOOTSTRAP_METHOD, PairedComparison, paired_comparison
from evalgate.thresholds import LevelOverride, TaskThreshold, Thresholds

M = "\u2212"  # the minus sign used in reasons

BASE_CFG = {"model": "m", "dtype": "float32", "compilation_config": {"level": 0, "cg": False}}
CAND_CFG = {"model": "m", "dtype": "bfloat16", "compilation_config": {"level": 3, "cg": False}}


def cmp(
    lower: float, *, delta: float = -1.2, high: float = 1.6, n: int = 40, alpha: float = 0.05,
    p_loss: float = 1.0, se_power: float = 1.0,
) -> PairedComparison:
    """A hand-made comparison; only the fields the gate reads matter.

    ``se_power=1.0`` gives MDE = (1.645 + 0.842) * 1.0 = 2.486 points at alpha 0.05, power 0.8.
    """
    return PairedComparison(
        n=n, baseline_mean=80.0, candidate_mean=80.0 + delta, delta=delta,
        ci_low=lower, ci_high=high, lower_bound=lower, method=BOOTSTRAP_METHOD, binary=True,
        n_improved=3, n_regressed=4, mcnemar_p=1.0, stderr=1.0, alpha=alpha, p_loss=p_loss,
        loss_test="McNemar exact, one-sided", se_power=se_power,
    )


MDE = "2.5"  # printed MDE of cmp(): 2.486 points


@pytest.fixture
def thresholds() -> Thresholds:
    return Thresholds(
        alpha=0.05,
        default_margin=3.0,
        suites={"coding": LevelOverride(margin=5.0)},
        tasks={"strict_task": LevelOverride(margin=0.0)},
    )


def _decide(results: list, thr: Thresholds) -> Decision:
    return decide(results, thr, baseline_effective=BASE_CFG, candidate_effective=CAND_CFG)


def _one(comparison: PairedComparison, thr: Thresholds) -> Decision:
    return _decide([("docparse", "fields", comparison)], thr)


def test_verdict_values() -> None:
    assert [v.value for v in Verdict] == ["PASS", "BLOCK", "NO-OP", "INCONCLUSIVE"]
    assert Verdict.NO_OP == "NO-OP"


def test_lower_bound_exactly_minus_margin_passes(thresholds: Thresholds) -> None:
    d = _one(cmp(-3.0), thresholds)
    assert d.verdict is Verdict.PASS
    assert d.tasks[0].verdict is Verdict.PASS
    assert d.tasks[0].reason == (
        f"lower bound {M}3.0 pts \u2265 {M}margin {M}3.0 pts and MDE {MDE} \u2264 margin 3.0 pts "
        f"(\u0394 {M}1.2, 90% CI [{M}3.0, +1.6], n=40, 7 changed, MDE {MDE})"
    )
    assert d.tasks[0].mde == pytest.approx(1.6448536 + 0.8416212, abs=1e-6)  # z_0.95 + z_0.8


def test_lower_bound_just_below_minus_margin_blocks(thresholds: Thresholds) -> None:
    just_below = float(np.nextafter(-3.0, -np.inf))
    d = _one(cmp(just_below, high=-0.5, p_loss=0.01), thresholds)
    assert d.verdict is Verdict.BLOCK
    assert d.tasks[0].verdict is Verdict.BLOCK
    # The same bound without a significant loss: the interval straddles 0 and -margin.
    d = _one(cmp(just_below, p_loss=0.2), thresholds)
    assert d.tasks[0].verdict is Verdict.INCONCLUSIVE
    assert d.tasks[0].reason.startswith("undecided: lower bound")


def test_block_reason_shows_enough_decimals(thresholds: Thresholds) -> None:
    d = _one(cmp(-3.004, p_loss=0.001), thresholds)
    assert d.tasks[0].reason.startswith(f"lower bound {M}3.004 pts < {M}margin {M}3.000 pts")


def test_block_reason_example(thresholds: Thresholds) -> None:
    d = _one(cmp(-4.1, high=-0.1, p_loss=0.012), thresholds)
    assert d.verdict is Verdict.BLOCK
    reason = (
        f"lower bound {M}4.1 pts < {M}margin {M}3.0 pts and the loss is significant "
        "(one-sided loss p=0.012 \u2264 0.05 after Holm, McNemar exact, one-sided) "
        f"(\u0394 {M}1.2, 90% CI [{M}4.1, {M}0.1], n=40, 7 changed, MDE {MDE})"
    )
    assert d.tasks[0].reason == reason
    assert d.reasons == (f"docparse/fields: BLOCK: {reason}",)
    assert d.tasks[0].threshold == TaskThreshold(3.0, 0.05, "default")


def test_thresholds_precedence_is_used(thresholds: Thresholds) -> None:
    results = [
        ("coding", "humaneval", cmp(-4.0)),
        ("docparse", "fields", cmp(-2.0)),
        ("docparse", "strict_task", cmp(-0.1, p_loss=0.001)),
    ]
    d = _decide(results, thresholds)
    assert [(t.task, t.verdict, t.threshold.margin) for t in d.tasks] == [
        ("humaneval", Verdict.PASS, 5.0),
        ("fields", Verdict.PASS, 3.0),
        ("strict_task", Verdict.BLOCK, 0.0),
    ]
    assert d.verdict is Verdict.BLOCK
    assert d.reasons == (f"docparse/strict_task: BLOCK: {d.tasks[2].reason}",)
    assert f"{M}margin 0.0 pts" in d.tasks[2].reason


def test_all_pass_lists_every_task(thresholds: Thresholds) -> None:
    d = _decide([("a", "t1", cmp(-1.0)), ("b", "t2", cmp(0.5, delta=1.0, high=2.0))], thresholds)
    assert d.verdict is Verdict.PASS
    assert len(d.reasons) == 2
    assert d.reasons[1] == (
        f"b/t2: PASS: lower bound +0.5 pts \u2265 {M}margin {M}3.0 pts and MDE {MDE} \u2264 margin 3.0 pts "
        f"(\u0394 +1.0, 90% CI [+0.5, +2.0], n=40, 7 changed, MDE {MDE})"
    )


def test_ci_level_follows_alpha() -> None:
    thr = Thresholds(alpha=0.025, default_margin=1.0)
    d = _one(cmp(-0.5, alpha=0.025), thr)
    assert "95% CI" in d.tasks[0].reason


def test_no_op_when_effective_configs_equal(thresholds: Thresholds) -> None:
    same = {"model": "m", "compilation_config": {"level": 0}}
    results = [("docparse", "fields", cmp(-10.0, p_loss=0.0)), ("coding", "humaneval", cmp(-1.0))]
    same_reordered = {"compilation_config": {"level": 0}, "model": "m"}
    d = decide(results, thresholds, baseline_effective=same, candidate_effective=same_reordered)
    assert d.verdict is Verdict.NO_OP
    assert len(d.reasons) == 1
    assert "candidate's effective engine config equals the baseline's" in d.reasons[0]
    assert [t.verdict for t in d.tasks] == [Verdict.BLOCK, Verdict.PASS]  # still evaluated


def test_nested_difference_is_not_a_no_op(thresholds: Thresholds) -> None:
    d = decide([("s", "t", cmp(-1.0))], thresholds,
               baseline_effective={"c": {"level": 0}}, candidate_effective={"c": {"level": 3}})
    assert d.verdict is Verdict.PASS


def test_empty_task_list_fails_closed(thresholds: Thresholds) -> None:
    with pytest.raises(ValueError, match="no evidence is never a pass"):
        _decide([], thresholds)


def test_duplicate_task_is_an_error(thresholds: Thresholds) -> None:
    with pytest.raises(ValueError, match="s/t appears more than once"):
        _decide([("s", "t", cmp(-1.0)), ("s", "t", cmp(-1.0))], thresholds)


def test_alpha_mismatch_is_an_error(thresholds: Thresholds) -> None:
    match = "alpha=0.1 but the threshold \\(default\\) requires alpha=0.05"
    with pytest.raises(ValueError, match=match):
        _one(cmp(-1.0, alpha=0.1), thresholds)


def test_nan_lower_bound_blocks(thresholds: Thresholds) -> None:
    d = _one(replace(cmp(-1.0), lower_bound=math.nan, ci_low=math.nan), thresholds)
    assert d.verdict is Verdict.BLOCK
    assert d.tasks[0].reason.startswith("lower bound is undefined (NaN)")


def test_decide_on_real_comparison(thresholds: Thresholds) -> None:
    base = np.array([1.0] * 30 + [0.0] * 10)
    cand = base.copy()
    cand[:6] = 0.0  # six regressions, no improvements: delta = -15 points
    c = paired_comparison(base, cand, alpha=0.05, rng=np.random.default_rng(0))
    d = _one(c, thresholds)
    assert c.delta == pytest.approx(-15.0)
    assert c.lower_bound < -3.0
    assert d.verdict is Verdict.BLOCK


# ---------------------------------------------------------------------------- effective_diff


def test_effective_diff_flattens_and_sorts() -> None:
    assert effective_diff(BASE_CFG, CAND_CFG) == {
        "compilation_config.level": (0, 3),
        "dtype": ("float32", "bfloat16"),
    }


def test_effective_diff_missing_keys() -> None:
    diff = effective_diff({"a": 1, "n": {"x": 1}}, {"a": 1, "b": None, "n": {}})
    assert diff == {"b": (MISSING, None), "n": (MISSING, {}), "n.x": (1, MISSING)}
    assert repr(MISSING) == "<absent>"


def test_effective_diff_equal_is_empty() -> None:
    assert effective_diff(BASE_CFG, dict(BASE_CFG)) == {}
