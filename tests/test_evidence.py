"""Evidence: output health, divergence and spec-decode health, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from evalgate.evidence import (contradictions, divergence, first_divergence, is_degenerate, output_health,
                               spec_decode_health)
from evalgate.results import ItemResult


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
    assert len(flags) == 3
    assert flags[0].startswith("spec-decode counters report 100% of drafts accepted, yet 50% of greedy outputs differ")
    assert contradictions(None, divergence(list(zip(base, base))), output_health(base), output_health(base)) == []


def test_position_kl_matches_closed_form_on_a_partition() -> None:
    import numpy as np

    from evalgate.evidence import logit_divergence, position_kl

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

    from evalgate.evidence import task_evidence

    base = [item(0, "the total is 4"), item(1, "ok")]
    div = {"positions": 2, "kl_mean": 0.5, "kl_p99": 1.0, "kl_max": 1.0, "top1_agreement": 0.5,
           "max_abs_dlogprob": 2.0, "nonfinite": True, "kl_by_position": (0.0, 1.0)}
    cand = [replace(item(0, "0 " * 20), divergence=div), item(1, "ok")]
    ev = task_evidence(list(zip(base, cand)), None)
    assert ev["logit"]["items"] == 1 and ev["logit"]["nonfinite_items"] == 1
    assert ev["logit"]["kl_by_position"] == [0.0, 1.0]
    assert ev["failures"] == ["1 item(s) with NaN/inf log-probs under the candidate engine",
                              "degenerate (repeated-unit) outputs: 0% baseline, 50% candidate"]
    assert ev["divergence"]["identical_share"] == 0.5
    clean = task_evidence(list(zip(base, base)), None)
    assert clean["failures"] == [] and clean["logit"] is None


def test_task_evidence_is_strict_json() -> None:
    import json

    from evalgate.evidence import task_evidence

    ev = task_evidence([(item(0, "a"), item(0, "a"))], None)  # no format metric: unparseable is unknown
    assert ev["health"]["candidate"]["unparseable"] is None
    json.dumps(ev, allow_nan=False)
