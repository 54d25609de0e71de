"""Reasoning cost per task: thinking and answer tokens per side and their paired difference (``chat.think_end``).

A switch that makes the model think longer costs output tokens (and so throughput and latency) even when accuracy
holds; the gate shows it beside the accuracy Δ. Pure functions over paired items; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from evalgate.compare.intervals import paired_t_interval
from evalgate.fmt import num
from evalgate.results.records import ItemResult

__all__ = ["LEVEL", "paired_tokens", "reasoning_line", "reasoning_summary"]
LEVEL = 0.95  # two-sided level of the token intervals


def paired_tokens(base: Sequence[float], cand: Sequence[float], level: float = LEVEL) -> dict[str, Any]:
    """Means per side and the paired difference of per-item token counts, with a two-sided ``level`` interval.

    Paired t on the per-item differences ``d_i = cand_i - base_i``: mean(d) -/+ t_{(1+level)/2, n-1} * sd(d)/sqrt(n)
    (``intervals.paired_t_interval``; sd with n - 1 degrees of freedom). Token counts are far from normal on a few
    items: the interval is the t approximation, nothing more.

    Args:
        base, cand: per-item counts (tokens), paired by position; same length n >= 1.
    Returns:
        ``{"baseline": mean, "candidate": mean, "delta": mean(d), "ci_low", "ci_high"}`` in tokens; the interval ends
        are None when n < 2.
    Raises:
        ValueError: the sequences differ in length or are empty.
    """
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.shape != c.shape or b.size == 0:
        raise ValueError(f"paired token counts need equal, non-empty lengths, got {b.size} and {c.size}")
    d = c - b
    n = d.size
    se = float(np.std(d, ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    lo, hi = paired_t_interval(float(d.mean()), se, n - 1, alpha=(1 - level) / 2)
    return {"baseline": float(b.mean()), "candidate": float(c.mean()), "delta": float(d.mean()),
            "ci_low": None if math.isnan(lo) else lo, "ci_high": None if math.isnan(hi) else hi}


def reasoning_summary(pairs: Sequence[tuple[ItemResult, ItemResult]]) -> dict[str, Any] | None:
    """One task's reasoning block: None unless both sides' items carry token counts (``chat.think_end`` set).

    Returns:
        ``{"n": paired items counted, "level": 0.95, "method": "paired t on per-item differences",
        "thinking_tokens": paired_tokens(...), "answer_tokens": paired_tokens(...),
        "truncated_thought": {"baseline": count, "candidate": count}}``.
    """
    counted = [(b, k) for b, k in pairs if b.thinking_tokens is not None and k.thinking_tokens is not None]
    if not counted:
        return None
    return {
        "n": len(counted), "level": LEVEL, "method": "paired t on per-item differences",
        "thinking_tokens": paired_tokens([b.thinking_tokens for b, _ in counted],
                                         [k.thinking_tokens for _, k in counted]),
        "answer_tokens": paired_tokens([b.answer_tokens or 0 for b, _ in counted],
                                       [k.answer_tokens or 0 for _, k in counted]),
        "truncated_thought": {"baseline": sum(b.truncated_thought for b, _ in counted),
                              "candidate": sum(k.truncated_thought for _, k in counted)},
    }


def _tokens(d: Any, level: float) -> str:
    """``12.0 → 14.5 (Δ +2.5, 95% CI [+0.4, +4.6])`` for a ``verdict.TokenDiff`` (tokens per item; ``evalgate.fmt``'s
    signs: a real minus, no sign on zero)."""
    ci = (f", {100 * level:.0f}% CI [{num(d.ci_low)}, {num(d.ci_high)}]" if d.ci_low is not None
          and d.ci_high is not None else "")
    return f"{num(d.baseline, signed=False)} \u2192 {num(d.candidate, signed=False)} (\u0394 {num(d.delta)}{ci})"


def reasoning_line(r: Any) -> str:
    """One line for a task's ``verdict.Reasoning`` (terminal, summary, report): thinking and answer tokens per item
    on both sides with the paired difference, and truncated thoughts per side."""
    level = r.level or LEVEL
    trunc = r.truncated_thought or {}
    return (f"thinking tokens/item {_tokens(r.thinking_tokens, level)}; answer tokens/item "
            f"{_tokens(r.answer_tokens, level)}; truncated thoughts {trunc.get('baseline', 0)} \u2192 "
            f"{trunc.get('candidate', 0)} of {r.n} (scored as empty answers); paired t on per-item differences")
