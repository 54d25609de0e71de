"""The seed's switches on vLLM's CUDA build (tested: vLLM 0.26.0 on an H200), through ``evalgate run``.

Skipped without CUDA (``tests/conftest.py``). Each run is tiny (3 items of one suite, no teacher-forced scoring);
runs share the store under ``$EVALGATE_HOME``, so the FP32 baseline's engine starts once. Engine start ~40 s warm.
What is checked is read back from the engine (the manifest's effective config), never the request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.config import CONFIGS_DIR, engine_arg_names, load_config

pytestmark = [pytest.mark.gpu, pytest.mark.engine]
ARGS = ["--limit", "3", "--suites", "docparse", "--logprob-items", "0", "--timeout", "900"]
GATED = {"PASS": 0, "BLOCK": 1, "NO-OP": 4, "INCONCLUSIVE": 5}
# Engine args whose read-back is the requested value itself (no renaming of values by vLLM).
PLAIN = ("mamba_ssm_cache_dtype", "mamba_backend", "enable_mamba_cache_stochastic_rounding", "async_scheduling")


def _run(config: str, out: Path) -> tuple[int, dict, dict]:
    code = main(["run", "--config", config, "--out", str(out), *ARGS])
    assert code not in (2, 3), f"{config}: exit {code} (config or engine error); see {out}/logs"
    doc = json.loads((out / "verdict.json").read_text())
    assert code == GATED[doc["verdict"]]
    return code, doc, json.loads((out / "manifest.json").read_text())


def _applied(manifest: dict, role: str) -> dict:
    return manifest[role]["effective"]["engine_args"]


def test_baseline_pins_off_and_fp16_state_sr_is_applied(tmp_path: Path) -> None:
    _, doc, manifest = _run("fp16-state-sr", tmp_path)
    base = _applied(manifest, "baseline")
    assert (base["async_scheduling"], base["mamba_backend"], base["mamba_ssm_cache_dtype"],
            base["enable_mamba_cache_stochastic_rounding"], base["speculative_config"]) == (
        False, "triton", "float32", False, None)
    cand = _applied(manifest, "candidate")
    assert (cand["mamba_ssm_cache_dtype"], cand["enable_mamba_cache_stochastic_rounding"], cand["mamba_backend"]) == (
        "float16", True, "flashinfer")
    assert doc["verdict"] != "NO-OP"


def test_async_scheduling_is_applied_on_cuda_not_a_no_op(tmp_path: Path) -> None:
    _, doc, manifest = _run("async-sched", tmp_path)
    assert (_applied(manifest, "baseline")["async_scheduling"], _applied(manifest, "candidate")["async_scheduling"]) \
        == (False, True)
    assert doc["verdict"] != "NO-OP"


def test_mtp1_at_fp32_runs_and_records_acceptance(tmp_path: Path) -> None:
    """The FP32 drafter crash is worked around (engine.declare_dtype); acceptance comes from the source the installed
    vLLM offers: per-request metrics where EngineArgs has them, else the engine-wide counters (vLLM 0.26)."""
    _, doc, manifest = _run("mtp1", tmp_path)
    assert _applied(manifest, "candidate")["dtype"] == "float32"
    assert _applied(manifest, "candidate")["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 1}
    expected = "per_request" if "per_request_spec_decode_metrics" in engine_arg_names() else "engine_counters"
    assert manifest["candidate"]["evidence_sources"] == {"spec_decode": expected}
    assert doc["spec_decode_source"] == expected
    counts = manifest["candidate"]["spec_decode"]
    assert counts["spec_decode_num_drafts"] > 0
    assert 0 <= counts["spec_decode_num_accepted_tokens"] <= counts["spec_decode_num_draft_tokens"]
    sd = doc["spec_decode"]["candidate"]
    assert sd["acceptance_rate"] == pytest.approx(
        counts["spec_decode_num_accepted_tokens"] / counts["spec_decode_num_draft_tokens"])


@pytest.mark.parametrize("config", ["fp16-state-flashinfer", "sr-only", "flashinfer-mamba", "cline-recipe"])
def test_cuda_only_config_runs_with_its_switches_applied(tmp_path: Path, config: str) -> None:
    _, doc, manifest = _run(config, tmp_path)
    requested = load_config(config, CONFIGS_DIR).engine_args
    cand = _applied(manifest, "candidate")
    for key in PLAIN:
        if key in requested:
            assert cand[key] == requested[key], f"{config}: {key} requested {requested[key]!r}, applied {cand[key]!r}"
    if "speculative_config" in requested:
        assert cand["speculative_config"]["num_speculative_tokens"] == requested["speculative_config"][
            "num_speculative_tokens"]
        assert manifest["candidate"]["spec_decode"]["spec_decode_num_drafts"] > 0
    assert doc["verdict"] != "NO-OP"


def test_serve_mode_measures_latency_with_vllm_serve_on_cuda(tmp_path: Path) -> None:
    """``traffic.mode: serve`` on CUDA: both servers (one at a time on one GPU) measured by ``vllm bench serve``,
    TTFT / TPOT read back per repeat, both servers stopped."""
    thresholds = tmp_path / "thresholds.yaml"
    shipped = (Path(__file__).resolve().parents[1] / "thresholds.yaml").read_text()
    thresholds.write_text(shipped + "\ntraffic: {mode: serve, input_len: 64, output_len: 32, num_prompts: 8, "
                          "concurrency: 4, repeats: 2}\n")
    code = main(["run", "--config", "fp16-state", "--out", str(tmp_path / "run"), *ARGS,
                 "--thresholds", str(thresholds)])
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert code == GATED[doc["verdict"]], doc.get("speed")
    speed = doc["speed"]
    assert speed["status"] == "measured" and speed["profile"]["mode"] == "serve"
    (level,) = speed["levels"]
    assert level["concurrency"] == 4
    for role in ("baseline", "candidate"):
        assert len(level[role]["output_tok_s"]) == 2 and min(level[role]["output_tok_s"]) > 0
        runs = speed["sides"][role]["runs"]
        assert len(runs) == 2 and all(r["ttft_p50_ms"] > 0 and r["tpot_p50_ms"] > 0 for r in runs)
        assert all(r["output_tokens"] == 8 * 32 for r in runs)  # --ignore-eos: exactly output_len each
    assert set(level["latency"]) >= {"ttft_p50_ms", "tpot_p50_ms"}
