"""The decision rule: per-task non-inferiority against a margin, then one overall verdict.

Pure: no I/O, no logging. A task BLOCKs when the one-sided (1 - alpha) lower confidence bound
of (candidate - baseline), in points, is below ``-margin`` (a non-inferiority test with the
confidence-interval formulation; see e.g. S. Wellek, *Testing Statistical Hypotheses of
Equivalence and Noninferiority*, 2nd ed., CRC Press, 2010, ch. 2). A bound exactly at
``-margin`` passes. The run is BLOCK if any task blocks, PASS otherwise, and NO-OP when the
candidate's effective engine configuration equals the baseline's (there is no speed-up to
gate). No tasks is an error, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from evalgate.stats import PairedComparison
from evalgate.thresholds import Thresholds, TaskThreshold

__all__ = ["MISSING", "Decision", "TaskDecision", "Verdict", "decide", "effective_diff"]

_MINUS = "\u2212"


class Verdict(str, Enum):
    """Overall or per-task outcome. Per task only PASS and BLOCK occur."""

    PASS = "PASS"
    BLOCK = "BLOCK"
    NO_OP = "NO-OP"


@dataclass(frozen=True)
class TaskDecision:
    """The verdict for one task, with the evidence and the sentence that explains it."""

    suite: str
    task: str
    comparison: PairedComparison
    threshold: TaskThreshold
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Decision:
    """The overall verdict, its reasons (one sentence each) and every task's decision."""

    verdict: Verdict
    reasons: tuple[str, ...]
    tasks: tuple[TaskDecision, ...]


class _Missing:
    """Marks a key present on only one side of ``effective_diff``."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<absent>"

    def __bool__(self) -> bool:
        return False


MISSING: Any = _Missing()


def _num(x: float, decimals: int = 1, *, signed: bool = True) -> str:
    """Format points with a real minus sign; zero has no sign; NaN is 'NaN'."""
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else (f"{_MINUS}inf" if x < 0 else "+inf")
    text = f"{x:.{decimals}f}"
    if float(text) == 0.0:
        return f"{0.0:.{decimals}f}"
    if text.startswith("-"):
        return _MINUS + text[1:]
    return ("+" + text) if signed else text


def _decimals(a: float, b: float) -> int:
    """Fewest decimals (1..15) at which a and b print differently, when they differ."""
    for d in range(1, 16):
        if a == b or f"{a:.{d}f}" != f"{b:.{d}f}":
            return d
    return 15


def _task_decision(
    suite: str, task: str, cmp: PairedComparison, thr: TaskThreshold
) -> TaskDecision:
    if math.isfinite(cmp.alpha) and not math.isclose(cmp.alpha, thr.alpha, rel_tol=1e-9):
        raise ValueError(
            f"{suite}/{task}: comparison was computed at alpha={cmp.alpha:g} but the threshold "
            f"({thr.source}) requires alpha={thr.alpha:g}"
        )
    alpha = cmp.alpha if math.isfinite(cmp.alpha) else thr.alpha
    level = f"{100.0 * (1.0 - 2.0 * alpha):.4g}%"
    interval = f"[{_num(cmp.ci_low)}, {_num(cmp.ci_high)}]"
    evidence = f"(\u0394 {_num(cmp.delta)}, {level} CI {interval}, n={cmp.n})"
    bound = -thr.margin
    d = _decimals(cmp.lower_bound, bound)
    lb, mg = _num(cmp.lower_bound, d), _num(bound, d)
    if math.isnan(cmp.lower_bound):
        verdict = Verdict.BLOCK
        reason = f"lower bound is undefined (NaN), so non-inferiority is not shown {evidence}"
    elif cmp.lower_bound < bound:
        verdict = Verdict.BLOCK
        reason = f"lower bound {lb} pts < {_MINUS}margin {mg} pts {evidence}"
    else:
        verdict = Verdict.PASS
        reason = f"lower bound {lb} pts \u2265 {_MINUS}margin {mg} pts {evidence}"
    return TaskDecision(suite, task, cmp, thr, verdict, reason)


def decide(
    task_results: Sequence[tuple[str, str, PairedComparison]],
    thresholds: Thresholds,
    *,
    baseline_effective: Mapping,
    candidate_effective: Mapping,
) -> Decision:
    """Apply the gate to every task and combine the verdicts.

    Args:
        task_results: ``(suite, task, comparison)`` per task; differences in points.
        thresholds: margins (points) and alpha per task, via ``Thresholds.for_task``.
        baseline_effective, candidate_effective: the engine configuration as vLLM resolved it
            for each arm (nested mappings allowed).

    Rule: task BLOCK iff ``comparison.lower_bound < -margin`` (or the bound is NaN); overall
    BLOCK iff any task blocks, else PASS; overall NO_OP (tasks still decided and returned)
    iff ``baseline_effective == candidate_effective``.

    Raises:
        ValueError: no tasks (no evidence is never a pass), a duplicated (suite, task), or a
            comparison whose alpha differs from its threshold's alpha.
    """
    if not task_results:
        raise ValueError("no task results to gate: no evidence is never a pass")
    seen: set[tuple[str, str]] = set()
    decisions: list[TaskDecision] = []
    for suite, task, cmp in task_results:
        if (suite, task) in seen:
            raise ValueError(f"task {suite}/{task} appears more than once")
        seen.add((suite, task))
        decisions.append(_task_decision(suite, task, cmp, thresholds.for_task(suite, task)))
    tasks = tuple(decisions)

    if dict(baseline_effective) == dict(candidate_effective):
        reason = (
            "the candidate's effective engine config equals the baseline's "
            f"({len(dict(baseline_effective))} keys, none differ): there is no change to gate"
        )
        return Decision(Verdict.NO_OP, (reason,), tasks)
    blocked = [t for t in tasks if t.verdict is Verdict.BLOCK]
    verdict = Verdict.BLOCK if blocked else Verdict.PASS
    reasons = tuple(
        f"{t.suite}/{t.task}: {t.verdict.value}: {t.reason}" for t in (blocked or tasks)
    )
    return Decision(verdict, reasons, tasks)


def _flatten(mapping: Mapping, prefix: str, out: dict[str, Any]) -> None:
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            _flatten(value, dotted + ".", out)
        else:
            out[dotted] = value


def effective_diff(
    baseline_effective: Mapping, candidate_effective: Mapping
) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ: ``{dotted_key: (baseline_value, candidate_value)}``.

    Nested mappings are flattened to dotted keys (``"compilation_config.level"``); a key
    present on one side only has ``MISSING`` (repr ``<absent>``) on the other. Keys are sorted.
    Empty when the configurations are equal.
    """
    base: dict[str, Any] = {}
    cand: dict[str, Any] = {}
    _flatten(baseline_effective, "", base)
    _flatten(candidate_effective, "", cand)
    diff: dict[str, tuple[Any, Any]] = {}
    for key in sorted(base.keys() | cand.keys()):
        b, c = base.get(key, MISSING), cand.get(key, MISSING)
        if b is MISSING or c is MISSING or b != c:
            diff[key] = (b, c)
    return diff
