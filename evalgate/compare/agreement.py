"""How far a task's greedy outputs agree on both sides: the fact the lossless rule (``gate.accuracy``) decides on."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["OutputAgreement", "is_near_tie"]


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


def is_near_tie(tie_gap: float | None, tolerance: float) -> bool:
    """A differing output whose first differing token the baseline ranked within ``tolerance`` nats of its own
    (``evidence.DecodeDivergence.tie_gap``; None: the outputs are identical, never a tie-flip): numerics, not a
    changed model, so the lossless rule counts it as agreeing."""
    return tie_gap is not None and tie_gap <= tolerance
