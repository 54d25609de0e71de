"""Next-token distributions of the two engines compared per item: KL, top-1 agreement, near-tie flips (pure).

Teacher-forced along the baseline's greedy output (``logit_divergence``, prefill) and as recorded while decoding
along the tokens both engines generated alike (``decode_divergence``). Inputs are top-k log-probs per output
position; ``position_kl`` is a lower bound of the full-vocabulary KL. ``evalgate.compare.evidence`` summarises these per
task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DecodeDivergence", "LogitDivergence", "decode_divergence", "logit_divergence", "position_kl"]


@dataclass(frozen=True)
class LogitDivergence:
    """Candidate vs baseline next-token distributions along the baseline's own greedy output (teacher forcing).

    Attributes:
        positions: output positions compared.
        kl_mean, kl_p99, kl_max: KL(baseline || candidate) per position, in nats (see ``position_kl``).
        top1_agreement: share of positions where both engines rank the same token first.
        max_abs_dlogprob: max over positions of |log p_base(t) - log p_cand(t)| for the baseline's token t.
        nonfinite: True when the candidate produced a NaN or +inf log-prob anywhere (always a failure).
        kl_by_position: the per-position KL (for the divergence-vs-position curve).
    """

    positions: int
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1_agreement: float
    max_abs_dlogprob: float
    nonfinite: bool
    kl_by_position: tuple[float, ...]


def position_kl(p_top: dict[int, float], q_top: dict[int, float]) -> float:
    """KL(P || Q) in nats from top-k log-probs of each side, over the partition {P's top-k tokens, all others}.

    Collapsing a distribution onto a partition can only shrink KL (data-processing inequality), so this is
    a lower bound of the full-vocabulary KL that llama.cpp's ``--kl-divergence`` computes. A token of P's
    top-k that is missing from Q's top-k gets Q's smallest listed probability (an upper bound for it).
    Raises ValueError for empty inputs.
    """
    if not p_top or not q_top:
        raise ValueError("empty distribution")
    q_floor = math.exp(min(q_top.values()))
    kl, p_sum, q_sum = 0.0, 0.0, 0.0
    for tok, lp in p_top.items():
        p = math.exp(lp)
        q = math.exp(q_top[tok]) if tok in q_top else q_floor
        if p > 0:
            kl += p * (lp - math.log(max(q, 1e-30)))
        p_sum += p
        q_sum += q
    p_rest, q_rest = max(0.0, 1.0 - p_sum), max(1e-30, 1.0 - q_sum)
    if p_rest > 1e-12:
        kl += p_rest * math.log(p_rest / q_rest)
    return max(0.0, kl)


def logit_divergence(base: list[dict[int, float]], cand: list[dict[int, float]], tokens: list[int]) -> LogitDivergence | None:
    """Per-item summary of ``position_kl`` along ``tokens`` (the baseline's output ids); None for an empty output.

    Args:
        base, cand: per output position, ``{token id: logprob}`` (top-k plus the actual token) from each engine.
        tokens: the baseline's output token ids (same length).
    """
    n = min(len(base), len(cand), len(tokens))
    if n == 0:
        return None
    nonfinite = any(math.isnan(v) or v == math.inf for pos in cand[:n] for v in pos.values())
    kls, agree, dmax = [], 0, 0.0
    for j in range(n):
        b, c = base[j], cand[j]
        finite_c = {t: v for t, v in c.items() if math.isfinite(v)}
        kls.append(position_kl(b, finite_c) if b and finite_c else math.inf)
        agree += bool(b and finite_c) and max(b, key=b.__getitem__) == max(finite_c, key=finite_c.__getitem__)
        t = tokens[j]
        if t in b and t in c:
            d = abs(b[t] - c[t])
            dmax = max(dmax, d if math.isfinite(d) else math.inf)
    ordered = sorted(kls)
    return LogitDivergence(positions=n, kl_mean=sum(kls) / n, kl_p99=ordered[min(n - 1, int(0.99 * n))],
                           kl_max=ordered[-1], top1_agreement=agree / n, max_abs_dlogprob=dmax,
                           nonfinite=nonfinite, kl_by_position=tuple(round(k, 6) for k in kls))


@dataclass(frozen=True)
class DecodeDivergence:
    """Candidate vs baseline next-token distributions recorded *while decoding*, along the tokens both generated alike.

    Up to and including the first differing token both engines saw the same context, so their distributions
    there are directly comparable. Unlike teacher-forced prefill scoring (``LogitDivergence``) this sees
    decode-time switches: an SSM state stored in FP16 between steps, a speculative-decoding path, a decode kernel.

    Attributes:
        common_prefix: leading output tokens identical on both sides (= the output length when identical).
        positions: positions compared: the common prefix, plus the first differing position when both sides
            have one.
        kl_mean, kl_max: KL(baseline || candidate) per compared position, nats (``position_kl``, a lower bound).
        top1_agreement: share of compared positions whose top-ranked token is the same on both sides.
        max_abs_dlogprob: max |log p_base(t) - log p_cand(t)| over compared positions, t = the baseline's token,
            where both sides list t.
        nonfinite: the candidate recorded a NaN or +inf log-prob anywhere in its output (always a failure).
        tie_gap: at the first differing position, log p_base(baseline's token) - log p_base(candidate's token)
            under the *baseline* engine, nats: how close to a tie the flip was (0 = exact tie). ``inf`` when the
            baseline did not list the candidate's token in its top-k, or one output is a prefix of the other;
            None when the outputs are identical.
        kl_by_position: KL at each compared position (the divergence-against-position curve).
    """

    common_prefix: int
    positions: int
    kl_mean: float
    kl_max: float
    top1_agreement: float
    max_abs_dlogprob: float
    nonfinite: bool
    tie_gap: float | None
    kl_by_position: tuple[float, ...]


def decode_divergence(base_ids: Sequence[int], base_lps: Sequence[Sequence[Sequence[float]]],
                      cand_ids: Sequence[int], cand_lps: Sequence[Sequence[Sequence[float]]]) -> DecodeDivergence | None:
    """Compare two greedy generations of the same prompt by their decode-time top-k log-probs.

    Args:
        base_ids, cand_ids: output token ids of baseline and candidate.
        base_lps, cand_lps: per output position ``[[token id, logprob], ...]`` (``engine.Generation.top_logprobs``),
            one entry per output token.
    Returns:
        None when either side recorded no log-probs or generated nothing (nothing to compare).
    """
    if not base_ids or not cand_ids or not base_lps or not cand_lps:
        return None
    n_b, n_c = min(len(base_ids), len(base_lps)), min(len(cand_ids), len(cand_lps))
    prefix = 0
    while prefix < min(n_b, n_c) and base_ids[prefix] == cand_ids[prefix]:
        prefix += 1
    compared = min(prefix + 1, n_b, n_c)
    nonfinite = any(math.isnan(lp) or lp == math.inf for pos in cand_lps for _, lp in pos)
    kls, agree, dmax = [], 0, 0.0
    for j in range(compared):
        b = {int(t): float(lp) for t, lp in base_lps[j]}
        c = {int(t): float(lp) for t, lp in cand_lps[j] if math.isfinite(lp)}
        kls.append(position_kl(b, c) if b and c else math.inf)
        agree += bool(b and c) and max(b, key=b.__getitem__) == max(c, key=c.__getitem__)
        t = int(base_ids[j])
        if t in b and t in c:
            dmax = max(dmax, abs(b[t] - c[t]))
    tie_gap: float | None = None
    if prefix < min(n_b, n_c):
        b = {int(t): float(lp) for t, lp in base_lps[prefix]}
        tb, tc = int(base_ids[prefix]), int(cand_ids[prefix])
        tie_gap = b[tb] - b[tc] if tb in b and tc in b else math.inf
    elif n_b != n_c or list(base_ids) != list(cand_ids):
        tie_gap = math.inf  # one output stops where the other goes on: not a numerical tie we can see
    if not kls:
        return None
    return DecodeDivergence(common_prefix=prefix, positions=len(kls), kl_mean=sum(kls) / len(kls), kl_max=max(kls),
                            top1_agreement=agree / len(kls), max_abs_dlogprob=dmax, nonfinite=nonfinite,
                            tie_gap=tie_gap, kl_by_position=tuple(float(f"{k:.3g}") for k in kls))
