"""`evalgate report` and `evalgate compare` on stored run directories (synthetic runs; no engine)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.results.store import write_json_atomic
from runfixtures import blocking_document, task, write_run

ROOT = Path(__file__).resolve().parents[2]


def _runs(tmp_path: Path, b_scores: list[float], *, b_dtype: str = "float16") -> tuple[Path, Path]:
    n = len(b_scores)
    a = write_run(tmp_path / "a", "bf16", "bfloat16", {"finance_tableqa": task("finance_tableqa", "finance",
                                                                                 ["1"] * n, [1.0] * n)})
    b = write_run(tmp_path / "b", "fp16", b_dtype, {"finance_tableqa": task("finance_tableqa", "finance",
                                                                             ["1" if s else "2" for s in b_scores],
                                                                             b_scores)})
    return a, b


def test_compare_gates_run_b_candidate_against_run_a_candidate(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path, [0.0] * 5 + [1.0] * 15)
    out = tmp_path / "cmp"
    code = main(["compare", str(a), str(b), "--out", str(out), "--thresholds", str(ROOT / "thresholds.yaml")])
    doc = json.loads((out / "verdict.json").read_text())
    assert (code, doc["verdict"]) == (1, "BLOCK")
    t = doc["tasks"][0]
    assert (t["n_regressed"], t["delta"], t["margin"]) == (5, -25.0, 3.0)  # finance's margin from thresholds.yaml
    m = doc["manifest"]
    assert (m["baseline"]["name"], m["candidate"]["name"]) == ("bf16", "fp16")
    assert m["compared_runs"] == {"baseline": str(a), "candidate": str(b),
                                  "rule": "baseline side = run A's candidate, candidate side = run B's candidate"}
    assert doc["effective_diff"] == [{"key": "engine_args.dtype", "baseline": "'bfloat16'", "candidate": "'float16'"}]
    assert {p.name for p in out.iterdir()} >= {"baseline.json", "candidate.json", "manifest.json", "verdict.json",
                                               "report.html", "verdict.junit.xml", "summary.md"}
    assert "VERDICT: BLOCK" in capsys.readouterr().out


def test_compare_of_same_effective_config_is_no_op(tmp_path: Path) -> None:
    a, b = _runs(tmp_path, [1.0] * 8, b_dtype="bfloat16")
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 4


def test_compare_fails_closed_when_items_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", "x", "bfloat16", {"t": task("t", "s", ["1"] * 4, [1.0] * 4)})
    b = write_run(tmp_path / "b", "y", "float16", {"t": task("t", "s", ["1"] * 5, [1.0] * 5)})
    out = tmp_path / "cmp"
    code = main(["compare", str(a), str(b), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1
    assert err[0].startswith("evalgate: error: runs are not comparable (") and "different items (4 vs 5" in err[0]
    assert not (out / "verdict.json").exists()
    assert "ERROR" in (out / "summary.md").read_text()  # CI still gets a summary and an error test case
    assert ET.parse(out / "verdict.junit.xml").getroot().get("errors") == "1"


def test_compare_fails_closed_when_suite_contents_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _runs(tmp_path, [1.0] * 4)
    m = json.loads((b / "manifest.json").read_text())
    m["suites"][0]["content_hash"] = "cd" * 32
    write_json_atomic(b / "manifest.json", m)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 3
    assert "suite 'finance' differs between" in capsys.readouterr().err


def test_compare_of_a_missing_run_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, _ = _runs(tmp_path, [1.0] * 4)
    assert main(["compare", str(a), str(tmp_path / "nope"), "--out", str(tmp_path / "cmp")]) == 3
    assert capsys.readouterr().err.strip() == f"evalgate: error: {tmp_path / 'nope'}: run directory not found"


def test_report_rerenders_every_output_from_verdict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    write_json_atomic(run / "verdict.json", blocking_document())
    assert main(["report", str(run)]) == 0
    assert {p.name for p in run.iterdir()} == {"verdict.json", "report.html", "verdict.junit.xml", "summary.md"}
    assert 'class="verdict BLOCK">BLOCK<' in (run / "report.html").read_text()
    assert "VERDICT: BLOCK" in capsys.readouterr().out
    assert main(["report", str(run), "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "report.html").is_file()


def test_report_without_verdict_is_a_runtime_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 3
    assert "verdict not found" in capsys.readouterr().err


def test_every_file_of_a_compare_run_directory_honours_the_umask(tmp_path: Path) -> None:
    """JSON (atomic writes) and the rendered outputs get the same permissions: 0o644 under umask 022."""
    a, b = _runs(tmp_path, [0.0] * 5 + [1.0] * 15)
    out = tmp_path / "cmp"
    saved = os.umask(0o022)
    try:
        assert main(["compare", str(a), str(b), "--out", str(out)]) == 1
    finally:
        os.umask(saved)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()}
    assert modes == {name: oct(0o644) for name in ("baseline.json", "candidate.json", "manifest.json", "verdict.json",
                                                  "report.html", "verdict.junit.xml", "summary.md")}


@pytest.mark.parametrize("case", ["items differ", "run missing", "suite differs"])
def test_compare_refusal_without_out_leaves_no_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], case: str) -> None:
    """Without --out a refused comparison (exit 3) writes nothing: no runs/, no runs/compare-*/."""
    if case == "items differ":
        a = write_run(tmp_path / "a", "x", "bfloat16", {"t": task("t", "s", ["1"] * 4, [1.0] * 4)})
        b = write_run(tmp_path / "b", "y", "float16", {"t": task("t", "s", ["1"] * 5, [1.0] * 5)})
    else:
        a, b = _runs(tmp_path, [1.0] * 4)
        if case == "run missing":
            b = tmp_path / "nope"
        else:
            m = json.loads((b / "manifest.json").read_text())
            m["suites"][0]["content_hash"] = "cd" * 32
            write_json_atomic(b / "manifest.json", m)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["compare", str(a), str(b)]) == 3
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert list(work.iterdir()) == []


def test_compare_without_out_writes_runs_compare_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _runs(tmp_path, [0.0] * 5 + [1.0] * 15)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(a), str(b)]) == 1
    (made,) = (tmp_path / "runs").iterdir()
    assert made.name.startswith("compare-a-vs-b-")
    assert json.loads((made / "verdict.json").read_text())["verdict"] == "BLOCK"


def test_compare_failing_after_it_started_writing_leaves_the_error_beside_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure once the run directory exists (here: rendering) still leaves an error summary for CI there."""
    import evalgate.commands.pipeline as runs_mod

    a, b = _runs(tmp_path, [0.0] * 5 + [1.0] * 15)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runs_mod, "write_outputs", lambda doc, out: (_ for _ in ()).throw(OSError(28, "disk full")))
    assert main(["compare", str(a), str(b)]) == 3
    (made,) = (tmp_path / "runs").iterdir()
    assert (made / "verdict.json").is_file() and "ERROR" in (made / "summary.md").read_text()
    assert ET.parse(made / "verdict.junit.xml").getroot().get("errors") == "1"


def test_compare_no_op_still_exits_4_and_reports_tasks_as_not_gated(tmp_path: Path) -> None:
    """Equal effective configs: exit 4 and verdict NO-OP, even though the statistics alone would BLOCK."""
    a, b = _runs(tmp_path, [0.0] * 10 + [1.0] * 30, b_dtype="bfloat16")
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 4
    doc = json.loads((out / "verdict.json").read_text())
    assert (doc["verdict"], doc["tasks"][0]["verdict"], doc["tasks"][0]["gated"]) == ("NO-OP", "BLOCK", False)
    assert "not gated; statistics shown for information: BLOCK" in (out / "report.html").read_text()
    assert "**NO-OP** (not gated; statistics: BLOCK)" in (out / "summary.md").read_text()


@pytest.mark.parametrize("overall", ["PASS", "INCONCLUSIVE"])
def test_report_refuses_a_task_verdict_of_no_op(overall: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A document whose BLOCKed task was relabelled NO-OP re-rendered as PASS (exit 0): the gate never gives a task
    NO-OP (a NO-OP run keeps each task's own verdict), so ``report`` refuses it, exit 3, naming the field."""
    doc = blocking_document()
    worst = next(i for i, t in enumerate(doc["tasks"]) if t["verdict"] == "BLOCK")
    doc["tasks"][worst]["verdict"] = "NO-OP"
    doc["verdict"] = overall
    doc["tasks"] = [dict(t, evidence=dict(t["evidence"], failures=[])) if t.get("evidence") else t
                    for t in doc["tasks"]]
    run = tmp_path / "run"
    run.mkdir()
    (run / "verdict.json").write_text(json.dumps(doc, allow_nan=True))
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evalgate: error: {run / 'verdict.json'}: not a consistent evalgate verdict: tasks[{worst}].verdict: "
                   "NO-OP is a run's verdict, never a task's (PASS, BLOCK or INCONCLUSIVE)"]
    assert not (tmp_path / "out").exists()


def test_report_refuses_a_task_decided_on_no_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A PASS task whose paired items were set to 0 re-rendered as PASS (exit 0); the gate never decides a task
    without items (``stats.paired_comparison`` refuses empty input), so ``report`` refuses it, exit 3."""
    doc = blocking_document()
    passed = next(i for i, t in enumerate(doc["tasks"]) if t["verdict"] == "PASS")
    doc["tasks"] = [dict(doc["tasks"][passed], n=0, n_regressed=0, n_improved=0)]
    doc["verdict"] = "PASS"
    run = tmp_path / "run"
    run.mkdir()
    (run / "verdict.json").write_text(json.dumps(doc, allow_nan=True))
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"evalgate: error: {run / 'verdict.json'}: not a consistent evalgate verdict: tasks[0].n: "
                   "0 paired items: the gate never decides a task without evidence"]


def test_compare_refuses_a_speed_only_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A --speed-only run has no quality results: comparing it is exit 3 naming the run, before anything is read
    further."""
    from evalgate.commands import jobs
    from evalgate.errors import StoreError

    monkeypatch.setattr(jobs, "read_side", lambda run: ({}, {"speed_only": True} if run.name == "b" else {}))
    job = jobs.StoredJob(tmp_path / "a", tmp_path / "b", tmp_path / "t.yaml", tmp_path / "out")
    with pytest.raises(StoreError, match=r"/b: a --speed-only run \(manifest.json speed_only\) holds no quality"):
        job.load()
