"""Evidence: output health, divergence and spec-decode health, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from evalgate.compare.evidence import (
    contradictions,
    divergence,
    first_divergence,
    is_degenerate,
    output_health,
    spec_decode_health,
)
from evalgate.results.records import ItemResult


def item(i: int, output: str, *, finish: str = "stop", metrics: dict[str, float] | None = None) -> ItemResult:
    return ItemResult(task="t", item_id=i, item_hash=f"h{i}", prompt="p", target="x", output=output, score=1.0,
                      metrics=metrics or {}, n_tokens=len(output.split()), finish_reason=finish)


def test_degenerate_detects_repeated_units_only() -> None:
    assert is_degenerate("answer: " + "0 " * 12)
    assert is_degenerate("<pad>" * 12)
    assert not is_degenerate("0 " * 11)
    assert not is_degenerate('{"total": "1,000.00", "date": "2023-01-01"}')


def test_output_health_shares() -> None:
    items = [item(0, "ok", metrics={"parsed": 1.0}), item(1, "  ", metrics={"parsed": 0.0}),
             item(2, "x" * 40, finish="length", metrics={"parsed": 0.0}), item(3, "fine", metrics={"parsed": 1.0})]
    h = output_health(items)
    assert (h.n, h.truncated, h.empty, h.unparseable, h.degenerate) == (4, 0.25, 0.25, 0.5, 0.25)
    assert math.isnan(output_health([item(0, "a")]).unparseable)
    with pytest.raises(ValueError):
        output_health([])


def test_first_divergence_and_curve() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abcd", "abxd") == 2
    assert first_divergence("ab", "abc") == 2
    pairs = [(item(0, "same"), item(0, "same")), (item(1, "abcdefghij"), item(1, "abcdefghiX")),
             (item(2, "xyz"), item(2, "Xyz"))]
    d = divergence(pairs, offsets=(0, 5, 9, 10))
    assert d.identical_share == pytest.approx(1 / 3)
    assert d.first_divergence == (9, 0)
    # still identical beyond offset o: item 0 always; item 1 while o < 9; item 2 never (diverges at 0)
    assert d.curve == pytest.approx((2 / 3, 2 / 3, 1 / 3, 1 / 3))


def test_spec_decode_health_formulas() -> None:
    assert spec_decode_health({}) is None
    s = spec_decode_health({"spec_decode_num_drafts": 10.0, "spec_decode_num_draft_tokens": 30.0,
                            "spec_decode_num_accepted_tokens": 12.0})
    assert s is not None
    assert s.acceptance_rate == pytest.approx(0.4)
    assert s.mean_acceptance_length == pytest.approx(2.2)


def test_contradiction_all_accepted_but_outputs_diverge() -> None:
    base = [item(0, "the answer is 4"), item(1, "fine")]
    cand = [item(0, "0 " * 20, finish="length"), item(1, "fine")]
    s = spec_decode_health({"spec_decode_num_drafts": 5.0, "spec_decode_num_draft_tokens": 15.0,
                            "spec_decode_num_accepted_tokens": 15.0})
    flags = contradictions(s, divergence(list(zip(base, cand))), output_health(cand), output_health(base))
    assert len(flags) == 1
    assert flags[0].startswith("spec-decode counters report 100% of drafts accepted, yet 50% of greedy outputs differ")
    assert contradictions(None, divergence(list(zip(base, base))), output_health(base), output_health(base)) == []


def test_position_kl_matches_closed_form_on_a_partition() -> None:
    import numpy as np

    from evalgate.compare.evidence import logit_divergence, position_kl

    p = {1: np.log(0.5), 2: np.log(0.3)}  # rest 0.2
    q = {1: np.log(0.4), 2: np.log(0.4)}  # rest 0.2
    expected = 0.5 * np.log(0.5 / 0.4) + 0.3 * np.log(0.3 / 0.4) + 0.2 * np.log(0.2 / 0.2)
    assert position_kl(p, q) == pytest.approx(expected)
    assert position_kl(p, p) == pytest.approx(0.0, abs=1e-12)
    d = logit_divergence([p, p], [q, p], [1, 2])
    assert d is not None
    assert d.kl_mean == pytest.approx(expected / 2) and d.kl_max == pytest.approx(expected)
    assert d.top1_agreement == 1.0  # position 0: q ties 1 and 2, the first listed (1) wins -> agree
    flipped = logit_divergence([p, p], [{1: np.log(0.2), 2: np.log(0.6)}, p], [1, 2])
    assert flipped is not None and flipped.top1_agreement == 0.5
    assert d.max_abs_dlogprob == pytest.approx(np.log(0.5 / 0.4))
    assert not d.nonfinite
    assert logit_divergence([p], [{1: float("nan"), 2: np.log(0.4)}], [1]).nonfinite


def test_task_evidence_fails_degenerate_and_nonfinite_candidates() -> None:
    from dataclasses import replace

    from evalgate.gate import task_evidence

    base = [item(0, "the total is 4"), item(1, "ok")]
    div = {"positions": 2, "kl_mean": 0.5, "kl_p99": 1.0, "kl_max": 1.0, "top1_agreement": 0.5,
           "max_abs_dlogprob": 2.0, "nonfinite": True, "kl_by_position": (0.0, 1.0)}
    cand = [replace(item(0, "0 " * 20), divergence=div), item(1, "ok")]
    # Lossless: one newly degenerate item is a failure, whatever a test says.
    ev = task_evidence(list(zip(base, cand)), None, lossless=True)
    assert ev["logit"]["items"] == 1 and ev["logit"]["nonfinite_items"] == 1
    assert ev["logit"]["kl_by_position"] == [0.0, 1.0]
    assert ev["failures"][0] == "1 item(s) with NaN/inf log-probs under the candidate engine"
    assert ev["failures"][1].startswith("degenerate outputs: 0% baseline, 50% candidate (1 item(s) newly degenerate, "
                                        "0 recovered; one-sided McNemar p=0.5; a lossless switch must never")
    assert ev["divergence"]["identical_share"] == 0.5
    # Lossy: 1 of 2 is not significant (p = 1/2): a warning, not a failure.
    lossy = task_evidence(list(zip(base, cand)), None)
    assert lossy["failures"] == ["1 item(s) with NaN/inf log-probs under the candidate engine"]
    assert any("not significant, not gated" in c for c in lossy["contradictions"])
    clean = task_evidence(list(zip(base, base)), None)
    assert clean["failures"] == [] and clean["logit"] is None


def test_health_shift_is_an_exact_one_sided_mcnemar_test() -> None:
    from scipy.stats import binomtest

    from evalgate.compare.evidence import health_shifts
    from evalgate.gate import task_evidence

    # 12 items: 6 become degenerate, 1 recovers, 5 stay healthy; 2 outputs newly truncated.
    base = [item(i, "fine answer") for i in range(11)] + [item(11, "7 " * 20)]
    cand = ([item(i, "ab" * 20) for i in range(6)]
            + [item(i, "fine answer", finish="length" if i in (6, 7) else "stop") for i in range(6, 11)]
            + [item(11, "recovered")])
    shifts = {s.kind: s for s in health_shifts(list(zip(base, cand)))}
    assert (shifts["degenerate"].worse, shifts["degenerate"].better) == (6, 1)
    assert shifts["degenerate"].p == pytest.approx(binomtest(6, 7, 0.5, alternative="greater").pvalue)
    assert (shifts["truncated"].worse, shifts["truncated"].better) == (2, 0)
    assert shifts["truncated"].p == pytest.approx(0.25) and shifts["empty"].p == 1.0
    ev = task_evidence(list(zip(base, cand)), None, health_alpha=0.1)   # p(degenerate) = 8/128 = 0.0625
    assert len(ev["failures"]) == 1 and ev["failures"][0].startswith("degenerate outputs: 8% baseline, 50% candidate")
    assert task_evidence(list(zip(base, cand)), None, health_alpha=0.05)["failures"] == []


def test_task_evidence_is_strict_json() -> None:
    import json

    from evalgate.gate import task_evidence

    ev = task_evidence([(item(0, "a"), item(0, "a"))], None)  # no format metric: unparseable is unknown
    assert ev["health"]["candidate"]["unparseable"] is None
    json.dumps(ev, allow_nan=False)


def _lps(*dists: dict[int, float]) -> list[list[list[float]]]:
    """Per-position ``[[token, logprob], ...]`` as the engine records them, from probabilities."""
    return [[[t, math.log(p)] for t, p in d.items()] for d in dists]


def test_decode_divergence_compares_the_common_prefix_and_the_first_flip() -> None:
    from evalgate.compare.evidence import decode_divergence

    same = {1: 0.5, 2: 0.3}                  # rest 0.2
    moved = {1: 0.4, 2: 0.4}                 # rest 0.2
    tie_b = {3: 0.40, 4: 0.39, 5: 0.1}       # baseline's own near-tie between tokens 3 and 4
    tie_c = {4: 0.41, 3: 0.38, 5: 0.1}
    # Baseline generates 1 1 3 9, candidate 1 1 4 8: identical for two tokens, flip at position 2.
    d = decode_divergence([1, 1, 3, 9], _lps(same, same, tie_b, {9: 0.9}),
                          [1, 1, 4, 8], _lps(same, moved, tie_c, {8: 0.9}))
    assert d is not None
    assert (d.common_prefix, d.positions) == (2, 3)  # position 3 has different contexts: not compared
    kl1 = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)
    kl2 = 0.40 * math.log(0.40 / 0.38) + 0.39 * math.log(0.39 / 0.41) + 0.1 * math.log(0.1 / 0.1) \
        + 0.11 * math.log(0.11 / 0.11)
    assert d.kl_by_position == pytest.approx((0.0, kl1, kl2), rel=1e-2, abs=1e-12)
    assert d.kl_mean == pytest.approx((kl1 + kl2) / 3, rel=1e-2)
    assert d.kl_max == pytest.approx(kl1, rel=1e-2)
    # Top-1: position 1 ties 1/2 under the candidate, the first listed (1) wins -> agree; position 2 flips.
    assert d.top1_agreement == pytest.approx(2 / 3)
    assert d.max_abs_dlogprob == pytest.approx(math.log(0.5 / 0.4))
    assert d.tie_gap == pytest.approx(math.log(0.40 / 0.39))
    assert not d.nonfinite


def test_decode_divergence_identical_prefix_and_missing_tokens() -> None:
    from evalgate.compare.evidence import decode_divergence

    p = {1: 0.6, 2: 0.3}
    d = decode_divergence([1, 1], _lps(p, p), [1, 1], _lps(p, p))
    assert d is not None and (d.common_prefix, d.positions, d.tie_gap, d.kl_mean) == (2, 2, None, 0.0)
    # Candidate picks a token the baseline did not list in its top-k: not a near-tie.
    far = decode_divergence([1], _lps(p), [7], _lps({7: 0.9}))
    assert far is not None and far.tie_gap == math.inf and far.common_prefix == 0
    # One output is a prefix of the other (a stop came earlier): not a tie we can see.
    short = decode_divergence([1, 1, 2], _lps(p, p, p), [1, 1], _lps(p, p))
    assert short is not None and short.tie_gap == math.inf and short.positions == 2
    nan = decode_divergence([1], _lps(p), [1], [[[1, float("nan")]]])
    assert nan is not None and nan.nonfinite
    assert decode_divergence([], [], [1], _lps(p)) is None
    assert decode_divergence([1], _lps(p), [1], []) is None


def test_decode_summary_is_token_weighted_and_gates_nonfinite() -> None:
    from dataclasses import asdict, replace

    from evalgate.compare.evidence import decode_divergence
    from evalgate.gate import task_evidence

    p, q = {1: 0.5, 2: 0.3}, {1: 0.4, 2: 0.4}
    d_long = decode_divergence([1, 1, 1], _lps(p, p, p), [1, 1, 1], _lps(q, q, q))   # 3 positions, KL k each
    d_short = decode_divergence([1], _lps(p), [1], _lps(p))                          # 1 position, KL 0
    k = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)
    base = [item(0, "a"), item(1, "b")]
    cand = [replace(item(0, "a"), decode=asdict(d_long)), replace(item(1, "b"), decode=asdict(d_short))]
    ev = task_evidence(list(zip(base, cand)), None)["decode"]
    assert ev["items"] == 2 and ev["positions"] == 4
    assert ev["kl_mean"] == pytest.approx(3 * k / 4, rel=1e-2)   # token-weighted, not the mean of item means
    assert ev["kl_by_position"] == pytest.approx([k / 2, k, k], rel=1e-2)
    assert ev["items_by_position"] == [2, 1, 1]
    assert ev["nonfinite_items"] == 0 and ev["tie_gaps"] == {}
    bad = decode_divergence([1], _lps(p), [1], [[[1, float("nan")]]])
    cand_bad = [replace(item(0, "a"), decode=asdict(bad)), cand[1]]
    ev_bad = task_evidence(list(zip(base, cand_bad)), None)
    assert ev_bad["decode"]["nonfinite_items"] == 1
    assert "1 item(s) with NaN/inf log-probs while the candidate decoded" in ev_bad["failures"]


def test_agreement_counts_tie_flips_by_tolerance() -> None:
    from dataclasses import asdict, replace

    import numpy as np

    from evalgate.compare.evidence import decode_divergence
    from evalgate.compare.pairing import compare_tasks
    from evalgate.inputs.thresholds import Thresholds
    from evalgate.results.records import TaskResult

    tie = decode_divergence([3], _lps({3: 0.40, 4: 0.39}), [4], _lps({4: 0.41, 3: 0.38}))  # gap ln(40/39) = 0.0253
    far = decode_divergence([3], _lps({3: 0.9, 4: 0.01}), [4], _lps({4: 0.9}))              # gap ln(90) = 4.5
    base = [item(0, "x"), item(1, "y"), item(2, "z")]
    cand = [replace(item(0, "x2"), decode=asdict(tie)), replace(item(1, "y2"), decode=asdict(far)), item(2, "z")]
    thr = Thresholds(alpha=0.05, default_margin=2.0)
    (c,) = compare_tasks({"t": TaskResult("t", "s", "m", tuple(base))}, {"t": TaskResult("t", "s", "m", tuple(cand))}, thr.policy(None))
    assert c.agreement(0.03).tie_flips == (0,) and c.agreement(0.03).agreeing == 2
    assert c.agreement(0.02).tie_flips == () and c.agreement(0.02).share == pytest.approx(1 / 3)
    assert c.agreement(5.0).tie_flips == (0, 1)
    # Decode KL: token-weighted over measured items (one position each); item 2 has no evidence.
    expected = (tie.kl_mean + far.kl_mean) / 2
    assert c.agreement().kl_mean == pytest.approx(expected) and np.isfinite(expected) and expected > 0


def test_per_request_spec_counts_and_suite_sums() -> None:
    from types import SimpleNamespace

    from evalgate.worker.item_evidence import suite_spec_decode as _suite_spec_decode
    from evalgate.worker.vllm_engine import _spec_counts

    # k=3: 5 verify steps accepted 0, 0, 1, 3, 2 draft tokens -> histogram [2, 1, 1, 1]; 15 draft tokens proposed.
    m = SimpleNamespace(histogram=[2, 1, 1, 1], num_draft_tokens=15)
    assert _spec_counts(m) == {"spec_decode_num_drafts": 5, "spec_decode_num_draft_tokens": 15,
                               "spec_decode_num_accepted_tokens": 6}
    assert _spec_counts(None) is None
    records = {"a": {"spec_decode": _spec_counts(m)}, "b": {"spec_decode": _spec_counts(m)}, "c": {"text": "x"}}
    # Per-request counts win (a cached/reused item keeps its counts); keys repeated by tasks count once.
    assert _suite_spec_decode(records, ["a", "b", "a", "c"], {}, {"spec_decode_num_drafts": 0.0}) == {
        "spec_decode": {"spec_decode_num_drafts": 10.0, "spec_decode_num_draft_tokens": 30.0,
                        "spec_decode_num_accepted_tokens": 12.0},
        "evidence_sources": {"spec_decode": "per_request"}}
    # Without per-request counts (vLLM 0.26): the engine-wide counters' change, and the source says so.
    assert _suite_spec_decode({"c": {}}, ["c"], {"spec_decode_num_drafts": 4.0},
                              {"spec_decode_num_drafts": 9.0}) == {
        "spec_decode": {"spec_decode_num_drafts": 5.0}, "evidence_sources": {"spec_decode": "engine_counters"}}
    # No speculative decoding: no counts and no source.
    assert _suite_spec_decode({"c": {}}, ["c"], {}, {}) == {"spec_decode": {}, "evidence_sources": {}}


def test_contradiction_threshold_is_near_all_accepted() -> None:
    base = [item(0, "the answer is 4")]
    cand = [item(0, "")]
    div = divergence(list(zip(base, cand)))

    def flags(accepted: float) -> list[str]:
        s = spec_decode_health({"spec_decode_num_drafts": 1000.0, "spec_decode_num_draft_tokens": 1000.0,
                                "spec_decode_num_accepted_tokens": accepted})
        return contradictions(s, div, output_health(cand), output_health(base))

    assert flags(984.0)[0].startswith("spec-decode counters report 98% of drafts accepted, yet 100% of greedy outputs")
    assert flags(950.0) and not flags(949.0)
