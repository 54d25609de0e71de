"""The seed's switches on vLLM's CUDA build (tested: vLLM 0.26.0 on an H200), through ``evalgate run``.

Skipped without CUDA (``tests/conftest.py``). Each run is small (10 items of each docparse and coding task, no
teacher-forced scoring);
runs share the store under ``$EVALGATE_HOME``, so the FP32 baseline's engine starts once. Engine start ~40 s warm.
What is checked is read back from the engine (the manifest's effective config), never the request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.inputs.config import CONFIGS_DIR, engine_arg_names, load_config
from evalgate.inputs.thresholds import load_thresholds

pytestmark = [pytest.mark.gpu, pytest.mark.engine]
ARGS = ["--limit", "10", "--suites", "docparse", "coding", "--logprob-items", "0", "--timeout", "900"]
THRESHOLDS = Path(__file__).resolve().parents[2] / "thresholds.yaml"
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


# The smallest n at which a task could PASS is ceil(100 * (z_0.95 + z_0.8) / margin) = 42 items at the loosest margin
# (6 points, fp16-state on coding); at ARGS' 10 items every MDE (>= 24.9 points) exceeds every margin, so a verdict
# that is not a BLOCK is INCONCLUSIVE by the power rule (docs/concepts/how-evalgate-decides.md).
UNDERPOWERED = "power: MDE > margin"


@pytest.mark.parametrize("config,k", [("mtp1", 1), ("mtp3", 3)])
def test_mtp_at_greedy_is_lossless_against_the_fp32_baseline(tmp_path: Path, config: str, k: int) -> None:
    """MTP is a lossless switch: at greedy decoding the target model verifies every drafted token, so the
    candidate's outputs must agree with the same-dtype (FP32) baseline's on every item, and its drafts must be
    accepted above the floor thresholds.yaml sets for it. The FP32 drafter crash of vLLM 0.26 is worked around
    (engine.declare_dtype); acceptance comes from the source the installed vLLM offers (per-request metrics where
    EngineArgs has them, else the engine-wide counters, as on 0.26)."""
    code, doc, manifest = _run(config, tmp_path)
    cand = _applied(manifest, "candidate")
    assert (cand["dtype"], _applied(manifest, "baseline")["dtype"]) == ("float32", "float32")
    assert cand["speculative_config"] == {"method": "mtp", "num_speculative_tokens": k}
    expected = "per_request" if "per_request_spec_decode_metrics" in engine_arg_names() else "engine_counters"
    assert manifest["candidate"]["evidence_sources"] == {"spec_decode": expected}
    counts = manifest["candidate"]["spec_decode"]
    assert counts["spec_decode_num_drafts"] > 0
    assert counts["spec_decode_num_draft_tokens"] == k * counts["spec_decode_num_drafts"]
    sd = doc["spec_decode"]["candidate"]
    assert sd["acceptance_rate"] == pytest.approx(
        counts["spec_decode_num_accepted_tokens"] / counts["spec_decode_num_draft_tokens"])
    floor = load_thresholds(THRESHOLDS).configs[config].min_mean_acceptance_length
    assert sd["mean_acceptance_length"] >= floor, f"{config}: mean acceptance length {sd['mean_acceptance_length']}"
    # Lossless: every greedy output byte-identical to the baseline's (no near-tie allowance needed).
    for task in doc["tasks"]:
        assert task["identical_outputs"] == task["n"] > 0, f"{task['task']}: {task['changed_outputs']}"
        assert task["delta"] == 0 and task["n_regressed"] == task["n_improved"] == 0
        assert (task["verdict"], task["rule"]) == ("INCONCLUSIVE", UNDERPOWERED)
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")


def test_stochastic_rounding_on_the_triton_kernel_is_refused_on_hopper(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """SR on the Triton Mamba kernel needs cvt.rs (compute capability 10.x); on an H200 (sm_90) vLLM 0.26 dies in
    ptxas after the engine started. evalgate reads the GPU's capability from the real ``nvidia-smi`` and refuses
    the config (exit 2) before any engine starts."""
    def no_engine(*args: object, **kwargs: object) -> None:
        raise AssertionError("an engine was started for a config that must be refused first")

    monkeypatch.setattr("evalgate.evaluate.runner.spawn", no_engine)
    cfg = tmp_path / "sr-triton.yaml"
    cfg.write_text(f"extends: {CONFIGS_DIR / 'fp16-state.yaml'}\n"
                   "engine_args:\n  enable_mamba_cache_stochastic_rounding: true\n  mamba_backend: triton\n")
    code = main(["run", "--config", str(cfg), "--out", str(tmp_path / "run"), *ARGS])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2, err
    assert str(cfg) in err and "engine_args.enable_mamba_cache_stochastic_rounding" in err
    assert "cvt.rs" in err and "sm_90" in err


def test_fp16_state_applies_and_is_gated_never_an_error(tmp_path: Path) -> None:
    """The shipped main job's switch on CUDA: FP16 state read back on the candidate, FP32 on the baseline; at 10 items
    no task can PASS, and FP16 state changed 1 in 20 coding outputs on an H200 (2026-12-01), too few for a significant
    loss, so INCONCLUSIVE (never exit 2/3)."""
    code, doc, manifest = _run("fp16-state", tmp_path)
    assert (_applied(manifest, "baseline")["mamba_ssm_cache_dtype"],
            _applied(manifest, "candidate")["mamba_ssm_cache_dtype"]) == ("float32", "float16")
    assert all(t["rule"] == UNDERPOWERED for t in doc["tasks"])
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")


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
    shipped = (Path(__file__).resolve().parents[2] / "thresholds.yaml").read_text()
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


def test_alternate_placement_sleeps_and_wakes_on_cuda(tmp_path: Path) -> None:
    """``--placement alternate`` on the embedded hybrid: both engines started with vLLM's sleep mode (read back), the
    baseline asleep before the candidate starts, the speed phase waking one side per pass; a verdict and a measured
    speed block, never an error."""
    out = tmp_path / "run"
    code = main(["run", "--config", "fp16-state", "--out", str(out), *ARGS, "--placement", "alternate",
                 "--concurrency", "16", "--repeats", "2"])
    assert code not in (2, 3), f"exit {code}; see {out}/logs"
    doc = json.loads((out / "verdict.json").read_text())
    assert code == GATED[doc["verdict"]]
    placement = json.loads((out / "manifest.json").read_text())["placement"]
    assert placement["mode"] == "alternate" and placement["restarts"] == 0
    for role in ("baseline", "candidate"):
        side = placement["sides"][role]
        assert side["sleep_mode"] is True and side["sleeps"] > 0
        assert len(side["sleep_s"]) == side["sleeps"] and len(side["wake_s"]) == side["wakes"]
    assert placement["sides"]["baseline"]["wakes"] > 0 and placement["sides"]["candidate"]["wakes"] > 0
    assert doc["speed"]["status"] == "measured" and len(doc["speed"]["levels"]) == 1
