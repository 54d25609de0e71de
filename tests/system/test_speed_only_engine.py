"""``evalgate run --speed-only`` end to end on the real vLLM CPU engine, on a config-only model with random weights
(``embedded:nemotron-h-cpu-shape``: the embedded hybrid's layers with a 131,072-token vocabulary, 64 times its
tokenizer's, under ``load_format: dummy``): no suite runs, both engines are measured with token-id-only passes
(generated ids beyond the tokenizer need no decoding), and the verdict is INCONCLUSIVE ("speed only"), exit 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import THRESHOLDS_FILE, main  # noqa: E402
from evalgate.report.verdict import SpeedBlock  # noqa: E402
from evalgate.speed.speedup import headline  # noqa: E402


def headline_text(doc: dict) -> str:
    """The terminal's speed line of a written verdict."""
    return headline(SpeedBlock.model_validate(doc["speed"]))

pytestmark = pytest.mark.engine

N_PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN = 12, 4, 32, 16  # refilled: a steady window between fill and drain
RANGE_RATIO = 0.5  # traffic.range_ratio: lengths drawn from [8, 24] output tokens, so requests finish one by one


def _sampled_output_tokens() -> int:
    """The output budgets vLLM's own RandomDataset draws for this profile (the worker's prompt seed, the model's
    tokenizer), summed: what a pass must generate with ignore_eos, computed without evalgate's sampling code."""
    from transformers import AutoTokenizer
    from vllm.benchmarks.datasets import RandomDataset

    from evalgate.models.hybrid import CHECKPOINT_DIR
    from evalgate.worker.throughput import PROMPT_SEED

    tok = AutoTokenizer.from_pretrained(str(CHECKPOINT_DIR))
    reqs = RandomDataset(random_seed=PROMPT_SEED).sample(tokenizer=tok, num_requests=N_PROMPTS, input_len=INPUT_LEN,
                                                         output_len=OUTPUT_LEN, range_ratio=RANGE_RATIO)
    lens = [r.expected_output_len for r in reqs]
    assert min(lens) >= 8 and max(lens) <= 24 and len(set(lens)) > 1
    return sum(lens)


def test_speed_only_on_random_weights_measures_speed_and_is_inconclusive(tmp_path: Path) -> None:
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8") + f"traffic: {{input_len: {INPUT_LEN}, output_len: "
                   f"{OUTPUT_LEN}, concurrency: {CONCURRENCY}, num_prompts: {N_PROMPTS}, repeats: 2, "
                   f"range_ratio: {RANGE_RATIO}}}\n", encoding="utf-8")
    out = tmp_path / "run"
    code = main(["run", "--config", "scale/cpu/fp16-state", "--speed-only", "--thresholds", str(thr), "--out",
                 str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    assert doc["reasons"][0].startswith("speed only: no quality suite ran (--speed-only)")
    assert doc["tasks"] == [] and json.loads((out / "manifest.json").read_text())["speed_only"] is True
    assert json.loads((out / "manifest.json").read_text())["suites"] == []
    # The switch is read back from the live engines (no suite result carries it).
    diff = {d["key"]: (d["baseline"], d["candidate"]) for d in doc["effective_diff"]}
    assert diff["engine_args.mamba_ssm_cache_dtype"] == ("'float32'", "'float16'")  # reprs
    speed = doc["speed"]
    assert speed["profile"]["range_ratio"] == RANGE_RATIO
    budgets = _sampled_output_tokens()
    assert speed["status"] == "measured" and [lv["concurrency"] for lv in speed["levels"]] == [4]
    for role in ("baseline", "candidate"):
        runs = speed["sides"][role]["runs"]
        assert len(runs) == 2
        for r in runs:  # ignore_eos: every request generates its whole (drawn) budget, as token ids only
            assert r["requests"] == N_PROMPTS and r["output_tokens"] == budgets
            assert r["output_tok_s"] > 0 and r["detokenize"] is False
            # Refilled: the rate is the steady window's (first finish to last admission), the whole pass's beside it.
            w = r["window"]
            assert 0 < w["start_s"] < w["end_s"] <= r["elapsed_s"] and w["finished"] >= CONCURRENCY
            assert 0 < w["output_tokens"] < r["output_tokens"]
            assert r["output_tok_s"] == pytest.approx(w["output_tokens"] / (w["end_s"] - w["start_s"]))
            assert r["pass_output_tok_s"] == pytest.approx(r["output_tokens"] / r["elapsed_s"])
            # A tiny model's cache holds 4 streams many times over: every slot decodes in the window's median step,
            # and vLLM (its vllm:num_preemptions counter) preempted nothing.
            assert r["streams"] == CONCURRENCY and r["preemptions"] == 0
    assert "capacity" not in headline_text(doc)
    assert "speed only" in (out / "summary.md").read_text() and "speed only" in (out / "report.html").read_text()
    # The stored verdict re-renders (evalgate report re-validates it).
    assert main(["report", str(out), "--out", str(tmp_path / "again")]) == 0
