"""The replay gate's rules: recorded requests replayed on both sides, no reference answers (pure; no I/O).

Facts come from ``evalgate.compare.replay``; ``thresholds.yaml``'s ``replay`` section and the lossless tolerances set
the levels. With n replayed requests, k of them *agreeing* (identical outputs, or first differing at a near-tie:
the baseline ranked the candidate's token within ``lossless.near_tie_logprob`` nats of its own), the floor
``f = ConfigPolicy.replay_share`` and the one-sided level ``alpha`` (the file's top-level ``alpha``):

1. *Identity* (every config). Clopper-Pearson one-sided bounds of the agreeing share (exact binomial; C. J. Clopper
   and E. S. Pearson, Biometrika 26(4), 1934): ``L = Beta_{alpha}(k, n - k + 1)`` (0 when k = 0) and
   ``U = Beta_{1 - alpha}(k + 1, n - k)`` (1 when k = n). BLOCK when ``U < f`` (the share is shown below the
   floor), PASS when ``L >= f`` (shown at or above it), else INCONCLUSIVE (too few requests to tell: all n agreeing
   needs ``alpha ** (1 / n) >= f``).
2. *Decode-time KL* (``expect: lossless`` configs only, as the suites' lossless rule): BLOCK when the
   token-weighted mean decode-time KL(baseline || candidate) along the common prefixes exceeds
   ``lossless.max_kl_mean``; not measured (no log-probs): no KL rule.
3. *Valid JSON* (when some request asks for JSON): the paired difference Δ (points) of the valid-JSON share,
   candidate - baseline, with its Newcombe interval (two-sided 1 - 2 alpha) and McNemar's exact one-sided loss test,
   against ``replay.json_margin`` by the suites' non-inferiority rule (``accuracy``, rules 2-5): PASS when the lower
   bound is >= -margin and MDE <= margin, BLOCK when the lower bound is below -margin and the loss is significant at
   ``alpha``, else INCONCLUSIVE.

The replay verdict is BLOCK if a rule BLOCKs, else INCONCLUSIVE if one is inconclusive, else PASS. It joins the run's
verdict (``combine``): NO-OP stays NO-OP; a replay BLOCK makes the run BLOCK; a replay INCONCLUSIVE makes a PASS run
INCONCLUSIVE (BLOCK under ``on_inconclusive: block``). Schema conformance is part of rule 3's "valid"; tool-name
agreement and length change are reported, not gated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.stats import beta

from evalgate.compare.power import items_needed, mde
from evalgate.compare.replay import ReplayComparison
from evalgate.fmt import p_value, pts
from evalgate.gate.accuracy import Decision, Verdict, _accuracy_rule, overall_of

__all__ = ["ReplayDecision", "RuleOutcome", "agreeing_share_bounds", "combine", "decide_replay"]

RULE_IDENTITY = "replay identity: agreeing share against the floor (Clopper-Pearson)"
RULE_KL = "replay decode-time KL > max_kl_mean (lossless)"
RULE_JSON = "replay valid JSON: non-inferiority against json_margin"


@dataclass(frozen=True)
class RuleOutcome:
    """One replay rule's outcome: ``rule`` (a ``RULE_*``), ``verdict`` and its one-sentence ``reason``."""

    rule: str
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class ReplayDecision:
    """The replay gate's word.

    Attributes:
        verdict: PASS, BLOCK or INCONCLUSIVE (module docstring). rules: each rule that applied, in order.
        share, lower, upper: the agreeing share and its one-sided (1 - alpha) Clopper-Pearson bounds, 0..1.
        floor: the required agreeing share. alpha: the one-sided level. json_margin: points.
        comparison: the facts decided on.
    """

    verdict: Verdict
    rules: tuple[RuleOutcome, ...]
    share: float
    lower: float
    upper: float
    floor: float
    alpha: float
    json_margin: float
    comparison: ReplayComparison

    @property
    def reasons(self) -> tuple[str, ...]:
        """``replay: <VERDICT>: <reason>`` per rule whose verdict is the replay's (all of them on PASS)."""
        return tuple(f"replay: {r.verdict.value}: {r.reason}" for r in self.rules if r.verdict is self.verdict)


def agreeing_share_bounds(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided (1 - alpha) Clopper-Pearson bounds ``(L, U)`` of a binomial share with ``k`` successes of ``n``
    (module docstring). Raises ValueError: ``n < 1``, ``k`` outside 0..n or alpha outside (0, 0.5)."""
    if n < 1 or not 0 <= k <= n or not 0 < alpha < 0.5:
        raise ValueError(f"need n >= 1, 0 <= k <= n and 0 < alpha < 0.5, got k={k}, n={n}, alpha={alpha}")
    lower = 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def _identity(cmp: ReplayComparison, floor: float, alpha: float) -> tuple[RuleOutcome, float, float]:
    a = cmp.agreement
    lower, upper = agreeing_share_bounds(a.agreeing, a.n, alpha)
    level = f"{100 * (1 - alpha):.4g}%"
    ties = f" ({len(a.tie_flips)} of them only after a near-tie)" if a.tie_flips else ""
    facts = (f"{a.agreeing} of {a.n} replayed requests agree{ties}, share {100 * a.share:.1f}%, one-sided {level} "
             f"bounds [{100 * lower:.1f}%, {100 * upper:.1f}%], floor {100 * floor:.1f}%")
    if upper < floor:
        return RuleOutcome(RULE_IDENTITY, Verdict.BLOCK, f"outputs changed: {facts}; upper bound < floor"), lower, upper
    if lower >= floor:
        return RuleOutcome(RULE_IDENTITY, Verdict.PASS, f"outputs kept: {facts}; lower bound >= floor"), lower, upper
    # all m agreeing passes when alpha ** (1/m) >= floor, i.e. m >= ln(alpha) / ln(floor) (never for floor 1)
    need = math.ceil(math.log(alpha) / math.log(floor) - 1e-12) if 0 < floor < 1 else None
    more = f"; even all agreeing needs {need} requests" if need and need > a.n else ""
    return (RuleOutcome(RULE_IDENTITY, Verdict.INCONCLUSIVE, f"too few requests to tell: {facts}; the floor lies "
                                                             f"between the bounds{more}"), lower, upper)


def _json(cmp: ReplayComparison, margin: float, alpha: float, power: float) -> RuleOutcome | None:
    j = cmp.json
    if j is None:
        return None
    task_mde = mde(j.se_power, alpha, power)
    changed = j.n_regressed + j.n_improved
    needed = items_needed(j.se_power, j.n, margin, alpha, power, discordant=changed)
    shown = j.p_loss <= alpha
    loss = f"one-sided loss p={p_value(j.p_loss)} {'<=' if shown else '>'} {alpha:g}, {j.loss_test}"
    verdict, _, reason = _accuracy_rule(j, margin, task_mde, loss, shown, needed)
    level = f"{100.0 * (1.0 - 2.0 * alpha):.4g}%"
    facts = (f"valid JSON {j.baseline_mean:.1f}% -> {j.candidate_mean:.1f}% of {j.n} JSON requests (\u0394 "
             f"{pts(j.delta)} pts, {level} CI [{pts(j.ci_low)}, {pts(j.ci_high)}], {j.n_regressed} lost, "
             f"{j.n_improved} gained, margin {margin:g} pts)")
    return RuleOutcome(RULE_JSON, verdict, f"{reason}; {facts}")


def decide_replay(cmp: ReplayComparison, *, floor: float, alpha: float, json_margin: float, power: float,
                  lossless: bool, max_kl_mean: float) -> ReplayDecision:
    """The replay verdict of ``cmp`` by the rules of the module docstring.

    Args:
        cmp: the replay's facts (``compare.replay.compare_replay``). floor: the required agreeing share, 0..1.
        alpha: one-sided level. json_margin: points. power: the thresholds' target power (MDE).
        lossless: the candidate is declared ``expect: lossless`` (the KL rule applies). max_kl_mean: nats/token.
    Raises:
        ValueError: no requests (never a pass).
    """
    if cmp.n < 1:
        raise ValueError("no replayed requests: no evidence is never a pass")
    identity, lower, upper = _identity(cmp, floor, alpha)
    rules = [identity]
    kl = cmp.agreement.kl_mean
    if lossless and kl is not None and not kl <= max_kl_mean:
        rules.append(RuleOutcome(RULE_KL, Verdict.BLOCK, f"declared lossless, but the next-token distributions moved "
                                                         f"on the replayed requests: decode-time KL {kl:.2g} "
                                                         f"nats/token > {max_kl_mean:g} allowed"))
    js = _json(cmp, json_margin, alpha, power)
    if js is not None:
        rules.append(js)
    verdict = overall_of([r.verdict for r in rules])
    return ReplayDecision(verdict=verdict, rules=tuple(rules), share=cmp.agreement.share, lower=lower, upper=upper,
                          floor=floor, alpha=alpha, json_margin=json_margin, comparison=cmp)


def combine(decision: Decision, replay: ReplayDecision | None, on_inconclusive: str) -> Decision:
    """The run's decision with the replay verdict joined (module docstring): NO-OP stays; a replay BLOCK makes the
    run BLOCK (its reasons first); a replay INCONCLUSIVE makes a PASS run INCONCLUSIVE, or BLOCK under
    ``on_inconclusive: block``; a replay PASS adds its reasons to a PASS run's."""
    if replay is None or decision.verdict is Verdict.NO_OP:
        return decision
    v = decision.verdict
    if replay.verdict is Verdict.PASS:
        return Decision(v, (*decision.reasons, *replay.reasons) if v is Verdict.PASS else decision.reasons,
                        decision.tasks)
    if replay.verdict is Verdict.BLOCK:
        kept = decision.reasons if v is Verdict.BLOCK else ()
        return Decision(Verdict.BLOCK, (*replay.reasons, *kept), decision.tasks)
    unsure = tuple(r.replace("replay: INCONCLUSIVE:", "replay: INCONCLUSIVE, counted as BLOCK "
                             "(on_inconclusive: block):", 1) if on_inconclusive == "block" else r
                   for r in replay.reasons)
    if v is Verdict.BLOCK:
        return Decision(Verdict.BLOCK, (*decision.reasons, *(unsure if on_inconclusive == "block" else ())),
                        decision.tasks)
    if on_inconclusive == "block":
        return Decision(Verdict.BLOCK, unsure, decision.tasks)
    kept = decision.reasons if v is Verdict.INCONCLUSIVE else ()
    return Decision(Verdict.INCONCLUSIVE, (*kept, *unsure), decision.tasks)
