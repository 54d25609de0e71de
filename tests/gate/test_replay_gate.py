"""Tests of evalgate.gate.replay: the identity rule's Clopper-Pearson bounds, the KL and valid-JSON rules, and how the
replay verdict joins the run's."""

from __future__ import annotations

import math

import pytest

from evalgate.compare.replay import ReplayItem, compare_replay
from evalgate.gate import Decision, Verdict
from evalgate.gate.replay import agreeing_share_bounds, combine, decide_replay


def items(n_same: int, n_diff: int, *, json_pairs=(), kl=None, tie_gap=math.inf):
    out = [ReplayItem(line=i, identical=True, first_divergence=None, tie_gap=None, kl_mean=kl,
                      kl_positions=4 if kl is not None else 0, base_tokens=4, cand_tokens=4)
           for i in range(1, n_same + 1)]
    out += [ReplayItem(line=n_same + i, identical=False, first_divergence=1, tie_gap=tie_gap, kl_mean=kl,
                       kl_positions=2 if kl is not None else 0, base_tokens=4, cand_tokens=5)
            for i in range(1, n_diff + 1)]
    for k, (b, c) in enumerate(json_pairs):
        out[k] = ReplayItem(**{**out[k].__dict__, "wants_json": True, "json_valid": (b, c)})
    return compare_replay(out, near_tie=0.01, alpha=0.05)


def decide(cmp, floor=0.5, lossless=False, margin=5.0):
    return decide_replay(cmp, floor=floor, alpha=0.05, json_margin=margin, power=0.8, lossless=lossless,
                         max_kl_mean=0.001)


def test_clopper_pearson_bounds_closed_forms():
    # k = n: L = alpha ** (1/n); k = 0: U = 1 - alpha ** (1/n) (the binomial tail in closed form)
    assert agreeing_share_bounds(10, 10, 0.05) == (pytest.approx(0.05 ** 0.1), 1.0)
    assert agreeing_share_bounds(0, 10, 0.05) == (0.0, pytest.approx(1 - 0.05 ** 0.1))
    lo, hi = agreeing_share_bounds(5, 10, 0.05)
    # P[Bin(10, lo) >= 5] = 0.05 and P[Bin(10, hi) <= 5] = 0.05
    from math import comb
    assert sum(comb(10, j) * lo ** j * (1 - lo) ** (10 - j) for j in range(5, 11)) == pytest.approx(0.05)
    assert sum(comb(10, j) * hi ** j * (1 - hi) ** (10 - j) for j in range(0, 6)) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        agreeing_share_bounds(3, 2, 0.05)


def test_all_agreeing_passes_when_the_lower_bound_reaches_the_floor():
    d = decide(items(10, 0), floor=0.7)  # L = 0.05 ** 0.1 = 0.741 >= 0.7
    assert d.verdict is Verdict.PASS and d.share == 1.0
    assert d.lower == pytest.approx(0.05 ** 0.1)


def test_few_requests_are_inconclusive_never_a_pass():
    d = decide(items(10, 0), floor=0.95)  # L = 0.741 < 0.95 <= U = 1
    assert d.verdict is Verdict.INCONCLUSIVE
    # all agreeing needs n with 0.05 ** (1/n) >= 0.95: n >= ln 0.05 / ln 0.95 = 58.4 -> 59
    assert "needs 59 requests" in d.rules[0].reason


def test_many_changed_outputs_block():
    d = decide(items(2, 18), floor=0.5)  # 10 %: U = Beta_0.95(3, 18) = 0.28 < 0.5
    assert d.verdict is Verdict.BLOCK
    assert d.upper < 0.5 and "upper bound < floor" in d.reasons[0]


def test_near_tie_flips_count_as_agreeing():
    d = decide(items(2, 18, tie_gap=0.001), floor=0.7)
    assert d.comparison.agreement.agreeing == 20 and d.verdict is Verdict.PASS


def test_kl_rule_only_for_lossless():
    cmp = items(20, 0, kl=0.01)
    assert decide(cmp, floor=0.5).verdict is Verdict.PASS
    lossless = decide(cmp, floor=0.5, lossless=True)
    assert lossless.verdict is Verdict.BLOCK and "decode-time KL 0.01" in lossless.reasons[0]


def test_json_loss_blocks():
    # 40 JSON requests, 12 valid -> invalid and none the other way: McNemar p = 0.5 ** 12, delta = -30 points
    cmp = items(40, 0, json_pairs=[(True, False)] * 12 + [(True, True)] * 28)
    d = decide(cmp, floor=0.5)
    assert cmp.json.p_loss == pytest.approx(0.5 ** 12)
    assert [r.verdict for r in d.rules] == [Verdict.PASS, Verdict.BLOCK]
    assert d.verdict is Verdict.BLOCK and "valid JSON 100.0% -> 70.0%" in d.reasons[0]


def test_json_unchanged_on_many_requests_passes_and_few_are_inconclusive():
    many = decide(items(300, 0, json_pairs=[(True, True)] * 300), floor=0.9)
    assert [r.verdict for r in many.rules] == [Verdict.PASS, Verdict.PASS]
    few = decide(items(10, 0, json_pairs=[(True, True)] * 10), floor=0.7)
    assert [r.verdict for r in few.rules] == [Verdict.PASS, Verdict.INCONCLUSIVE]  # MDE > 5 points at n=10
    assert few.verdict is Verdict.INCONCLUSIVE


RUN_PASS = Decision(Verdict.PASS, ("a/t: PASS: fine",), ())


def test_combine():
    block, unsure, ok = decide(items(2, 18)), decide(items(10, 0), floor=0.95), decide(items(10, 0), floor=0.7)
    assert combine(RUN_PASS, None, "warn") is RUN_PASS
    assert combine(Decision(Verdict.NO_OP, ("same",), ()), block, "warn").verdict is Verdict.NO_OP
    b = combine(RUN_PASS, block, "warn")
    assert b.verdict is Verdict.BLOCK and b.reasons[0].startswith("replay: BLOCK:")
    assert combine(RUN_PASS, unsure, "warn").verdict is Verdict.INCONCLUSIVE
    counted = combine(RUN_PASS, unsure, "block")
    assert counted.verdict is Verdict.BLOCK and "counted as BLOCK" in counted.reasons[0]
    p = combine(RUN_PASS, ok, "warn")
    assert p.verdict is Verdict.PASS and p.reasons[-1].startswith("replay: PASS:")
    run_block = Decision(Verdict.BLOCK, ("a/t: BLOCK: loss",), ())
    assert combine(run_block, unsure, "warn") == run_block
