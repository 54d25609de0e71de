"""Rules that BLOCK a candidate whatever its accuracy says (pure; no I/O).

Applied after :func:`evalgate.gate.decide`, by :func:`overrule`, in this order of the reasons:

1. output health, per task (:func:`health_failures`): a NaN or +inf log-prob anywhere in the candidate's output;
   for a config declared lossless, any item that newly degenerates (a run of one repeated unit); for any config a
   degenerate, empty or truncated share that rose significantly: one-sided exact McNemar p at most the
   Bonferroni level :func:`health_alpha` (alpha / (indicators x tasks), so the run's false-BLOCK rate from
   health shifts stays at most alpha however many tasks run; C. E. Bonferroni 1936, as in O. J. Dunn,
   "Multiple comparisons among means", JASA 56(293), 1961, 52-64). A rise that is not significant is a warning;
2. speculative-decoding floors (:func:`spec_decode_floor_failures`): acceptance rate and mean acceptance length;
3. speed floors (:func:`speed_floor_failures`): ``min_speedup`` for a lossy candidate, ``max_slowdown`` for a
   lossless one;
4. latency service-level objectives (:func:`slo_failures`, serve mode): a ceiling on a latency percentile that the
   candidate exceeds at some measured concurrency level, or an objective set for a run whose speed was not
   measured at all (closed: it cannot be checked).

A NO-OP stays NO-OP (nothing changed, nothing to fail).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from evalgate.gate.accuracy import Decision, Verdict
from evalgate.speed.block import SpeedBlock, SpeedLevel

__all__ = ["escalate", "health_alpha", "health_failures", "overrule", "spec_decode_floor_failures",
           "slo_failures", "speed_floor_failures"]


def health_alpha(task_alphas: Sequence[float], n_tasks: int, n_indicators: int = 3) -> float:
    """The per-test level of the output-health tests: ``min(task_alphas) / (n_indicators * n_tasks)`` (Bonferroni;
    ``task_alphas`` empty: 0.05; ``n_tasks`` below 1 counts as 1)."""
    return min(task_alphas or [0.05]) / (n_indicators * max(1, n_tasks))


def health_failures(*, decode_nonfinite: int, prefill_nonfinite: int, shifts: Sequence[Any],
                    shares: Mapping[str, tuple[float, float]], lossless: bool,
                    alpha: float) -> tuple[list[str], list[str]]:
    """``(failures, warnings)`` of one task's output health (rule 1 of the module docstring).

    Args:
        decode_nonfinite, prefill_nonfinite: items whose candidate recorded a NaN/+inf log-prob while decoding and
            under teacher-forced prefill scoring (``evidence.decode_summary`` / the task's ``logit`` block).
        shifts: ``evidence.HealthShift`` per indicator: ``kind``, ``worse``, ``better``, one-sided McNemar ``p``.
        shares: per ``kind``, the (baseline, candidate) share of unhealthy items (0..1).
        lossless: the candidate is declared lossless (a new degenerate item always fails).
        alpha: the per-test level (:func:`health_alpha`).
    """
    failures, warnings = [], []
    if decode_nonfinite:
        failures.append(f"{decode_nonfinite} item(s) with NaN/inf log-probs while the candidate decoded")
    if prefill_nonfinite:
        failures.append(f"{prefill_nonfinite} item(s) with NaN/inf log-probs under the candidate engine")
    for sh in shifts:
        if not sh.worse:
            continue
        before, after = shares[sh.kind]
        what = (f"{sh.kind} outputs: {100 * before:.0f}% baseline, {100 * after:.0f}% candidate ({sh.worse} item(s) "
                f"newly {sh.kind}, {sh.better} recovered; one-sided McNemar p={sh.p:.2g}")
        if lossless and sh.kind == "degenerate":
            failures.append(f"{what}; a lossless switch must never make an output degenerate)")
        elif sh.p <= alpha:
            failures.append(f"{what} <= {alpha:.2g})")
        else:
            warnings.append(f"{what} > {alpha:.2g}: not significant, not gated)")
    return failures, warnings


def spec_decode_floor_failures(acceptance_rate: float | None, mean_acceptance_length: float | None, *,
                               min_acceptance_rate: float | None, min_mean_acceptance_length: float | None,
                               speculative: bool) -> list[str]:
    """Sentences for each speculative-decoding floor the candidate misses (empty when none is missed).

    Args:
        acceptance_rate: accepted / draft tokens (0..1) over the run; None when no counters were recorded.
        mean_acceptance_length: 1 + accepted / drafts; None when no counters were recorded.
        min_acceptance_rate, min_mean_acceptance_length: the floors (``ConfigPolicy.spec_floors``); None = none.
        speculative: the candidate's effective engine config runs speculative decoding.
    A floor set for a candidate that ran speculative decoding without any recorded counters fails (closed): the
    claim cannot be checked. A floor on a candidate without speculative decoding does not apply.
    """
    if not speculative or (min_acceptance_rate is None and min_mean_acceptance_length is None):
        return []
    if acceptance_rate is None or mean_acceptance_length is None or math.isnan(acceptance_rate):
        return ["speculative decoding ran but recorded no drafts, so its acceptance floor cannot be checked"]
    out = []
    if min_acceptance_rate is not None and not acceptance_rate >= min_acceptance_rate:
        out.append(f"acceptance rate {100 * acceptance_rate:.1f}% < floor {100 * min_acceptance_rate:.1f}%")
    if min_mean_acceptance_length is not None and not mean_acceptance_length >= min_mean_acceptance_length:
        out.append(f"mean acceptance length {mean_acceptance_length:.2f} < floor {min_mean_acceptance_length:.2f}")
    return out


def escalate(decision: Decision, failures: Mapping[str, Sequence[str]]) -> Decision:
    """Apply evidence that always fails a candidate, whatever its accuracy says.

    Args:
        decision: from :func:`decide`.
        failures: task name -> sentences (e.g. NaN/inf log-probs, degenerate repeated-token outputs; see
            ``evidence.task_evidence``). Empty lists mean no failure.
    Returns:
        ``decision`` unchanged when there are no failures or it is NO-OP (nothing changed, nothing to fail);
        otherwise the same decision with verdict BLOCK and the failures first among the reasons.
    """
    found = [f"{task}: {msg}" for task, msgs in failures.items() for msg in msgs]
    if not found or decision.verdict is Verdict.NO_OP:
        return decision
    return dataclasses.replace(decision, verdict=Verdict.BLOCK, reasons=(*found, *decision.reasons))


def speed_floor_failures(levels: Sequence[SpeedLevel], *, expect: str, min_speedup: float | None,
                         max_slowdown: float | None) -> list[str]:
    """Sentences for each speed threshold the candidate misses (empty when none is set or none is missed).

    Args:
        levels: the ``speed`` block's rows (``SpeedBlock.levels``, from ``speed.speed_block``): ``concurrency``,
            ``ratio``, ``ci_low``, ``ci_high`` (candidate / baseline throughput; None where undefined).
        expect: the candidate's ``expect``. ``min_speedup`` applies to a lossy candidate: each level's interval must
            lie at or above it (the speed it costs quality for must be shown). ``max_slowdown`` applies to a lossless
            one: each level's interval must reach ``1 - max_slowdown`` (BLOCK only when a slowdown beyond it is shown).
    An undefined interval (fewer than 2 repeats) fails a set threshold (closed): the claim cannot be checked.
    """
    out = []
    for row in levels:
        c, lo, hi, ratio = row.concurrency, row.ci_low, row.ci_high, row.ratio
        shown = f"\u00d7{ratio:.2f}" if isinstance(ratio, (int, float)) else "n/a"
        interval = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "no interval (< 2 repeats)"
        if expect == "lossy" and min_speedup is not None and not (lo is not None and lo >= min_speedup):
            out.append(f"costs quality, buys no measurable speed: speed-up {shown} {interval} at concurrency {c} "
                       f"does not reach min_speedup \u00d7{min_speedup:g}")
        if expect == "lossless" and max_slowdown is not None and not (hi is not None and hi >= 1 - max_slowdown):
            out.append(f"speed regression: speed-up {shown} {interval} at concurrency {c} is slower than max_slowdown "
                       f"{100 * max_slowdown:g}% allows (\u00d7{1 - max_slowdown:g})")
    return out


SLO_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}


def slo_failures(levels: Sequence[SpeedLevel], slos: Mapping[str, float]) -> list[str]:
    """Sentences for each latency objective the candidate misses (rule 4; empty when none is set or none missed).

    Args:
        levels: the serve-mode ``speed`` block's rows (``SpeedBlock.levels``, from ``servespeed.serve_block``):
            ``concurrency`` and ``latency`` (field, e.g. ``ttft_p99_ms`` -> ``block.SpeedLatency`` with
            ``baseline_median`` and ``candidate_median``: per side the median over the level's repeats of each
            pass's percentile, ms; None offline).
        slos: latency field -> ceiling in ms (``thresholds.LatencySlos.slos``), e.g. ``{"ttft_p99_ms": 500.0}``.
    The candidate misses a ceiling when its median exceeds it (the baseline's value is named beside it: an objective
    the baseline misses too is still missed: the config cannot serve this load within it). A level without that
    latency measured fails the objective (closed): it cannot be checked.
    """
    out = []
    for row in levels:
        c = row.concurrency
        latency = row.latency or {}
        for fld, ceiling in slos.items():
            metric, pct = fld.split("_")[:2]
            words = f"{SLO_WORDS.get(metric, metric)} {pct}"
            entry = latency.get(fld)
            cand = None if entry is None else entry.candidate_median
            base = None if entry is None else entry.baseline_median
            if not isinstance(cand, (int, float)) or not math.isfinite(cand):
                out.append(f"latency SLO: {words} at concurrency {c} was not measured, so max_{fld} {ceiling:g} ms "
                           f"cannot be checked")
            elif cand > ceiling:
                also = (f"; the baseline misses it too ({base:,.1f} ms)" if isinstance(base, (int, float))
                        and base > ceiling else f"; baseline {base:,.1f} ms" if isinstance(base, (int, float)) else "")
                out.append(f"latency SLO: {words} {cand:,.1f} ms at concurrency {c} exceeds max_{fld} "
                           f"{ceiling:g} ms{also}")
    return out


def overrule(decision: Decision, task_failures: Mapping[str, Sequence[str]], *, expect: str,
             spec: Any = None, speculative: bool = False, spec_floors: Any = None,
             speed: SpeedBlock | None = None, speed_floors: Any = None) -> Decision:
    """The final decision: ``decision`` with every rule of the module docstring applied (:func:`escalate`).

    Args:
        decision: from :func:`evalgate.gate.decide`.
        task_failures: task name -> its :func:`health_failures` failures.
        expect: the candidate's ``expect`` (``"lossy"`` or ``"lossless"``).
        spec: the candidate's ``evidence.SpecDecodeHealth`` (None: no counters recorded).
        speculative: the candidate's effective engine config runs speculative decoding.
        spec_floors: ``thresholds.SpecDecodeFloors`` (None: no floors).
        speed: the ``speed`` block (``speed.block.SpeedBlock``; only a measured one is checked; None: speed was
            not measured); speed_floors: ``thresholds.SpeedFloors`` (speed floors and latency objectives).
    Returns:
        The decision, BLOCK with the failures first among its reasons when any rule fails (NO-OP stays NO-OP).
    """
    failures = {task: list(msgs) for task, msgs in task_failures.items()}
    if spec_floors is not None:
        missed = spec_decode_floor_failures(
            None if spec is None else spec.acceptance_rate, None if spec is None else spec.mean_acceptance_length,
            min_acceptance_rate=spec_floors.min_acceptance_rate,
            min_mean_acceptance_length=spec_floors.min_mean_acceptance_length, speculative=speculative)
        if missed:
            failures["speculative decoding"] = missed
    if speed is not None and speed.measured and speed_floors is not None:
        slow = speed_floor_failures(speed.levels, expect=expect, min_speedup=speed_floors.min_speedup,
                                    max_slowdown=speed_floors.max_slowdown)
        if slow:
            failures["speed"] = slow
        missed = slo_failures(speed.levels, speed_floors.slos())
        if missed:
            failures["latency"] = missed
    elif speed is None and speed_floors is not None and speed_floors.slos():
        # An objective nobody measured (--no-speed, no traffic section, a compare of stored runs) is not met.
        failures["latency"] = [f"latency SLO: {', '.join(f'max_{k}' for k in speed_floors.slos())} set, but no "
                               f"serve-mode speed was measured, so the objective cannot be checked"]
    return escalate(decision, failures)
