"""CI plumbing without an engine: `evalgate changed-configs` on real git history, and scripts/ci-gate.sh's
error paths (an error is never a pass; CI still gets a summary and JUnit)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalgate.cli import main

ROOT = Path(__file__).resolve().parents[2]
GATEABLE = ["aa", "async-sched", "chat/fp16-state", "chat/thinking-fp16-state", "cline-recipe", "dense/bf16", "dense/fp16-state", "dense/ngram", "flashinfer-mamba",
            "fp16-state", "fp16-state-flashinfer", "fp16-state-sr", "gdn/fp16-state", "gdn/mtp1", "mtp1", "mtp3",
            "omp1", "sr-only", "vl/bf16", "vl/chat-bf16"]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding copies of configs/, suites/ and thresholds.yaml, with one commit on main."""
    r = tmp_path / "repo"
    shutil.copytree(ROOT / "configs", r / "configs")
    shutil.copytree(ROOT / "suites", r / "suites", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "thresholds.yaml", r / "thresholds.yaml")
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", ".")
    _git(r, "commit", "-q", "-m", "base")
    _git(r, "checkout", "-q", "-b", "pr")
    return r


def _changed(repo: Path, capsys: pytest.CaptureFixture[str], base: str = "main") -> tuple[int, list[str], str]:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "change")
    code = main(["changed-configs", "--base", base, "--configs-dir", str(repo / "configs"),
                 "--suites-dir", str(repo / "suites"), "--thresholds", str(repo / "thresholds.yaml")])
    cap = capsys.readouterr()
    return code, cap.out.split(), cap.err


def test_a_changed_config_is_gated(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with (repo / "configs" / "dense" / "bf16.yaml").open("a") as fh:
        fh.write("  max_num_seqs: 8\n")
    code, names, err = _changed(repo, capsys)
    assert (code, names) == (0, ["dense/bf16"])
    assert "evalgate: dense/bf16: config changed" in err


def test_a_changed_parent_gates_its_children(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "configs" / "mtp1.yaml").write_text((repo / "configs" / "mtp1.yaml").read_text() + "\n# tweak\n")
    code, names, err = _changed(repo, capsys)
    assert names == ["mtp1", "mtp3"] and "mtp3: extends mtp1, which changed" in err


def test_a_changed_baseline_gates_every_config_against_it(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "configs" / "baseline.yaml").write_text((repo / "configs" / "baseline.yaml").read_text() + "# x\n")
    _, names, _ = _changed(repo, capsys)
    # baseline itself has nothing to be gated against; the dense, GDN and VL families have their own baselines
    assert names == [n for n in GATEABLE if not n.startswith(("dense/", "gdn/", "vl/"))]


def test_random_weight_configs_are_never_listed_for_the_quality_gate(repo: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """configs/scale/ (load_format: dummy) gates speed only: a change to it lists nothing for the quality job."""
    for name in ("scale/baseline.yaml", "scale/fp16-state.yaml", "scale/cpu/aa.yaml"):
        (repo / "configs" / name).write_text((repo / "configs" / name).read_text() + "# x\n")
    code, names, _ = _changed(repo, capsys)
    assert (code, names) == (0, [])


def test_suite_or_threshold_changes_gate_everything(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "thresholds.yaml").write_text((repo / "thresholds.yaml").read_text() + "# x\n")
    _, names, err = _changed(repo, capsys)
    assert names == GATEABLE and "dense/bf16: thresholds.yaml changed" in err


def test_added_config_is_gated_and_a_deleted_one_is_not(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "configs" / "fp8-kv.yaml").write_text("extends: baseline\nengine_args:\n  kv_cache_dtype: fp8\n")
    (repo / "configs" / "omp1.yaml").unlink()
    _, names, _ = _changed(repo, capsys)
    assert names == ["fp8-kv"]


def test_a_config_that_no_longer_loads_is_listed(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "configs" / "mtp1.yaml").unlink()  # mtp3 extends it
    _, names, err = _changed(repo, capsys)
    assert names == ["mtp3"] and "mtp3: does not load (" in err


def test_no_relevant_change_lists_nothing(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "README").write_text("docs\n")
    assert _changed(repo, capsys)[:2] == (0, [])


def test_unknown_base_is_a_usage_error(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _changed(repo, capsys, base="origin/nope")
    assert code == 2 and err.startswith("evalgate: error: --base: unknown git revision 'origin/nope' (in CI check "
                                        "out the base branch too") and "fetch-depth: 0" in err
    assert err.count("\n") == 1  # one line, without git's usage advice


def _gate_script(tmp_path: Path, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    bindir = str(Path(sys.executable).parent)  # where `evalgate` lives, as the workflow's install step sets up
    full = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "GATE_REPORTS": str(tmp_path / "reports"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "ci-gate.sh")], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


def test_gate_script_fails_on_a_config_error_and_still_leaves_summary_and_junit(tmp_path: Path) -> None:
    proc = _gate_script(tmp_path, {"GATE_CONFIGS": "no-such-config", "GATE_LIMIT": "2"})
    assert proc.returncode == 1, proc.stderr
    assert "::error title=evalgate no-such-config::exit 2" in proc.stdout
    assert (tmp_path / "reports" / "exit-codes.tsv").read_text() == "no-such-config\t2\n"
    assert "evalgate ERROR: no-such-config (exit 2)" in (tmp_path / "summary.md").read_text()
    junit = ET.parse(tmp_path / "reports" / "no-such-config" / "verdict.junit.xml").getroot()
    assert junit.get("errors") == "1" and "not found" in next(junit.iter("error")).get("message")


def test_gate_script_passes_when_no_config_needs_gating(tmp_path: Path) -> None:
    proc = _gate_script(tmp_path, {"GATE_CONFIGS": " "})
    assert proc.returncode == 0, proc.stderr
    assert "no configs to gate" in (tmp_path / "summary.md").read_text()
