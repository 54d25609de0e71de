"""The decision rule: per-task non-inferiority with power and a Holm-corrected loss test, then one
overall verdict.

Pure: no I/O, no logging. For each task, with margin m (points), its one-sided level alpha and the
configured power:

* ``LB`` / ``UB``: the ends of the task's two-sided (1 - 2 alpha) interval of delta = candidate -
  baseline (``PairedComparison.ci_low``/``ci_high``), so ``LB`` is a one-sided (1 - alpha) lower
  confidence bound (non-inferiority in the confidence-interval form; S. Wellek, *Testing
  Statistical Hypotheses of Equivalence and Noninferiority*, 2nd ed., CRC, 2010, ch. 2);
* ``MDE = (z_{1-alpha} + z_power) * SE`` (``evalgate.power``): the run is *powered* when
  ``MDE <= m``, i.e. a truly equal candidate passes with probability >= power;
* the *loss test*: H0 "delta >= 0" against "the candidate is worse", one-sided p-value
  ``PairedComparison.p_loss`` (McNemar exact for 0/1 scores, else bootstrap and t), rejected at
  the task's level after Holm's step-down correction across all tasks of the run.

Task verdicts, in this order:

1. BLOCK if the config is declared ``expect: lossless`` and fewer than ``min_identical_share`` of
   the items have agreeing greedy outputs (byte-identical, or first differing at a near-tie: a token the
   baseline itself ranked within ``near_tie_logprob`` nats of its own), or the mean decode-time KL along
   the common prefixes exceeds ``max_kl_mean`` (the differing items are listed).
2. BLOCK if ``LB`` is NaN (fail closed).
3. PASS if ``LB >= -m`` and the run is powered (non-inferiority shown by a run able to show it).
4. BLOCK if ``LB < -m`` and the loss test rejects: a loss is shown and is not shown to stay
   within the margin.
5. INCONCLUSIVE otherwise: under-powered (``MDE > m``; never a silent pass), or ``LB < -m`` while
   no loss is shown (the interval straddles both 0 and -m).

Why Holm on the loss test and not on LB: a PASS needs *every* task to pass, an intersection-union
test whose false-PASS rate is at most alpha without any correction (R. L. Berger, "Multiparameter
hypothesis testing and acceptance sampling", Technometrics 24(4), 1982, 295-300). A BLOCK needs
only *one* task, so the false-BLOCK rate grows with the number of tasks unless corrected: Holm
keeps the chance that a candidate that truly loses nothing is BLOCKED on any task at most alpha,
however many tasks run. The intervals, LB and MDE stay at the task's own alpha.

Overall: NO-OP if the effective engine configs are equal (tasks still decided) > BLOCK if any
task blocks > INCONCLUSIVE if any task is inconclusive (reported as BLOCK when thresholds say
``on_inconclusive: block``) > PASS. No tasks is an error, never a pass.
"""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from evalgate.power import describe_items_needed, holm_levels, items_needed, mde
from evalgate.stats import PairedComparison
from evalgate.thresholds import TaskThreshold, Thresholds

__all__ = ["MISSING", "Decision", "OutputAgreement", "TaskDecision", "Verdict", "decide", "effective_diff",
           "escalate", "spec_decode_floor_failures", "speed_floor_failures"]

_MINUS = "\u2212"
_LIST_DIFFERING = 10

RULE_NON_INFERIOR = "non-inferiority: LB >= -margin and MDE <= margin"
RULE_LOSS = "loss shown: LB < -margin and loss test significant (Holm)"
RULE_UNDERPOWERED = "power: MDE > margin"
RULE_UNDECIDED = "undecided: LB < -margin, loss test not significant (Holm)"
RULE_LOSSLESS = "lossless: agreeing greedy outputs < min_identical_share"
RULE_LOSSLESS_KL = "lossless: decode-time KL > max_kl_mean"
RULE_UNDEFINED = "undefined lower bound (fail closed)"


class Verdict(str, Enum):
    """Overall or per-task outcome. Per task only PASS, BLOCK and INCONCLUSIVE occur."""

    PASS = "PASS"
    BLOCK = "BLOCK"
    NO_OP = "NO-OP"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class OutputAgreement:
    """How far a task's greedy outputs agree on both sides (the evidence a lossless config is gated on).

    Attributes:
        identical: items with byte-identical outputs.
        n: items compared.
        differing: ``item_id`` of every item whose outputs differ, ascending.
        tie_flips: the differing items whose first differing token was a near-tie under the baseline's
            decode-time log-probs (``evidence.DecodeDivergence.tie_gap`` <= the tolerance): numerics, not a
            changed model. They count as agreeing.
        kl_mean: token-weighted mean decode-time KL(baseline || candidate) along the common prefixes, nats;
            None when not measured (then only identity is gated).
    """

    identical: int
    n: int
    differing: tuple[int, ...] = ()
    tie_flips: tuple[int, ...] = ()
    kl_mean: float | None = None

    @property
    def agreeing(self) -> int:
        """Items that agree: identical, or differing only after a near-tie."""
        return self.identical + len(self.tie_flips)

    @property
    def share(self) -> float:
        """``agreeing / n`` (0..1); NaN for no items."""
        return self.agreeing / self.n if self.n else math.nan


@dataclass(frozen=True)
class TaskDecision:
    """The verdict for one task, with the evidence and the sentence that explains it.

    Attributes beyond the obvious: ``mde`` (points, at the threshold's alpha and ``power``),
    ``rule`` (which rule produced the verdict, one of the ``RULE_*`` strings), ``loss_alpha``
    (the Holm-adjusted level of the loss test), ``loss_shown`` (the loss test rejected),
    ``items_needed`` (items for MDE <= margin at this run's discordance, None if unknown) and
    ``lossless`` (the output agreement when the config is declared lossless, else None) with
    ``required_share``.
    """

    suite: str
    task: str
    comparison: PairedComparison
    threshold: TaskThreshold
    verdict: Verdict
    reason: str
    mde: float = math.nan
    power: float = math.nan
    rule: str = ""
    loss_alpha: float = math.nan
    loss_shown: bool = False
    items_needed: int | None = None
    lossless: OutputAgreement | None = None
    required_share: float = math.nan


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


def _p(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:.2g}" if x >= 0.001 else f"{x:.1e}"


def _task_decision(suite: str, task: str, cmp: PairedComparison, thr: TaskThreshold, *, power: float,
                   loss_alpha: float, loss_shown: bool, agreement: OutputAgreement | None,
                   required_share: float, max_kl_mean: float = math.inf) -> TaskDecision:
    if math.isfinite(cmp.alpha) and not math.isclose(cmp.alpha, thr.alpha, rel_tol=1e-9):
        raise ValueError(
            f"{suite}/{task}: comparison was computed at alpha={cmp.alpha:g} but the threshold "
            f"({thr.source}) requires alpha={thr.alpha:g}"
        )
    alpha = cmp.alpha if math.isfinite(cmp.alpha) else thr.alpha
    m = thr.margin
    task_mde = mde(cmp.se_power, alpha, power)
    changed = cmp.n_regressed + cmp.n_improved
    needed = items_needed(cmp.se_power, cmp.n, m, alpha, power, discordant=changed) if cmp.n >= 1 else None
    level = f"{100.0 * (1.0 - 2.0 * alpha):.4g}%"
    interval = f"[{_num(cmp.ci_low)}, {_num(cmp.ci_high)}]"
    evidence = (f"(\u0394 {_num(cmp.delta)}, {level} CI {interval}, n={cmp.n}, "
                f"{cmp.n_regressed + cmp.n_improved} scores changed, MDE {_num(task_mde, signed=False)})")
    if cmp.n and cmp.baseline_mean == 0 and cmp.candidate_mean == 0:
        # A task the baseline fails on every item cannot show a loss: its PASS/MDE say nothing about the change.
        evidence += "; note: both sides score 0 on every item, so this task cannot show a loss"
    d = _decimals(cmp.lower_bound, -m)
    lb, mg = _num(cmp.lower_bound, d), _num(-m, d)
    relation = "\u2264" if loss_shown else ">"
    loss = (f"one-sided loss p={_p(cmp.p_loss)} {relation} {loss_alpha:.3g} after Holm"
            + (f", {cmp.loss_test}" if cmp.loss_test else ""))
    powered = math.isfinite(task_mde) and task_mde <= m
    kl_over = agreement is not None and agreement.kl_mean is not None and not agreement.kl_mean <= max_kl_mean
    if agreement is not None and (not agreement.share >= required_share or kl_over):
        flips = set(agreement.tie_flips)
        real = [i for i in agreement.differing if i not in flips]
        shown = ", ".join(str(i) for i in real[:_LIST_DIFFERING])
        more = len(real) - _LIST_DIFFERING
        shown += f" and {more} more" if more > 0 else ""
        ties = f", {len(flips)} more differ only after a near-tie" if flips else ""
        kl = "" if agreement.kl_mean is None else f"; decode-time KL {agreement.kl_mean:.2g} nats/token"
        if not agreement.share >= required_share:
            verdict, rule = Verdict.BLOCK, RULE_LOSSLESS
            reason = (f"declared lossless, but greedy outputs differ on {len(real)} of {agreement.n} items{ties} "
                      f"({100 * agreement.share:.1f}% agree < {100 * required_share:.1f}% required{kl}); "
                      f"differing items: {shown or 'none listed'} {evidence}")
        else:
            verdict, rule = Verdict.BLOCK, RULE_LOSSLESS_KL
            reason = (f"declared lossless, but the candidate's next-token distributions moved: decode-time KL "
                      f"{agreement.kl_mean:.2g} nats/token > {max_kl_mean:g} allowed, along the tokens both "
                      f"generated alike ({100 * agreement.share:.1f}% of outputs agree) {evidence}")
    elif math.isnan(cmp.lower_bound):
        verdict, rule = Verdict.BLOCK, RULE_UNDEFINED
        reason = f"lower bound is undefined (NaN), so non-inferiority is not shown {evidence}"
    elif cmp.lower_bound >= -m and powered:
        verdict, rule = Verdict.PASS, RULE_NON_INFERIOR
        reason = (f"lower bound {lb} pts \u2265 {_MINUS}margin {mg} pts and MDE "
                  f"{_num(task_mde, signed=False)} \u2264 margin {_num(m, signed=False)} pts {evidence}")
    elif cmp.lower_bound < -m and loss_shown:
        verdict, rule = Verdict.BLOCK, RULE_LOSS
        reason = f"lower bound {lb} pts < {_MINUS}margin {mg} pts and the loss is significant ({loss}) {evidence}"
    elif not powered:
        verdict, rule = Verdict.INCONCLUSIVE, RULE_UNDERPOWERED
        need = f"; needs {describe_items_needed(needed, n=cmp.n, discordant=changed)}" if needed else ""
        reason = (f"under-powered: MDE {_num(task_mde, signed=False)} pts > margin {_num(m, signed=False)} pts "
                  f"at n={cmp.n}{need} (lower bound {lb} pts) {evidence}")
    else:
        verdict, rule = Verdict.INCONCLUSIVE, RULE_UNDECIDED
        reason = (f"undecided: lower bound {lb} pts < {_MINUS}margin {mg} pts but no loss is shown ({loss}) "
                  f"{evidence}")
    return TaskDecision(suite, task, cmp, thr, verdict, reason, mde=task_mde, power=power, rule=rule,
                        loss_alpha=loss_alpha, loss_shown=loss_shown, items_needed=needed,
                        lossless=agreement, required_share=required_share if agreement is not None else math.nan)


def decide(
    task_results: Sequence[tuple[str, str, PairedComparison]],
    thresholds: Thresholds,
    *,
    baseline_effective: Mapping,
    candidate_effective: Mapping,
    config: str | None = None,
    expect: str = "lossy",
    outputs: Mapping[str, OutputAgreement] | None = None,
) -> Decision:
    """Apply the gate to every task and combine the verdicts (rules: module docstring).

    Args:
        task_results: ``(suite, task, comparison)`` per task; differences in points.
        thresholds: margins (points), alpha, power and ``on_inconclusive``.
        baseline_effective, candidate_effective: the engine configuration as vLLM resolved it
            for each arm (nested mappings allowed).
        config: the candidate config's name, for ``configs.<name>`` thresholds.
        expect: the candidate's declared ``expect``; ``"lossless"`` turns on the output check.
        outputs: per task name, the output agreement (needed when ``expect == "lossless"``).

    Raises:
        ValueError: no tasks (no evidence is never a pass), a duplicated (suite, task), a
            comparison whose alpha differs from its threshold's alpha, or a lossless config
            without output agreement for a task.
    """
    if not task_results:
        raise ValueError("no task results to gate: no evidence is never a pass")
    seen: set[tuple[str, str]] = set()
    for suite, task, _ in task_results:
        if (suite, task) in seen:
            raise ValueError(f"task {suite}/{task} appears more than once")
        seen.add((suite, task))
    thrs = [thresholds.for_task(suite, task, config) for suite, task, _ in task_results]
    holm = holm_levels([cmp.p_loss for _, _, cmp in task_results], [t.alpha for t in thrs])
    lossless = expect == "lossless"
    decisions: list[TaskDecision] = []
    for (suite, task, cmp), thr, level, rejected in zip(task_results, thrs, holm.levels, holm.rejected):
        agreement = None
        if lossless:
            if outputs is None or task not in outputs:
                raise ValueError(f"{suite}/{task}: config is declared lossless but no output agreement was given")
            agreement = outputs[task]
        decisions.append(_task_decision(suite, task, cmp, thr, power=thresholds.power, loss_alpha=level,
                                        loss_shown=rejected, agreement=agreement,
                                        required_share=thresholds.identical_share_for(config),
                                        max_kl_mean=thresholds.max_kl_mean))
    tasks = tuple(decisions)

    if dict(baseline_effective) == dict(candidate_effective):
        reason = (
            "the candidate's effective engine config equals the baseline's "
            f"({len(dict(baseline_effective))} keys, none differ): there is no change to gate"
        )
        return Decision(Verdict.NO_OP, (reason,), tasks)
    blocked = [t for t in tasks if t.verdict is Verdict.BLOCK]
    unsure = [t for t in tasks if t.verdict is Verdict.INCONCLUSIVE]
    if blocked:
        return Decision(Verdict.BLOCK, tuple(f"{t.suite}/{t.task}: BLOCK: {t.reason}" for t in blocked), tasks)
    if unsure:
        if thresholds.on_inconclusive == "block":
            return Decision(Verdict.BLOCK, tuple(
                f"{t.suite}/{t.task}: INCONCLUSIVE, counted as BLOCK (on_inconclusive: block): {t.reason}"
                for t in unsure), tasks)
        return Decision(Verdict.INCONCLUSIVE, tuple(f"{t.suite}/{t.task}: INCONCLUSIVE: {t.reason}"
                                                    for t in unsure), tasks)
    return Decision(Verdict.PASS, tuple(f"{t.suite}/{t.task}: PASS: {t.reason}" for t in tasks), tasks)


def spec_decode_floor_failures(acceptance_rate: float | None, mean_acceptance_length: float | None, *,
                               min_acceptance_rate: float | None, min_mean_acceptance_length: float | None,
                               speculative: bool) -> list[str]:
    """Sentences for each speculative-decoding floor the candidate misses (empty when none is missed).

    Args:
        acceptance_rate: accepted / draft tokens (0..1) over the run; None when no counters were recorded.
        mean_acceptance_length: 1 + accepted / drafts; None when no counters were recorded.
        min_acceptance_rate, min_mean_acceptance_length: the floors (``thresholds.spec_floors_for``); None = none.
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


def _walk(a: Any, b: Any, prefix: str, out: dict[str, tuple[Any, Any]]) -> None:
    """Record in ``out`` every dotted key under which ``a`` and ``b`` differ; descend only where both are mappings,
    so a switch going from ``None`` to a mapping is one row (``None`` -> the mapping), not one per sub-key."""
    if isinstance(a, Mapping) and isinstance(b, Mapping) and (a or not prefix) and (b or not prefix):
        for key in sorted(set(a) | set(b), key=str):
            _walk(a.get(key, MISSING), b.get(key, MISSING), f"{prefix}{key}" if not prefix else f"{prefix}.{key}", out)
    elif a is MISSING or b is MISSING or a != b:
        out[prefix] = (a, b)


def effective_diff(
    baseline_effective: Mapping, candidate_effective: Mapping
) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ: ``{dotted_key: (baseline_value, candidate_value)}``.

    Nested mappings present on both sides are descended into (dotted keys such as
    ``"compilation_config.level"``); a key present on one side only has ``MISSING`` (repr ``<absent>``) on the
    other; a mapping on one side against a non-mapping (e.g. ``None``) on the other is one entry holding both.
    Keys are sorted. Empty when the configurations are equal.
    """
    diff: dict[str, tuple[Any, Any]] = {}
    _walk(baseline_effective, candidate_effective, "", diff)
    return dict(sorted(diff.items()))


def speed_floor_failures(levels: Sequence[Mapping[str, Any]], *, expect: str, min_speedup: float | None,
                         max_slowdown: float | None) -> list[str]:
    """Sentences for each speed threshold the candidate misses (empty when none is set or none is missed).

    Args:
        levels: the ``speed`` block's rows (``speed.speed_block``): ``concurrency``, ``ratio``, ``ci_low``,
            ``ci_high`` (candidate / baseline throughput; None where undefined).
        expect: the candidate's ``expect``. ``min_speedup`` applies to a lossy candidate: each level's interval must
            lie at or above it (the speed it costs quality for must be shown). ``max_slowdown`` applies to a lossless
            one: each level's interval must reach ``1 - max_slowdown`` (BLOCK only when a slowdown beyond it is shown).
    An undefined interval (fewer than 2 repeats) fails a set threshold (closed): the claim cannot be checked.
    """
    out = []
    for row in levels:
        c, lo, hi, ratio = row.get("concurrency"), row.get("ci_low"), row.get("ci_high"), row.get("ratio")
        shown = f"\u00d7{ratio:.2f}" if isinstance(ratio, (int, float)) else "n/a"
        interval = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "no interval (< 2 repeats)"
        if expect == "lossy" and min_speedup is not None and not (lo is not None and lo >= min_speedup):
            out.append(f"costs quality, buys no measurable speed: speed-up {shown} {interval} at concurrency {c} "
                       f"does not reach min_speedup \u00d7{min_speedup:g}")
        if expect == "lossless" and max_slowdown is not None and not (hi is not None and hi >= 1 - max_slowdown):
            out.append(f"speed regression: speed-up {shown} {interval} at concurrency {c} is slower than max_slowdown "
                       f"{100 * max_slowdown:g}% allows (\u00d7{1 - max_slowdown:g})")
    return out
