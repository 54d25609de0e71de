"""Paired statistics for one task: baseline vs candidate scored on the same items.

Pure functions: no I/O, no logging, no global random state (the caller passes a
``numpy.random.Generator``). Inputs are per-item scores in [0, 1]; every mean, difference and
interval in the output is in *points* (100 x fraction, 0-100 scale). Undefined quantities are
``NaN``, never strings.

What is computed for ``d = candidate - baseline`` (shape ``(n,)``):

* the paired bootstrap percentile interval; with ``clusters`` (items that share a source, e.g. four
  questions on one income statement) whole clusters are resampled (cluster bootstrap);
* the paired t interval on the (clustered) standard error, as a cross-check;
* for 0/1 scores without clusters, Newcombe's square-and-add interval for the paired difference of
  proportions and McNemar's exact test;
* a one-sided p-value for "the candidate is worse" (H0: delta >= 0), which the gate uses, with Holm's
  correction across tasks, to decide whether a loss is *shown*;
* the standard error that the power calculation (``evalgate.compare.power``) uses, floored so that a tiny
  run with no observed change is never mistaken for a precise one.

``interval="bootstrap"`` (the default) reports the bootstrap interval as ``ci_low``/``ci_high``;
``interval="auto"`` (what ``compare`` uses) reports the interval suited to the metric kind: Newcombe
for unclustered 0/1 scores, otherwise the wider of the bootstrap and t intervals.

scipy computes McNemar's exact test (``scipy.stats.binomtest``), Wilson's interval and the t and normal
quantiles, so those are scipy's; it has no cluster bootstrap (``scipy.stats.bootstrap`` resamples items),
clustered standard error or Newcombe's paired interval, so those are written out here and in ``intervals``.

Sources:
    * Paired bootstrap, percentile interval: B. Efron and R. J. Tibshirani, *An Introduction to
      the Bootstrap*, Chapman & Hall, 1993, ch. 6 (standard errors) and ch. 13 (percentile
      interval); resampling clusters: A. C. Davison and D. V. Hinkley, *Bootstrap Methods and their
      Application*, CUP, 1997, sec. 3.8.
    * Clustered standard errors for evals: E. Miller, "Adding Error Bars to Evals", arXiv:2411.00640,
      2024 (see ``evalgate.compare.intervals``).
    * McNemar's test: Q. McNemar, "Note on the sampling error of the difference between
      correlated proportions or percentages", Psychometrika 12(2), 1947, 153-157.
    * Exact (conditional) McNemar = binomial test on the discordant pairs:
      M. W. Fagerland, S. Lydersen and P. Laake, "The McNemar test for binary matched-pairs data:
      mid-p and asymptotic are better than exact conditional", BMC Med. Res. Methodol. 13:91, 2013.
    * Newcombe's interval: see ``evalgate.compare.intervals.newcombe_paired_interval``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, norm
from scipy.stats import t as student_t

from evalgate.compare.intervals import (
    NEWCOMBE_METHOD,
    check_alpha,
    cluster_codes,
    clustered_se,
    newcombe_paired_interval,
    paired_t_interval,
)

__all__ = [
    "BOOTSTRAP_METHOD",
    "CLUSTER_BOOTSTRAP_METHOD",
    "LOSS_TEST_BOOTSTRAP_T",
    "LOSS_TEST_MCNEMAR",
    "NEWCOMBE_METHOD",
    "PairedComparison",
    "flipped_items",
    "mcnemar_exact",
    "paired_comparison",
    "power_se",
]

BOOTSTRAP_METHOD = "paired bootstrap (percentile)"
CLUSTER_BOOTSTRAP_METHOD = "cluster bootstrap (percentile)"
LOSS_TEST_MCNEMAR = "McNemar exact, one-sided"
LOSS_TEST_BOOTSTRAP_T = "bootstrap and t, one-sided (larger p)"

# Upper bound on the number of elements of one (resamples x items) index block, so that memory
# stays around 64 MiB (int64 indices + gathered float64 values) whatever n is.
_MAX_BLOCK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class PairedComparison:
    """Candidate vs baseline on the same n items. Means and differences are in points.

    Attributes:
        n: number of paired items.
        baseline_mean, candidate_mean: mean score of each arm, points (0-100).
        delta: ``candidate_mean - baseline_mean``, points.
        ci_low, ci_high: two-sided (1 - 2*alpha) interval of ``delta``, points; ``ci_low`` is
            therefore a one-sided (1 - alpha) lower bound. Which interval: ``method``.
        lower_bound: equal to ``ci_low``; what the gate compares with ``-margin``.
        method: how ``ci_low``/``ci_high`` were computed.
        binary: True when every score of both arms is 0 or 1.
        n_improved: items with candidate > baseline.
        n_regressed: items with candidate < baseline.
        mcnemar_p: exact two-sided McNemar p-value (``mcnemar_exact(n_regressed, n_improved)``)
            when ``binary``, NaN otherwise (it treats items as independent, clusters or not).
        stderr: standard error of ``delta``, points: ``100 * sd(d, ddof=1) / sqrt(n)`` without
            clusters, the clustered (CR1) SE with them; NaN with fewer than 2 clusters.
        alpha: the one-sided level the intervals were computed at (NaN if unknown). The gate
            refuses a comparison whose alpha differs from the threshold's.
        n_clusters: number of clusters G (n when every item is its own cluster; 0 if unknown).
        boot_low, boot_high: the (cluster) bootstrap percentile interval, points.
        t_low, t_high: the paired t interval ``delta -/+ t_{1-alpha, G-1} * stderr``, points.
        newcombe_low, newcombe_high: Newcombe's interval (0/1 scores, no clusters), else NaN.
        p_loss: one-sided p-value of H0 "delta >= 0" (the candidate is not worse): McNemar exact
            (``P[X >= n_regressed]``, ``X ~ Bin(n_regressed + n_improved, 1/2)``) for unclustered
            0/1 scores, else the larger of the bootstrap p ``(1 + #{means >= 0}) / (B + 1)`` and
            the t p-value on ``max(stderr, se_floor)``. NaN if unknown.
        loss_test: which test gave ``p_loss``.
        se_power: standard error (points) for power and MDE (``evalgate.compare.power``): for unclustered
            0/1 scores the null SE ``100 * sqrt(discordant / n) / sqrt(n)``, else ``stderr``;
            never below the floor ``100 / n`` (one discordant item in n). NaN if unknown.
    """

    n: int
    baseline_mean: float
    candidate_mean: float
    delta: float
    ci_low: float
    ci_high: float
    lower_bound: float
    method: str
    binary: bool
    n_improved: int
    n_regressed: int
    mcnemar_p: float
    stderr: float
    alpha: float = math.nan
    n_clusters: int = 0
    boot_low: float = math.nan
    boot_high: float = math.nan
    t_low: float = math.nan
    t_high: float = math.nan
    newcombe_low: float = math.nan
    newcombe_high: float = math.nan
    p_loss: float = math.nan
    loss_test: str = ""
    se_power: float = math.nan


def _check_pair(baseline: object, candidate: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert a pair of score vectors to 1-D float64 arrays of equal length."""
    try:
        b = np.asarray(baseline, dtype=np.float64)
        c = np.asarray(candidate, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores must be numeric arrays: {exc}") from None
    if b.ndim != 1 or c.ndim != 1:
        raise ValueError(f"scores must be 1-D arrays, got shapes {b.shape} and {c.shape}")
    if b.shape != c.shape:
        raise ValueError(f"baseline and candidate differ in length: {b.size} vs {c.size}")
    if b.size == 0:
        raise ValueError("scores are empty: need at least one paired item")
    for name, arr in (("baseline", b), ("candidate", c)):
        if np.isnan(arr).any():
            first = int(np.flatnonzero(np.isnan(arr))[0])
            raise ValueError(f"{name} scores contain NaN at index {first}")
        bad = np.flatnonzero((arr < 0.0) | (arr > 1.0))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name} score at index {i} is {arr[i]!r}, outside [0, 1]")
    return b, c


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for discordant counts ``b`` and ``c``.

    Conditional on ``b + c`` discordant pairs, under H0 ``b ~ Binomial(b + c, 0.5)`` (McNemar
    1947; exact form as in Fagerland et al. 2013): ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``,
    which for this symmetric null is ``min(1, 2 * P[X <= min(b, c)])``, ``X ~ Bin(b + c, 0.5)``.

    Returns 1.0 when ``b + c == 0`` (scipy needs n >= 1). Raises ValueError for negative or
    non-integer counts.
    """
    for name, v in (("b", b), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    total = int(b) + int(c)
    return float(binomtest(int(b), total, 0.5).pvalue) if total else 1.0


def mcnemar_one_sided(worse: int, better: int) -> float:
    """Exact one-sided McNemar p-value of "the candidate is worse": ``P[X >= worse]``, ``X ~ Bin(worse + better,
    1/2)`` (conditional on the discordant pairs; McNemar 1947), i.e. ``scipy.stats.binomtest(worse, worse +
    better, 0.5, alternative="greater").pvalue``. 1.0 when ``worse + better == 0``."""
    total = int(worse) + int(better)
    return float(binomtest(int(worse), total, 0.5, alternative="greater").pvalue) if total else 1.0


def flipped_items(baseline: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64, ascending) of ``(regressed, improved)`` items.

    Regressed: ``candidate[i] < baseline[i]``; improved: ``candidate[i] > baseline[i]``.
    Inputs are validated like ``paired_comparison`` (ValueError on bad shape, NaN, range).
    """
    b, c = _check_pair(baseline, candidate)
    return np.flatnonzero(c < b).astype(np.int64), np.flatnonzero(c > b).astype(np.int64)


def _bootstrap_means(
    d: np.ndarray, rng: np.random.Generator, n_resamples: int, codes: np.ndarray | None = None
) -> np.ndarray:
    """Means of ``n_resamples`` resamples of ``d``, in blocks; shape ``(n_resamples,)``.

    Without ``codes``: n item indices with replacement (the same indices for both arms, which
    keeps the pairing). With ``codes`` (G clusters): G cluster indices with replacement, and the
    resample mean is (sum of the drawn clusters' sums) / (sum of their sizes).
    """
    if codes is None:
        n = d.size
        rows = max(1, min(n_resamples, _MAX_BLOCK_ELEMENTS // n))
        means = np.empty(n_resamples, dtype=np.float64)
        for start in range(0, n_resamples, rows):
            m = min(rows, n_resamples - start)
            idx = rng.integers(0, n, size=(m, n))
            means[start : start + m] = d[idx].mean(axis=1)
        return means
    g = int(codes.max()) + 1
    sums = np.bincount(codes, weights=d, minlength=g)
    sizes = np.bincount(codes, minlength=g).astype(np.float64)
    rows = max(1, min(n_resamples, _MAX_BLOCK_ELEMENTS // g))
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, rows):
        m = min(rows, n_resamples - start)
        idx = rng.integers(0, g, size=(m, g))
        means[start : start + m] = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    return means


def _codes(clusters: Sequence[Hashable | None] | None, n: int) -> tuple[np.ndarray, int]:
    """Cluster codes and their number G. A single cluster (all items from one document, as in a 3-item run)
    carries no between-cluster variance to estimate, so its items are then treated as independent."""
    codes = cluster_codes(clusters, n)
    g = int(codes.max()) + 1
    if g < 2:
        return np.arange(n, dtype=np.int64), n
    return codes, g


def _is_binary(b: np.ndarray, c: np.ndarray) -> bool:
    """True when every score of both arms is exactly 0 or 1."""
    return bool(np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())


def _stderr(d: np.ndarray, codes: np.ndarray, clustered: bool) -> float:
    """SE of ``mean(d)`` in points: clustered (CR1, ``intervals.clustered_se``) or ``sd(d, ddof=1)/sqrt(n)``;
    NaN for a single unclustered item."""
    if clustered:
        return 100.0 * clustered_se(d, codes)
    return 100.0 * float(np.std(d, ddof=1)) / math.sqrt(d.size) if d.size > 1 else math.nan


def _floored(se: float, n: int) -> float:
    """``max(se, 100 / n)`` (one discordant item in n, points), or the floor when ``se`` is NaN (one item)."""
    return max(se, 100.0 / n) if math.isfinite(se) else 100.0 / n


def _power_se(n: int, exact_binary: bool, discordant: int, stderr: float) -> float:
    """SE (points) for power and MDE; see ``PairedComparison.se_power``."""
    if exact_binary:
        return _floored(100.0 * math.sqrt(discordant / n) / math.sqrt(n), n)
    return _floored(stderr, n)


def power_se(
    baseline: np.ndarray, candidate: np.ndarray, clusters: Sequence[Hashable | None] | None = None
) -> tuple[float, int, int]:
    """``(se_power, n_clusters, changed)`` without resampling: the standard error (points) that
    ``evalgate.compare.power`` turns into an MDE or a sample size, the number of clusters G and the number
    of items whose score changed. Same value as ``paired_comparison(...).se_power``; inputs and
    errors as there."""
    b, c = _check_pair(baseline, candidate)
    n = int(b.size)
    d = c - b
    codes, g = _codes(clusters, n)
    clustered = g < n
    binary = _is_binary(b, c)
    changed = int(np.count_nonzero(d))
    return _power_se(n, binary and not clustered, changed, _stderr(d, codes, clustered)), g, changed


def _check_args(alpha: object, n_resamples: object, interval: object) -> None:
    check_alpha(alpha)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    if interval not in ("bootstrap", "auto"):
        raise ValueError(f"interval must be 'bootstrap' or 'auto', got {interval!r}")


def paired_comparison(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    alpha: float,
    rng: np.random.Generator,
    n_resamples: int = 10_000,
    clusters: Sequence[Hashable | None] | None = None,
    interval: str = "bootstrap",
) -> PairedComparison:
    """Compare two arms scored on the same items; differences in points.

    Args:
        baseline, candidate: shape ``(n,)``, n >= 1, per-item scores in [0, 1]; element i of
            both arrays is the same item.
        alpha: one-sided level, 0 < alpha < 0.5. Intervals are two-sided (1 - 2*alpha), so a
            lower end is a one-sided (1 - alpha) lower confidence bound of delta.
        rng: the only source of randomness; same generator state -> same result.
        n_resamples: bootstrap resamples B, >= 1.
        clusters: optional, length n: item i's cluster label (hashable; ``None`` = its own
            cluster). Clusters are resampled whole and enter the standard error (Miller 2024). With a
            single cluster the items are treated as independent (nothing else can be estimated).
        interval: ``"bootstrap"`` (``ci_low``/``ci_high`` = the bootstrap interval) or
            ``"auto"`` (Newcombe for unclustered 0/1 scores, else the wider of bootstrap and t).

    Bootstrap (Efron & Tibshirani 1993, ch. 13): with ``d_i = candidate_i - baseline_i``, draw B
    resamples (of items, or of clusters), take the mean of ``d`` over each, and report the
    empirical alpha and 1 - alpha quantiles (times 100). When all ``d_i`` are equal the interval
    is degenerate at that value and no random numbers are drawn. Without clusters the draws are
    exactly those of an item bootstrap, so results do not change when clusters are all None.

    Raises:
        ValueError: mismatched or non-1-D shapes, empty input, NaN, a score outside [0, 1],
            alpha outside (0, 0.5), n_resamples < 1, an unknown ``interval``, or a ``clusters``
            of the wrong length.
    """
    b, c = _check_pair(baseline, candidate)
    _check_args(alpha, n_resamples, interval)
    alpha = float(alpha)
    n = int(b.size)
    d = c - b
    codes, g = _codes(clusters, n)
    clustered = g < n
    delta, (boot_low, boot_high), means = _bootstrap(d, alpha, rng, int(n_resamples), codes if clustered else None)
    binary = _is_binary(b, c)
    exact = binary and not clustered  # McNemar and Newcombe treat items as independent 0/1 pairs
    n_improved, n_regressed = int(np.count_nonzero(c > b)), int(np.count_nonzero(c < b))
    stderr = _stderr(d, codes, clustered)
    t_low, t_high = paired_t_interval(delta, stderr, g - 1, alpha=alpha)
    newcombe_low, newcombe_high = _newcombe(b, c, alpha) if exact else (math.nan, math.nan)
    if exact:
        p_loss, loss_test = mcnemar_one_sided(n_regressed, n_improved), LOSS_TEST_MCNEMAR
    else:
        p_loss, loss_test = _p_loss_bootstrap_t(delta, means, _floored(stderr, n), g), LOSS_TEST_BOOTSTRAP_T
    ci_low, ci_high, method = _reported_interval(
        interval, clustered, exact, (boot_low, boot_high), (t_low, t_high), (newcombe_low, newcombe_high))
    return PairedComparison(
        n=n, baseline_mean=100.0 * float(b.mean()), candidate_mean=100.0 * float(c.mean()), delta=delta,
        ci_low=ci_low, ci_high=ci_high, lower_bound=ci_low, method=method, binary=binary,
        n_improved=n_improved, n_regressed=n_regressed,
        mcnemar_p=mcnemar_exact(n_regressed, n_improved) if binary else math.nan,
        stderr=stderr, alpha=alpha, n_clusters=g, boot_low=boot_low, boot_high=boot_high, t_low=t_low,
        t_high=t_high, newcombe_low=newcombe_low, newcombe_high=newcombe_high, p_loss=p_loss, loss_test=loss_test,
        se_power=_power_se(n, exact, n_improved + n_regressed, stderr),
    )


def _bootstrap(
    d: np.ndarray, alpha: float, rng: np.random.Generator, n_resamples: int, codes: np.ndarray | None
) -> tuple[float, tuple[float, float], np.ndarray | None]:
    """``(delta, (boot_low, boot_high), means)`` in points: the mean difference, the percentile interval at
    ``alpha`` / ``1 - alpha`` of the (cluster) bootstrap means (Efron & Tibshirani 1993, ch. 13) and those means.
    When every ``d_i`` is equal the interval is degenerate at that value, no random numbers are drawn and
    ``means`` is None."""
    if np.all(d == d[0]):
        value = 100.0 * float(d[0])
        return value, (value, value), None
    means = _bootstrap_means(d, rng, n_resamples, codes)
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return 100.0 * float(d.mean()), (100.0 * float(lo), 100.0 * float(hi)), means


def _newcombe(b: np.ndarray, c: np.ndarray, alpha: float) -> tuple[float, float]:
    """Newcombe's interval (points) for ``mean(c) - mean(b)`` of 0/1 scores, from their paired 2x2 table."""
    both = int(np.count_nonzero((b == 1.0) & (c == 1.0)))
    improved, regressed = int(np.count_nonzero(c > b)), int(np.count_nonzero(c < b))
    neither = b.size - both - improved - regressed
    lo, hi = newcombe_paired_interval(both, improved, regressed, neither, alpha=alpha)
    return 100.0 * lo, 100.0 * hi


def _p_loss_bootstrap_t(delta: float, means: np.ndarray | None, se_t: float, g: int) -> float:
    """One-sided p of H0 "delta >= 0": the larger of the bootstrap p ``(1 + #{means >= 0}) / (B + 1)`` (0 or 1
    when no resampling was needed) and the t p-value of ``delta / se_t`` on G - 1 df (normal for G < 2)."""
    if means is not None:
        p_boot = (1.0 + float(np.count_nonzero(means >= 0.0))) / (means.size + 1.0)
    else:
        p_boot = 0.0 if delta < 0 else 1.0
    z = delta / se_t
    p_t = float(student_t.cdf(z, g - 1)) if g >= 2 else float(norm.cdf(z))
    return max(p_boot, p_t)


def _reported_interval(
    interval: str, clustered: bool, exact: bool, boot: tuple[float, float], t: tuple[float, float],
    newcombe: tuple[float, float],
) -> tuple[float, float, str]:
    """``(ci_low, ci_high, method)`` that ``interval`` selects; see ``paired_comparison``."""
    boot_method = CLUSTER_BOOTSTRAP_METHOD if clustered else BOOTSTRAP_METHOD
    if interval == "bootstrap":
        return boot[0], boot[1], boot_method
    if exact:
        return newcombe[0], newcombe[1], NEWCOMBE_METHOD
    low = boot[0] if math.isnan(t[0]) else min(boot[0], t[0])
    high = boot[1] if math.isnan(t[1]) else max(boot[1], t[1])
    t_name = "clustered t" if clustered else "paired t"
    return low, high, f"{boot_method} and {t_name}, the wider of the two"
