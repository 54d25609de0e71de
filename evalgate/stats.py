"""Paired statistics for one task: baseline vs candidate scored on the same items.

Pure functions: no I/O, no logging, no global random state (the caller passes a
``numpy.random.Generator``). Inputs are per-item scores in [0, 1]; every mean, difference and
interval in the output is in *points* (100 x fraction, 0-100 scale). Undefined quantities are
``NaN``, never strings.

Sources:
    * Paired bootstrap, percentile interval: B. Efron and R. J. Tibshirani, *An Introduction to
      the Bootstrap*, Chapman & Hall, 1993, ch. 6 (standard errors) and ch. 13 (percentile
      interval).
    * McNemar's test: Q. McNemar, "Note on the sampling error of the difference between
      correlated proportions or percentages", Psychometrika 12(2), 1947, 153-157.
    * Exact (conditional) McNemar = two-sided binomial test on the discordant pairs:
      M. W. Fagerland, S. Lydersen and P. Laake, "The McNemar test for binary matched-pairs data:
      mid-p and asymptotic are better than exact conditional", BMC Med. Res. Methodol. 13:91, 2013.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

__all__ = [
    "BOOTSTRAP_METHOD",
    "PairedComparison",
    "flipped_items",
    "mcnemar_exact",
    "paired_comparison",
]

BOOTSTRAP_METHOD = "paired bootstrap (percentile)"

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
        ci_low, ci_high: two-sided (1 - 2*alpha) paired bootstrap percentile interval of
            ``delta``, points; ``ci_low`` is therefore a one-sided (1 - alpha) lower bound.
        lower_bound: equal to ``ci_low``; what the gate compares with ``-margin``.
        method: how the interval was computed (``BOOTSTRAP_METHOD``).
        binary: True when every score of both arms is 0 or 1.
        n_improved: items with candidate > baseline.
        n_regressed: items with candidate < baseline.
        mcnemar_p: exact two-sided McNemar p-value (``mcnemar_exact(n_regressed, n_improved)``)
            when ``binary``, NaN otherwise.
        stderr: paired standard error of ``delta``, ``100 * sd(d, ddof=1) / sqrt(n)`` with
            ``d = candidate - baseline``; NaN when n == 1.
        alpha: the one-sided level the interval was computed at (NaN if unknown). The gate
            refuses a comparison whose alpha differs from the threshold's.
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
    1947; exact form as in Fagerland et al. 2013). Because the null is symmetric,
    ``p = min(1, 2 * P[X <= min(b, c)])`` with ``X ~ Bin(b + c, 0.5)``; equals
    ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``.

    Returns 1.0 when ``b + c == 0``. Raises ValueError for negative or non-integer counts.
    """
    for name, v in (("b", b), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    total = int(b) + int(c)
    if total == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(int(b), int(c)), total, 0.5)))


def flipped_items(baseline: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (int64, ascending) of ``(regressed, improved)`` items.

    Regressed: ``candidate[i] < baseline[i]``; improved: ``candidate[i] > baseline[i]``.
    Inputs are validated like ``paired_comparison`` (ValueError on bad shape, NaN, range).
    """
    b, c = _check_pair(baseline, candidate)
    return np.flatnonzero(c < b).astype(np.int64), np.flatnonzero(c > b).astype(np.int64)


def _bootstrap_means(d: np.ndarray, rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """Means of ``n_resamples`` item-resamples of ``d`` (same indices for both arms), in blocks."""
    n = d.size
    rows = max(1, min(n_resamples, _MAX_BLOCK_ELEMENTS // n))
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, rows):
        m = min(rows, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        means[start : start + m] = d[idx].mean(axis=1)
    return means


def paired_comparison(
    baseline: np.ndarray,
    candidate: np.ndarray,
    *,
    alpha: float,
    rng: np.random.Generator,
    n_resamples: int = 10_000,
) -> PairedComparison:
    """Compare two arms scored on the same items; differences in points.

    Args:
        baseline, candidate: shape ``(n,)``, n >= 1, per-item scores in [0, 1]; element i of
            both arrays is the same item.
        alpha: one-sided level, 0 < alpha < 0.5. The interval is the two-sided (1 - 2*alpha)
            one, so ``ci_low`` is the one-sided (1 - alpha) lower confidence bound of delta.
        rng: the only source of randomness; same generator state -> same result.
        n_resamples: bootstrap resamples B, >= 1.

    Interval (Efron & Tibshirani 1993, ch. 13): with ``d_i = candidate_i - baseline_i``,
    draw B resamples of n item indices with replacement (the same indices for both arms, which
    keeps the pairing), take the mean of ``d`` over each, and report the empirical alpha and
    1 - alpha quantiles (times 100). When all ``d_i`` are equal the interval is degenerate at
    that value and no random numbers are drawn.

    Standard error: ``100 * sd(d, ddof=1) / sqrt(n)`` (paired-difference SE; NaN for n == 1).
    McNemar: see ``mcnemar_exact``; computed only when all scores are 0 or 1.

    Raises:
        ValueError: mismatched or non-1-D shapes, empty input, NaN, a score outside [0, 1],
            alpha outside (0, 0.5), or n_resamples < 1.
    """
    b, c = _check_pair(baseline, candidate)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not (
        0.0 < float(alpha) < 0.5
    ):
        raise ValueError(f"alpha must be a number in (0, 0.5), got {alpha!r}")
    if (
        isinstance(n_resamples, bool)
        or not isinstance(n_resamples, (int, np.integer))
        or n_resamples < 1
    ):
        raise ValueError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    alpha = float(alpha)
    n = int(b.size)
    d = c - b

    if np.all(d == d[0]):
        delta = ci_low = ci_high = 100.0 * float(d[0])
    else:
        delta = 100.0 * float(d.mean())
        means = _bootstrap_means(d, rng, int(n_resamples))
        lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
        ci_low, ci_high = 100.0 * float(lo), 100.0 * float(hi)

    binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())
    n_improved = int(np.count_nonzero(c > b))
    n_regressed = int(np.count_nonzero(c < b))
    mcnemar_p = mcnemar_exact(n_regressed, n_improved) if binary else math.nan
    stderr = 100.0 * float(np.std(d, ddof=1)) / math.sqrt(n) if n > 1 else math.nan

    return PairedComparison(
        n=n,
        baseline_mean=100.0 * float(b.mean()),
        candidate_mean=100.0 * float(c.mean()),
        delta=delta,
        ci_low=ci_low,
        ci_high=ci_high,
        lower_bound=ci_low,
        method=BOOTSTRAP_METHOD,
        binary=binary,
        n_improved=n_improved,
        n_regressed=n_regressed,
        mcnemar_p=mcnemar_p,
        stderr=stderr,
        alpha=alpha,
    )
