"""Power, minimum detectable effect, sample-size planning and Holm's correction (pure functions).

Units: standard errors, effects and margins are in *points* (percentage points, 0-100 scale).

Minimum detectable effect (MDE). For a one-sided test at level alpha on a paired mean difference
with standard error SE, the smallest true difference detected with probability ``power`` is::

    MDE = (z_{1-alpha} + z_{power}) * SE

(e.g. J. Cohen, *Statistical Power Analysis for the Behavioral Sciences*, 2nd ed., 1988, ch. 2;
the same closed form as TensorRT-LLM's accuracy suite, whose SE is the unpaired
``sqrt(2 sigma^2 / n)``). For the non-inferiority gate it has a second reading: a candidate that is
truly equal to the baseline passes (lower bound >= -margin) with probability >= ``power`` exactly
when ``MDE <= margin``. A run with ``MDE > margin`` cannot reliably pass an equal candidate: the gate
calls it INCONCLUSIVE instead of deciding on noise.

For paired 0/1 scores without clusters SE is the null standard error ``100 * sqrt(p_disc / n)``
with ``p_disc`` the share of discordant items (Connor 1987, "Sample size for testing differences
in proportions for the paired-sample design", Biometrics 43:207-211); for graded or clustered
scores it is the (clustered) standard error of the mean difference. Either way it is floored at
``100 / n`` (one discordant item in n), so three items with no change give an MDE of about 140
points, never "high power". ``stats.PairedComparison.se_power`` holds this SE.

Items needed for a margin m: with per-item variance ``v = n * SE^2`` (points^2, design effect of
clusters included), ``n_needed = ceil(v * (z_{1-alpha} + z_{power})^2 / m^2)``. With a 3 % flip
rate (v = 10^4 * 0.03 = 300) and m = 1 point that is 1,855 items, against about 23,200 for an
unpaired comparison of two independent runs at 75 % accuracy (v = 2 * 10^4 * 0.75 * 0.25 = 3,750).
The SE floor holds at every size, so no run of N items has ``MDE < (z_{1-alpha} + z_{power}) * 100 / N``:
at least ``ceil(100 * (z_{1-alpha} + z_{power}) / m)`` items are needed whatever the pilot says
(``items_floor``; 125 for m = 2). A pilot in which no item changed measured no variance at all (its SE
is the floor ``100 / n``, an assumption); extrapolating that floor would only restate the pilot's size
(``10^4 k^2 / (n m^2)``: 5,152 items after 3 items, 387 after 40). ``items_needed`` then returns
the floor, a lower bound rather than an estimate, and ``describe_items_needed`` says so.

Holm. ``holm_levels`` is Holm's step-down procedure (S. Holm, "A simple sequentially rejective
multiple test procedure", Scand. J. Statist. 6(2), 1979, 65-70), in its weighted form when the
tasks' alphas differ. It controls the family-wise error rate over the tasks of one run: the chance
that *any* task's null is wrongly rejected is at most the (mean) alpha, however many tasks run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import norm

__all__ = ["HolmResult", "describe_items_needed", "items_floor", "items_needed", "items_needed_basis", "mde",
           "items_needed_at_discordance", "mde_at", "mde_at_discordance", "holm_levels", "se_floor", "z_sum"]


def _check_level(name: str, value: float, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo < value < hi):
        raise ValueError(f"{name} must be a number in ({lo:g}, {hi:g}), got {value!r}")
    return float(value)


def z_sum(alpha: float, power: float) -> float:
    """``z_{1-alpha} + z_{power}`` (standard normal quantiles). 0 < alpha < 0.5, 0 < power < 1."""
    alpha = _check_level("alpha", alpha, 0.0, 0.5)
    power = _check_level("power", power, 0.0, 1.0)
    return float(norm.ppf(1.0 - alpha) + norm.ppf(power))


def se_floor(n: int) -> float:
    """The smallest standard error (points) evalgate assumes for n items: ``100 / n``.

    That is the null SE of one discordant 0/1 item in n (``100 * sqrt((1/n)/n)``). Raises
    ValueError for n < 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    return 100.0 / n


def mde(se: float, alpha: float, power: float) -> float:
    """Minimum detectable effect in points: ``(z_{1-alpha} + z_{power}) * se``.

    ``se`` in points (>= 0); NaN in gives NaN out (unknown power). Raises ValueError for a
    negative ``se`` or levels out of range.
    """
    k = z_sum(alpha, power)
    if math.isnan(se):
        return math.nan
    if se < 0:
        raise ValueError(f"se must be >= 0, got {se!r}")
    return k * se


def items_floor(margin: float, alpha: float, power: float) -> int | None:
    """The fewest items with which any run can have ``MDE <= margin``: ``ceil(100 * k / margin)``,
    ``k = z_{1-alpha} + z_{power}``.

    The SE for power is never below ``100 / N`` (one changed item in N, ``se_floor``), so a run of N
    items has ``MDE >= k * 100 / N`` even when no item changes. Returns None for a margin of 0 (no
    finite run). Raises ValueError for a negative margin or levels out of range.
    """
    k = z_sum(alpha, power)
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    if margin == 0:
        return None
    return max(1, math.ceil(100.0 * k / margin - 1e-9))


def items_needed(se: float, n: int, margin: float, alpha: float, power: float, *,
                 discordant: int | None = None) -> int | None:
    """Items for which ``MDE <= margin``, extrapolating a run of ``n`` items with standard error
    ``se`` (points): ``max(ceil(n * se^2 * (z_{1-alpha} + z_{power})^2 / margin^2), items_floor)``.

    Args:
        discordant: items whose score changed in that run, when known. With 0 the run measured no
            variance (its ``se`` is the assumed floor ``100 / n``), so nothing can be extrapolated:
            the result is ``items_floor(margin, ...)``, a lower bound that suffices only if (almost) no
            item changes in the larger run either (``items_needed_basis`` names which it is).

    Returns None when it cannot be computed (``se`` NaN, or a margin of 0: no finite run can
    show non-inferiority within a zero margin). Raises ValueError for n < 1, se < 0, margin < 0,
    discordant < 0 or levels out of range.
    """
    k = z_sum(alpha, power)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    if discordant is not None and (isinstance(discordant, bool) or not isinstance(discordant, int) or discordant < 0):
        raise ValueError(f"discordant must be an int >= 0, got {discordant!r}")
    if math.isnan(se) or margin == 0:
        return None
    if se < 0:
        raise ValueError(f"se must be >= 0, got {se!r}")
    floor = items_floor(margin, alpha, power)
    assert floor is not None  # margin > 0
    if discordant == 0:
        return floor
    return max(floor, math.ceil(n * se * se * k * k / (margin * margin) - 1e-9))


def mde_at(se: float, n: int, n_target: int, alpha: float, power: float, *, discordant: int | None = None) -> float:
    """MDE (points) a run of ``n_target`` items would have, extrapolating a run of ``n`` items with standard error
    ``se``: ``(z_{1-alpha} + z_{power}) * max(se * sqrt(n / n_target), 100 / n_target)``; with ``discordant == 0``
    (nothing measured) the floor ``100 / n_target`` alone. The inverse of :func:`items_needed`: the smallest margin
    a run of ``n_target`` items is powered for. NaN for a NaN ``se``; ValueError as :func:`items_needed`.
    """
    k = z_sum(alpha, power)
    for name, value in (("n", n), ("n_target", n_target)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if math.isnan(se):
        return math.nan
    if se < 0:
        raise ValueError(f"se must be >= 0, got {se!r}")
    floor = 100.0 / n_target
    return k * (floor if discordant == 0 else max(se * math.sqrt(n / n_target), floor))


def mde_at_discordance(discordance: float, n: int, alpha: float, power: float) -> float:
    """MDE (points) of a run of ``n`` unclustered 0/1 items of which a share ``discordance`` changes score:
    ``(z_{1-alpha} + z_{power}) * max(100 * sqrt(discordance / n), 100 / n)`` (the gate's null SE, Connor 1987,
    with its floor). For planning before any pilot, with an *assumed* discordance; for graded or clustered metrics it
    is an approximation (their SE is that of the mean difference). Raises ValueError for n < 1, a discordance
    outside [0, 1] or levels out of range."""
    k = z_sum(alpha, power)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"discordance must be in [0, 1], got {discordance!r}")
    return k * max(100.0 * math.sqrt(discordance / n), se_floor(n))


def items_needed_at_discordance(discordance: float, margin: float, alpha: float, power: float) -> int | None:
    """Items for which ``MDE <= margin`` (points) when a share ``discordance`` of unclustered 0/1 items changes
    score: ``max(ceil(10^4 * discordance * (z_{1-alpha} + z_{power})^2 / margin^2), items_floor(margin, ...))``,
    the smallest n with ``mde_at_discordance(discordance, n, ...) <= margin`` (its inverse, up to rounding).

    For planning before any pilot, with an *assumed* discordance (an approximation for graded or clustered metrics,
    like :func:`mde_at_discordance`). Returns None for a margin of 0 (no finite run). Raises ValueError for a
    discordance outside [0, 1], a negative margin or levels out of range.
    """
    k = z_sum(alpha, power)
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"discordance must be in [0, 1], got {discordance!r}")
    floor = items_floor(margin, alpha, power)
    if floor is None:
        return None
    return max(floor, math.ceil(1e4 * discordance * k * k / (margin * margin) - 1e-9))


def items_needed_basis(needed: int | None, discordant: int | None) -> str | None:
    """What an ``items_needed`` result is: ``"floor"`` (no item changed in the pilot: a lower bound from
    the SE floor, not an estimate), ``"discordance"`` (extrapolated from the changes observed) or None
    (no result)."""
    if needed is None:
        return None
    return "floor" if discordant == 0 else "discordance"


def describe_items_needed(needed: int | None, *, n: int, discordant: int | None) -> str:
    """The items-needed figure in words that say what it is, for reasons, reports and ``evalgate plan``.

    ``"about 110 items at this run's discordance (5 of 40 items changed)"`` for an estimate;
    ``"at least 125 items (a floor, not an estimate: no item changed in 40, so there is no discordance
    to extrapolate from; no smaller run is powered for this margin, and 125 suffice only if (almost) no
    item changes)"`` when nothing changed; ``"unknown"`` when there is no figure.
    """
    if needed is None:
        return "unknown"
    if discordant == 0:
        return (f"at least {needed} items (a floor, not an estimate: no item changed in {n}, so there is no "
                f"discordance to extrapolate from; no smaller run is powered for this margin, and {needed} suffice "
                f"only if (almost) no item changes)")
    changed = "" if discordant is None else f" ({discordant} of {n} items changed)"
    return f"about {needed} items at this run's discordance{changed}"


@dataclass(frozen=True)
class HolmResult:
    """Outcome of ``holm_levels``, one entry per hypothesis, in input order.

    Attributes:
        levels: the adjusted one-sided level of each test (<= its own alpha). A rejected
            hypothesis has ``p <= level``; a retained one ``p > level``.
        rejected: whether each null hypothesis is rejected.
        family_alpha: the family-wise error rate controlled (the mean of the alphas).
    """

    levels: tuple[float, ...]
    rejected: tuple[bool, ...]
    family_alpha: float


def holm_levels(p_values: Sequence[float], alphas: Sequence[float]) -> HolmResult:
    """Holm's step-down procedure; weighted (Holm 1979, sec. 3) when the alphas differ.

    Args:
        p_values: one p-value per hypothesis (NaN counts as 1: no evidence).
        alphas: each hypothesis' own level, 0 < alpha < 0.5 (same length).

    With ``L = mean(alphas)`` and R the hypotheses not yet rejected, every ``j`` in R with
    ``p_j <= min(alpha_j, alpha_j * L / sum_{i in R} alpha_i)`` is rejected and R shrinks; this
    repeats until nothing more is rejected. With equal alphas the thresholds are
    ``alpha/k, alpha/(k-1), ..., alpha`` in order of the p-values: classic Holm, equivalent to the
    closed testing of Bonferroni tests, with family-wise error <= alpha. The reported level of a
    hypothesis is its threshold at the end (the rejected ones are rejected at it too, since
    thresholds only grow as R shrinks).

    Raises:
        ValueError: different lengths, no hypotheses, or an alpha out of range.
    """
    if len(p_values) != len(alphas):
        raise ValueError(f"{len(p_values)} p-values but {len(alphas)} alphas")
    if not alphas:
        raise ValueError("no hypotheses")
    a = [_check_level("alpha", x, 0.0, 0.5) for x in alphas]
    p = [1.0 if p_ is None or math.isnan(p_) else float(p_) for p_ in p_values]
    family = a[0] if len(set(a)) == 1 else sum(a) / len(a)
    w = [x / family for x in a]  # all exactly 1.0 when the alphas agree
    remaining = set(range(len(a)))

    def threshold(j: int) -> float:
        return min(a[j], family * w[j] / sum(w[i] for i in remaining))

    while remaining:
        newly = {j for j in remaining if p[j] <= threshold(j)}
        if not newly:
            break
        remaining -= newly
    levels = tuple(threshold(j) if remaining else a[j] for j in range(len(a)))
    return HolmResult(levels=levels, rejected=tuple(j not in remaining for j in range(len(a))),
                      family_alpha=family)
