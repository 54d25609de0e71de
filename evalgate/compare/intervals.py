"""Closed-form pieces of the paired analysis: Wilson and Newcombe intervals, clustered standard
errors and the paired t interval. Wilson's interval and the t quantile come from scipy; scipy has
neither Newcombe's paired interval nor a clustered standard error, so those are written out here.

Pure functions of counts or arrays; no randomness, no I/O. Unlike ``stats`` (which reports in
points), everything here is on the *fraction* scale (0-1): callers multiply by 100.

Conventions: ``alpha`` is a one-sided level, 0 < alpha < 0.5; an interval is the two-sided
(1 - 2*alpha) interval, so its lower end is a one-sided (1 - alpha) lower confidence bound
(the form a non-inferiority test uses).

Sources:
    * Wilson score interval: E. B. Wilson, "Probable inference, the law of succession, and
      statistical inference", JASA 22(158), 1927, 209-212.
    * Paired difference of proportions, square-and-add of two Wilson intervals with a correlation
      correction: R. G. Newcombe, "Improved confidence intervals for the difference between
      binomial proportions based on paired data", Stat. Med. 17(22), 1998, 2635-2650 (method 10),
      in the form recommended and tabulated by M. W. Fagerland, S. Lydersen and P. Laake,
      "Recommended tests and confidence intervals for paired binomial proportions", Stat. Med.
      33(16), 2014, 2850-2875, and *Statistical Analysis of Contingency Tables*, CRC, 2017, ch. 8
      (the correlation estimate is shrunk towards 0 by N/2, as there).
    * Clustered (cluster-robust) standard error of a mean: E. Miller, "Adding Error Bars to Evals:
      A Statistical Approach to Language Model Evaluations", arXiv:2411.00640, 2024, sec. 2.2,
      with the usual G/(G-1) small-sample factor (CR1; A. C. Cameron and D. L. Miller, "A
      practitioner's guide to cluster-robust inference", J. Hum. Resour. 50(2), 2015, 317-372).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
from scipy.stats import binomtest
from scipy.stats import t as student_t

__all__ = [
    "NEWCOMBE_METHOD",
    "cluster_codes",
    "clustered_se",
    "newcombe_paired_interval",
    "paired_t_interval",
    "wilson_interval",
]

NEWCOMBE_METHOD = "Newcombe square-and-add (Wilson score, method 10)"


def check_alpha(alpha: object) -> float:
    """``alpha`` as a float; ValueError unless it is a number in (0, 0.5) (a one-sided level)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not (0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be a number in (0, 0.5), got {alpha!r}")
    return float(alpha)


def _check_count(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    return int(v)


def wilson_interval(k: int, n: int, *, alpha: float) -> tuple[float, float]:
    """Wilson score interval (no continuity correction) for a binomial proportion ``k / n``.

    Returns the two-sided (1 - 2*alpha) interval ``(lower, upper)`` as fractions in [0, 1]:
    ``(p + z^2/(2n) -/+ z * sqrt(p(1-p)/n + z^2/(4n^2))) / (1 + z^2/n)`` with
    ``z = Phi^-1(1 - alpha)`` (Wilson 1927), as computed by
    ``scipy.stats.binomtest(k, n).proportion_ci(1 - 2*alpha, method="wilson")``. Raises ValueError for
    n < 1, k outside [0, n] or a bad alpha.
    """
    k, n = _check_count("k", k), _check_count("n", n)
    if n < 1 or k > n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    ci = binomtest(k, n).proportion_ci(confidence_level=1.0 - 2.0 * check_alpha(alpha), method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


def newcombe_paired_interval(
    both: int, only_first: int, only_second: int, neither: int, *, alpha: float
) -> tuple[float, float]:
    """Interval for ``p_first - p_second`` from a paired 2x2 table (Newcombe 1998, method 10).

    Args:
        both: items where both arms succeed (score 1 and 1).
        only_first: first arm 1, second arm 0.
        only_second: first arm 0, second arm 1.
        neither: both 0.
        alpha: one-sided level; the interval is two-sided (1 - 2*alpha).

    With ``p1 = (both + only_first)/N``, ``p2 = (both + only_second)/N``, Wilson intervals
    ``(l1, u1)``, ``(l2, u2)`` and the correlation estimate ``psi`` (``A = both*neither -
    only_first*only_second``; ``psi = (A - N/2)/sqrt(prod of margins)`` if ``A > N/2``, 0 if
    ``0 <= A <= N/2``, ``A/sqrt(...)`` if ``A < 0``; 0 when a margin is empty)::

        L = (p1 - p2) - sqrt((p1 - l1)^2 + (u2 - p2)^2 - 2 psi (p1 - l1)(u2 - p2))
        U = (p1 - p2) + sqrt((p2 - l2)^2 + (u1 - p1)^2 - 2 psi (p2 - l2)(u1 - p1))

    Returns ``(L, U)`` as fractions, clipped to [-1, 1]. For evalgate ``first`` is the candidate
    and ``second`` the baseline, so ``only_first`` counts improved and ``only_second`` regressed
    items. Raises ValueError on negative or non-integer counts, an empty table or a bad alpha.
    """
    a = _check_count("both", both)
    b = _check_count("only_first", only_first)
    c = _check_count("only_second", only_second)
    d = _check_count("neither", neither)
    n = a + b + c + d
    if n == 0:
        raise ValueError("the 2x2 table is empty")
    l1, u1 = wilson_interval(a + b, n, alpha=alpha)
    l2, u2 = wilson_interval(a + c, n, alpha=alpha)
    p1, p2 = (a + b) / n, (a + c) / n
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        psi = 0.0
    else:
        cross = a * d - b * c
        if cross > n / 2:
            psi = (cross - n / 2) / math.sqrt(margins)
        elif cross >= 0:
            psi = 0.0
        else:
            psi = cross / math.sqrt(margins)
    delta = p1 - p2
    lo = delta - math.sqrt(max(0.0, (p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * psi * (p1 - l1) * (u2 - p2)))
    hi = delta + math.sqrt(max(0.0, (p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * psi * (p2 - l2) * (u1 - p1)))
    return max(-1.0, lo), min(1.0, hi)


def cluster_codes(labels: Sequence[Hashable | None] | None, n: int) -> np.ndarray:
    """Integer cluster codes, shape ``(n,)``, in order of first appearance.

    ``labels`` gives each item's cluster (e.g. the source document); ``None`` as a whole or as an
    element means "its own cluster". Raises ValueError when the length differs from n.
    """
    if labels is None:
        return np.arange(n, dtype=np.int64)
    if len(labels) != n:
        raise ValueError(f"clusters has {len(labels)} labels for {n} items")
    codes = np.empty(n, dtype=np.int64)
    seen: dict[Hashable, int] = {}
    for i, lab in enumerate(labels):
        key: Hashable = ("\0item", i) if lab is None else ("\0label", lab)
        codes[i] = seen.setdefault(key, len(seen))
    return codes


def clustered_se(d: np.ndarray, codes: np.ndarray) -> float:
    """Cluster-robust standard error of ``mean(d)`` (fraction scale); NaN with fewer than 2 clusters.

    ``SE = sqrt(G/(G-1) * sum_g (sum_{i in g} (d_i - mean(d)))^2) / n`` for G clusters (Miller 2024,
    eq. for SE_clustered, with the CR1 factor). With one item per cluster this is exactly the
    paired standard error ``sd(d, ddof=1)/sqrt(n)``. ``d`` and ``codes`` have shape ``(n,)``.
    """
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    g = int(codes.max()) + 1 if n else 0
    if g < 2:
        return math.nan
    sums = np.bincount(codes, weights=d - d.mean(), minlength=g)
    return math.sqrt(g / (g - 1) * float(np.sum(sums * sums))) / n


def paired_t_interval(delta: float, se: float, df: int, *, alpha: float) -> tuple[float, float]:
    """Student-t interval ``delta -/+ t_{1-alpha, df} * se`` (two-sided 1 - 2*alpha), quantile from
    ``scipy.stats.t.ppf``.

    For paired items ``se = sd(d)/sqrt(n)`` and ``df = n - 1``: then it is
    ``scipy.stats.ttest_rel(candidate, baseline).confidence_interval(1 - 2*alpha)``, which takes the raw
    arrays; this form also takes the clustered SE with ``df = G - 1`` (Cameron and Miller 2015, sec. VI),
    which scipy does not compute. Returns NaNs when ``df < 1`` or
    ``se`` is NaN; a zero ``se`` gives the degenerate interval ``(delta, delta)``.
    """
    check_alpha(alpha)
    if df < 1 or not math.isfinite(se):
        return math.nan, math.nan
    q = float(student_t.ppf(1.0 - alpha, df))
    return delta - q * se, delta + q * se
