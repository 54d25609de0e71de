"""Tests of evalgate.compare.stats against independent computations (scipy, closed forms)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

import evalgate.compare.stats as stats
from evalgate.compare.stats import (
    BOOTSTRAP_METHOD,
    PairedComparison,
    flipped_items,
    mcnemar_exact,
    paired_comparison,
)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize(
    ("b", "c"),
    [(1, 0), (0, 1), (2, 3), (3, 7), (5, 5), (0, 12), (10, 25), (1, 9), (20, 6), (17, 17),
     (40, 55)],
)
def test_mcnemar_exact_matches_scipy_binomtest(b: int, c: int) -> None:
    expected = binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def _binomial_tail(k: int, n: int) -> float:
    """P[X <= k] for X ~ Bin(n, 1/2), exactly (integer arithmetic), as a float."""
    return float(sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


# The closed forms evalgate computed before calling scipy (two-sided: min(1, 2 P[X <= min(b, c)]); one-sided:
# P[X >= worse] = 1 - P[X <= worse - 1]), in exact integer arithmetic, on every table with b, c <= 30.
@pytest.mark.parametrize("b", range(31))
def test_mcnemar_equals_the_closed_form_on_a_grid(b: int) -> None:
    for c in range(31):
        n = b + c
        two_sided = 1.0 if n == 0 else min(1.0, 2 * _binomial_tail(min(b, c), n))
        one_sided = 1.0 if n == 0 else 1 - _binomial_tail(b - 1, n) if b else 1.0
        assert mcnemar_exact(b, c) == pytest.approx(two_sided, rel=1e-12, abs=1e-15)
        assert stats.mcnemar_one_sided(b, c) == pytest.approx(one_sided, rel=1e-12, abs=1e-15)


def test_mcnemar_exact_known_values() -> None:
    # Bin(10, 0.5): P[X <= 3] = (1 + 10 + 45 + 120) / 1024 = 176/1024; two-sided = 352/1024.
    assert mcnemar_exact(3, 7) == pytest.approx(352 / 1024, rel=1e-12)
    assert mcnemar_exact(0, 12) == pytest.approx(2 / 4096, rel=1e-12)
    assert mcnemar_exact(4, 4) == 1.0


def test_mcnemar_exact_no_discordant_pairs_is_one() -> None:
    assert mcnemar_exact(0, 0) == 1.0


@pytest.mark.parametrize(("b", "c"), [(-1, 3), (2, -5), (1.5, 2), (True, 2), ("3", 1)])
def test_mcnemar_exact_rejects_bad_counts(b: object, c: object) -> None:
    with pytest.raises(ValueError, match="must be"):
        mcnemar_exact(b, c)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- hand-made tables


def test_paired_comparison_binary_counts_and_means() -> None:
    base = np.array([1, 1, 0, 0, 1], dtype=float)
    cand = np.array([1, 0, 1, 0, 0], dtype=float)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng())
    assert r.n == 5
    assert r.baseline_mean == pytest.approx(60.0)
    assert r.candidate_mean == pytest.approx(40.0)
    assert r.delta == pytest.approx(-20.0)
    assert r.binary is True
    assert (r.n_regressed, r.n_improved) == (2, 1)
    assert r.mcnemar_p == pytest.approx(binomtest(1, 3, 0.5).pvalue)
    assert r.lower_bound == r.ci_low
    assert r.ci_low <= r.delta <= r.ci_high
    assert r.method == BOOTSTRAP_METHOD
    assert r.alpha == 0.05
    # d = [0, -1, 1, 0, -1]: sd(ddof=1) = sqrt(0.7), se = 100 * sqrt(0.7 / 5)
    assert r.stderr == pytest.approx(100 * math.sqrt(0.7 / 5))


def test_non_binary_scores_have_nan_mcnemar() -> None:
    base, cand = np.array([0.5, 1.0, 0.0]), np.array([0.25, 1.0, 1.0])
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng())
    assert r.binary is False
    assert math.isnan(r.mcnemar_p)
    assert (r.n_regressed, r.n_improved) == (1, 1)
    assert r.delta == pytest.approx(100 * (-0.25 + 0.0 + 1.0) / 3)  # d = [-0.25, 0, 1]


def test_bootstrap_two_item_closed_form() -> None:
    # d = [0, 1]: the resampled mean is 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4.
    base, cand = np.array([0.0, 0.0]), np.array([0.0, 1.0])
    wide = paired_comparison(base, cand, alpha=0.2, rng=_rng(1))  # quantiles 0.2 and 0.8
    assert (wide.ci_low, wide.ci_high) == (0.0, 100.0)
    mid = paired_comparison(base, cand, alpha=0.3, rng=_rng(1))  # quantiles 0.3 and 0.7
    assert (mid.ci_low, mid.ci_high) == (50.0, 50.0)


# ------------------------------------------------------------ large-sample normal check


def _known_difference(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Baseline ~ Bernoulli(0.7); each item flips with prob 0.1 -> true delta = 0.66 - 0.70."""
    gen = np.random.default_rng(seed)
    base = (gen.random(n) < 0.7).astype(float)
    flip = gen.random(n) < 0.1
    cand = np.where(flip, 1.0 - base, base)
    return base, cand


@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_bootstrap_interval_matches_normal_interval(alpha: float) -> None:
    n, true_delta = 2000, -4.0
    base, cand = _known_difference(n, seed=7)
    r = paired_comparison(base, cand, alpha=alpha, rng=_rng(11))
    # Independent closed forms for paired binary data with b regressed, c improved items.
    b = int(np.sum((base == 1) & (cand == 0)))
    c = int(np.sum((base == 0) & (cand == 1)))
    delta = 100.0 * (c - b) / n
    se = 100.0 * math.sqrt(((b + c) / n - ((c - b) / n) ** 2) / (n - 1))
    z = norm.ppf(1 - alpha)
    assert r.delta == pytest.approx(delta)
    assert r.stderr == pytest.approx(se, rel=1e-9)
    assert r.ci_low < true_delta < r.ci_high
    assert r.ci_low == pytest.approx(delta - z * se, abs=0.15)
    assert r.ci_high == pytest.approx(delta + z * se, abs=0.15)
    assert r.mcnemar_p == pytest.approx(binomtest(b, b + c, 0.5).pvalue)


def test_bootstrap_interval_continuous_scores() -> None:
    gen = np.random.default_rng(3)
    base = gen.uniform(0.2, 0.8, 3000)
    cand = np.clip(base + gen.normal(0.02, 0.1, 3000), 0.0, 1.0)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(5))
    d = cand - base
    se = 100.0 * d.std(ddof=1) / math.sqrt(d.size)
    z = norm.ppf(0.95)
    assert r.binary is False
    assert r.ci_low == pytest.approx(100 * d.mean() - z * se, abs=0.1 * se)
    assert r.ci_high == pytest.approx(100 * d.mean() + z * se, abs=0.1 * se)


# -------------------------------------------------------------- degenerate / determinism


def test_identical_differences_give_degenerate_interval_without_drawing() -> None:
    base = np.array([0.2, 0.5, 0.4, 0.0])
    cand = base + 0.25
    rng = _rng(0)
    before = rng.bit_generator.state
    r = paired_comparison(base, cand, alpha=0.05, rng=rng)
    assert rng.bit_generator.state == before
    assert r.ci_low == r.ci_high == r.delta == r.lower_bound
    assert r.delta == pytest.approx(25.0)
    assert r.stderr == pytest.approx(0.0, abs=1e-12)
    assert (r.n_regressed, r.n_improved) == (0, 4)


def test_identical_arms() -> None:
    scores = np.array([1.0, 0.0, 1.0, 1.0])
    r = paired_comparison(scores, scores.copy(), alpha=0.05, rng=_rng())
    assert (r.delta, r.ci_low, r.ci_high, r.stderr, r.mcnemar_p) == (0.0, 0.0, 0.0, 0.0, 1.0)
    assert (r.n_regressed, r.n_improved) == (0, 0)


def test_single_item() -> None:
    r = paired_comparison(np.array([1.0]), np.array([0.0]), alpha=0.05, rng=_rng())
    assert (r.n, r.delta, r.ci_low, r.ci_high) == (1, -100.0, -100.0, -100.0)
    assert math.isnan(r.stderr)
    assert r.mcnemar_p == 1.0  # Bin(1, 0.5): 2 * P[X <= 0] = 1


def test_same_seed_same_result_different_seed_different_interval() -> None:
    base, cand = _known_difference(500, seed=1)
    r1 = paired_comparison(base, cand, alpha=0.05, rng=_rng(42), n_resamples=2000)
    r2 = paired_comparison(base, cand, alpha=0.05, rng=_rng(42), n_resamples=2000)
    r3 = paired_comparison(base, cand, alpha=0.05, rng=_rng(43), n_resamples=2000)
    assert isinstance(r1, PairedComparison)
    assert r1 == r2
    assert (r1.ci_low, r1.ci_high) != (r3.ci_low, r3.ci_high)
    assert r1.delta == r3.delta


def test_chunking_does_not_change_the_result(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = np.random.default_rng(9)
    base, cand = gen.random(1000), gen.random(1000)
    whole = paired_comparison(base, cand, alpha=0.05, rng=_rng(3), n_resamples=1001)
    monkeypatch.setattr(stats, "_MAX_BLOCK_ELEMENTS", 3000)  # 3 resamples per block
    chunked = paired_comparison(base, cand, alpha=0.05, rng=_rng(3), n_resamples=1001)
    assert chunked == whole


def test_dataclass_is_frozen() -> None:
    r = paired_comparison(np.array([1.0, 0.0]), np.array([1.0, 1.0]), alpha=0.05, rng=_rng())
    with pytest.raises(AttributeError):
        r.delta = 0.0  # type: ignore[misc]


# --------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("base", "cand", "match"),
    [
        ([0.0, 1.0], [0.0], "differ in length"),
        ([], [], "empty"),
        ([0.0, float("nan")], [0.0, 1.0], "NaN"),
        ([0.0, 1.0], [0.0, 1.5], "outside \\[0, 1\\]"),
        ([-0.1, 1.0], [0.0, 1.0], "outside \\[0, 1\\]"),
        ([[0.0, 1.0]], [[0.0, 1.0]], "1-D"),
        (["a", "b"], [0.0, 1.0], "numeric"),
    ],
)
def test_invalid_scores_raise(base: list, cand: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_comparison(np.array(base), np.array(cand), alpha=0.05, rng=_rng())


@pytest.mark.parametrize("alpha", [0.0, 0.5, -0.1, float("nan"), True])
def test_invalid_alpha_raises(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        paired_comparison(np.array([0.0, 1.0]), np.array([1.0, 1.0]), alpha=alpha, rng=_rng())


def test_invalid_resamples_raises() -> None:
    with pytest.raises(ValueError, match="n_resamples"):
        paired_comparison(
            np.array([0.0, 1.0]), np.array([1.0, 1.0]), alpha=0.05, rng=_rng(), n_resamples=0
        )


# ---------------------------------------------------------------------------- flipped_items


def test_flipped_items() -> None:
    base = np.array([1.0, 0.0, 0.5, 1.0, 0.0, 0.2])
    cand = np.array([0.0, 1.0, 0.5, 0.9, 0.0, 0.3])
    regressed, improved = flipped_items(base, cand)
    assert regressed.tolist() == [0, 3]
    assert improved.tolist() == [1, 5]
    assert regressed.dtype == np.int64


def test_flipped_items_validates() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        flipped_items(np.array([1.0]), np.array([1.0, 0.0]))


# ------------------------------------------------------------ clusters, auto interval, loss test, power SE

from scipy.stats import t as student_t  # noqa: E402

from evalgate.compare.intervals import NEWCOMBE_METHOD, newcombe_paired_interval  # noqa: E402
from evalgate.compare.stats import CLUSTER_BOOTSTRAP_METHOD, LOSS_TEST_MCNEMAR, power_se  # noqa: E402


def test_singleton_clusters_change_nothing() -> None:
    base, cand = _known_difference(300, seed=2)
    plain = paired_comparison(base, cand, alpha=0.05, rng=_rng(4), n_resamples=2000)
    labelled = paired_comparison(base, cand, alpha=0.05, rng=_rng(4), n_resamples=2000,
                                 clusters=[f"doc{i}" for i in range(300)])
    nones = paired_comparison(base, cand, alpha=0.05, rng=_rng(4), n_resamples=2000, clusters=[None] * 300)
    assert plain == nones
    assert (labelled.ci_low, labelled.ci_high, labelled.n_clusters) == (plain.ci_low, plain.ci_high, 300)


def _clustered(g: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Binary items in clusters whose items move together: a whole cluster is easy or hard, and flips together."""
    gen = np.random.default_rng(seed)
    p = np.repeat(gen.beta(1, 1, g), size)
    base = (gen.random(g * size) < p).astype(float)
    flip = np.repeat(gen.random(g) < 0.15, size) & (gen.random(g * size) < 0.7)
    cand = np.where(flip, 1.0 - base, base)
    return base, cand, [f"s{i // size}" for i in range(g * size)]


def test_cluster_bootstrap_se_matches_clustered_se_and_exceeds_the_naive_one() -> None:
    base, cand, clusters = _clustered(400, 4, seed=8)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(9), clusters=clusters)
    naive = paired_comparison(base, cand, alpha=0.05, rng=_rng(9))
    assert r.n_clusters == 400 and r.method == CLUSTER_BOOTSTRAP_METHOD
    # Bootstrap percentile half-width ~ z * SE; the clustered SE sees the within-cluster correlation.
    half = (r.ci_high - r.ci_low) / 2
    assert half == pytest.approx(norm.ppf(0.95) * r.stderr, rel=0.08)
    assert r.stderr > 1.1 * naive.stderr  # design effect of flips that come a cluster at a time
    assert r.t_low == pytest.approx(r.delta - student_t.ppf(0.95, 399) * r.stderr)


def test_auto_interval_is_newcombe_for_unclustered_binary_scores() -> None:
    base = np.array([1, 1, 0, 0, 1, 1, 1, 0, 1, 1], dtype=float)
    cand = np.array([1, 0, 1, 0, 0, 1, 1, 0, 0, 1], dtype=float)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(), interval="auto")
    both, improved, regressed = 4, 1, 3
    lo, hi = newcombe_paired_interval(both, improved, regressed, 10 - 8, alpha=0.05)
    assert (r.ci_low, r.ci_high, r.lower_bound) == pytest.approx((100 * lo, 100 * hi, 100 * lo))
    assert (r.newcombe_low, r.newcombe_high) == (r.ci_low, r.ci_high)
    assert r.method == NEWCOMBE_METHOD
    assert r.boot_low <= r.delta <= r.boot_high  # the bootstrap is still reported as a cross-check


def test_auto_interval_for_graded_scores_is_the_wider_of_bootstrap_and_t() -> None:
    gen = np.random.default_rng(10)
    base = gen.uniform(0.3, 1.0, 60)
    cand = np.clip(base + gen.normal(-0.01, 0.08, 60), 0, 1)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(11), interval="auto")
    assert r.ci_low == min(r.boot_low, r.t_low) and r.ci_high == max(r.boot_high, r.t_high)
    assert math.isnan(r.newcombe_low)


@pytest.mark.parametrize(("regressed", "improved"), [(0, 0), (3, 0), (5, 2), (2, 5), (12, 4)])
def test_binary_loss_p_is_one_sided_exact_mcnemar(regressed: int, improved: int) -> None:
    n = 40
    base = np.array([1.0] * regressed + [0.0] * improved + [1.0] * (n - regressed - improved))
    cand = np.array([0.0] * regressed + [1.0] * improved + [1.0] * (n - regressed - improved))
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(), interval="auto")
    want = 1.0 if regressed + improved == 0 else binomtest(regressed, regressed + improved, 0.5,
                                                          alternative="greater").pvalue
    assert r.p_loss == pytest.approx(want, rel=1e-12)
    assert r.loss_test == LOSS_TEST_MCNEMAR


def test_graded_loss_p_is_the_larger_of_bootstrap_and_t() -> None:
    gen = np.random.default_rng(12)
    base = gen.uniform(0.3, 1.0, 200)
    cand = np.clip(base - 0.03 + gen.normal(0, 0.1, 200), 0, 1)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(13), interval="auto")
    d = cand - base
    p_t = student_t.cdf(d.mean() / (d.std(ddof=1) / math.sqrt(200)), 199)
    assert r.p_loss >= p_t - 1e-12
    assert r.p_loss == pytest.approx(p_t, abs=0.01)  # the bootstrap p agrees closely at n = 200


def test_power_se_and_its_floor() -> None:
    # 3 items, nothing changed: the floor 100/n, so MDE ~ 83 points (never "high power").
    r = paired_comparison(np.zeros(3), np.zeros(3), alpha=0.05, rng=_rng(), interval="auto")
    assert r.se_power == pytest.approx(100 / 3)
    # Unclustered binary: the null SE of the discordant share.
    base, cand = _known_difference(2000, seed=7)
    r = paired_comparison(base, cand, alpha=0.05, rng=_rng(), interval="auto")
    disc = r.n_regressed + r.n_improved
    assert r.se_power == pytest.approx(100 * math.sqrt(disc / 2000) / math.sqrt(2000))
    assert power_se(base, cand) == (r.se_power, 2000, disc)
    # Graded or clustered: the (clustered) standard error.
    b2, c2, clusters = _clustered(100, 4, seed=3)
    r2 = paired_comparison(b2, c2, alpha=0.05, rng=_rng(), clusters=clusters)
    assert power_se(b2, c2, clusters)[0] == pytest.approx(r2.se_power) and r2.se_power == pytest.approx(r2.stderr)


def test_invalid_interval_and_clusters() -> None:
    with pytest.raises(ValueError, match="interval"):
        paired_comparison(np.array([0.0, 1.0]), np.array([1.0, 1.0]), alpha=0.05, rng=_rng(), interval="x")
    with pytest.raises(ValueError, match="3 labels for 2 items"):
        paired_comparison(np.array([0.0, 1.0]), np.array([1.0, 1.0]), alpha=0.05, rng=_rng(), clusters=["a"] * 3)


def test_a_single_cluster_is_treated_as_independent_items() -> None:
    base, cand = np.array([1.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0])
    one_doc = paired_comparison(base, cand, alpha=0.05, rng=_rng(), interval="auto", clusters=["s0"] * 3)
    plain = paired_comparison(base, cand, alpha=0.05, rng=_rng(), interval="auto")
    assert one_doc == plain and one_doc.method == NEWCOMBE_METHOD and one_doc.ci_low < one_doc.ci_high
