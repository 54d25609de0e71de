"""Tests of evalgate.compare.intervals against published values and independent computations (scipy, matrices)."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy.stats import binomtest, ttest_rel

from evalgate.compare.intervals import (
    cluster_codes,
    clustered_se,
    newcombe_paired_interval,
    paired_t_interval,
    wilson_interval,
)


@pytest.mark.parametrize(("k", "n"), [(0, 3), (3, 3), (1, 10), (17, 40), (65, 161), (999, 1000)])
@pytest.mark.parametrize("alpha", [0.025, 0.05, 0.1])
def test_wilson_matches_scipy(k: int, n: int, alpha: float) -> None:
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="wilson")
    lo, hi = wilson_interval(k, n, alpha=alpha)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)


def _wilson_closed_form(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Wilson (1927) written out, as evalgate computed it before calling scipy."""
    z = NormalDist().inv_cdf(1 - alpha)
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 40, 161, 1000])
@pytest.mark.parametrize("alpha", [0.01, 0.025, 0.05, 0.1, 0.25])
def test_wilson_equals_the_closed_form_on_a_grid(n: int, alpha: float) -> None:
    for k in range(n + 1):  # k = 0 and k = n included: the interval touches 0 or 1 there
        assert wilson_interval(k, n, alpha=alpha) == pytest.approx(_wilson_closed_form(k, n, alpha), abs=1e-12)
    assert wilson_interval(0, n, alpha=alpha)[0] == 0.0 and wilson_interval(n, n, alpha=alpha)[1] == 1.0


def test_wilson_errors() -> None:
    for k, n in ((0, 0), (4, 3), (-1, 3)):
        with pytest.raises(ValueError):
            wilson_interval(k, n, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        wilson_interval(1, 3, alpha=0.0)


# Published: M. W. Fagerland, S. Lydersen, P. Laake, Statistical Analysis of Contingency Tables (2017), ch. 8,
# as reproduced by the R package contingencytables (tests/testthat/test-ch8.R): Cavo et al. (2012) table
# [[59, 6], [16, 80]] -> Newcombe square-and-add 95% CI for p1+ - p+1: estimate -0.0621, (-0.1186, -0.0046).
def test_newcombe_published_example() -> None:
    lo, hi = newcombe_paired_interval(59, 6, 16, 80, alpha=0.025)
    assert (round(lo, 4), round(hi, 4)) == (-0.1186, -0.0046)


def _newcombe_independent(a: int, b: int, c: int, d: int, alpha: float) -> tuple[float, float]:
    """Square-and-add assembled from scipy's Wilson intervals and the table's margins."""
    n = a + b + c + d
    level = 1 - 2 * alpha
    w1 = binomtest(a + b, n).proportion_ci(confidence_level=level, method="wilson")
    w2 = binomtest(a + c, n).proportion_ci(confidence_level=level, method="wilson")
    p1, p2 = (a + b) / n, (a + c) / n
    rows, cols = np.array([a + b, c + d]), np.array([a + c, b + d])
    cross = a * d - b * c
    if rows.min() == 0 or cols.min() == 0:
        psi = 0.0
    else:
        scale = math.sqrt(rows.prod() * cols.prod())
        psi = (cross - n / 2) / scale if cross > n / 2 else (0.0 if cross >= 0 else cross / scale)
    dl, du = p1 - w1.low, w2.high - p2
    el, eu = p2 - w2.low, w1.high - p1
    return (p1 - p2 - math.sqrt(dl**2 + du**2 - 2 * psi * dl * du),
            p1 - p2 + math.sqrt(el**2 + eu**2 - 2 * psi * el * eu))


@pytest.mark.parametrize("table", [(1, 1, 7, 12), (59, 6, 16, 80), (10, 0, 0, 10), (40, 3, 9, 48),
                                   (300, 12, 20, 668), (5, 2, 0, 0), (0, 0, 3, 0)])
@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_newcombe_matches_independent_assembly(table: tuple[int, int, int, int], alpha: float) -> None:
    got = newcombe_paired_interval(*table, alpha=alpha)
    want = _newcombe_independent(*table, alpha)
    assert got == pytest.approx((max(-1.0, want[0]), min(1.0, want[1])), abs=1e-12)


def test_newcombe_covers_the_estimate_and_is_ordered() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b, c, d = (int(x) for x in rng.integers(0, 30, 4))
        if a + b + c + d == 0:
            continue
        lo, hi = newcombe_paired_interval(a, b, c, d, alpha=0.05)
        est = (b - c) / (a + b + c + d)
        assert -1 <= lo <= est <= hi <= 1


def test_newcombe_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        newcombe_paired_interval(0, 0, 0, 0, alpha=0.05)
    with pytest.raises(ValueError, match="int >= 0"):
        newcombe_paired_interval(-1, 0, 0, 1, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        newcombe_paired_interval(1, 0, 0, 1, alpha=0.5)


def _sandwich_se(d: np.ndarray, codes: np.ndarray) -> float:
    """Cluster-robust SE of the intercept of d ~ 1 (CR1), written as the matrix sandwich."""
    n, g = d.size, int(codes.max()) + 1
    x = np.ones((n, 1))
    beta = np.linalg.lstsq(x, d, rcond=None)[0]
    u = d - x @ beta
    bread = np.linalg.inv(x.T @ x)
    meat = sum(np.outer(x[codes == k].T @ u[codes == k], x[codes == k].T @ u[codes == k]) for k in range(g))
    return float(math.sqrt((g / (g - 1) * bread @ meat @ bread)[0, 0]))


def test_clustered_se_matches_the_sandwich_formula() -> None:
    rng = np.random.default_rng(3)
    codes = np.repeat(np.arange(30), 4)
    d = rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], size=120) + np.repeat(rng.normal(0, 0.3, 30), 4)
    assert clustered_se(d, codes) == pytest.approx(_sandwich_se(d, codes), rel=1e-12)


def test_clustered_se_with_singletons_is_the_paired_se() -> None:
    d = np.array([0.0, -1.0, 1.0, 0.0, -1.0, 0.25])
    assert clustered_se(d, np.arange(6)) == pytest.approx(d.std(ddof=1) / math.sqrt(6), rel=1e-12)


def test_clustered_se_small_table_closed_form() -> None:
    # Two clusters {0, 1} and {2, 3}; d = [1, 1, 0, 0], mean 0.5; cluster sums of (d - 0.5): +1, -1.
    # SE = sqrt(2/1 * (1 + 1)) / 4 = 0.5.
    assert clustered_se(np.array([1.0, 1.0, 0.0, 0.0]), np.array([0, 0, 1, 1])) == pytest.approx(0.5)
    assert math.isnan(clustered_se(np.array([1.0, 0.0]), np.array([0, 0])))


def test_cluster_codes() -> None:
    assert cluster_codes(None, 3).tolist() == [0, 1, 2]
    assert cluster_codes(["a", "b", "a", None, "b", None], 6).tolist() == [0, 1, 0, 2, 1, 3]
    with pytest.raises(ValueError, match="3 labels for 2 items"):
        cluster_codes(["a", "b", "c"], 2)


@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_paired_t_interval_matches_scipy(alpha: float) -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 1, 50)
    cand = np.clip(base + rng.normal(-0.02, 0.1, 50), 0, 1)
    d = cand - base
    lo, hi = paired_t_interval(d.mean(), d.std(ddof=1) / math.sqrt(50), 49, alpha=alpha)
    ci = ttest_rel(cand, base).confidence_interval(confidence_level=1 - 2 * alpha)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_paired_t_interval_degenerate_cases() -> None:
    assert paired_t_interval(0.5, 0.0, 10, alpha=0.05) == (0.5, 0.5)
    assert all(math.isnan(x) for x in paired_t_interval(0.5, 0.1, 0, alpha=0.05))
    assert all(math.isnan(x) for x in paired_t_interval(0.5, math.nan, 5, alpha=0.05))


@pytest.mark.parametrize("n", [2, 3, 5, 12])
def test_paired_t_interval_matches_scipy_for_few_items(n: int) -> None:
    rng = np.random.default_rng(n)
    base, cand = rng.integers(0, 2, n).astype(float), rng.uniform(0, 1, n)
    d = cand - base
    lo, hi = paired_t_interval(d.mean(), d.std(ddof=1) / math.sqrt(n), n - 1, alpha=0.05)
    ci = ttest_rel(cand, base).confidence_interval(confidence_level=0.9)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-10)
