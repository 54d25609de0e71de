"""Tests of evalgate.compare.power: MDE and sample size in closed form, Holm against closed testing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import norm

from evalgate.compare.power import (
    describe_items_needed,
    holm_levels,
    items_floor,
    items_needed,
    items_needed_basis,
    mde,
    mde_at,
    se_floor,
    z_sum,
)

K = norm.ppf(0.95) + norm.ppf(0.8)  # z_{1-alpha} + z_{power} at alpha 0.05, power 0.8: 1.6449 + 0.8416 = 2.4865


def test_mde_closed_form_and_its_power() -> None:
    se, alpha, power = 0.4, 0.05, 0.8
    got = mde(se, alpha, power)
    assert got == pytest.approx((norm.ppf(0.95) + norm.ppf(0.8)) * se, rel=1e-12)
    # A one-sided level-alpha z test detects a true loss of exactly MDE with probability `power`.
    assert norm.cdf(got / se - norm.ppf(1 - alpha)) == pytest.approx(power, rel=1e-12)
    assert z_sum(0.025, 0.9) == pytest.approx(1.959964 + 1.281552, abs=1e-6)
    assert math.isnan(mde(math.nan, 0.05, 0.8))


def test_zero_flips_on_three_items_is_not_high_power() -> None:
    assert se_floor(3) == pytest.approx(100 / 3)
    # K * 100 / 3 = 82.88 points: nothing short of a collapse is detectable.
    assert mde(se_floor(3), 0.05, 0.8) == pytest.approx(82.8825, abs=1e-4) == K * 100 / 3
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n must be an int >= 1"):
            se_floor(bad)


def test_items_needed_reproduces_the_issue_numbers() -> None:
    # 3 % discordant pairs, 1-point margin: paired needs ~1.9 k items (Connor 1987 form).
    n_pilot = 400
    se = 100 * math.sqrt(0.03 / n_pilot)
    # n_needed = ceil(10^4 * 0.03 * K^2 / 1^2) = ceil(1854.77)
    assert items_needed(se, n_pilot, 1.0, 0.05, 0.8) == math.ceil(1e4 * 0.03 * K**2) == 1855
    # Unpaired, two independent runs at 75 % accuracy: ceil(10^4 * 2 * 0.75 * 0.25 * K^2) = ceil(23184.59).
    se_unpaired = 100 * math.sqrt(2 * 0.75 * 0.25 / n_pilot)
    assert items_needed(se_unpaired, n_pilot, 1.0, 0.05, 0.8) == math.ceil(3750 * K**2) == 23_185


def test_items_needed_makes_mde_reach_the_margin() -> None:
    se_pilot, n_pilot, margin = 1.3, 120, 2.0
    need = items_needed(se_pilot, n_pilot, margin, 0.05, 0.8)
    assert need == 314  # ceil(120 * (K * 1.3 / 2)^2) = ceil(313.46); the floor, ceil(100 K / 2) = 125, is lower
    se_at = lambda n: se_pilot * math.sqrt(n_pilot / n)  # noqa: E731 - SE shrinks as 1/sqrt(n)
    assert K * se_at(need) <= margin < K * se_at(need - 1)  # the MDE in closed form, not evalgate's mde()
    assert items_needed(se_pilot, n_pilot, 0.0, 0.05, 0.8) is None
    assert items_needed(math.nan, n_pilot, 1.0, 0.05, 0.8) is None


def test_items_floor_is_the_fewest_items_whose_se_floor_reaches_the_margin() -> None:
    assert items_floor(2.0, 0.05, 0.8) == math.ceil(100 * K / 2.0) == 125
    assert items_floor(1.0, 0.05, 0.8) == math.ceil(100 * K) == 249
    for m in (0.5, 1.0, 2.0, 3.0, 5.0):
        n = items_floor(m, 0.05, 0.8)
        # With no item changing, a run of N items has MDE = K * 100 / N (the SE floor): N is powered, N-1 is not.
        assert K * 100 / n <= m < K * 100 / (n - 1)
    assert items_floor(0.0, 0.05, 0.8) is None
    with pytest.raises(ValueError, match="margin"):
        items_floor(-1.0, 0.05, 0.8)


def test_no_discordance_gives_the_floor_not_an_extrapolation_of_the_pilot_size() -> None:
    # No item changed: the pilot's SE is the assumed floor 100/n. Extrapolating it would say 10^4 K^2 / (n m^2),
    # a number that only restates the pilot's size (5,153 after 3 items, 387 after 40, 39 after 400). The answer
    # is the floor ceil(100 K / 2) = 125 whatever the pilot's size.
    for n, extrapolated in ((3, 5153), (40, 387), (400, 39)):
        got = items_needed(100 / n, n, 2.0, 0.05, 0.8, discordant=0)
        assert got == 125 != extrapolated
        assert items_needed(100 / n, n, 2.0, 0.05, 0.8) == max(125, extrapolated)  # discordance unknown: extrapolated
    assert items_needed_basis(125, 0) == "floor" and items_needed_basis(125, 3) == "discordance"


def test_items_needed_is_never_below_the_floor() -> None:
    # One discordant item in 400 (rate p = 1/400), margin 1: the extrapolation says ceil(1e4 p K^2) = 155, but a run
    # of 155 items has SE >= 100/155, so its MDE >= K * 100/155 = 1.6 > 1. The floor, 249, is what it takes.
    n, p = 400, 1 / 400
    se = 100 * math.sqrt(p / n)
    need = items_needed(se, n, 1.0, 0.05, 0.8, discordant=1)
    assert need == 249 == math.ceil(100 * K) and items_needed_basis(need, 1) == "discordance"
    se_at = lambda N: max(100 * math.sqrt(p / N), 100 / N)  # noqa: E731 - stats._power_se at rate p
    assert K * se_at(need) <= 1.0 < K * se_at(155)
    with pytest.raises(ValueError, match="discordant"):
        items_needed(se, n, 1.0, 0.05, 0.8, discordant=-1)


def test_mde_at_is_the_smallest_margin_a_run_of_that_size_is_powered_for() -> None:
    se, n = 100 * math.sqrt(0.03 / 400), 400  # 3 % discordance
    for target in (50, 200, 1855, 5000):
        m = mde_at(se, n, target, 0.05, 0.8, discordant=12)
        assert m == pytest.approx(K * max(se * math.sqrt(n / target), 100 / target), rel=1e-12)
        assert items_needed(se, n, m, 0.05, 0.8, discordant=12) <= target
        assert items_needed(se, n, m * 0.99, 0.05, 0.8, discordant=12) > target
    assert mde_at(se_floor(40), 40, 200, 0.05, 0.8, discordant=0) == pytest.approx(K * 100 / 200)
    assert math.isnan(mde_at(math.nan, 40, 200, 0.05, 0.8))
    with pytest.raises(ValueError, match="n_target"):
        mde_at(se, n, 0, 0.05, 0.8)


def test_describe_items_needed_says_what_the_figure_is() -> None:
    floor = describe_items_needed(125, n=3, discordant=0)
    assert floor.startswith("at least 125 items (a floor, not an estimate: no item changed in 3")
    assert "no smaller run is powered for this margin" in floor and "about" not in floor
    assert describe_items_needed(1855, n=400, discordant=12) == \
        "about 1855 items at this run's discordance (12 of 400 items changed)"
    assert describe_items_needed(None, n=3, discordant=0) == "unknown"
    assert items_needed_basis(None, 0) is None


@pytest.mark.parametrize(("args", "match"), [((-1.0, 10, 1.0, 0.05, 0.8), "se"), ((1.0, 0, 1.0, 0.05, 0.8), "n"),
                                             ((1.0, 10, -1.0, 0.05, 0.8), "margin"),
                                             ((1.0, 10, 1.0, 0.5, 0.8), "alpha"), ((1.0, 10, 1.0, 0.05, 1.0), "power")])
def test_items_needed_errors(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        items_needed(*args)


def _closed_testing(p: list[float], alphas: list[float]) -> list[bool]:
    """Reject H_i iff every intersection containing i is rejected by its weighted Bonferroni test."""
    k = len(p)
    level = sum(alphas) / k if len(set(alphas)) > 1 else alphas[0]
    rejected_sets = set()
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            total = sum(alphas[j] for j in subset)
            if any(p[j] <= min(alphas[j], alphas[j] * level / total) for j in subset):
                rejected_sets.add(subset)
    return [all(s in rejected_sets for r in range(1, k + 1) for s in itertools.combinations(range(k), r) if i in s)
            for i in range(k)]


def _holm_adjusted(p: list[float]) -> list[float]:
    """Holm-adjusted p-values: max over earlier ranks of min(1, (k - rank) * p)."""
    k = len(p)
    order = sorted(range(k), key=lambda i: p[i])
    adj, running = [0.0] * k, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (k - rank) * p[i]))
        adj[i] = running
    return adj


def test_holm_equal_alphas_matches_adjusted_p_values_and_closed_testing() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        k = int(rng.integers(1, 6))
        p = [float(x) for x in rng.choice([rng.uniform(0, 0.06), rng.uniform(0, 1)], size=k)]
        res = holm_levels(p, [0.05] * k)
        assert list(res.rejected) == [a <= 0.05 for a in _holm_adjusted(p)]
        assert list(res.rejected) == _closed_testing(p, [0.05] * k)
        for pi, level, rej in zip(p, res.levels, res.rejected):
            assert (pi <= level) == rej and level <= 0.05


def test_holm_unequal_alphas_matches_closed_testing() -> None:
    rng = np.random.default_rng(6)
    for _ in range(300):
        k = int(rng.integers(2, 5))
        alphas = [float(x) for x in rng.choice([0.01, 0.025, 0.05], size=k)]
        p = [float(x) for x in rng.uniform(0, 0.06, size=k)]
        res = holm_levels(p, alphas)
        assert list(res.rejected) == _closed_testing(p, alphas)
        assert all(level <= a for level, a in zip(res.levels, alphas))


def test_holm_known_values() -> None:
    res = holm_levels([0.01, 0.04, 0.03], [0.05] * 3)
    assert res.rejected == (True, False, False)  # 0.01 <= 0.05/3; then 0.03 > 0.05/2: stop
    assert res.levels == (0.025, 0.025, 0.025)
    res = holm_levels([0.01, 0.02, 0.04], [0.05] * 3)
    assert res.rejected == (True, True, True) and res.levels == (0.05, 0.05, 0.05)
    assert holm_levels([math.nan], [0.05]).rejected == (False,)
    assert holm_levels([0.03], [0.05]).rejected == (True,)  # one task: no correction


def test_holm_family_wise_error_under_the_null() -> None:
    rng = np.random.default_rng(7)
    k, runs = 5, 4000
    false = sum(any(holm_levels(list(rng.uniform(0, 1, k)), [0.05] * k).rejected) for _ in range(runs))
    assert false / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)


def test_holm_errors() -> None:
    with pytest.raises(ValueError, match="2 p-values but 1 alphas"):
        holm_levels([0.1, 0.2], [0.05])
    with pytest.raises(ValueError, match="no hypotheses"):
        holm_levels([], [])
