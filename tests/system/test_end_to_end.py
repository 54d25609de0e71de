"""End to end: the real vLLM CPU engine on the real embedded model, a baseline and candidates, every suite.

Slow (engine starts of ~30 s each plus generation); the result store makes the baseline a one-time cost
within a session. Values are checked against an independent recomputation from the stored per-item results.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, norm

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402
from evalgate.engine.readback import NO_SSM  # noqa: E402
from evalgate.inputs.thresholds import load_thresholds  # noqa: E402
from evalgate.suites.discovery import list_suites  # noqa: E402

pytestmark = pytest.mark.engine
LIMIT = 2
# Teacher-forced scoring costs a full-vocabulary log-softmax per prompt position (Gemma: 262k entries; the real-data
# tasks' prompts run to ~1,800 tokens): one item per task took 306 s of the BF16 candidate's run on a 2-core
# AVX2-only CI host (2026-12-05). It runs on the hybrid instead, where tests/system/test_hybrid_gate.py asserts its
# KL values.
LOGPROB_ITEMS = 0
ROOT = Path(__file__).resolve().parents[2]
# Gemma 3 270M decodes slowly on a 2-core AVX2-only CI host (its 262k-entry vocabulary; BF16 slower still): every
# suite at the dense family's 256-token budget took 1,207 s here (2026-12-05). The verdicts below follow from n = 2
# whatever the outputs say, so the family runs from a copy of configs/ whose dense baseline's budget is MAX_TOKENS
# (candidates inherit it; thresholds.yaml names configs of every family, so the whole folder is copied).
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def configs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/ copied, with dense/baseline's ``sampling.max_tokens`` lowered to ``MAX_TOKENS``."""
    root = tmp_path_factory.mktemp("e2e") / "configs"
    shutil.copytree(ROOT / "configs", root)
    base = root / "dense" / "baseline.yaml"
    text = base.read_text()
    assert text.count("max_tokens: 256") == 1
    base.write_text(text.replace("max_tokens: 256", f"max_tokens: {MAX_TOKENS}"))
    return root


@pytest.fixture(scope="module")
def small(configs_dir: Path) -> list[str]:
    return ["--limit", str(LIMIT), "--logprob-items", str(LOGPROB_ITEMS), "--configs-dir", str(configs_dir)]


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory: pytest.TempPathFactory, small: list[str]) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("bf16")
    code = main(["run", "--config", "dense/bf16", *small, "--out", str(out)])
    return code, out


def test_numerics_changing_candidate_is_gated_on_every_suite(bf16_run: tuple[int, Path]) -> None:
    code, out = bf16_run
    doc = json.loads((out / "verdict.json").read_text())
    # The verdict follows from n = 2 (test_stored_items_reproduce_the_verdict derives it from the items): dtype
    # differs in the effective config (not NO-OP); the MDE floor (z_0.95 + z_0.8)·100/2 = 124 points exceeds every
    # margin (no PASS); and no loss or health shift can be significant at two items per task (no BLOCK), so
    # INCONCLUSIVE, exit 5 under the repository's on_inconclusive: warn.
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    # every suite a text model is gated on by default: the text suites (the page-image tier needs a VL model)
    assert {t["task"] for t in doc["tasks"]} == {t for s in list_suites() if s.modality == "text" for t in s.tasks}
    assert {"docparse_fields", "coding_humaneval", "coding_mbpp", "finance_tableqa", "finance_tatqa",
            "finance_finqa", "docparse_hard", "finance_hard"} <= {t["task"] for t in doc["tasks"]}
    assert any(r["key"] == "engine_args.dtype" and "bfloat16" in r["candidate"] for r in doc["effective_diff"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["baseline"]["effective"]["engine_args"]["dtype"] == "float32"
    assert manifest["candidate"]["effective"]["engine_args"]["dtype"] == "bfloat16"


def test_stored_items_reproduce_the_verdict(bf16_run: tuple[int, Path]) -> None:
    """Recompute each task's Δ, MDE floor, loss test and verdict from baseline.json/candidate.json, independently
    of evalgate.compare.stats and of the document's own decision fields (closed forms and scipy).

    Why no task can BLOCK at n = 2: Holm's first step needs the smallest loss p-value <= alpha / K (K tasks, equal
    alphas). The smallest p a task can reach: exact McNemar with 2 of 2 items regressed, 0.5² = 0.25; otherwise the
    loss p is the larger of a bootstrap and a t p-value whose SE is never below 100/n = 50 points, and Δ >= -100
    points, so the t statistic is >= -2 and p >= Φ(-2) = 0.023 (the t CDF is heavier-tailed than Φ). Both exceed
    0.05 / 8. The output-health shifts are one-sided McNemar tests too (p >= 0.25 at two items); only NaN/inf
    log-probs would block, and none occur in float32/bfloat16 on this model (asserted)."""
    _, out = bf16_run
    doc = json.loads((out / "verdict.json").read_text())
    base = json.loads((out / "baseline.json").read_text())["tasks"]
    cand = json.loads((out / "candidate.json").read_text())["tasks"]
    thresholds = load_thresholds(ROOT / "thresholds.yaml")
    z = norm.ppf(1 - thresholds.alpha) + norm.ppf(thresholds.power)
    p_floor = {}  # per task: a lower bound of its loss p-value, computed here from the items
    for t in doc["tasks"]:
        b_items = {i["item_hash"]: i for i in base[t["task"]]["items"]}
        c_items = {i["item_hash"]: i for i in cand[t["task"]]["items"]}
        assert len(b_items) == len(c_items) == LIMIT and b_items.keys() == c_items.keys()
        for item in b_items.values():
            assert 0.0 <= item["score"] <= 1.0 and item["prompt"] and isinstance(item["output"], str)
        diffs = np.array([c_items[h]["score"] - b_items[h]["score"] for h in b_items])
        assert t["delta"] == pytest.approx(100 * diffs.mean(), abs=1e-9)
        assert t["n_regressed"] == int((diffs < 0).sum()) and t["n_improved"] == int((diffs > 0).sum())
        assert t["ci_low"] <= t["delta"] <= t["ci_high"]
        # A bootstrap percentile bound can never lie outside the range of item differences.
        boot_low, boot_high = t["cross_check"]["bootstrap"]
        assert 100 * diffs.min() - 1e-9 <= boot_low and boot_high <= 100 * diffs.max() + 1e-9
        binary = all(i["score"] in (0.0, 1.0) for i in [*b_items.values(), *c_items.values()])
        clusters = {b_items[h].get("cluster") or h for h in b_items}  # no cluster recorded: the item alone
        worse, better = int((diffs < 0).sum()), int((diffs > 0).sum())
        if binary and len(clusters) == LIMIT:
            # Unclustered 0/1 scores: one-sided exact McNemar = binomial test on the discordant pairs.
            want = binomtest(worse, worse + better, 0.5, alternative="greater").pvalue if worse + better else 1.0
            assert t["loss_p"] == pytest.approx(want)
            p_floor[t["task"]] = want
        else:
            # max(bootstrap p, t p) >= the t p-value >= Φ(Δ / SE) with SE floored at 100/n points.
            p_floor[t["task"]] = float(norm.cdf(min(100 * diffs.mean(), 0.0) * LIMIT / 100))
        assert t["loss_p"] >= p_floor[t["task"]] - 1e-12
        # Power floor: one discordant item in n, so MDE >= (z_{1-alpha} + z_power) * 100 / n.
        assert t["mde"] >= z * 100 / LIMIT - 1e-9
        thr = thresholds.for_task(t["suite"], t["task"], "dense/bf16")
        assert (t["margin"], t["alpha"]) == (thr.margin, thresholds.alpha) and t["mde"] > thr.margin
        # No NaN/inf log-probs (the one health rule that could block at this size); a rise in degenerate, empty or
        # truncated outputs is at most a warning: its one-sided McNemar p is >= 0.25 at two items.
        cand_items = list(c_items.values())
        assert t["evidence"]["decode"]["nonfinite_items"] == 0
        assert t["evidence"]["failures"] == []
        assert len(t["flipped"]) == t["n_regressed"] + t["n_improved"]
        # --logprob-items 0: no item is teacher-forced, and the document says so (no logit summary, no divergence).
        assert t["evidence"]["logit"] is None and not any(i.get("divergence") for i in cand_items)
    # Holm (equal alphas): nothing is rejected when even the smallest p-value exceeds alpha / K.
    assert min(p_floor.values()) > thresholds.alpha / len(p_floor)
    assert all(not t["loss_shown"] and t["verdict"] == "INCONCLUSIVE" for t in doc["tasks"])
    assert doc["verdict"] == "INCONCLUSIVE"


def test_report_is_written_and_self_contained(bf16_run: tuple[int, Path]) -> None:
    _, out = bf16_run
    html = (out / "report.html").read_text()
    doc = json.loads((out / "verdict.json").read_text())
    assert f'class="verdict {doc["verdict"]}">{doc["verdict"]}<' in html
    # No script and nothing fetched from elsewhere (the inline SVG's xmlns is a name, not a fetch).
    assert "<script" not in html and "<link" not in html
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?\s*https?://""", html)
    for t in doc["tasks"]:
        assert t["task"] in html


def test_switch_the_cpu_engine_ignores_is_no_op(tmp_path: Path, bf16_run: tuple[int, Path], small: list[str]) -> None:
    """An SSM-state dtype cannot act on Gemma (no Mamba layers): NO-OP, exit 4, never a silent PASS. (One suite:
    the verdict comes from the effective configs, and the baseline's docparse is in the store from bf16_run.)"""
    code = main(["run", "--config", "dense/fp16-state", *small, "--suites", "docparse", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "verdict.json").read_text())
    assert (code, doc["verdict"]) == (4, "NO-OP")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["candidate"]["requested"]["engine_args"]["mamba_ssm_cache_dtype"] == "float16"
    assert manifest["candidate"]["effective"]["engine_args"]["mamba_ssm_cache_dtype"] == NO_SSM
    assert manifest["baseline"]["cached_suites"]  # the baseline came from the store, not a second engine run
    assert doc["effective_diff"] == []


def test_engine_that_cannot_start_is_a_runtime_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     bf16_run: tuple[int, Path], small: list[str]) -> None:
    """An engine that cannot allocate its KV cache (1 TiB asked) dies at start: exit 3 with vLLM's reason."""
    cfg = tmp_path / "huge-kv.yaml"
    cfg.write_text("extends: dense/baseline\nengine_args:\n  kv_cache_memory_bytes: 1099511627776\n")
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), *small, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 3
    assert err.startswith("evalgate: error: engine for huge-kv exited with code 1")
    assert "kv cache" in err.lower() and "logs/candidate.log" in err
    assert not (out / "verdict.json").exists()
    assert json.loads((out / "baseline.json").read_text())["tasks"]  # finished work is kept


def test_timings_are_recorded(bf16_run: tuple[int, Path]) -> None:
    _, out = bf16_run
    manifest = json.loads((out / "manifest.json").read_text())
    timings, cached = manifest["timings"], manifest["candidate"]["cached_suites"]
    assert math.isfinite(timings["compare"]) and timings["candidate:total"] > 0
    for suite in ("docparse", "coding", "finance"):
        # A suite served from the store cost nothing in this run; a computed one took real time.
        assert (timings[f"candidate:suite:{suite}"] == 0.0) == (suite in cached)
