"""The decision rule: per-task non-inferiority with power and a Holm-corrected loss test, then one
overall verdict.

Pure: no I/O, no logging. For each task, with margin m (points), its one-sided level alpha and the
configured power:

* ``LB`` / ``UB``: the ends of the task's two-sided (1 - 2 alpha) interval of delta = candidate -
  baseline (``PairedComparison.ci_low``/``ci_high``), so ``LB`` is a one-sided (1 - alpha) lower
  confidence bound (non-inferiority in the confidence-interval form; S. Wellek, *Testing
  Statistical Hypotheses of Equivalence and Noninferiority*, 2nd ed., CRC, 2010, ch. 2);
* ``MDE = (z_{1-alpha} + z_power) * SE`` (``evalgate.compare.power``): the run is *powered* when
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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from evalgate.compare.agreement import OutputAgreement, is_near_tie
from evalgate.compare.power import describe_items_needed, holm_levels, items_needed, mde
from evalgate.compare.stats import PairedComparison
from evalgate.fmt import MINUS, decimals_apart, num, p_value
from evalgate.inputs.thresholds import ConfigPolicy, TaskThreshold

__all__ = ["Decision", "OutputAgreement", "TaskDecision", "Verdict", "decide", "is_near_tie", "overall_of",
           "shows_non_inferiority"]

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


def _evidence(cmp: PairedComparison, alpha: float, task_mde: float) -> str:
    """The parenthesised evidence every task reason ends with: Δ, its interval, n, changed scores, MDE."""
    level = f"{100.0 * (1.0 - 2.0 * alpha):.4g}%"
    changed = cmp.n_regressed + cmp.n_improved
    text = (f"(\u0394 {num(cmp.delta)}, {level} CI [{num(cmp.ci_low)}, {num(cmp.ci_high)}], n={cmp.n}, "
            f"{changed} score{'' if changed == 1 else 's'} changed, MDE {num(task_mde, signed=False)})")
    if cmp.n and cmp.baseline_mean == 0 and cmp.candidate_mean == 0:
        # A task the baseline fails on every item cannot show a loss: its PASS/MDE say nothing about the change.
        text += "; note: both sides score 0 on every item, so this task cannot show a loss"
    return text


def _lossless_rule(agreement: OutputAgreement | None, required_share: float,
                   max_kl_mean: float) -> tuple[str, str] | None:
    """Rule 1 (module docstring): ``(rule, reason without evidence)`` when a lossless task's outputs disagree or its
    decode-time KL exceeds the ceiling, else None."""
    if agreement is None:
        return None
    kl_over = agreement.kl_mean is not None and not agreement.kl_mean <= max_kl_mean
    if agreement.share >= required_share and not kl_over:
        return None
    flips = set(agreement.tie_flips)
    real = [i for i in agreement.differing if i not in flips]
    shown = ", ".join(str(i) for i in real[:_LIST_DIFFERING])
    more = len(real) - _LIST_DIFFERING
    shown += f" and {more} more" if more > 0 else ""
    ties = f", {len(flips)} more differ only after a near-tie" if flips else ""
    kl = "" if agreement.kl_mean is None else f"; decode-time KL {agreement.kl_mean:.2g} nats/token"
    if not agreement.share >= required_share:
        return RULE_LOSSLESS, (f"declared lossless, but greedy outputs differ on {len(real)} of {agreement.n} items"
                               f"{ties} ({100 * agreement.share:.1f}% agree < {100 * required_share:.1f}% required"
                               f"{kl}); differing items: {shown or 'none listed'}")
    return RULE_LOSSLESS_KL, (f"declared lossless, but the candidate's next-token distributions moved: decode-time KL "
                              f"{agreement.kl_mean:.2g} nats/token > {max_kl_mean:g} allowed, along the tokens both "
                              f"generated alike ({100 * agreement.share:.1f}% of outputs agree)")


def shows_non_inferiority(lower_bound: float, margin: float, task_mde: float) -> bool:
    """Rule 3 (module docstring): ``LB >= -margin`` and ``MDE <= margin`` (points), both finite. The one test of a
    task PASS: the gate decides with it, and ``runs.read_verdict`` re-checks a stored PASS task with it."""
    return (math.isfinite(lower_bound) and math.isfinite(task_mde) and lower_bound >= -margin
            and task_mde <= margin)


def overall_of(verdicts: Sequence[Verdict]) -> Verdict:
    """The gate's precedence over task verdicts, before the NO-OP rule and the overrides: BLOCK if any task blocks,
    else INCONCLUSIVE if any is inconclusive, else PASS.

    Raises:
        ValueError: no verdicts (no evidence is never a pass).
    """
    if not verdicts:
        raise ValueError("no task verdicts: no evidence is never a pass")
    for v in (Verdict.BLOCK, Verdict.INCONCLUSIVE):
        if v in verdicts:
            return v
    return Verdict.PASS


def _accuracy_rule(cmp: PairedComparison, m: float, task_mde: float, loss: str, loss_shown: bool,
                   needed: int | None) -> tuple[Verdict, str, str]:
    """Rules 2-5 (module docstring): ``(verdict, rule, reason without evidence)``."""
    d = decimals_apart(cmp.lower_bound, -m)
    lb, mg = num(cmp.lower_bound, d), num(-m, d)
    powered = math.isfinite(task_mde) and task_mde <= m
    if math.isnan(cmp.lower_bound):
        return Verdict.BLOCK, RULE_UNDEFINED, "lower bound is undefined (NaN), so non-inferiority is not shown"
    if shows_non_inferiority(cmp.lower_bound, m, task_mde):
        return Verdict.PASS, RULE_NON_INFERIOR, (
            f"lower bound {lb} pts \u2265 {MINUS}margin {mg} pts and MDE {num(task_mde, signed=False)} \u2264 margin "
            f"{num(m, signed=False)} pts")
    if cmp.lower_bound < -m and loss_shown:
        return Verdict.BLOCK, RULE_LOSS, (f"lower bound {lb} pts < {MINUS}margin {mg} pts and the loss is significant "
                                          f"({loss})")
    if not powered:
        changed = cmp.n_regressed + cmp.n_improved
        need = f"; needs {describe_items_needed(needed, n=cmp.n, discordant=changed)}" if needed else ""
        return Verdict.INCONCLUSIVE, RULE_UNDERPOWERED, (
            f"under-powered: MDE {num(task_mde, signed=False)} pts > margin {num(m, signed=False)} pts "
            f"at n={cmp.n}{need} (lower bound {lb} pts)")
    return Verdict.INCONCLUSIVE, RULE_UNDECIDED, (f"undecided: lower bound {lb} pts < {MINUS}margin {mg} pts but no "
                                                  f"loss is shown ({loss})")


def _task_decision(suite: str, task: str, cmp: PairedComparison, thr: TaskThreshold, *, power: float,
                   loss_alpha: float, loss_shown: bool, agreement: OutputAgreement | None,
                   required_share: float, max_kl_mean: float = math.inf) -> TaskDecision:
    """One task's verdict by the rules of the module docstring, in their order (lossless rules first)."""
    if math.isfinite(cmp.alpha) and not math.isclose(cmp.alpha, thr.alpha, rel_tol=1e-9):
        raise ValueError(
            f"{suite}/{task}: comparison was computed at alpha={cmp.alpha:g} but the threshold "
            f"({thr.source}) requires alpha={thr.alpha:g}"
        )
    alpha = cmp.alpha if math.isfinite(cmp.alpha) else thr.alpha
    task_mde = mde(cmp.se_power, alpha, power)
    changed = cmp.n_regressed + cmp.n_improved
    needed = items_needed(cmp.se_power, cmp.n, thr.margin, alpha, power, discordant=changed) if cmp.n >= 1 else None
    relation = "\u2264" if loss_shown else ">"
    loss = (f"one-sided loss p={p_value(cmp.p_loss)} {relation} {loss_alpha:.3g} after Holm"
            + (f", {cmp.loss_test}" if cmp.loss_test else ""))
    lossless = _lossless_rule(agreement, required_share, max_kl_mean)
    if lossless is not None:
        verdict, (rule, reason) = Verdict.BLOCK, lossless
    else:
        verdict, rule, reason = _accuracy_rule(cmp, thr.margin, task_mde, loss, loss_shown, needed)
    return TaskDecision(suite, task, cmp, thr, verdict, f"{reason} {_evidence(cmp, alpha, task_mde)}", mde=task_mde,
                        power=power, rule=rule, loss_alpha=loss_alpha, loss_shown=loss_shown, items_needed=needed,
                        lossless=agreement, required_share=required_share if agreement is not None else math.nan)


def decide(
    task_results: Sequence[tuple[str, str, PairedComparison]],
    policy: ConfigPolicy,
    *,
    baseline_effective: Mapping,
    candidate_effective: Mapping,
    expect: str = "lossy",
    outputs: Mapping[str, OutputAgreement] | None = None,
) -> Decision:
    """Apply the gate to every task and combine the verdicts (rules: module docstring).

    Args:
        task_results: ``(suite, task, comparison)`` per task; differences in points.
        policy: the candidate config's resolved thresholds (``Thresholds.policy``): margins (points), alpha,
            power, ``on_inconclusive`` and the lossless tolerances.
        baseline_effective, candidate_effective: the engine configuration as vLLM resolved it
            for each arm (nested mappings allowed).
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
    thrs = [policy.task(suite, task) for suite, task, _ in task_results]
    holm = holm_levels([cmp.p_loss for _, _, cmp in task_results], [t.alpha for t in thrs])
    lossless = expect == "lossless"
    decisions: list[TaskDecision] = []
    for (suite, task, cmp), thr, level, rejected in zip(task_results, thrs, holm.levels, holm.rejected):
        agreement = None
        if lossless:
            if outputs is None or task not in outputs:
                raise ValueError(f"{suite}/{task}: config is declared lossless but no output agreement was given")
            agreement = outputs[task]
        decisions.append(_task_decision(suite, task, cmp, thr, power=policy.power, loss_alpha=level,
                                        loss_shown=rejected, agreement=agreement,
                                        required_share=policy.identical_share,
                                        max_kl_mean=policy.max_kl_mean))
    return _overall(tuple(decisions), policy.on_inconclusive, baseline_effective, candidate_effective)


def speed_only_decision(baseline_effective: Mapping, candidate_effective: Mapping) -> Decision:
    """The accuracy rule of a ``--speed-only`` run (no quality suite ran): INCONCLUSIVE, never PASS (no evidence is
    never a pass), with the reason said; the overrides (speed floors, latency objectives) may still BLOCK it. Equal
    effective engine configs are noted in the reason (nothing changed, so any speed-up is run-to-run noise)."""
    reason = ("speed only: no quality suite ran (--speed-only), so quality was not measured and this run cannot "
              "PASS; gate quality with a run on real weights")
    if dict(baseline_effective) == dict(candidate_effective):
        reason += "; the two sides' effective engine configs are equal (an A/A run: any speed-up is noise)"
    return Decision(Verdict.INCONCLUSIVE, (reason,), ())


def _overall(tasks: tuple[TaskDecision, ...], on_inconclusive: str, baseline_effective: Mapping,
             candidate_effective: Mapping) -> Decision:
    """The overall verdict of decided tasks: NO-OP > BLOCK > INCONCLUSIVE (BLOCK under ``on_inconclusive: block``)
    > PASS, with one reason per task that produced it."""
    if dict(baseline_effective) == dict(candidate_effective):
        reason = (
            "the candidate's effective engine config equals the baseline's "
            f"({len(dict(baseline_effective))} keys, none differ): there is no change to gate"
        )
        return Decision(Verdict.NO_OP, (reason,), tasks)
    overall = overall_of([t.verdict for t in tasks])
    blocked = [t for t in tasks if t.verdict is Verdict.BLOCK]
    unsure = [t for t in tasks if t.verdict is Verdict.INCONCLUSIVE]
    if overall is Verdict.BLOCK:
        return Decision(Verdict.BLOCK, tuple(f"{t.suite}/{t.task}: BLOCK: {t.reason}" for t in blocked), tasks)
    if overall is Verdict.INCONCLUSIVE:
        if on_inconclusive == "block":
            return Decision(Verdict.BLOCK, tuple(
                f"{t.suite}/{t.task}: INCONCLUSIVE, counted as BLOCK (on_inconclusive: block): {t.reason}"
                for t in unsure), tasks)
        return Decision(Verdict.INCONCLUSIVE, tuple(f"{t.suite}/{t.task}: INCONCLUSIVE: {t.reason}"
                                                    for t in unsure), tasks)
    return Decision(Verdict.PASS, tuple(f"{t.suite}/{t.task}: PASS: {t.reason}" for t in tasks), tasks)
