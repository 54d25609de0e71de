"""Tests of evalgate.compare.replay: per-request comparison of replayed outputs and the run-level facts."""

from __future__ import annotations

import math

import pytest

from evalgate.compare.replay import ReplayOutput, compare_replay, json_validity, replay_item, tool_called

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def out(ids, text="", lps=None):
    return ReplayOutput(text=text, token_ids=tuple(ids), top_logprobs=None if lps is None else tuple(lps))


def test_identical_outputs_have_no_divergence():
    item = replay_item(3, out([1, 2, 3]), out([1, 2, 3]))
    assert (item.line, item.identical, item.first_divergence) == (3, True, None)
    assert (item.base_tokens, item.cand_tokens) == (3, 3)


def test_first_divergence_is_the_first_differing_token_position():
    assert replay_item(1, out([1, 2, 3, 4]), out([1, 2, 9, 4])).first_divergence == 2
    # one output a prefix of the other: the divergence is where the shorter one stops
    item = replay_item(1, out([1, 2]), out([1, 2, 5, 6]))
    assert (item.identical, item.first_divergence, item.cand_tokens) == (False, 2, 4)


def test_decode_kl_and_tie_gap_from_top_logprobs():
    # position 0: same token 1, distributions differ; position 1: baseline picks 2 (lp -0.6), candidate picks 3
    lb, lc = math.log(0.6), math.log(0.4)
    base = out([1, 2], lps=[[[1, lb], [5, lc]], [[2, math.log(0.51)], [3, math.log(0.49)]]])
    cand = out([1, 3], lps=[[[1, lc], [5, lb]], [[3, math.log(0.5)], [2, math.log(0.5)]]])
    item = replay_item(1, base, cand)
    kl0 = 0.6 * math.log(0.6 / 0.4) + 0.4 * math.log(0.4 / 0.6)
    kl1 = 0.51 * math.log(0.51 / 0.5) + 0.49 * math.log(0.49 / 0.5)
    assert item.kl_positions == 2
    assert item.kl_mean == pytest.approx((kl0 + kl1) / 2, abs=1e-9)
    assert item.tie_gap == pytest.approx(math.log(0.51) - math.log(0.49))


def test_json_validity_rules():
    assert json_validity(' {"a": 1}\n', None)
    assert not json_validity('```json\n{"a": 1}\n```', None)  # a fence is not a JSON body
    assert not json_validity("[1, 2]", None)  # json_object asks for an object
    assert not json_validity('{"a": 1', None)
    assert json_validity('{"city": "Oslo"}', SCHEMA)
    assert not json_validity('{"town": "Oslo"}', SCHEMA)


def test_tool_called():
    assert tool_called('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>') == "get_weather"
    assert tool_called('{"function": {"name": "lookup"}} trailing') == "lookup"
    assert tool_called("It is sunny.") is None
    assert tool_called('{"name": 3}') is None


def test_json_and_tool_fields_of_an_item():
    item = replay_item(2, out([1], '{"city": "Oslo"}'), out([2], '{"town": 1}'), wants_json=True, schema=SCHEMA)
    assert item.json_valid == (True, False) and item.has_schema
    t = replay_item(2, out([1], '{"name": "a"}'), out([1], '{"name": "a"}'), tools=True)
    assert t.tool_names == ("a", "a") and t.tools_agree is True
    assert replay_item(2, out([1]), out([1])).tools_agree is None


def test_compare_replay_counts_and_weighted_kl():
    items = [replay_item(1, out([1, 2]), out([1, 2])),
             replay_item(2, out([1, 2], lps=[[[1, -0.1], [2, -2.4]], [[2, -0.69], [4, -0.70]]]),
                         out([1, 4], lps=[[[1, -0.1], [2, -2.4]], [[4, -0.6], [2, -0.8]]])),
             replay_item(5, out([7]), out([8, 9]))]
    cmp = compare_replay(items, near_tie=0.02, alpha=0.05)
    a = cmp.agreement
    assert (a.identical, a.n, a.differing, a.tie_flips) == (1, 3, (2, 5), (2,))
    assert a.share == pytest.approx(2 / 3)
    # only item 2 recorded log-probs: its KL over its 2 positions is the run's
    assert a.kl_mean == pytest.approx(items[1].kl_mean)
    s = cmp.summary()
    assert s["first_divergence_median"] == pytest.approx(0.5)  # divergences at 1 and 0
    assert s["tokens"] == {"baseline": 5, "candidate": 6}
    assert s["length_change"] == pytest.approx(6 / 5 - 1)
    assert cmp.json is None and s["json"]["requests"] == 0


def test_compare_replay_json_pairs_mcnemar():
    good, bad = '{"a": 1}', "oops"
    pairs = [(good, good)] * 6 + [(good, bad)] * 3 + [(bad, good)] * 1
    items = [replay_item(i, out([i], b), out([i], c), wants_json=True) for i, (b, c) in enumerate(pairs, 1)]
    j = compare_replay(items, near_tie=0.01, alpha=0.05).json
    assert (j.n, j.n_regressed, j.n_improved) == (10, 3, 1)
    assert j.baseline_mean == pytest.approx(90.0) and j.candidate_mean == pytest.approx(70.0)
    assert j.p_loss == pytest.approx((4 + 1) / 16)  # P[X >= 3], X ~ Bin(4, 1/2)


def test_no_items_is_an_error():
    with pytest.raises(ValueError, match="never a pass"):
        compare_replay([], near_tie=0.01, alpha=0.05)
