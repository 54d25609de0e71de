"""A real engine death in the speed phase, survived: ``evalgate run`` on the real vLLM CPU engine (the embedded
hybrid, both engines resident: ``placement: together``), and the candidate's engine SIGKILLed from outside once it
finished its warm-up pass, by ``benchmarks/kill_engine.py`` run as a separate process (evalgate runs vLLM's engine
core in the worker process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the worker itself is killed). The gate notices
at the candidate's next pass, kills what is left of the worker's process group, restarts that side with every suite
from the store, repeats the lost pass, records the restart, and ends with the verdict's own exit code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import THRESHOLDS_FILE, main  # noqa: E402
from evalgate.engine.pgroup import group_members  # noqa: E402

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parents[2]
LIMIT, REPEATS = 3, 2


def test_a_candidate_engine_killed_in_the_speed_phase_is_restarted(tmp_path: Path) -> None:
    thr = tmp_path / "thresholds.yaml"
    thr.write_text(THRESHOLDS_FILE.read_text(encoding="utf-8") + "traffic: {input_len: 32, output_len: 32, "
                   f"concurrency: 2, num_prompts: 8, repeats: {REPEATS}}}\n", encoding="utf-8")
    out = tmp_path / "run"
    killer = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "kill_engine.py"), "--out", str(out), "--log",
                               "candidate", "--after", "1", "--timeout", "1200"], stdout=subprocess.PIPE, text=True)
    try:
        code = main(["run", "--config", "fp16-state", "--suites", "docparse", "--limit", str(LIMIT), "--logprob-items",
                     "0", "--thresholds", str(thr), "--out", str(out)])
        killed = json.loads(killer.communicate(timeout=60)[0].strip().splitlines()[-1])
    finally:
        killer.kill()
    assert killer.returncode == 0, killed
    # what was killed: the candidate's worker (the engine core runs in it), once its warm-up pass was done
    assert killed["killed"] == killed["worker"] and killed["passes"] == 1 and "evalgate.worker" in killed["cmdline"]
    assert killed["cmdline"].endswith("candidate.spec.json")
    assert group_members(killed["worker"]) == []  # nothing of the killed worker's group runs on
    doc = json.loads((out / "verdict.json").read_text())
    # the verdict's own exit code, not 3 (a failed speed part) or 2: n = 3 items per task cannot PASS a 4-point
    # margin and the FP16 state changes no greedy output here (tests/system/test_hybrid_gate.py): INCONCLUSIVE
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    manifest = json.loads((out / "manifest.json").read_text())
    p = manifest["placement"]
    assert (p["mode"], p["sleeps"], p["wakes"], p["restarts"]) == ("together", 0, 0, 1)
    assert p["sides"]["baseline"]["restarts"] == 0 and p["sides"]["candidate"]["restarts"] == 1
    # the candidate's next pass after the kill (repeat 1/2, unless the killer came late) found the engine dead
    (why,) = p["sides"]["candidate"]["restart_reasons"]
    lost = re.match(r"pass '(repeat [12]/2)' failed: engine for fp16-state was killed by signal 9 \(SIGKILL", why)
    assert lost, why
    speed = doc["speed"]
    assert speed["status"] == "measured" and [lv["concurrency"] for lv in speed["levels"]] == [2]
    for role in ("baseline", "candidate"):
        runs = speed["sides"][role]["runs"]
        assert len(runs) == REPEATS and all(r["requests"] == 8 and r["output_tok_s"] > 0 for r in runs)
    # Nothing recomputed: the restarted worker was asked for no suite (every one came from the store; the first
    # worker computed docparse unless an earlier test had stored it), and its log shows passes but no suite; the
    # quality results are the first candidate worker's, as written before the kill.
    logs = out / "logs"
    assert json.loads((logs / "candidate.restart1.spec.json").read_text())["suites"] == []
    restart_log = (logs / "candidate.restart1.log").read_text()
    assert "evalgate: suite " not in restart_log
    first_log = (logs / "candidate.log").read_text()
    # the lost pass ran on the new worker, never on the killed one
    assert f"evalgate: {lost[1]} at concurrency 2" in restart_log and f"evalgate: {lost[1]} " not in first_log
    # after the level's warm-up, run again on the restarted (cold) engine; the repeated run is tagged
    assert 0 <= restart_log.find("evalgate: warm-up at concurrency 2") < restart_log.find(f"evalgate: {lost[1]} ")
    repeated = [r for r in speed["sides"]["candidate"]["runs"] if r.get("after_restart")]
    assert [r["repeat"] + 1 for r in repeated] == [int(lost[1][7])]
    stored = json.loads((out / "candidate.json").read_text())["tasks"]
    assert sorted(stored) == sorted(t["task"] for t in doc["tasks"]) and all(t["n"] == LIMIT for t in doc["tasks"])
    html = (out / "report.html").read_text()
    assert "1 restart<br>candidate: 1 restart" in html and "killed by signal 9" in html
