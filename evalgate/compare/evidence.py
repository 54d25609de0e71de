"""Engine-aware evidence beside the accuracy delta: output health, divergence, speculative-decoding health.

Pure functions over stored items and counters; no I/O. An accuracy delta alone is a blunt instrument for
precision and speculative-decoding changes: a "lossless" switch should leave greedy outputs identical, a
truncated or degenerate output is a failure whatever its score, and spec-decode counters are evidence,
not proof (vLLM has reported every draft accepted while producing NaN log-probs and a stream of token 0).
Which of these facts fails a candidate is the gate's call (``gate.health_failures``), not this module's. The
per-item next-token KL between the engines is in ``evalgate.compare.kl`` (its names are re-exported here).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from evalgate.compare.kl import DecodeDivergence, LogitDivergence, decode_divergence, logit_divergence, position_kl
from evalgate.compare.stats import mcnemar_one_sided
from evalgate.results.records import ItemResult

__all__ = ["CURVE_POSITIONS", "FORMAT_METRICS", "HEALTH_INDICATORS", "NEAR_ALL_ACCEPTED", "POSITION_BUCKETS",
           "DecodeDivergence", "Divergence", "HealthShift", "LogitDivergence", "OutputHealth", "SpecDecodeHealth",
           "as_dict", "contradictions", "decode_divergence", "decode_summary", "divergence", "first_divergence",
           "health_shifts", "is_degenerate", "logit_divergence", "output_health", "position_buckets", "position_kl",
           "position_metric", "prefill_summary", "spec_decode_health", "task_facts"]

# Per-item metrics that say whether the output had the task's answer format (suites declare them).
FORMAT_METRICS = ("json_valid", "parsed")
# Acceptance at or above this share is "nearly every draft accepted" (measured: vLLM-CPU's MTP path that emits NaN
# log-probs and token 0 reported 98.4 % accepted while no output matched the baseline).
NEAR_ALL_ACCEPTED = 0.95
# A run of one short unit repeated this many times or more is degenerate output (e.g. "0 0 0 0 ...").
_REPEAT = re.compile(r"(.{1,8}?)\1{11,}", re.DOTALL)


@dataclass(frozen=True)
class OutputHealth:
    """Shares (0-1) of one side's items of one task.

    Attributes:
        n: items.
        truncated: generation hit ``max_tokens`` (vLLM ``finish_reason == "length"``).
        empty: output is empty or whitespace.
        unparseable: the task's format metric (``json_valid``/``parsed``) is 0; NaN when the task has none.
        degenerate: output contains one unit of 1-8 characters repeated 12 or more times in a row.
    """

    n: int
    truncated: float
    empty: float
    unparseable: float
    degenerate: float


def is_degenerate(text: str) -> bool:
    """True when ``text`` contains a run of one 1-8 character unit repeated >= 12 times (e.g. a repeated token)."""
    return bool(_REPEAT.search(text))


def output_health(items: Sequence[ItemResult]) -> OutputHealth:
    """Health shares of ``items`` (one side, one task). Raises ValueError for no items."""
    if not items:
        raise ValueError("no items")
    n = len(items)
    fmt = [1.0 - i.metrics[m] for i in items for m in FORMAT_METRICS if m in i.metrics]
    return OutputHealth(
        n=n,
        truncated=sum(i.finish_reason == "length" for i in items) / n,
        empty=sum(not i.output.strip() for i in items) / n,
        unparseable=sum(fmt) / len(fmt) if fmt else float("nan"),
        degenerate=sum(is_degenerate(i.output) for i in items) / n,
    )


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ (the shorter length if one is a prefix); None if equal."""
    if a == b:
        return None
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


@dataclass(frozen=True)
class Divergence:
    """How far the candidate's greedy outputs moved from the baseline's on one task.

    Attributes:
        n: paired items.
        identical_share: share of items with byte-identical outputs (0-1).
        first_divergence: for each diverging item, the character offset of the first difference.
        curve: share of items still identical up to each character offset in ``offsets``
            (state errors accumulate with length, so this falls with position).
        offsets: the character offsets of ``curve``.
    """

    n: int
    identical_share: float
    first_divergence: tuple[int, ...]
    curve: tuple[float, ...]
    offsets: tuple[int, ...]


def divergence(pairs: Sequence[tuple[ItemResult, ItemResult]], offsets: Iterable[int] = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)) -> Divergence:
    """Greedy identity and first-divergence positions over ``(baseline, candidate)`` pairs.

    Positions are in characters of the decoded text (token ids are not stored).
    Raises ValueError for no pairs.
    """
    if not pairs:
        raise ValueError("no pairs")
    firsts = [first_divergence(b.output, c.output) for b, c in pairs]
    offs = tuple(offsets)
    curve = tuple(sum(f is None or f > o for f in firsts) / len(firsts) for o in offs)
    return Divergence(n=len(pairs), identical_share=sum(f is None for f in firsts) / len(firsts),
                      first_divergence=tuple(f for f in firsts if f is not None), curve=curve, offsets=offs)


@dataclass(frozen=True)
class SpecDecodeHealth:
    """vLLM's speculative-decoding counters over a run, and what they imply.

    Attributes:
        drafts, draft_tokens, accepted_tokens: vLLM counters ``spec_decode_num_drafts``, ``..._draft_tokens``,
            ``..._accepted_tokens``.
        acceptance_rate: accepted / draft tokens (0-1), NaN without drafts.
        mean_acceptance_length: 1 + accepted / drafts (tokens emitted per target step), NaN without drafts.
    """

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    acceptance_rate: float
    mean_acceptance_length: float


def spec_decode_health(counters: dict[str, float]) -> SpecDecodeHealth | None:
    """Acceptance statistics from the counters recorded by ``VllmEngine.spec_decode_counters``; None when off.

    Formulas as vLLM reports them: acceptance rate = accepted / draft tokens; mean acceptance length =
    1 + accepted / drafts.
    """
    drafts = counters.get("spec_decode_num_drafts", 0.0)
    draft_tokens = counters.get("spec_decode_num_draft_tokens", 0.0)
    accepted = counters.get("spec_decode_num_accepted_tokens", 0.0)
    if not drafts and not draft_tokens:
        return None
    nan = float("nan")
    return SpecDecodeHealth(drafts, draft_tokens, accepted,
                            accepted / draft_tokens if draft_tokens else nan,
                            1.0 + accepted / drafts if drafts else nan)


def contradictions(spec: SpecDecodeHealth | None, div: Divergence, cand_health: OutputHealth,
                   base_health: OutputHealth) -> list[str]:
    """Sentences flagging evidence that disagrees with itself (empty when consistent).

    Counters that claim (nearly) every draft accepted (>= ``NEAR_ALL_ACCEPTED``) while greedy outputs diverge or
    are degenerate: the drafter agrees with a target that no longer agrees with the baseline.
    (Health shares that rise are judged by ``gate.health_failures``, from ``health_shifts``.)
    """
    out = []
    if spec is not None and spec.acceptance_rate >= NEAR_ALL_ACCEPTED and (div.identical_share < 1.0 or cand_health.degenerate > 0):
        out.append(f"spec-decode counters report {100 * spec.acceptance_rate:.0f}% of drafts accepted, yet "
                   f"{100 * (1 - div.identical_share):.0f}% of greedy outputs differ from the baseline and "
                   f"{100 * cand_health.degenerate:.0f}% are degenerate")
    return out


# Output-health indicators gated as paired 0/1 metrics (an item is "unhealthy" on one side and not the other).
HEALTH_INDICATORS: dict[str, Any] = {
    "degenerate": lambda i: is_degenerate(i.output),
    "empty": lambda i: not i.output.strip(),
    "truncated": lambda i: i.finish_reason == "length",
}


@dataclass(frozen=True)
class HealthShift:
    """Paired change of one output-health indicator on one task.

    Attributes:
        kind: ``"degenerate"``, ``"empty"`` or ``"truncated"``.
        worse: items healthy under the baseline and unhealthy under the candidate.
        better: the reverse.
        p: one-sided exact McNemar p-value of "the candidate is unhealthy more often":
            ``P[X >= worse]``, ``X ~ Binomial(worse + better, 1/2)`` (1.0 when nothing changed).
    """

    kind: str
    worse: int
    better: int
    p: float


def health_shifts(pairs: Sequence[tuple[ItemResult, ItemResult]]) -> list[HealthShift]:
    """The paired degenerate / empty / truncated shifts of one task (McNemar 1947, exact one-sided form)."""
    out = []
    for kind, bad in HEALTH_INDICATORS.items():
        worse = sum(bad(c) and not bad(b) for b, c in pairs)
        better = sum(bad(b) and not bad(c) for b, c in pairs)
        out.append(HealthShift(kind, worse, better, mcnemar_one_sided(worse, better)))
    return out


def prefill_summary(pairs: Sequence[tuple[ItemResult, ItemResult]]) -> dict[str, Any] | None:
    """Task-level summary of the candidates' teacher-forced ``divergence`` records (``LogitDivergence``); None when
    no item was scored.

    Returns:
        ``{"items", "kl_mean", "kl_p99", "kl_max", "top1_agreement", "max_abs_dlogprob", "nonfinite_items",
        "kl_by_position"}``: KL in nats; ``kl_mean`` the mean of the items' means, ``kl_p99``/``kl_max`` the
        largest item values, top-1 agreement token-weighted, the curve the mean over the items at each position.
    """
    scored = [c.divergence for _, c in pairs if c.divergence]
    if not scored:
        return None
    width = max(len(d["kl_by_position"]) for d in scored)
    curve = []
    for j in range(width):
        vals = [d["kl_by_position"][j] for d in scored if j < len(d["kl_by_position"])]
        curve.append(sum(vals) / len(vals))
    return {"items": len(scored), "kl_mean": sum(d["kl_mean"] for d in scored) / len(scored),
            "kl_p99": max(d["kl_p99"] for d in scored), "kl_max": max(d["kl_max"] for d in scored),
            "top1_agreement": sum(d["top1_agreement"] * d["positions"] for d in scored)
            / max(1, sum(d["positions"] for d in scored)),
            "max_abs_dlogprob": max(d["max_abs_dlogprob"] for d in scored),
            "nonfinite_items": sum(bool(d["nonfinite"]) for d in scored), "kl_by_position": curve}


def task_facts(pairs: Sequence[tuple[ItemResult, ItemResult]], spec: SpecDecodeHealth | None) -> dict[str, Any]:
    """Everything this module measures about one task, as JSON-able data (no judgement: ``gate.health_failures``
    decides which of it fails the candidate).

    Returns:
        ``{"health": {"baseline", "candidate"}, "divergence", "logit", "decode", "by_position", "contradictions",
        "health_shifts"}``: ``health`` the ``OutputHealth`` shares of each side (NaN as None: verdict.json is strict
        JSON), ``divergence`` greedy identity, ``logit`` ``prefill_summary``, ``decode`` ``decode_summary``,
        ``by_position`` ``position_buckets``, ``contradictions`` the counters that disagree with the outputs
        (``contradictions``), ``health_shifts`` the paired ``HealthShift``s. Raises ValueError for no pairs.
    """
    base_h = output_health([b for b, _ in pairs])
    cand_h = output_health([c for _, c in pairs])
    div = divergence(pairs)
    health = {side: {k: (None if isinstance(v, float) and v != v else v) for k, v in asdict(h).items()}
              for side, h in (("baseline", base_h), ("candidate", cand_h))}
    return {"health": health, "divergence": asdict(div), "logit": prefill_summary(pairs),
            "decode": decode_summary(pairs), "by_position": position_buckets(pairs),
            "contradictions": contradictions(spec, div, cand_h, base_h),
            "health_shifts": [asdict(sh) for sh in health_shifts(pairs)]}


CURVE_POSITIONS = 1536  # output positions kept in a task's KL-against-position curve (the long task writes 1,300)
# Output-token buckets [lo, hi) (hi None: open) of ``position_buckets``; the long-generation suite scores its rows
# in the same buckets (per-item metrics ``pos_<lo>_<hi>`` / ``pos_<lo>_plus``).
POSITION_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 256), (256, 512), (512, 1024), (1024, None))


def position_metric(lo: int, hi: int | None) -> str:
    """Name of the per-item metric that scores output positions ``[lo, hi)``: ``pos_0_256``, ``pos_1024_plus``."""
    return f"pos_{lo}_{'plus' if hi is None else hi}"


def _agrees_through(b: ItemResult, c: ItemResult, end: int) -> bool | None:
    """Whether the two outputs agree on every output token before ``end`` (None when unknown: no decode record)."""
    if b.output == c.output:
        return True
    if not c.decode:
        return None
    return c.decode["common_prefix"] >= end


def position_buckets(pairs: Sequence[tuple[ItemResult, ItemResult]],
                     buckets: Sequence[tuple[int, int | None]] = POSITION_BUCKETS) -> list[dict[str, Any]]:
    """Quality, greedy identity and decode-time KL per bucket of output positions (tokens), for one task.

    Per bucket ``[lo, hi)``:
        ``reaching``: items whose baseline output is longer than ``lo`` tokens (``ItemResult.n_tokens``);
        ``identical_share``: share of those whose candidate output agrees with the baseline's on every token up to
        the bucket's end (``min(hi, baseline length)``; from ``decode.common_prefix``, or byte-identical outputs);
        None when an item's agreement is unknown (no decode record on a differing item);
        ``kl_mean``, ``kl_positions``: mean decode-time KL(baseline || candidate), nats/token, over the compared
        positions inside the bucket (``decode.kl_by_position``: positions up to the first differing token), and
        how many there were (None / 0 without any);
        ``baseline``, ``candidate``, ``delta``, ``scored``: when the task scores positions (per-item metric
        ``position_metric(lo, hi)`` on both sides), both means and Δ = candidate − baseline in points over the
        ``scored`` items that have it; None otherwise.
    Pure; an empty ``pairs`` gives buckets with ``reaching`` 0.
    """
    out = []
    for lo, hi in buckets:
        reach = [(b, c) for b, c in pairs if (b.n_tokens or 0) > lo]
        agree = [_agrees_through(b, c, min(hi if hi is not None else math.inf, b.n_tokens or 0)) for b, c in reach]
        kls = [k for _, c in pairs if c.decode and not c.decode.get("nonfinite")
               for k in c.decode["kl_by_position"][lo:hi] if math.isfinite(k)]
        name = position_metric(lo, hi)
        scored = [(b.metrics[name], c.metrics[name]) for b, c in pairs if name in b.metrics and name in c.metrics]
        row: dict[str, Any] = {
            "lo": lo, "hi": hi, "reaching": len(reach),
            "identical_share": (None if any(a is None for a in agree) or not agree else sum(agree) / len(agree)),
            "kl_mean": sum(kls) / len(kls) if kls else None, "kl_positions": len(kls),
            "metric": name if scored else None, "scored": len(scored), "baseline": None, "candidate": None,
            "delta": None}
        if scored:
            mb = 100.0 * sum(x for x, _ in scored) / len(scored)
            mc = 100.0 * sum(y for _, y in scored) / len(scored)
            row.update(baseline=mb, candidate=mc, delta=mc - mb)
        out.append(row)
    return out


def decode_summary(pairs: Sequence[tuple[ItemResult, ItemResult]]) -> dict[str, Any] | None:
    """Task-level summary of the candidates' ``decode`` evidence (None when no item has any).

    Returns:
        ``{"items", "positions", "kl_mean", "kl_max", "top1_agreement", "max_abs_dlogprob", "nonfinite_items",
        "unscored_items", "mean_common_prefix", "tie_gaps", "kl_by_position", "items_by_position"}``: KL (nats) and top-1 agreement
        are token-weighted over every compared position of every item; ``tie_gaps`` maps each differing item's
        ``item_id`` to its ``tie_gap`` (None for inf: not a near-tie); the curve is the mean KL over the items
        compared at each output position (first ``CURVE_POSITIONS``), with how many items that mean covers.
        ``nonfinite_items`` counts items whose candidate recorded a NaN/+inf log-prob (always a failure); those and
        any other item with an infinite KL (``unscored_items``) are left out of the means.
    """
    scored = [(b, c.decode) for b, c in pairs if c.decode]
    if not scored:
        return None
    finite = [(b, d) for b, d in scored if not d["nonfinite"] and all(math.isfinite(k) for k in d["kl_by_position"])]
    positions = sum(d["positions"] for _, d in finite)
    kl_sum = sum(d["kl_mean"] * d["positions"] for _, d in finite)
    curve, counts = [], []
    for j in range(min(CURVE_POSITIONS, max((len(d["kl_by_position"]) for _, d in finite), default=0))):
        vals = [d["kl_by_position"][j] for _, d in finite if j < len(d["kl_by_position"])]
        curve.append(sum(vals) / len(vals))
        counts.append(len(vals))
    return {
        "items": len(scored), "positions": positions,
        "kl_mean": kl_sum / positions if positions else None,
        "kl_max": max((d["kl_max"] for _, d in finite), default=None),
        "top1_agreement": (sum(d["top1_agreement"] * d["positions"] for _, d in finite) / positions
                           if positions else None),
        "max_abs_dlogprob": max((d["max_abs_dlogprob"] for _, d in finite), default=None),
        "nonfinite_items": sum(bool(d["nonfinite"]) for _, d in scored),
        "unscored_items": len(scored) - len(finite),
        "mean_common_prefix": sum(d["common_prefix"] for _, d in scored) / len(scored),
        "tie_gaps": {str(b.item_id): (d["tie_gap"] if math.isfinite(d["tie_gap"]) else None)
                     for b, d in scored if d["tie_gap"] is not None},
        "kl_by_position": curve, "items_by_position": counts,
    }


def as_dict(obj: Any) -> dict[str, Any] | None:
    """JSON-able form of an evidence record (None stays None)."""
    return None if obj is None else asdict(obj)
