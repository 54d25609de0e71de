"""The ablation's closing recommendation (issue 27, item 5): at each measured concurrency, the fastest variant that
PASSes quality and is faster for sure, or "none" with the reason. Pure choice logic over ``ablate.ablation_rows``,
the typed rows of ``ablation.json`` (:class:`AblationRow`, defined here).

A variant qualifies at concurrency ``c`` when

* its row ran (not skipped, not pending) and its verdict is ``PASS`` (``BLOCK``, ``INCONCLUSIVE`` and ``NO-OP`` never
  qualify: a switch that may cost quality, or that the engine did not apply, is not recommended);
* its speed-up at ``c`` (candidate / baseline output tok/s, medians) has an interval whose lower end is > 1: it is
  faster for sure, not merely in its point estimate (no interval, with fewer than 2 repeats: not shown faster);
* ``slo_failure(row, c)`` is empty: a hook for a per-level refusal beyond the verdict. Latency SLOs need no hook
  today: they are decided in serve mode by ``evalgate run`` (``gate.slo_failures``: a missed objective BLOCKs the
  verdict, so such a variant never PASSes), and ``ablate`` refuses serve mode; the default never refuses.

Among those, the largest speed-up wins; a tie on the speed-up goes to the larger lower bound, then to the fewer
switches (the simpler change), then to the table's order, and the tied variants are named. Rows of the same config
(a switch alone and the first cumulative step) count once, under the first row's label.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from evalgate.results.document import Number, Record, described, described_list
from evalgate.speed.block import SpeedLevel
from evalgate.speed.economics import EconomicsLevel, usd

__all__ = ["AblationRow", "AblationSwitch", "AblationTask", "Recommendation", "recommend", "recommendation_lines"]


class AblationSwitch(Record):
    """One switch of a variant (``ablate.Switch``): a top-level ``engine_args`` key or an ``env`` variable."""

    section: str = described("``engine_args`` or ``env``", "")
    key: str = described("the engine arg or environment variable", "")
    value: Any = described("its value in the variant (None: removed, vLLM's default)")


class AblationTask(Record):
    """One task of a variant's verdict (its ``TaskVerdict``'s Δ and interval, points, and verdict)."""

    suite: str = described("the evalgate suite", "")
    task: str = described("lm-eval task name", "")
    delta: Number | None = described("Δ = candidate − baseline, points")
    ci_low: Number | None = described("its interval, low end, points")
    ci_high: Number | None = described("its interval, high end, points")
    verdict: str = described("the task's outcome (PASS, BLOCK or INCONCLUSIVE)", "")


class AblationRow(Record):
    """One row of ``ablation.json`` (``ablate.ablation_rows``): a variant and, once gated, its verdict, speed and
    costs. Written with :meth:`as_json` (only the keys that were set, in this order): a row not gated has no
    ``verdict`` .. ``tasks``, a row still pending or stopped has ``not_run``."""

    label: str = described("the variant's label: ``key=value`` alone, ``+ key + key`` cumulative", "")
    kind: str = described("``alone`` or ``cumulative``", "")
    config: str = described("the variant's config name (an existing config's when it has the same identity)", "")
    skipped: str = described("why the row did not run (the platform refused it, vLLM refused a value, it failed); "
                             "empty when it ran", "")
    switches: list[AblationSwitch] = described_list("the switches applied to the baseline, in the recipe's order")
    verdict: str | None = described("the variant's verdict (PASS, BLOCK, NO-OP, INCONCLUSIVE); absent until gated")
    speed: list[SpeedLevel] = described_list("each level of the verdict's ``speed`` block, as in ``verdict.json`` "
                                             "(empty when speed was not measured or failed)")
    speed_status: str | None = described("the speed block's ``status`` (``measured``/``failed``); None: not measured")
    speed_error: str | None = described("why the speed measurement failed; None otherwise")
    economics: list[EconomicsLevel] = described_list("the verdict's cost per concurrency level (empty without an "
                                                     "``economics`` section)")
    tasks: list[AblationTask] = described_list("every task of the verdict: Δ and interval, points")
    pending: bool = described("the row's config is not gated yet", False)
    not_run: str | None = described("a pending row: ``pending`` while the ablation runs, else that it stopped first")

    def as_json(self) -> dict[str, Any]:
        """The row as written in ``ablation.json``: the keys that were set, in field order."""
        return self.model_dump(exclude_unset=True)


class Recommendation(Record):
    """The recommendation at one concurrency level (``recommend``), as ``ablation.json``'s ``recommendation`` lists
    it (every key, in this order: :meth:`as_json`): the chosen variant and its speed-up, or none and why."""

    concurrency: int = described("the concurrency level", 0)
    config: str | None = described("the chosen variant's config name; None when no variant qualifies")
    label: str | None = described("the chosen variant's label (``AblationRow.label``); None when none qualifies")
    ratio: Number | None = described("its speed-up at this level, candidate / baseline output tok/s (medians)")
    ci_low: Number | None = described("the speed-up's interval, low end (> 1: faster for sure)")
    ci_high: Number | None = described("the speed-up's interval, high end")
    level: Number | None = described("the interval's level (0.95 when its level was not recorded)")
    usd_per_mtok: Number | None = described("the chosen variant's $ per million output tokens at this level (its "
                                            "economics block); None without one")
    tied: list[str] = described_list("labels of the other variants with the same speed-up and lower bound")
    reason: str = described("why it was chosen, or why no variant qualifies", "")

    def as_json(self) -> dict[str, Any]:
        """The entry as written in ``ablation.json``: every key, in field order."""
        return self.model_dump()


SloCheck = Callable[[AblationRow, int], str]


def _no_slo(row: AblationRow, concurrency: int) -> str:
    return ""


def _level(row: AblationRow, c: int) -> SpeedLevel | None:
    return next((s for s in row.speed if s.concurrency == c), None)


def _ran(row: AblationRow) -> bool:
    return not row.skipped and not row.pending and bool(row.verdict)


def _ratio(s: SpeedLevel) -> str:
    lo, hi = s.ci_low, s.ci_high
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else " [no interval]"
    return f"\u00d7{s.ratio:.2f}{ci}"


def recommend(rows: Sequence[AblationRow], slo_failure: SloCheck = _no_slo) -> list[Recommendation]:
    """The recommendation at each concurrency some row measured (ascending).

    Args:
        rows: ``ablate.ablation_rows`` (:class:`AblationRow`: ``label``, ``config``, ``verdict``, ``speed`` levels,
            ``skipped``, ``pending``, ``switches``, ``economics`` levels).
        slo_failure: ``(row, concurrency) -> reason`` ("" when the variant meets every latency SLO at that level).
    Returns:
        One :class:`Recommendation` per concurrency: ``config`` and ``label`` are None when no variant qualifies
        and ``reason`` says why; ``usd_per_mtok`` is the chosen variant's $ per million output tokens when the row
        has an economics block, else None; ``tied`` lists the labels of the variants with the same speed-up and
        lower bound.
    """
    seen: set[str] = set()
    unique = []
    for r in rows:
        if _ran(r) and r.config not in seen:
            seen.add(r.config)
            unique.append(r)
    levels = sorted({s.concurrency for r in unique for s in r.speed if s.ratio is not None})
    out: list[Recommendation] = []
    for c in levels:
        measured = [(i, r, _level(r, c)) for i, r in enumerate(unique)]
        measured = [(i, r, s) for i, r, s in measured if s is not None and s.ratio is not None]
        passed = [(i, r, s) for i, r, s in measured if r.verdict == "PASS"]
        sure = [(i, r, s) for i, r, s in passed if s.ci_low is not None and s.ci_low > 1]
        within = [(i, r, s) for i, r, s in sure if not slo_failure(r, c)]
        if within:
            def key(x: tuple[int, AblationRow, SpeedLevel]) -> tuple[float, float, int, int]:
                i, r, s = x
                return (-s.ratio, -s.ci_low, len(r.switches), i)  # type: ignore[operator]

            within.sort(key=key)
            _, best, s = within[0]
            tied = [r.label for _, r, t in within[1:] if (t.ratio, t.ci_low) == (s.ratio, s.ci_low)]
            cost = next((e for e in best.economics if e.concurrency == c), None)
            level = s.level or 0.95
            out.append(Recommendation(
                concurrency=c, config=best.config, label=best.label, ratio=s.ratio, ci_low=s.ci_low,
                ci_high=s.ci_high, level=level, usd_per_mtok=None if cost is None else cost.candidate.usd_per_mtok,
                tied=tied, reason=f"the fastest variant that PASSes with its speed-up's lower {100 * level:.0f} % "
                                  f"bound above 1: {_ratio(s)}" + (f" (tied with {', '.join(tied)})" if tied else "")))
            continue
        if not measured:
            reason = "no variant measured its speed at this concurrency"
        elif not passed:
            reason = (f"no variant PASSes quality ({len(measured)} measured: "
                      + ", ".join(f"{r.label} {r.verdict}" for _, r, _ in measured) + ")")
        elif not sure:
            _, r, s = max(passed, key=lambda x: x[2].ratio)  # type: ignore[arg-type,return-value]
            reason = (f"no PASS variant is faster for sure (lower bound of its speed-up > 1); the fastest, "
                      f"{r.label}, is {_ratio(s)}")
        else:
            reason = "every PASS variant faster for sure breaks a latency SLO: " + "; ".join(
                f"{r.label}: {slo_failure(r, c)}" for _, r, _ in sure)
        out.append(Recommendation(concurrency=c, config=None, label=None, ratio=None, ci_low=None, ci_high=None,
                                  level=None, usd_per_mtok=None, tied=[], reason=reason))
    return out


def recommendation_lines(recs: Sequence[Recommendation]) -> list[str]:
    """The recommendation as text, one line per concurrency: ``c=16: recommend async_scheduling=True (config x): the
    fastest ...`` or ``c=16: none: no variant PASSes quality ...``. Empty when nothing was measured."""
    out = []
    for r in recs:
        if r.config is None:
            out.append(f"c={r.concurrency}: none: {r.reason}")
        else:
            cost = f"; {usd(r.usd_per_mtok)} per M output tokens" if r.usd_per_mtok is not None else ""
            out.append(f"c={r.concurrency}: recommend {r.label} (config {r.config}): {r.reason}{cost}")
    return out
