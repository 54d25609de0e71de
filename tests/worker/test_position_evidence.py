"""Quality, identity and decode KL by output position (evidence.position_buckets) and its report table."""

from __future__ import annotations

import math

from evalgate.compare.evidence import POSITION_BUCKETS, position_buckets, position_metric
from evalgate.compare.pairing import compare_tasks
from evalgate.gate import decide, task_evidence
from evalgate.inputs.thresholds import Thresholds
from evalgate.report.render import render_html
from evalgate.results.records import ItemResult, TaskResult
from runfixtures import gate_document


def _item(i: int, output: str, n_tokens: int, pos: dict[str, float] | None = None, decode: dict | None = None,
          score: float = 1.0) -> ItemResult:
    return ItemResult(task="t", item_id=i, item_hash=f"h{i}", prompt="p", target="x", output=output, score=score,
                      metrics={"row_acc": score, **(pos or {})}, n_tokens=n_tokens, finish_reason="stop", decode=decode)


def _decode(common_prefix: int, kls: list[float]) -> dict:
    return {"common_prefix": common_prefix, "positions": len(kls), "kl_mean": sum(kls) / len(kls), "kl_max": max(kls),
            "top1_agreement": 1.0, "max_abs_dlogprob": 0.0, "nonfinite": False, "tie_gap": None,
            "kl_by_position": kls}


def test_metric_names_match_the_long_suite() -> None:
    assert [position_metric(lo, hi) for lo, hi in POSITION_BUCKETS] == [
        "pos_0_256", "pos_256_512", "pos_512_1024", "pos_1024_plus"]


def test_buckets_by_hand() -> None:
    # item 0: 1100 tokens, identical outputs, KL 0.001 at every position; scored 1,1,1,1 vs 1,1,1,1
    # item 1: 600 tokens, first differing token at 300 (common prefix 300): compared positions 0..300;
    #         KL 0.0 before 256, 0.5 from 256 to 300; scored 1,1,0.5,- vs 1,0.5,0,-  (no row past 1024: absent)
    # item 2: 100 tokens, identical, no decode record
    kl0 = [0.001] * 1100
    kl1 = [0.0] * 256 + [0.5] * 45
    full = {"pos_0_256": 1.0, "pos_256_512": 1.0, "pos_512_1024": 1.0, "pos_1024_plus": 1.0}
    pairs = [
        (_item(0, "A" * 50, 1100, full), _item(0, "A" * 50, 1100, full, _decode(1100, kl0))),
        (_item(1, "B" * 50, 600, {"pos_0_256": 1.0, "pos_256_512": 1.0, "pos_512_1024": 0.5}),
         _item(1, "B" * 40 + "C" * 10, 600, {"pos_0_256": 1.0, "pos_256_512": 0.5, "pos_512_1024": 0.0},
               _decode(300, kl1))),
        (_item(2, "short", 100), _item(2, "short", 100)),
    ]
    rows = position_buckets(pairs)
    assert [r["reaching"] for r in rows] == [3, 2, 2, 1]
    # through 256 every item agrees; item 1 differs before 512 and before its end (600)
    assert [r["identical_share"] for r in rows] == [1.0, 0.5, 0.5, 1.0]
    assert math.isclose(rows[0]["kl_mean"], (256 * 0.001 + 256 * 0.0) / 512)
    assert math.isclose(rows[1]["kl_mean"], (256 * 0.001 + 45 * 0.5) / 301)
    assert rows[1]["kl_positions"] == 301
    assert math.isclose(rows[2]["kl_mean"], 0.001) and rows[2]["kl_positions"] == 512
    assert rows[3]["kl_positions"] == 76
    assert [r["scored"] for r in rows] == [2, 2, 2, 1]
    assert [r["delta"] for r in rows] == [0.0, -25.0, -25.0, 0.0]
    assert rows[2]["baseline"] == 75.0 and rows[2]["candidate"] == 50.0


def test_unknown_agreement_and_unscored_tasks() -> None:
    pairs = [(_item(0, "same", 300), _item(0, "diff", 300))]  # differs, no decode record: cannot tell where
    rows = position_buckets(pairs)
    assert rows[0]["identical_share"] is None and rows[1]["identical_share"] is None
    assert rows[2]["reaching"] == 0 and rows[2]["identical_share"] is None
    assert all(r["metric"] is None and r["delta"] is None and r["kl_mean"] is None for r in rows)


def test_verdict_and_report_carry_the_position_table() -> None:
    full = {"pos_0_256": 1.0, "pos_256_512": 1.0, "pos_512_1024": 1.0, "pos_1024_plus": 1.0}
    late = {**full, "pos_1024_plus": 0.0}
    base = [_item(i, f"out {i}", 1200, full) for i in range(4)]
    cand = [_item(i, f"out {i}" + ("!" if i == 0 else ""), 1200, late if i == 0 else full,
                  _decode(1100 if i == 0 else 1200, [0.01] * (1101 if i == 0 else 1200))) for i in range(4)]
    thr = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=1000)
    comps = compare_tasks({"t": TaskResult("t", "longgen", "row_acc", tuple(base))},
                          {"t": TaskResult("t", "longgen", "row_acc", tuple(cand))}, thr.policy(None))
    decision = decide([(c.suite, c.task, c.comparison) for c in comps], thr.policy(None),
                      baseline_effective={"x": 1}, candidate_effective={"x": 2})
    manifest = {"created": "now", "model": "m", "limit": None, "versions": {}, "thresholds": "t.yaml", "timings": {},
                "suites": [], "baseline": {"name": "b", "requested": {}, "effective": {"x": 1}},
                "candidate": {"name": "c", "requested": {}, "effective": {"x": 2}}}
    doc = gate_document(decision, comps, manifest)
    rows = doc["tasks"][0]["evidence"]["by_position"]
    assert rows == task_evidence(comps[0].pairs, None)["by_position"]
    assert rows[3]["delta"] == -25.0 and rows[3]["identical_share"] == 0.75
    html = render_html(doc)
    assert 'id="by-position"' in html
    assert "1024+<" in html and "512–1024<" in html and "\u221225.0" in html and "75%" in html
