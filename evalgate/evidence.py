"""Engine-aware evidence beside the accuracy delta: output health, divergence, speculative-decoding health.

Pure functions over stored items and counters; no I/O. An accuracy delta alone is a blunt instrument for
precision and speculative-decoding changes: a "lossless" switch should leave greedy outputs identical, a
truncated or degenerate output is a failure whatever its score, and spec-decode counters are evidence,
not proof (vLLM has reported every draft accepted while producing NaN log-probs and a stream of token 0).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from evalgate.results import ItemResult

# Per-item metrics that say whether the output had the task's answer format (suites declare them).
FORMAT_METRICS = ("json_valid", "parsed")
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


def divergence(pairs: Sequence[tuple[ItemResult, ItemResult]], offsets: Iterable[int] = (0, 8, 16, 32, 64, 128, 256)) -> Divergence:
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

    - counters claim (nearly) every draft accepted while greedy outputs diverge or are degenerate;
    - the candidate degenerates or truncates more than the baseline on a task.
    """
    out = []
    if spec is not None and spec.acceptance_rate >= 0.99 and (div.identical_share < 1.0 or cand_health.degenerate > 0):
        out.append(f"spec-decode counters report {100 * spec.acceptance_rate:.0f}% of drafts accepted, yet "
                   f"{100 * (1 - div.identical_share):.0f}% of greedy outputs differ from the baseline and "
                   f"{100 * cand_health.degenerate:.0f}% are degenerate")
    if cand_health.degenerate > base_health.degenerate:
        out.append(f"degenerate outputs rose from {100 * base_health.degenerate:.0f}% to {100 * cand_health.degenerate:.0f}%")
    if cand_health.truncated > base_health.truncated:
        out.append(f"outputs truncated at max_tokens rose from {100 * base_health.truncated:.0f}% to "
                   f"{100 * cand_health.truncated:.0f}%")
    return out


def as_dict(obj: Any) -> dict[str, Any] | None:
    """JSON-able form of an evidence record (None stays None)."""
    return None if obj is None else asdict(obj)
