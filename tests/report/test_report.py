"""Report: untrusted output is escaped, numbers and verdicts appear, the terminal table lines up."""

from __future__ import annotations

import numpy as np
import pytest

from evalgate.compare.pairing import compare_tasks
from evalgate.fmt import MINUS, pts
from evalgate.gate import decide
from evalgate.inputs.thresholds import Thresholds
from evalgate.report.render import render_html, render_terminal
from evalgate.results.records import ItemResult, TaskResult
from runfixtures import gate_document
from runfixtures import manifest as run_manifest

EVIL = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def _task(outputs: list[str], scores: list[float]) -> TaskResult:
    items = tuple(ItemResult(task="t", item_id=i, item_hash=f"h{i}", prompt=f"prompt {i} <b>", target="42",
                             output=o, score=s, metrics={"m": s}) for i, (o, s) in enumerate(zip(outputs, scores)))
    return TaskResult(task="t", suite="s", metric="m", items=items)


def _doc(base_scores: list[float], cand_scores: list[float], cand_outputs: list[str]) -> dict:
    thr = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=1000)
    base = {"t": _task(["ok"] * len(base_scores), base_scores)}
    cand = {"t": _task(cand_outputs, cand_scores)}
    comps = compare_tasks(base, cand, thr.policy(None))
    decision = decide([(c.suite, c.task, c.comparison) for c in comps], thr.policy(None),
                      baseline_effective={"dtype": "float32"}, candidate_effective={"dtype": "bfloat16"})
    manifest = {"created": "now", "model": "m", "limit": None, "versions": {"vllm": "x"}, "thresholds": "t.yaml",
                "timings": {"compare": 0.1}, "suites": [{"name": "s", "tasks": ["t"], "content_hash": "ab" * 32}],
                "baseline": {"name": "baseline", "path": "b.yaml", "requested": {"engine_args": {"dtype": "float32"}},
                             "effective": {"dtype": "float32"}},
                "candidate": {"name": "cand", "path": "c.yaml", "requested": {"engine_args": {"dtype": "bfloat16"}},
                              "effective": {"dtype": "bfloat16"}}}
    return gate_document(decision, comps, manifest)


def test_model_output_is_escaped_and_no_script_is_emitted() -> None:
    doc = _doc([1, 1, 0, 1], [0, 1, 0, 1], [EVIL, "ok", "ok", "ok"])
    html = render_html(doc)
    assert "<script" not in html
    assert "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=" in html.replace("<mark>", "").replace("</mark>", "")
    assert "prompt 0 &lt;b&gt;" in html


def test_document_lists_regressions_first_with_both_outputs() -> None:
    doc = _doc([1, 0, 1, 1], [0, 1, 1, 1], ["bad", "good", "ok", "ok"])
    flips = doc["tasks"][0]["flipped"]
    assert [f["kind"] for f in flips] == ["regressed", "improved"]
    assert flips[0]["baseline_output"] == "ok" and flips[0]["candidate_output"] == "bad"
    assert doc["tasks"][0]["delta"] == 0.0
    assert doc["effective_diff"] == [{"key": "dtype", "baseline": "'float32'", "candidate": "'bfloat16'"}]
    assert doc["config_diff"] == [{"key": "engine_args.dtype", "baseline": "'float32'", "candidate": "'bfloat16'"}]


def test_terminal_table_has_one_row_per_task_and_the_verdict() -> None:
    rng = np.random.default_rng(1)
    base = [float(x) for x in rng.integers(0, 2, 50)]
    cand = [0.0] * 50
    doc = _doc(base, cand, ["x"] * 50)
    text = render_terminal(doc)
    assert doc["verdict"] == "BLOCK"
    assert "s/t" in text and text.splitlines()[5] == "VERDICT: BLOCK"
    assert f" {pts(doc['tasks'][0]['delta'])} " in text and "-" not in text.splitlines()[3]


def test_terminal_table_signs_numbers_as_the_reasons_do() -> None:
    """One signed-number format (evalgate.fmt) in the table and the reasons: a real minus, + on a positive Δ, zero
    unsigned."""
    tie = _doc([1.0, 0.0] * 20, [1.0, 0.0] * 20, ["ok"] * 40)  # nothing changes: Δ 0 (the interval is the SE floor's)
    row = render_terminal(tie).splitlines()[3]
    assert "    0.0 " in row and f"[{MINUS}4.0, +4.0]" in row and "+0.0" not in row and "-" not in row
    assert f"\u0394 0.0, 90% CI [{MINUS}4.0, +4.0]" in render_terminal(tie)  # the reason, the same way
    loss = _doc([1.0] * 40, [0.0] * 4 + [1.0] * 36, ["x"] * 40)  # Δ −10.0
    row = render_terminal(loss).splitlines()[3]
    assert f" {MINUS}10.0 " in row and f"[{MINUS}20.5, {MINUS}1.7]" in row and "-" not in row
    assert f"\u0394 {MINUS}10.0, 90% CI [{MINUS}" in render_terminal(loss)


def test_report_shows_rules_and_position_deltas_in_the_same_format() -> None:
    doc = _doc([1.0] * 40, [0.0] * 10 + [1.0] * 30, ["x"] * 40)  # 10 of 40 lost: BLOCK
    assert doc["tasks"][0]["rule"] == "loss shown: LB < -margin and loss test significant (Holm)"  # ASCII data
    health = {"n": 40, "truncated": 0.0, "empty": 0.0}
    doc["tasks"][0]["evidence"] = {"divergence": {"n": 40, "identical_share": 0.75},
                                   "health": {"baseline": health, "candidate": health}, "by_position": [
        {"lo": 0, "hi": 256, "reaching": 40, "scored": True, "baseline": 99.3, "candidate": 99.1, "delta": -0.2},
        {"lo": 256, "hi": None, "reaching": 40, "scored": True, "baseline": 50.0, "candidate": 50.0, "delta": 0.0}]}
    html = render_html(doc)
    assert f"LB &lt; {MINUS}margin and loss test" in html and "-margin" not in html
    assert f"<td>{MINUS}0.2</td>" in html and "<td>-0.2</td>" not in html and "<td>+0.0</td>" not in html


def test_kl_curve_plots_each_position_on_a_log_axis_and_escapes_names() -> None:
    import re

    from evalgate.report.plot import CURVE_H, CURVE_PAD_B, kl_curve

    task = {"suite": "s<x>", "task": "t&1", "evidence": {"decode": {
        "kl_by_position": [0.0, 1e-6, 1e-2, 1.0], "items_by_position": [4, 4, 3, 1]}}}
    svg = str(kl_curve(task))
    assert "<x>" not in svg and "s&lt;x&gt; / t&amp;1" in svg
    (points,) = re.findall(r'<polyline [^>]*points="([^"]+)"', svg)
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(ys) == 4
    # log10 axis from 1e-8 (KL 0 is drawn there, on the x axis) to 1e0: equal steps per decade.
    bottom = CURVE_H - CURVE_PAD_B
    assert ys[0] == bottom
    per_decade = (ys[0] - ys[3]) / 8
    assert ys[1] == pytest.approx(bottom - 2 * per_decade, abs=0.2)
    assert ys[2] == pytest.approx(bottom - 6 * per_decade, abs=0.2)
    assert "token 2: KL 0.01 nats over 3 item(s)" in svg
    assert str(kl_curve({"suite": "s", "task": "t", "evidence": {"decode": None}})) == ""


def test_a_missed_acceptance_floor_blocks_the_run() -> None:
    from evalgate.inputs.thresholds import SpecDecodeFloors

    thr = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=1000, on_inconclusive="warn")
    same = {"t": _task(["ok"] * 4, [1, 1, 0, 1])}
    comps = compare_tasks(same, same, thr.policy(None))
    spec = {"method": "mtp", "num_speculative_tokens": 3}
    decision = decide([(c.suite, c.task, c.comparison) for c in comps], thr.policy(None),
                      baseline_effective={"engine_args": {"speculative_config": None}},
                      candidate_effective={"engine_args": {"speculative_config": spec}})
    # 100 verify steps, 300 draft tokens, 105 accepted: rate 35 %, mean acceptance length 2.05.
    counters = {"spec_decode_num_drafts": 100.0, "spec_decode_num_draft_tokens": 300.0,
                "spec_decode_num_accepted_tokens": 105.0}
    manifest = run_manifest({"name": "b", "requested": {}, "effective": {"engine_args": {"speculative_config": None}}},
                            {"name": "mtp3", "requested": {}, "spec_decode": counters,
                             "effective": {"engine_args": {"speculative_config": spec}}}, ["t"])
    before = gate_document(decision, comps, manifest)["verdict"]
    doc = gate_document(decision, comps, manifest, spec_floors=SpecDecodeFloors(0.5, 1.7))
    assert before == "INCONCLUSIVE" and doc["verdict"] == "BLOCK"
    assert doc["reasons"][0] == "speculative decoding: acceptance rate 35.0% < floor 50.0%"
    assert gate_document(decision, comps, manifest, spec_floors=SpecDecodeFloors(0.3, 2.0))["verdict"] == before


def test_tie_flips_are_listed_for_lossy_configs_too() -> None:
    import math
    from dataclasses import asdict, replace

    from evalgate.compare.evidence import decode_divergence

    thr = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=1000)
    base = {"t": _task(["a", "b", "c"], [1, 1, 1])}
    tie = decode_divergence([3], [[[3, math.log(0.40)], [4, math.log(0.3996)]]], [4], [[[4, math.log(0.41)]]])
    far = decode_divergence([3], [[[3, math.log(0.9)], [4, math.log(0.01)]]], [4], [[[4, math.log(0.9)]]])
    items = list(_task(["a2", "b2", "c"], [1, 1, 1]).items)
    items[0], items[1] = replace(items[0], decode=asdict(tie)), replace(items[1], decode=asdict(far))
    cand = {"t": TaskResult(task="t", suite="s", metric="m", items=tuple(items))}
    comps = compare_tasks(base, cand, thr.policy(None))
    decision = decide([(c.suite, c.task, c.comparison) for c in comps], thr.policy(None),
                      baseline_effective={"dtype": "float32"}, candidate_effective={"dtype": "bfloat16"})
    manifest = {"created": "now", "model": "m", "limit": None, "versions": {"vllm": "x"}, "thresholds": "t.yaml",
                "timings": {}, "suites": [{"name": "s", "tasks": ["t"], "content_hash": "ab" * 32}],
                "baseline": {"name": "b", "path": "b.yaml", "requested": {}, "effective": {"dtype": "float32"}},
                "candidate": {"name": "c", "path": "c.yaml", "requested": {}, "effective": {"dtype": "bfloat16"}}}
    doc = gate_document(decision, comps, manifest, near_tie=0.01)   # gap ln(0.40/0.3996) = 0.001 nats
    assert doc["tasks"][0]["tie_flips"] == [0]
    assert "<td>1 <span class=\"muted\">(items 0)</span></td>" in render_html(doc)
    assert gate_document(decision, comps, manifest)["tasks"][0]["tie_flips"] == []


def test_a_no_op_names_the_requested_switch_and_what_the_engine_applied() -> None:
    thr = Thresholds(alpha=0.05, default_margin=2.0, bootstrap_resamples=1000)
    same = {"t": _task(["ok"] * 4, [1, 1, 0, 1])}
    comps = compare_tasks(same, same, thr.policy(None))
    effective = {"engine_args": {"async_scheduling": False, "dtype": "float32"}}
    decision = decide([(c.suite, c.task, c.comparison) for c in comps], thr.policy(None),
                      baseline_effective=effective, candidate_effective=effective)
    manifest = run_manifest({"name": "b", "requested": {"engine_args": {"dtype": "float32"}}, "effective": effective},
                            {"name": "async-sched", "effective": effective,
                             "requested": {"engine_args": {"dtype": "float32", "async_scheduling": True}}}, ["t"])
    doc = gate_document(decision, comps, manifest)
    assert doc["verdict"] == "NO-OP"
    assert doc["reasons"][-1] == ("engine_args.async_scheduling: requested True (baseline: <absent>), but the engine "
                                  "applied False to both")
