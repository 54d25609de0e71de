"""What a switch buys: the traffic profile, and the statistics of a measured speed-up. Pure: no I/O, no engine.

Baseline and candidate are measured in interleaved repeats (repeat i of both sides back to back, the order
alternating), so slow drift of the host's load hits both sides of a pair alike. For each concurrency level:

* each side's throughput per repeat (output tok/s), its median and coefficient of variation (sample standard
  deviation / mean);
* the speed-up: ratio of the medians, candidate / baseline;
* its confidence interval: a paired Student t interval on the log throughput ratios of the repeats,
  ``exp(mean(d) +- t_{1-a/2, n-1} * sd(d) / sqrt(n))`` with ``d_i = ln(cand_i / base_i)``. Logs make a ratio a
  difference and throughput errors roughly symmetric (A. J. Fleming and J. J. Wallace, "How not to lie with
  statistics: the correct way to summarize benchmark results", CACM 29(3), 1986; T. Kalibera and R. Jones,
  "Rigorous benchmarking in reasonable time", ISMM 2013, which recommends intervals for ratios of execution
  times); pairing takes the drift shared by a pair out. A bootstrap over 3 repeats has only 10 distinct
  resamples, so the t interval is the honest choice at few repeats.

An interval containing 1 reads "no measurable speed-up", never a win; fewer than 2 repeats give no interval.

Planning, the speed side's minimum detectable effect (``detectable_ratio``, ``repeats_needed``): the power of the
paired t test behind the interval (two-sided, at the interval's level) for a true mean log ratio ``delta``, with the
observed standard deviation ``s`` of the log ratios, is exact under normal log ratios through the noncentral t
distribution: ``P(|T| > t_{(1+level)/2, n-1})``, ``T ~ t'(n-1, delta * sqrt(n) / s)`` (S.-C. Chow, J. Shao, H. Wang
and Y. Lokhnygina, "Sample Size Calculations in Clinical Research", 3rd ed., 2017, section 3.1, one-sample mean,
which is the paired design). ``detectable_ratio`` is ``exp(delta)`` at the wanted power (the thresholds' ``power``);
``repeats_needed`` is the fewest repeats at which the observed mean log ratio (the geometric mean of the paired
ratios, not the ratio of medians) reaches that power if the spread holds: an estimate from 3 or so repeats, not a
promise, like the items a quality task needs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.fmt import count
from evalgate.speed.block import MeasuredSide, SpeedBlock, SpeedLevel, SpeedPrecision, SpeedSide
from evalgate.speed.precision import METHOD as PRECISION_METHOD
from evalgate.speed.precision import pair_cap, precision_note
from evalgate.speed.profile import PLANNING_POWER, TrafficProfile

__all__ = ["CPU_PROFILE", "CUDA_PROFILE", "PLANNING_POWER", "SpeedComparison", "TrafficProfile", "compare_speed",
           "coefficient_of_variation", "describe", "detectable_ratio", "paired_t_power", "repeats_needed",
           "speed_block"]

METHOD = "paired t interval on log throughput ratios (interleaved repeats); point estimate: ratio of medians"
FASTER, SLOWER, UNMEASURABLE = "faster", "slower", "no measurable speed-up"
MAX_REPEATS = 100  # beyond this, repeats_needed reads "more than 100": the effect is small against the spread


# The recipe's profile (512 in / 512 out / 256 streams); on CPU a scaled one that takes about a minute per side
# for the embedded hybrid (measured on a 2-core AMD EPYC: ~18 s per repeat at ~2,700 output tok/s).
CUDA_PROFILE = TrafficProfile(input_len=512, output_len=512, concurrency=(256,))
CPU_PROFILE = TrafficProfile(input_len=256, output_len=256, concurrency=(64,), num_prompts=192)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation / mean (unitless); NaN for fewer than 2 values or a zero mean."""
    if len(values) < 2 or statistics.fmean(values) == 0:
        return math.nan
    return statistics.stdev(values) / statistics.fmean(values)


@dataclass(frozen=True)
class SpeedComparison:
    """The speed-up of candidate over baseline at one concurrency level.

    Attributes:
        concurrency: requests in flight.
        baseline, candidate: output tok/s per repeat, in measurement order.
        ratio: median(candidate) / median(baseline) (> 1: the candidate is faster).
        ci_low, ci_high: the ``level`` interval of the ratio (NaN with fewer than 2 paired repeats).
        cv_baseline, cv_candidate: each side's coefficient of variation.
        verdict: ``faster`` (interval above 1), ``slower`` (below 1) or ``no measurable speed-up``.
        mde_ratio: the minimum detectable speed-up (>= 1; a slowdown of 1 / mde_ratio likewise) at these repeats and
            spread, at the profile's power (``detectable_ratio``); NaN with fewer than 2 pairs or no spread.
        repeats_needed: for ``no measurable speed-up`` only, the repeats that would resolve the observed ratio
            (``repeats_needed``); None when measurable or not estimable, ``MAX_REPEATS + 1`` for more than the cap.
        precision: with ``traffic.precision``, ``precision.precision_record``'s ``{"target",
            "achieved_half_width", "pairs", "stopped", "pairs_needed"}`` (``ci_low`` / ``ci_high`` are then Stein's
            interval); None otherwise.
    """

    concurrency: int
    baseline: tuple[float, ...]
    candidate: tuple[float, ...]
    ratio: float
    ci_low: float
    ci_high: float
    level: float
    cv_baseline: float
    cv_candidate: float
    verdict: str
    total_baseline: tuple[float, ...] = field(default=())
    total_candidate: tuple[float, ...] = field(default=())
    mde_ratio: float = math.nan
    repeats_needed: int | None = None
    precision: dict[str, Any] | None = None


def _log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float] | None:
    """``ln(candidate_i / baseline_i)`` per pair; None for fewer than 2 pairs or a non-positive throughput."""
    if len(baseline) != len(candidate):
        raise ValueError(f"unpaired repeats: {len(baseline)} baseline vs {len(candidate)} candidate")
    if len(baseline) < 2 or min(*baseline, *candidate) <= 0:
        return None
    return [math.log(c / b) for b, c in zip(baseline, candidate)]


def paired_t_power(standardized: float, n: int, level: float) -> float:
    """Power of the two-sided paired t test at ``level`` (module docstring) for a true mean difference of
    ``standardized`` standard deviations with ``n`` pairs (>= 2): exact under normal differences (noncentral t)."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    df, crit = n - 1, float(student_t.ppf(0.5 + level / 2, n - 1))
    shift = abs(standardized) * math.sqrt(n)
    upper, lower = float(nct.sf(crit, df, shift)), float(nct.cdf(-crit, df, shift))
    # scipy's nct.cdf returns NaN for some large shifts where the lower tail has underflowed (~1e-20 at shift 28).
    return upper + (lower if math.isfinite(lower) else 0.0)


def _spread(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[float, float, int] | None:
    """``(mean, sd, n)`` of the paired log ratios; None when there are fewer than 2 pairs or no spread."""
    d = _log_ratios(baseline, candidate)
    sd = statistics.stdev(d) if d is not None else 0.0
    return (statistics.fmean(d), sd, len(d)) if d is not None and sd > 0 else None


def detectable_ratio(baseline: Sequence[float], candidate: Sequence[float], level: float = 0.95,
                     power: float = PLANNING_POWER) -> float:
    """Minimum detectable speed-up at these paired repeats (module docstring): ``exp(delta)`` for the smallest mean
    log ratio ``delta`` the paired t test detects with ``power`` at the observed spread; >= 1, and a slowdown to
    ``1 / result`` is detectable alike.

    Args:
        baseline, candidate: output tok/s per interleaved repeat, paired by index.
        level: the interval's two-sided confidence level; power: the wanted power, in (0, 1).
    Returns:
        The ratio, or NaN for fewer than 2 pairs, a non-positive throughput or no spread (nothing to scale by).
    Raises:
        ValueError: unpaired repeats.
    """
    from scipy.optimize import brentq

    got = _spread(baseline, candidate)
    if got is None:
        return math.nan
    _, sd, n = got
    hi = 1.0
    while paired_t_power(hi, n, level) < power:  # power rises with the effect: bracket, then solve
        hi *= 2
    return math.exp(sd * brentq(lambda e: paired_t_power(e, n, level) - power, 0.0, hi, xtol=1e-10))


def repeats_needed(baseline: Sequence[float], candidate: Sequence[float], level: float = 0.95,
                   power: float = PLANNING_POWER, cap: int = MAX_REPEATS) -> int | None:
    """Fewest paired repeats in all (>= 2) at which the paired t test detects the observed mean log ratio with
    ``power``, assuming the observed spread holds (module docstring; an estimate, not a promise).

    Returns:
        That count; ``cap + 1`` when even ``cap`` repeats would not do (the effect is small against the spread, an
        A/A run's usual reading); None for fewer than 2 pairs, a non-positive throughput or no spread.
    Raises:
        ValueError: unpaired repeats.
    """
    got = _spread(baseline, candidate)
    if got is None:
        return None
    mean, sd, _ = got
    for n in range(2, cap + 1):
        if paired_t_power(mean / sd, n, level) >= power:
            return n
    return cap + 1


def paired_log_interval(baseline: Sequence[float], candidate: Sequence[float], level: float) -> tuple[float, float]:
    """``level`` two-sided t interval of the candidate/baseline ratio from paired repeats (module docstring).

    Returns (NaN, NaN) for fewer than 2 pairs or a non-positive throughput. With identical log ratios the
    interval is that ratio exactly (zero spread).
    """
    from scipy.stats import t as student_t

    d = _log_ratios(baseline, candidate)
    if d is None:
        return math.nan, math.nan
    n = len(d)
    half = float(student_t.ppf(0.5 + level / 2, n - 1)) * statistics.stdev(d) / math.sqrt(n)
    mean = statistics.fmean(d)
    return math.exp(mean - half), math.exp(mean + half)


def compare_speed(concurrency: int, baseline: Sequence[float], candidate: Sequence[float], level: float = 0.95,
                  total_baseline: Sequence[float] = (), total_candidate: Sequence[float] = (),
                  power: float = PLANNING_POWER) -> SpeedComparison:
    """Speed-up of ``candidate`` over ``baseline`` (output tok/s per interleaved repeat; pairs by index).

    Raises:
        ValueError: no measurements, unpaired repeats, or a level outside (0, 1).
    """
    if not baseline or not candidate:
        raise ValueError("no throughput measurements to compare")
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    lo, hi = paired_log_interval(baseline, candidate, level)
    ratio = statistics.median(candidate) / statistics.median(baseline)
    verdict = describe(lo, hi)
    need = repeats_needed(baseline, candidate, level, power) if verdict == UNMEASURABLE else None
    return SpeedComparison(concurrency, tuple(baseline), tuple(candidate), ratio, lo, hi, level,
                           coefficient_of_variation(baseline), coefficient_of_variation(candidate),
                           verdict, tuple(total_baseline), tuple(total_candidate),
                           detectable_ratio(baseline, candidate, level, power), need)


def describe(ci_low: float, ci_high: float) -> str:
    """``faster`` / ``slower`` when the interval excludes 1, else (also undefined) ``no measurable speed-up``."""
    if ci_low > 1.0:
        return FASTER
    if ci_high < 1.0:
        return SLOWER
    return UNMEASURABLE


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def speed_block(levels: Sequence[SpeedComparison], profile: TrafficProfile,
                measurements: Mapping[str, MeasuredSide]) -> SpeedBlock:
    """The ``speed`` block of ``verdict.json``: profile, method, and per concurrency level both sides and the ratio.

    Args:
        levels: one ``SpeedComparison`` per concurrency level (``compare_speed``), in the profile's order; the first
            is the headline (its ``ratio``, ``ci_low``, ``ci_high``, ``verdict`` and ``concurrency`` are repeated at
            the top level; all None without levels).
        profile: the traffic profile measured (recorded whole, as ``TrafficProfile.as_dict`` writes it); with
            ``precision`` the method names Stein's interval too.
        measurements: per side (``baseline``/``candidate``) what it ran on and its raw repeat records
            (``block.MeasuredSide``: device, ISA, versions, effective config, ``runs``), kept as ``sides``.
    Returns:
        A measured :class:`~evalgate.speed.block.SpeedBlock` (every key set, so ``model_dump(exclude_unset=True)``
        writes them all): per level ratio and interval (None where not finite), level, reading, MDE ratio,
        repeats needed, the precision record when there is one, and per side output and total tok/s of each repeat,
        their median and CV (None where undefined).
    Raises:
        statistics.StatisticsError: a level without repeats on a side (``compare_speed`` refuses those first);
        pydantic.ValidationError: a value the block cannot hold (an MDE ratio below 1, fewer than 2 repeats needed).
    """
    sides = {role: MeasuredSide.model_validate(side) for role, side in measurements.items()}
    rows = []
    for s in levels:
        held = {role: _capacity_fields(sides.get(role), s.concurrency) for role in ("baseline", "candidate")}
        rows.append(SpeedLevel(
            concurrency=s.concurrency, ratio=_num(s.ratio), ci_low=_num(s.ci_low), ci_high=_num(s.ci_high),
            level=s.level, verdict=s.verdict, mde_ratio=_num(s.mde_ratio), repeats_needed=s.repeats_needed,
            **({"precision": SpeedPrecision.model_validate(s.precision)} if s.precision is not None else {}),
            baseline=SpeedSide(output_tok_s=list(s.baseline), median=statistics.median(s.baseline),
                               total_tok_s=list(s.total_baseline), cv=_num(s.cv_baseline), **held["baseline"]),
            candidate=SpeedSide(output_tok_s=list(s.candidate), median=statistics.median(s.candidate),
                                total_tok_s=list(s.total_candidate), cv=_num(s.cv_candidate), **held["candidate"])))
    head = rows[0] if rows else None
    method = METHOD if profile.precision is None else f"{METHOD}; {PRECISION_METHOD}"
    return SpeedBlock(status="measured", method=method, profile=profile, levels=rows,
                      ratio=None if head is None else head.ratio, ci_low=None if head is None else head.ci_low,
                      ci_high=None if head is None else head.ci_high, verdict=None if head is None else head.verdict,
                      concurrency=None if head is None else head.concurrency, sides=sides)


def _capacity_fields(side: MeasuredSide | None, concurrency: int) -> dict[str, list[Any]]:
    """``SpeedSide``'s ``streams`` and ``preemptions`` at one level from the side's timed passes (``runs`` at that
    concurrency, in order): each list only when some pass reported it, so a block from an engine that reports
    neither (serve mode, another vLLM) keeps both unset."""
    runs = [r for r in (side.runs if side is not None else []) if isinstance(r, dict)
            and r.get("concurrency") == concurrency]
    out: dict[str, list[Any]] = {}
    streams = [float(r["streams"]) if _count(r.get("streams")) else None for r in runs]
    if any(x is not None for x in streams):  # one entry per repeat, None where the pass had no window
        out["streams"] = streams
    preempted = [int(r["preemptions"]) for r in runs if _count(r.get("preemptions"))]
    if preempted:
        out["preemptions"] = preempted
    return out


def _count(x: Any) -> bool:
    """A recorded count or median (an int or float, not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def capacity_short(held: float, concurrency: int) -> bool:
    """Whether a median of ``held`` streams per step falls short of ``concurrency`` by more than the steps that are
    short for other reasons: a finishing request costs a step at c - 1 under async scheduling, and requests still
    in a chunked prefill get no token. The allowance is max(2, 5 % of the concurrency) streams."""
    return held < concurrency - max(2.0, 0.05 * concurrency)


def capacity_note(row: SpeedLevel) -> str:
    """What a side may not have held at ``row``'s concurrency: ``baseline got tokens to a median of 190 of 256 streams
    per step, 8 preemptions: part of this ratio may be capacity (KV cache / SSM state), not kernel speed``, or "" when
    both sides held the level (median ``streams`` within ``capacity_short``'s allowance, or not measured) and vLLM
    preempted nothing. ``streams`` exists only for refilled passes (``num_prompts`` above the concurrency: a steady
    window); ``preemptions`` for every pass where the engine reports it.

    Why it matters: a switch that shrinks the per-request cache (an FP16 SSM state, an FP8 KV cache) lets a full
    engine run more streams at once; at a concurrency beyond what the baseline holds, its speed-up is mostly that
    capacity, which moves with ``gpu_memory_utilization``, the GPU and the request lengths, unlike a kernel's.
    """
    parts = []
    for role in ("baseline", "candidate"):
        side: SpeedSide = getattr(row, role)
        words = []
        medians = [x for x in side.streams or [] if x is not None]
        held = statistics.median(medians) if medians else None
        if held is not None and capacity_short(held, row.concurrency):
            words.append(f"got tokens to a median of {held:g} of {row.concurrency} streams per step")
        if side.preemptions and sum(side.preemptions):
            n = sum(side.preemptions)
            words.append(count(n, "preemption"))
        if words:
            parts.append(f"{role} {', '.join(words)}")
    if not parts:
        return ""
    return "; ".join(parts) + ": part of this ratio may be capacity (KV cache / SSM state), not kernel speed"


def headline(speed: SpeedBlock | None) -> str:
    """Terminal and JUnit text of the speed block: ``speed (512 in / 512 out, 3 repeats, offline): c=256: ×1.42
    [1.31, 1.55] (95%), faster (6,058 → 8,602 output tok/s)``; a sweep puts each level on its own indented line;
    ``speed: not measured (why)`` for a failed block; "" for None (speed not measured)."""
    if speed is None:
        return ""
    if not speed.measured:
        return f"speed: not measured ({speed.error if 'error' in speed.model_fields_set else 'failed'})"
    p = speed.profile
    parts = []
    for row in speed.levels:
        lo, hi = row.ci_low, row.ci_high
        level = 0.95 if row.level is None else row.level
        ci = f" [{lo:.2f}, {hi:.2f}] ({100 * level:.0f}%)" if lo is not None and hi is not None \
            else " [no interval: < 2 repeats]"
        need = repeats_note(row.repeats_needed)
        prec = precision_note(row.precision)
        held = capacity_note(row)
        parts.append(f"c={row.concurrency}: \u00d7{row.ratio:.2f}{ci}, {row.verdict}{', ' + need if need else ''}"
                     f"{', ' + prec if prec else ''} "
                     f"({row.baseline.median:,.0f} \u2192 {row.candidate.median:,.0f} output tok/s)"
                     f"{'; ' + held if held else ''}")
    head = f"speed ({profile_words(p)}, {repeats_words(p)}, {p.mode}):"
    # A sweep gets one line per level: three levels on one line outgrow any terminal.
    return f"{head} {parts[0]}" if len(parts) == 1 else head + "".join(f"\n  {x}" for x in parts)


def profile_words(p: TrafficProfile) -> str:
    """The traffic in words: ``512 in / 512 out`` for a synthetic profile; for a request log (``requests``) ``40
    logged requests (requests.jsonl), input p50/p90/p99/max 120/340/800/812 tokens, output 64/256/256/256,
    concurrency from-log: typical 3, peak 7`` (counts and lengths only: the log's text never reaches a report)."""
    log = p.requests
    if not isinstance(log, dict):
        spread = f" (lengths \u00b1{100 * float(p.range_ratio):g} %)" if p.range_ratio else ""
        return f"{p.input_len} in / {p.output_len} out{spread}"
    sent = log.get("sent") if isinstance(log.get("sent"), dict) else {}
    name = Path(str(log.get("path", "?"))).name
    text = f"{sent.get('requests', log.get('requests'))} logged requests ({name})"

    def q(d: Any) -> str:
        return "/".join(str(d.get(k, "?")) for k in ("p50", "p90", "p99", "max")) if isinstance(d, dict) else "?"

    if sent:
        text += f", input p50/p90/p99/max {q(sent.get('input_tokens'))} tokens, output {q(sent.get('output_tokens'))}"
    conc = log.get("concurrency")
    if isinstance(conc, dict) and conc.get("source") == "from-log":
        text += f", concurrency from-log: typical {conc.get('typical')}, peak {conc.get('peak')}"
    return text


def repeats_words(p: TrafficProfile, interleaved: bool = False) -> str:
    """The profile's repeats in words: ``3 repeats`` (with ``interleaved``: ``3 interleaved repeats per side``); with
    ``traffic.precision`` ``3 to 10 pairs, target ±2 %`` (``3 to 10 interleaved pairs, ...``): Stein's first stage,
    then up to the cap (``precision.pair_cap``), and the ``max_seconds`` budget when set."""
    n = p.repeats
    if p.precision is None:
        return f"{n} interleaved repeats per side" if interleaved else f"{n} repeats"
    text = (f"{n} to {pair_cap(n, p.max_repeats)} {'interleaved ' if interleaved else ''}pairs, target "
            f"\u00b1{100 * float(p.precision):g} %")
    return text + (f" within {float(p.max_seconds):g} s" if p.max_seconds is not None else "")


def window_words(sides: Mapping[str, MeasuredSide]) -> str:
    """How the timed passes were timed, from the repeat records in ``SpeedBlock.sides`` (``sides[role].runs``):
    ``each pass over its steady-state window (fill and drain excluded)`` when every offline pass had one
    (``worker.throughput.steady_window``), ``each pass whole`` when none had, ``7 of 12 passes over their
    steady-state window, the rest whole`` when some had; "" without repeat records."""
    runs = [r for side in sides.values() for r in side.runs if isinstance(r, dict)]
    if not runs:
        return ""
    windowed = sum(1 for r in runs if isinstance(r.get("window"), dict))
    if windowed == len(runs):
        return "each pass over its steady-state window (fill and drain excluded)"
    if windowed == 0:
        return "each pass whole"
    return f"{windowed} of {len(runs)} passes over their steady-state window, the rest whole"


def repeats_note(need: int | None) -> str:
    """``resolving it needs ≈6 repeats in all`` (``repeats_needed`` of an unresolved level: the repeats at which the
    observed ratio would be told from 1 at the planning power, at this spread), ``resolving it needs > 100 repeats``
    past the cap, or "" when there is nothing to say (resolved, not estimable, or not an integer). "Resolving it"
    keeps it apart from ``precision_note``'s pairs for a half-width target, a different question."""
    if not isinstance(need, int) or need < 2:
        return ""
    return (f"resolving it needs > {MAX_REPEATS} repeats" if need > MAX_REPEATS
            else f"resolving it needs \u2248{need} repeats in all")


def resolve_profile(fields: dict[str, Any] | None, *, cuda: bool, concurrency: Sequence[int] | None = None,
                    repeats: int | None = None, power: float = PLANNING_POWER, precision: float | None = None,
                    max_repeats: int | None = None, max_seconds: float | None = None) -> TrafficProfile:
    """The traffic profile to measure: the platform's default (``CUDA_PROFILE`` / ``CPU_PROFILE``), then the
    thresholds' ``traffic`` fields (validated by ``thresholds``), then the command line's ``--concurrency`` /
    ``--repeats`` / ``--precision`` / ``--max-repeats`` / ``--max-seconds``. A default ``num_prompts`` of the CPU profile is kept only while its concurrency is. ``power``: the
    thresholds' ``power``, for the speed-up's MDE (not a traffic key)."""
    base = CUDA_PROFILE if cuda else CPU_PROFILE
    merged = base.as_dict()
    given = dict(fields or {})
    if "concurrency" in given and "num_prompts" not in given:
        merged["num_prompts"] = None  # a changed concurrency with the default prompt count: one wave per level
    merged.update(given)
    if concurrency:
        merged["concurrency"] = list(concurrency)
        if "num_prompts" not in given:
            merged["num_prompts"] = None
    if repeats is not None:
        merged["repeats"] = repeats
    for key, value in (("precision", precision), ("max_repeats", max_repeats), ("max_seconds", max_seconds)):
        if value is not None:
            merged[key] = value
    merged["concurrency"] = tuple(merged["concurrency"])
    merged["power"] = power
    return TrafficProfile(**merged)


def longest_request(profile: TrafficProfile) -> int:
    """Prompt + output tokens of the profile's longest random request: ``input_len + output_len``, or with
    ``range_ratio`` r the top of vLLM's sampling ranges, ``ceil(input_len * (1 + r)) + ceil(output_len * (1 + r))``
    (``vllm.benchmarks.datasets.utils.get_sampling_params``, the same in vLLM 0.26.0 and 0.32.0).

    Raises:
        ValueError: a profile without ``input_len`` (a request log's lengths are its own)."""
    if profile.input_len is None:
        raise ValueError("a request log's profile has no input_len")
    r = profile.range_ratio or 0.0
    return math.ceil(profile.input_len * (1 + r)) + math.ceil(profile.output_len * (1 + r))


# vLLM's RandomDataset refuses a spread whose shortest prompt, floor((input_len - special tokens) * (1 - r)), is
# below one token (vllm/benchmarks/datasets/datasets.py, RandomDataset.sample, 0.26.0 and 0.32.0); the tokenizer's
# special-token count is not known before an engine starts, so the pre-flight assumes up to this many.
MAX_SPECIAL_TOKENS = 2


def spread_problems(profile: TrafficProfile) -> list[tuple[str, str]]:
    """``(traffic field, message)`` when ``range_ratio`` would make vLLM's ``RandomDataset`` draw prompts shorter
    than one token: ``floor((input_len - MAX_SPECIAL_TOKENS) * (1 - range_ratio)) < 1`` (vLLM's own rule, with the
    tokenizer's special tokens assumed at most ``MAX_SPECIAL_TOKENS``). Empty without a spread or a prompt length."""
    r, n = profile.range_ratio, profile.input_len
    if not r or n is None or math.floor(max(0, n - MAX_SPECIAL_TOKENS) * (1 - r)) >= 1:
        return []
    return [("range_ratio", f"at input_len {n} the shortest prompt vLLM would draw, floor((input_len - special "
                            f"tokens) * (1 - {r!r})), is under one token (vLLM refuses it, counting up to "
                            f"{MAX_SPECIAL_TOKENS} special tokens); lower range_ratio or raise input_len")]


def profile_problems(profile: TrafficProfile, limits: dict[str, int]) -> list[tuple[str, str]]:
    """``(field, message)`` for each way ``profile`` exceeds an engine's limits (``max_model_len`` in tokens,
    ``max_num_seqs``); empty when it fits or a limit is unknown."""
    out = []
    max_len = limits.get("max_model_len")  # a request log's lengths are checked in the worker (engine.replay)
    if max_len is not None and profile.input_len is not None:
        exact, longest = profile.input_len + profile.output_len, longest_request(profile)
        if exact > max_len:
            out.append(("input_len", f"input_len + output_len = {exact} tokens exceeds the engine's max_model_len "
                                     f"{max_len}"))
        elif longest > max_len:  # the spread alone makes it too long: the field to change is range_ratio
            out.append(("range_ratio", f"the longest request at range_ratio {profile.range_ratio!r} = {longest} "
                                       f"tokens (input_len + output_len, each times 1 + range_ratio, rounded up) "
                                       f"exceeds the engine's max_model_len {max_len}"))
    seqs = limits.get("max_num_seqs")
    over = [c for c in profile.concurrency if seqs is not None and c > seqs]
    if over:
        out.append(("concurrency", f"concurrency {over[0]} exceeds the engine's max_num_seqs {seqs} (set "
                                   f"engine_args.max_num_seqs or lower the concurrency)"))
    return out
