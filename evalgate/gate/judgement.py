"""The run's decision in one place: the accuracy rule (:func:`evalgate.gate.accuracy.decide`), then every rule that
BLOCKs whatever accuracy says (:func:`evalgate.gate.overrides.overrule`) on each task's evidence. The pipeline calls
:func:`judge_run`; the verdict builder (``evalgate.report.document``) lays out what it returns and decides nothing.

Pure: no I/O, no logging. ``compare.evidence`` measures the facts; which of them fail the candidate is decided here
(:func:`task_evidence`, through ``overrides.health_failures`` at the Bonferroni level ``overrides.health_alpha``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalgate.compare.evidence import HEALTH_INDICATORS, HealthShift, SpecDecodeHealth, spec_decode_health, task_facts
from evalgate.compare.pairing import TaskComparison
from evalgate.compare.replay import ReplayComparison
from evalgate.gate.accuracy import Decision, decide, speed_only_decision
from evalgate.gate.overrides import health_alpha, health_failures, overrule
from evalgate.gate.replay import ReplayDecision, combine, decide_replay
from evalgate.inputs.thresholds import ConfigPolicy, SpecDecodeFloors, SpeedFloors
from evalgate.results.manifest import Manifest
from evalgate.results.records import ItemResult
from evalgate.speed.block import SpeedBlock

__all__ = ["Judgement", "judge", "judge_run", "task_evidence"]


@dataclass(frozen=True)
class Judgement:
    """The gate's final word on a run.

    Attributes:
        decision: the final decision (the accuracy rule, then every override; NO-OP stays NO-OP).
        evidence: task name -> its evidence block (:func:`task_evidence`: facts, contradictions, ``failures``).
        spec: ``"baseline"`` / ``"candidate"`` -> speculative-decoding health (None: no counters recorded).
        replay: the replay gate's decision (``gate.replay``), None when no replay ran.
    """

    decision: Decision
    evidence: dict[str, dict[str, Any]]
    spec: dict[str, SpecDecodeHealth | None]
    replay: ReplayDecision | None = None


def task_evidence(pairs: Sequence[tuple[ItemResult, ItemResult]], spec: SpecDecodeHealth | None, *,
                  lossless: bool = False, health_alpha: float = 0.05) -> dict[str, Any]:
    """One task's ``evidence`` block: ``evidence.task_facts`` plus the gate's judgement of them.

    Args:
        pairs: ``(baseline, candidate)`` items of the task.
        spec: the candidate's spec-decode counters (``evidence.spec_decode_health``), None when off.
        lossless: the candidate is declared lossless; health_alpha: the per-test level (``gate.health_alpha``).
    Returns:
        ``task_facts``'s keys, with ``contradictions`` extended by the health rises that are not significant and
        ``failures`` (``overrides.health_failures``: what fails the candidate whatever its accuracy). Raises ValueError
        for no pairs.
    """
    facts = task_facts(pairs, spec)
    shares = {kind: (facts["health"]["baseline"][kind], facts["health"]["candidate"][kind])
              for kind in HEALTH_INDICATORS}
    failures, warnings = health_failures(
        decode_nonfinite=(facts["decode"] or {}).get("nonfinite_items", 0),
        prefill_nonfinite=(facts["logit"] or {}).get("nonfinite_items", 0),
        shifts=[HealthShift(**sh) for sh in facts["health_shifts"]], shares=shares, lossless=lossless,
        alpha=health_alpha)
    return {**facts, "contradictions": [*facts["contradictions"], *warnings], "health_shifts": facts["health_shifts"],
            "failures": failures}


def judge(decision: Decision, comparisons: Sequence[TaskComparison], manifest: Manifest, *,
          spec_floors: SpecDecodeFloors | None = None, speed: SpeedBlock | None = None,
          speed_floors: SpeedFloors | None = None) -> Judgement:
    """``decision`` (from :func:`decide`) with the overrides applied to the run's evidence.

    Args:
        decision: the accuracy rule's decision over the same tasks as ``comparisons``.
        comparisons: from ``compare.compare_tasks``.
        manifest: the run manifest (``results.manifest.Manifest``); read: each side's ``spec_decode`` counters,
            the candidate's ``expect`` (unset: lossy) and ``effective`` engine args (speculative decoding on or off).
        spec_floors: ``thresholds.SpecDecodeFloors`` for the candidate (None: no floors); a missed floor BLOCKs.
        speed: the ``speed`` block (``speed.block.SpeedBlock``; only a measured one is checked; None: speed was not
            measured); speed_floors: ``thresholds.SpeedFloors`` (speed floors and latency objectives; None: none).
    Returns:
        The :class:`Judgement`.
    Raises:
        ValueError: a comparison without items.
    """
    cand = manifest.candidate
    spec = {role: spec_decode_health(side.spec_decode) for role, side in (("baseline", manifest.baseline),
                                                                          ("candidate", cand))}
    expect = cand.expect or "lossy"
    level = health_alpha([td.threshold.alpha for td in decision.tasks], len(comparisons), len(HEALTH_INDICATORS))
    evidence = {c.task: task_evidence(c.pairs, spec["candidate"], lossless=expect == "lossless", health_alpha=level)
                for c in comparisons}
    speculative = bool((cand.effective.get("engine_args") or {}).get("speculative_config"))
    final = overrule(decision, {t: e["failures"] for t, e in evidence.items()}, expect=expect,
                     spec=spec["candidate"], speculative=speculative, spec_floors=spec_floors, speed=speed,
                     speed_floors=speed_floors)
    return Judgement(final, evidence, spec)


def judge_run(comparisons: Sequence[TaskComparison], policy: ConfigPolicy, manifest: Manifest, *,
              expect: str, effective: Mapping[str, Any],
              speed: SpeedBlock | None = None, replay: ReplayComparison | None = None) -> Judgement:
    """The whole decision of one gate run: :func:`decide` over the comparisons, then :func:`judge`, then the replay
    gate's verdict joined (``gate.replay.combine``).

    Args:
        comparisons: from ``compare.compare_tasks``.
        policy: the candidate config's resolved thresholds (``Thresholds.policy``: margins, levels, power,
            floors, latency objectives, the replay gate's share and margin).
        manifest: as in :func:`judge`.
        expect: ``"lossy"`` or ``"lossless"``.
        effective: ``{"baseline": ..., "candidate": ...}`` effective engine configs (the NO-OP rule's input).
        speed: the ``speed`` block (``speed.block.SpeedBlock``, measured or failed), None when not measured.
        replay: the replayed requests compared (``compare.replay.ReplayComparison``), None when no replay ran.
    Returns:
        The :class:`Judgement`; with ``manifest.speed_only`` and no comparisons (``--speed-only``) the accuracy
        rule is :func:`~evalgate.gate.accuracy.speed_only_decision` (INCONCLUSIVE: quality not measured).
    Raises:
        ValueError: no tasks outside a speed-only run (an error, never a pass), a comparison without items, or a
            replay without requests.
    """
    if manifest.speed_only and not comparisons:  # --speed-only: quality not measured, never a PASS
        decision = speed_only_decision(effective["baseline"], effective["candidate"])
    else:
        decision = decide([(c.suite, c.task, c.comparison) for c in comparisons], policy,
                          baseline_effective=effective["baseline"], candidate_effective=effective["candidate"],
                          expect=expect, outputs={c.task: c.agreement(policy.near_tie_logprob) for c in comparisons})
    judged = judge(decision, comparisons, manifest, spec_floors=policy.spec_floors, speed=speed,
                   speed_floors=policy.speed_floors)
    if replay is None:
        return judged
    rd = decide_replay(replay, floor=policy.replay_share, alpha=policy.alpha, json_margin=policy.json_margin,
                       power=policy.power, lossless=expect == "lossless", max_kl_mean=policy.max_kl_mean)
    return Judgement(combine(judged.decision, rd, policy.on_inconclusive), judged.evidence, judged.spec, rd)
