"""Pair baseline and candidate items and compute each task's paired comparison (pure; no I/O).

Items are paired by lm-eval's ``doc_hash`` (``ItemResult.item_hash``), never by position, and the two
sides must cover exactly the same items: a mismatch means the runs are not comparable and is an error,
not something to average over. Items that share a source document (``ItemResult.cluster``, from the
suite's ``doc_group``) are analysed as clusters; records stored before clusters existed (``None``)
count as one item per cluster. The interval is chosen per metric kind (``stats.paired_comparison``
with ``interval="auto"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from evalgate.compare.agreement import OutputAgreement, is_near_tie
from evalgate.compare.evidence import decode_summary
from evalgate.compare.power import items_needed, items_needed_basis, mde, mde_at
from evalgate.compare.stats import PairedComparison, flipped_items, paired_comparison, power_se
from evalgate.errors import StoreError
from evalgate.inputs.thresholds import ConfigPolicy
from evalgate.results.records import ItemResult, TaskResult


@dataclass(frozen=True)
class TaskComparison:
    """One task, both sides, paired.

    Attributes:
        suite, task, metric: identity of the task and its primary metric.
        pairs: ``(baseline_item, candidate_item)`` for every item, ordered by baseline ``item_id``.
        comparison: the paired statistics (points).
        regressed: indices into ``pairs`` where the candidate scored lower.
        improved: indices into ``pairs`` where the candidate scored higher.
        identical_outputs: number of pairs whose raw outputs are byte-identical.
        differing_outputs: indices into ``pairs`` whose raw outputs differ.
    """

    suite: str
    task: str
    metric: str
    pairs: tuple[tuple[ItemResult, ItemResult], ...]
    comparison: PairedComparison
    regressed: tuple[int, ...]
    improved: tuple[int, ...]
    identical_outputs: int
    differing_outputs: tuple[int, ...] = ()

    def agreement(self, near_tie: float = 0.0) -> OutputAgreement:
        """The output agreement the gate's lossless check reads (differing items by ``item_id``).

        Args:
            near_tie: nats; a differing item whose candidate ``decode.tie_gap`` is at most this is a tie-flip.
        The decode-time KL is the task's token-weighted one (``evidence.decode_summary``; None if no item has it).
        """
        differing = [self.pairs[i] for i in self.differing_outputs]
        ties = tuple(b.item_id for b, c in differing if c.decode and is_near_tie(c.decode.get("tie_gap"), near_tie))
        summary = decode_summary(self.pairs)
        return OutputAgreement(self.identical_outputs, len(self.pairs), tuple(b.item_id for b, _ in differing),
                               tie_flips=ties, kl_mean=None if summary is None else summary["kl_mean"])


def pair_items(base: TaskResult, cand: TaskResult) -> list[tuple[ItemResult, ItemResult]]:
    """Pair the items of one task by ``item_hash``.

    Raises:
        StoreError: the two sides hold different items (or duplicates), so they are not comparable.
    """
    by_hash = {i.item_hash: i for i in cand.items}
    if len(by_hash) != len(cand.items) or len({i.item_hash for i in base.items}) != len(base.items):
        raise StoreError(f"task {base.task}: duplicate items in stored results")
    missing = [i.item_id for i in base.items if i.item_hash not in by_hash]
    if missing or len(base.items) != len(cand.items):
        raise StoreError(f"task {base.task}: baseline and candidate evaluated different items "
                         f"({len(base.items)} vs {len(cand.items)}; first unmatched baseline item {missing[:1]})")
    return [(b, by_hash[b.item_hash]) for b in sorted(base.items, key=lambda i: i.item_id)]


def compare_tasks(baseline: dict[str, TaskResult], candidate: dict[str, TaskResult],
                  policy: ConfigPolicy) -> list[TaskComparison]:
    """Paired comparison of every task present on both sides, at each task's alpha.

    Args:
        baseline, candidate: per-task results by task name; both must hold the same tasks.
        policy: the candidate config's resolved thresholds (``Thresholds.policy``): each task's alpha, the
            resample count and the bootstrap seed.
    Raises:
        StoreError: the sides hold different tasks or items, or a task has no items.
    """
    if set(baseline) != set(candidate):
        raise StoreError(f"baseline and candidate hold different tasks: {sorted(baseline)} vs {sorted(candidate)}")
    out = []
    for name in sorted(baseline):
        b, c = baseline[name], candidate[name]
        pairs = pair_items(b, c)
        if not pairs:
            raise StoreError(f"task {name}: no items were evaluated")
        thr = policy.task(b.suite, name)
        xb = np.array([p[0].score for p in pairs], dtype=float)
        xc = np.array([p[1].score for p in pairs], dtype=float)
        # One generator per task, seeded from the thresholds' seed and the task name: adding a task
        # does not change another task's interval.
        rng = np.random.default_rng([policy.seed, *name.encode()])
        clusters = [getattr(p[0], "cluster", None) for p in pairs]
        cmp = paired_comparison(xb, xc, alpha=thr.alpha, rng=rng, n_resamples=policy.bootstrap_resamples,
                                clusters=clusters, interval="auto")
        reg, imp = flipped_items(xb, xc)
        differ = tuple(i for i, (pb, pc) in enumerate(pairs) if pb.output != pc.output)
        out.append(TaskComparison(b.suite, name, b.metric, tuple(pairs), cmp, tuple(int(i) for i in reg),
                                  tuple(int(i) for i in imp), len(pairs) - len(differ), differ))
    return out


@dataclass(frozen=True)
class TaskPlan:
    """How many items one task needs for ``MDE <= margin``, extrapolated from a pilot run.

    Attributes:
        suite, task: identity.
        n, n_clusters, changed: the pilot's items, clusters and items whose score changed.
        alpha, power, margin: the levels and margin (points) planned for.
        se: the pilot's standard error for power (points; ``stats.power_se``).
        mde: the pilot's own MDE (points).
        items_needed: items for ``MDE <= margin`` (None for margin 0); never fewer than
            ``power.items_floor``.
        clusters_needed: source documents needed when items come in clusters (else None).
        basis: ``"discordance"`` (extrapolated from the pilot's changed items) or ``"floor"`` (no item
            changed: ``items_needed`` is a lower bound, not an estimate; ``power.items_needed``); None
            without a figure.
        available: items the task's suite holds (``suites.count_items``), None when unknown.
        min_margin: the smallest margin (points) a run of all ``available`` items is powered for at the
            pilot's discordance (``power.mde_at``), None when ``available`` is unknown.
    """

    suite: str
    task: str
    n: int
    n_clusters: int
    changed: int
    alpha: float
    power: float
    margin: float
    se: float
    mde: float
    items_needed: int | None
    clusters_needed: int | None
    basis: str | None = None
    available: int | None = None
    min_margin: float | None = None

    @property
    def exceeds_suite(self) -> bool:
        """More items are needed than the suite holds: no run of this suite is powered at this margin."""
        return self.items_needed is not None and self.available is not None and self.items_needed > self.available


def plan_tasks(baseline: dict[str, TaskResult], candidate: dict[str, TaskResult], policy: ConfigPolicy,
               *, margin: float | None,
               available: Mapping[str, int | None] | None = None) -> list[TaskPlan]:
    """Items each task needs to decide within ``margin`` points, from a pilot run's discordance.

    Per task: ``v = n * SE^2`` (SE from ``stats.power_se``: the null SE of the discordant share for
    unclustered 0/1 scores, else the clustered SE; floored at one changed item) and
    ``items_needed = ceil(v * (z_{1-alpha} + z_power)^2 / margin^2)`` (``evalgate.compare.power``), with the
    task's alpha (``policy.task``) and ``policy.power``, never below the SE floor's
    ``ceil(100 * (z_{1-alpha} + z_power) / margin)``; a task with no changed item gets that floor, marked
    ``basis="floor"`` (nothing to extrapolate from). Holm's correction is not
    included: it only touches the loss test, not the MDE. ``margin`` None: each task's own margin, as the gate
    applies it (``policy.task``). ``available`` (task -> items its suite holds) fills ``TaskPlan.available`` and
    ``min_margin``. Raises StoreError like ``compare_tasks``.
    """
    if set(baseline) != set(candidate):
        raise StoreError(f"baseline and candidate hold different tasks: {sorted(baseline)} vs {sorted(candidate)}")
    out = []
    for name in sorted(baseline):
        pairs = pair_items(baseline[name], candidate[name])
        if not pairs:
            raise StoreError(f"task {name}: no items were evaluated")
        threshold = policy.task(baseline[name].suite, name)
        alpha, task_margin = threshold.alpha, threshold.margin if margin is None else margin
        se, g, changed = power_se(np.array([p[0].score for p in pairs], dtype=float),
                                  np.array([p[1].score for p in pairs], dtype=float),
                                  [getattr(p[0], "cluster", None) for p in pairs])
        n = len(pairs)
        need = items_needed(se, n, task_margin, alpha, policy.power, discordant=changed)
        clusters = math.ceil(need * g / n) if need is not None and g < n else None
        have = (available or {}).get(name)
        best = mde_at(se, n, have, alpha, policy.power, discordant=changed) if have else None
        out.append(TaskPlan(baseline[name].suite, name, n, g, changed, alpha, policy.power, task_margin, se,
                            mde(se, alpha, policy.power), need, clusters, items_needed_basis(need, changed),
                            have, best))
    return out
