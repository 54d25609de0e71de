"""How many interleaved pairs a speed-up needs to be known to a set precision: Stein's two-stage procedure. Pure: no
I/O, no engine.

``traffic.precision`` is the wanted half-width of the speed-up's two-sided interval (at the profile's level, 95 %),
as a share of the ratio: 0.02 asks for "±2 %". Stopping when a running interval first looks narrow enough is not
valid: the stop then depends on the spread the same data show, small-spread runs stop early, and the interval's
coverage falls below its level (``tests/speed/test_precision.py`` measures it). Stein's rule stays exact because the
spread that sets the interval is fixed before the second stage:

1. Measure ``n0`` interleaved pairs (``traffic.repeats``, >= 2). ``d_i = ln(candidate_i / baseline_i)``; ``s0`` is
   the sample standard deviation of those ``n0`` log ratios.
2. With ``h = ln(1 + precision)`` and ``t = t_{(1+level)/2, n0-1}`` (Student t, ``n0 - 1`` degrees of freedom), the
   pairs in all are ``n = max(n0, ceil(t² · s0² / h²))``; measure the ``n - n0`` more, interleaved as before.
3. The interval of the ratio is ``exp(mean(d_1..d_n) ± t · s0 / √n)``: the mean over all ``n`` pairs, the spread
   and the degrees of freedom of the first stage only. For normal log ratios ``(mean - δ) · √n / s0`` is then
   exactly Student t with ``n0 - 1`` degrees of freedom whatever ``n`` the first stage chose (the mean of the
   second stage is independent of ``s0``), so the coverage is the level exactly, and the half-width
   ``t · s0 / √n`` is at most ``h`` once ``n`` pairs are measured.

Source: C. Stein, "A two-sample test for a linear hypothesis whose power is independent of the variance", Annals of
Mathematical Statistics 16(3), 243-258, 1945 (the two-stage procedure and its exact t distribution); the paired
design reduces it to one sample of differences. ``h = ln(1 + precision)`` puts the interval's upper end within
``precision`` of the point (``exp(mean + h) = exp(mean) · (1 + precision)``; its lower end is closer still).

When the pairs are capped (``traffic.max_repeats`` pairs in all, or the ``traffic.max_seconds`` budget) the
interval keeps Stein's form with the ``n`` measured (still exact: ``n`` depends on ``s0`` and the budget only), but
it is wider than asked, and the level's record says so: ``stopped`` ``max_repeats`` / ``max_seconds`` and
``pairs_needed``, the ``n`` of step 2.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_MAX_REPEATS", "MET", "STOPPED", "SteinPlan", "log_ratios", "pair_cap", "precision_note",
           "precision_problems", "precision_record", "stein_interval", "stein_plan"]

DEFAULT_MAX_REPEATS = 10  # pairs in all when traffic.max_repeats is unset (at least traffic.repeats)
MET, BY_REPEATS, BY_SECONDS = "met", "max_repeats", "max_seconds"
STOPPED = (MET, BY_REPEATS, BY_SECONDS)
METHOD = ("with traffic.precision: Stein's two-stage interval (C. Stein 1945): "
          "exp(mean(d) +- t_{1-a/2, n0-1} * s0 / sqrt(n)), s0 the first n0 pairs' standard deviation")


def log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """``ln(candidate_i / baseline_i)`` per interleaved pair (throughputs in output tok/s, paired by index).

    Raises:
        ValueError: unpaired lists or a throughput that is not a finite number > 0.
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"unpaired repeats: {len(baseline)} baseline vs {len(candidate)} candidate")
    for x in (*baseline, *candidate):
        if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
            raise ValueError(f"throughput must be a finite number > 0, got {x!r}")
    return [math.log(c / b) for b, c in zip(baseline, candidate)]


@dataclass(frozen=True)
class SteinPlan:
    """The second stage Stein's rule asks for after the first ``n0`` pairs (module docstring).

    Attributes:
        n0: first-stage pairs (>= 2).
        sd: ``s0``, the sample standard deviation of their log ratios (natural log units; >= 0).
        t: ``t_{(1+level)/2, n0-1}``.
        h: the target half-width on the log scale, ``ln(1 + precision)``.
        level: the interval's two-sided level.
        pairs_needed: ``max(n0, ceil(t² · s0² / h²))``, the pairs in all that meet the target.
    """

    n0: int
    sd: float
    t: float
    h: float
    level: float
    pairs_needed: int

    def half_width(self, n: int) -> float:
        """The interval's half-width on the log scale with ``n`` pairs in all: ``t · s0 / √n``."""
        return self.t * self.sd / math.sqrt(n)


def stein_plan(baseline: Sequence[float], candidate: Sequence[float], precision: float,
               level: float = 0.95) -> SteinPlan:
    """Stein's plan from the first-stage pairs: ``pairs_needed = max(n0, ceil(t_{(1+level)/2, n0-1}² · s0² /
    ln(1 + precision)²))`` (module docstring).

    Args:
        baseline, candidate: the first stage's output tok/s per interleaved pair, paired by index (>= 2 pairs).
        precision: the target half-width as a share of the ratio, 0 < precision < 1 (0.02 = ±2 %).
        level: the interval's two-sided confidence level, in (0, 1).
    Returns:
        The plan (``pairs_needed`` is ``n0`` when the first stage showed no spread).
    Raises:
        ValueError: fewer than 2 pairs, unpaired lists, a non-positive throughput, or precision / level out of range.
    """
    from scipy.stats import t as student_t

    if not 0 < precision < 1:
        raise ValueError(f"precision must be in (0, 1), got {precision}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    d = log_ratios(baseline, candidate)
    if len(d) < 2:
        raise ValueError(f"Stein's first stage needs >= 2 pairs, got {len(d)}")
    n0, sd = len(d), statistics.stdev(d)
    t = float(student_t.ppf(0.5 + level / 2, n0 - 1))
    h = math.log1p(precision)
    # The relative nudge keeps a product that is an integer in exact arithmetic (7.000000000000001) from asking for
    # one pair more than the formula does.
    need = math.ceil((t * sd / h) ** 2 * (1 - 1e-12))
    return SteinPlan(n0=n0, sd=sd, t=t, h=h, level=level, pairs_needed=max(n0, need))


def stein_interval(baseline: Sequence[float], candidate: Sequence[float], plan: SteinPlan) -> tuple[float, float]:
    """The speed-up's interval after Stein's second stage: ``exp(mean(d_1..d_n) ± t · s0 / √n)`` over all ``n``
    measured pairs (the first stage's ones first), ``s0`` and ``t`` from ``plan`` (module docstring).

    Returns:
        ``(low, high)`` of candidate / baseline (ratio; > 1 = the candidate is faster).
    Raises:
        ValueError: fewer pairs than the first stage, unpaired lists or a non-positive throughput.
    """
    d = log_ratios(baseline, candidate)
    if len(d) < plan.n0:
        raise ValueError(f"{len(d)} pairs, fewer than the first stage's {plan.n0}")
    mean, half = statistics.fmean(d), plan.half_width(len(d))
    return math.exp(mean - half), math.exp(mean + half)


def pair_cap(repeats: int, max_repeats: int | None) -> int:
    """Pairs in all at most: ``max_repeats``, or when unset ``max(DEFAULT_MAX_REPEATS, repeats)``."""
    return max_repeats if max_repeats is not None else max(DEFAULT_MAX_REPEATS, repeats)


def precision_record(target: float, plan: SteinPlan, pairs: int, stopped: str,
                     pair_seconds: float | None = None) -> dict[str, Any]:
    """The ``precision`` record of a speed level: ``{"target", "achieved_half_width", "pairs", "stopped",
    "pairs_needed"}``; ``achieved_half_width`` is ``exp(t · s0 / √pairs) - 1`` (the interval's upper half as a share
    of the ratio, comparable with ``target``). ``pair_seconds`` (mean wall-clock seconds of one interleaved pair at
    this level, both passes and any sleep/wake between them) is kept as ``"pair_seconds"`` when given: what each
    further pair would cost.

    Raises:
        ValueError: ``stopped`` not one of ``STOPPED``, ``pairs`` below the first stage, or ``pair_seconds`` not a
            finite number > 0.
    """
    if stopped not in STOPPED:
        raise ValueError(f"stopped must be one of {STOPPED}, got {stopped!r}")
    if pairs < plan.n0:
        raise ValueError(f"{pairs} pairs, fewer than the first stage's {plan.n0}")
    if pair_seconds is not None and not (0 < pair_seconds < math.inf):
        raise ValueError(f"pair_seconds must be a finite number of seconds > 0, got {pair_seconds}")
    out = {"target": target, "achieved_half_width": math.expm1(plan.half_width(pairs)), "pairs": pairs,
           "stopped": stopped, "pairs_needed": plan.pairs_needed}
    return out if pair_seconds is None else {**out, "pair_seconds": pair_seconds}


def _pct(share: float) -> str:
    """``±1.8 %`` / ``±2 %``: one decimal, a trailing ``.0`` dropped."""
    text = f"{100 * share:.1f}"
    return f"\u00b1{text[:-2] if text.endswith('.0') else text} %"


def _duration(seconds: float) -> str:
    """``0.04 s`` / ``4.5 s`` below 10 s (two significant digits), ``40 s`` below two minutes, ``11 min`` below two hours, ``5 h`` below two days, else
    ``12 days`` (rounded)."""
    for limit, unit, size, fmt in ((10, "s", 1, ".2g"), (120, "s", 1, ".0f"), (7200, "min", 60, ".0f"),
                                   (172800, "h", 3600, ".0f")):
        if seconds < limit:
            return f"{seconds / size:{fmt}} {unit}"
    return f"{seconds / 86400:,.0f} days"


def precision_note(record: Any) -> str:
    """A level's precision in words: ``±1.8 % (target ±2 %, 7 pairs)`` when met, ``target ±2 % not met: ±3.4 % after
    10 pairs (max_repeats); ≈24 pairs needed for ±2 %`` when capped, followed by what the rest would cost when the
    record has ``pair_seconds``: `` (14 more, ≈11 min at 48 s a pair)``; "" for no (or a malformed) record."""
    if hasattr(record, "model_dump"):
        record = record.model_dump()
    if not isinstance(record, dict):
        return ""
    try:
        target, got = float(record["target"]), float(record["achieved_half_width"])
        pairs, stopped, need = int(record["pairs"]), str(record["stopped"]), int(record["pairs_needed"])
    except (KeyError, TypeError, ValueError):
        return ""
    if stopped == MET:
        return f"{_pct(got)} (target {_pct(target)}, {pairs} pairs)"
    text = (f"target {_pct(target)} not met: {_pct(got)} after {pairs} pairs ({stopped}); \u2248{need:,} pairs "
            f"needed for {_pct(target)}")
    secs, more = record.get("pair_seconds"), need - pairs
    if isinstance(secs, (int, float)) and not isinstance(secs, bool) and 0 < secs < math.inf and more > 0:
        text += f" ({more:,} more, \u2248{_duration(more * secs)} at {_duration(secs)} a pair)"
    return text


def precision_problems(repeats: int, precision: float | None, max_repeats: int | None,
                       max_seconds: float | None) -> list[tuple[str, str]]:
    """``(traffic field, message)`` for each way the merged profile's precision keys contradict each other (each key's
    own range is the thresholds schema's and the command line's): a first stage of fewer than 2 pairs (no spread to
    plan with), ``max_repeats`` below ``repeats``, or ``max_repeats`` / ``max_seconds`` without ``precision`` (they
    bound Stein's second stage only). Empty when they fit."""
    out = []
    if precision is None:
        for key, value in (("max_repeats", max_repeats), ("max_seconds", max_seconds)):
            if value is not None:
                out.append((key, f"bounds the pairs added for traffic.precision and applies only with it; set "
                                 f"precision or remove {key}"))
        return out
    if repeats < 2:
        out.append(("repeats", f"must be >= 2 with precision (Stein's first stage needs a spread), got {repeats}"))
    if max_repeats is not None and max_repeats < repeats:
        out.append(("max_repeats", f"must be >= repeats ({repeats}), the first stage's pairs, got {max_repeats}"))
    return out
