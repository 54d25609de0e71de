"""A latency SLO decided on the real vLLM CPU engine (serve mode, embedded hybrid, CI-sized): the candidate's suites
run at two items, then ``vllm serve`` + ``vllm bench serve`` measure both sides in interleaved repeats with the
objectives as goodput objectives. A TTFT ceiling of one microsecond no request can meet BLOCKs the run with the SLO
reason, and goodput is recorded as vLLM counted it (0 requests per second on both sides)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import THRESHOLDS_FILE, main  # noqa: E402

pytestmark = pytest.mark.engine


def test_a_serve_mode_run_that_breaks_a_latency_slo_is_blocked(tmp_path: Path) -> None:
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8")
                   + "traffic: {mode: serve, input_len: 16, output_len: 8, concurrency: 2, num_prompts: 4, repeats: 2}\n"
                   + "speed: {max_ttft_p99_ms: 0.001, max_tpot_p99_ms: 86400000}\n",
                   encoding="utf-8")
    out = tmp_path / "run"
    code = main(["run", "--config", "fp16-state", "--limit", "2", "--suites", "docparse", "--logprob-items", "0",
                 "--thresholds", str(thr), "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    # Without the SLO this run is INCONCLUSIVE (2 items: test_speed_engine); the SLO turns it into a BLOCK.
    assert (code, doc["verdict"]) == (1, "BLOCK")
    slo = [r for r in doc["reasons"] if r.startswith("latency: latency SLO: TTFT p99 ")]
    assert len(slo) == 1 and slo[0].endswith("ms at concurrency 2 exceeds max_ttft_p99_ms 0.001 ms; the baseline "
                                             "misses it too " + slo[0].rsplit("too ", 1)[1])
    assert not any("TPOT" in r for r in doc["reasons"])  # the day-long TPOT objective is met
    row = doc["speed"]["levels"][0]
    assert row["latency"]["ttft_p99_ms"]["candidate_median"] > 0.001
    gp = row["goodput"]
    assert gp["objectives_ms"] == {"ttft": 0.001, "tpot": 86400000.0}
    assert gp["baseline"] == [0.0, 0.0] and gp["candidate"] == [0.0, 0.0] and gp["ratio"] is None
    assert doc["speed"]["thresholds"]["slos_ms"] == {"ttft_p99_ms": 0.001, "tpot_p99_ms": 86400000.0}
    html = (out / "report.html").read_text()
    assert "misses it: BLOCK" in html and "meets it" in html
    assert "latency SLO: TTFT p99" in (out / "summary.md").read_text()
