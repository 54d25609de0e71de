"""The pre-merge workflow: valid against GitHub's workflow schema (check-jsonschema), shaped as documented, and
its gate step run locally against the embedded default, producing the artifacts CI publishes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalgate.suites.discovery import load_suite

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "evalgate.yml"
CACHE_INPUTS = "hashFiles('configs/**', 'suites/**', 'thresholds.yaml', 'pyproject.toml')"


def _workflow() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("check_jsonschema", reason="needs check-jsonschema (pip install 'evalgate[test]')")
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True, timeout=120)


def test_workflow_is_valid_against_githubs_schema() -> None:
    proc = _lint(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_linter_rejects_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("    runs-on: ubuntu-latest\n", "    runs_on: ubuntu-latest\n"))
    assert _lint(broken).returncode != 0


def test_triggers_runner_label_and_jobs() -> None:
    wf = _workflow()
    on = wf[True]  # YAML 1.1 reads the key `on` as True
    assert on["pull_request"]["paths"] == ["configs/**", "suites/**", "thresholds.yaml"]
    assert {"configs", "cpu_configs", "gpu_runner", "limit"} <= set(on["workflow_dispatch"]["inputs"])
    gpu, cpu = wf["jobs"]["gate-gpu"], wf["jobs"]["embedded-cpu"]
    assert gpu["runs-on"] == "${{ inputs.gpu_runner || vars.EVALGATE_GPU_RUNNER || 'gpu' }}"
    assert cpu["runs-on"] == "ubuntu-latest" and "fp16-state" in cpu["env"]["GATE_CONFIGS"]
    assert gpu["steps"][0]["with"]["fetch-depth"] == 0  # changed-configs needs the merge base
    assert wf["permissions"] == {"contents": "read"}


@pytest.mark.parametrize("job", ["gate-gpu", "embedded-cpu"])
def test_job_caches_the_store_gates_and_publishes(job: str) -> None:
    steps = _workflow()["jobs"][job]["steps"]
    uses = {s.get("uses", "").split("@")[0]: s for s in steps}
    restore, save = uses["actions/cache/restore"], uses["actions/cache/save"]
    assert restore["with"]["path"] == save["with"]["path"] == ".evalgate-home/store"
    assert CACHE_INPUTS in restore["with"]["key"] and restore["with"]["key"] == save["with"]["key"]
    assert restore["with"]["restore-keys"].split()[-1].endswith("-")  # fall back to any earlier store
    assert save["if"] == uses["actions/upload-artifact"]["if"] == "${{ !cancelled() }}"  # also after a BLOCK
    assert uses["actions/upload-artifact"]["with"]["path"] == "reports/"
    gate = next(s for s in steps if s.get("id") == "gate")
    assert gate["run"].strip() == "scripts/ci-gate.sh"
    for step in steps:
        if "run" in step:
            assert subprocess.run(["bash", "-n", "-c", step["run"]]).returncode == 0, step["run"]
            assert "${{" not in step["run"], "expressions go through env:, never into scripts"


def _resolve(value: str) -> str:
    """Evaluate the workflow's env expressions as on a pull request: an input is empty, `a || 'x'` is 'x'."""
    m = re.fullmatch(r"\$\{\{\s*inputs\.\w+\s*(?:\|\|\s*'([^']*)'\s*)?\}\}", value)
    return (m.group(1) or "") if m else value


def _cpu_gate_env() -> dict[str, str]:
    """The embedded-cpu job's GATE_* variables as a pull request resolves them."""
    job = _workflow()["jobs"]["embedded-cpu"]
    return {k: _resolve(str(v)) for k, v in job["env"].items() if k.startswith("GATE_")}


def test_the_shipped_cpu_job_can_pass() -> None:
    """Its default size powers every task it gates: for each task, n items (the whole suite, or --limit) give an
    MDE floor (z_0.95 + z_0.8) * 100 / n at or below the task's fp16-state margin, so an unchanged candidate can
    PASS (the gate's SE is never below 100 / n: at the old --limit 40 every task was INCONCLUSIVE by construction).
    The floor is computed here from the standard library's normal quantiles, the item counts by generating each
    task's data as lm-eval would."""
    from statistics import NormalDist

    from evalgate.inputs.thresholds import load_thresholds
    from evalgate.suites.discovery import count_items, list_suites, load_suite

    env = _cpu_gate_env()
    assert env["GATE_CONFIGS"] == "fp16-state"
    limit = int(env["GATE_LIMIT"]) if env["GATE_LIMIT"] else None
    # what `evalgate run --config fp16-state` gates without --suites: every text suite (image suites need a VL model)
    suites = [load_suite(n) for n in env["GATE_SUITES"].split()] or [s for s in list_suites() if s.modality == "text"]
    thresholds = load_thresholds(ROOT / "thresholds.yaml")
    assert thresholds.alpha == 0.05 and thresholds.power == 0.8
    k = NormalDist().inv_cdf(0.95) + NormalDist().inv_cdf(0.8)
    gated = {}
    for suite in suites:
        for spec in suite.specs:
            caps = [c for c in (limit, spec.limit) if c is not None]
            n = min([count_items(suite, spec.name), *caps])
            margin = thresholds.for_task(suite.name, spec.name, "fp16-state").margin
            gated[spec.name] = (n, round(k * 100 / n, 2), margin)
            assert k * 100 / n <= margin, f"{suite.name}/{spec.name}: n={n}, MDE floor {k * 100 / n:.2f} > {margin}"
    assert len(gated) == 10  # every task of the four suites


@pytest.mark.engine
def test_cpu_job_runs_locally_and_produces_the_artifacts(tmp_path: Path) -> None:
    """The embedded-cpu job's steps after install, on this machine: its own env (defaults resolved), with fewer
    items and one suite to stay cheap (limit 3, as the end-to-end tests use, so a shared store serves both).

    At 3 items the verdict is knowable: INCONCLUSIVE, exit 5, the script's exit 1. No task can PASS (MDE >= (z_0.95
    + z_0.8) * 100 / 3 = 83 pts > its 4-point margin); none can BLOCK, since the smallest one-sided loss p-value of
    3 items is 0.048 (the t p-value of a 100-point loss on the floored SE 100/3 with >= 2 df; McNemar's is >= 1/8),
    above Holm's first level 0.05 / 4 over finance's four tasks; the health overrides need more items still
    (Bonferroni), fp16-state drafts nothing and measures no speed, and it is applied on CPU (float16 state read
    back), so not NO-OP."""
    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")
    job = _workflow()["jobs"]["embedded-cpu"]
    env = _cpu_gate_env()
    assert env["GATE_CONFIGS"] == "fp16-state"
    env.update(GATE_LIMIT="3", GATE_SUITES="finance", GATE_REPORTS=str(tmp_path / "reports"))
    summary = tmp_path / "step-summary.md"
    full = {**os.environ, **env, "GITHUB_STEP_SUMMARY": str(summary),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}
    rc, stderr = 0, ""
    for step in job["steps"]:
        if "run" in step and step.get("id") != "install":  # installed already: the venv running these tests
            proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=ROOT,
                                  env=full, capture_output=True, text=True, timeout=1800)
            rc, stderr = rc or proc.returncode, stderr + proc.stderr
    run = tmp_path / "reports" / "fp16-state"
    doc = json.loads((run / "verdict.json").read_text())
    assert (doc["verdict"], rc) == ("INCONCLUSIVE", 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "reports" / "exit-codes.tsv").read_text() == "fp16-state\t5\n"
    assert "::error title=evalgate fp16-state::exit 5" in proc.stdout
    finance = list(load_suite("finance").tasks)  # finance_finqa, finance_tableqa, finance_tatqa, ...
    assert [t["task"] for t in doc["tasks"]] == finance and all(t["n"] == 3 for t in doc["tasks"])
    assert all(t["verdict"] == "INCONCLUSIVE" and t["rule"].startswith("power") for t in doc["tasks"])
    # Said before the engines started: one line, naming the least limit that powers finance's 4-point margins.
    notices = [ln for ln in stderr.splitlines() if "notice:" in ln]
    assert len(notices) == 1
    assert notices[0].startswith("evalgate: notice: at --limit 3 no task can PASS")
    assert notices[0].endswith("every task could PASS from --limit 63")
    html = (run / "report.html").read_text()
    assert 'class="verdict INCONCLUSIVE">INCONCLUSIVE<' in html and "<svg" in html
    junit = ET.parse(run / "verdict.junit.xml").getroot()
    assert [c.get("name") for c in junit.iter("testcase")] == finance
    assert all(c.find("skipped") is not None for c in junit.iter("testcase"))  # INCONCLUSIVE is <skipped>
    md = (run / "summary.md").read_text()
    assert "evalgate INCONCLUSIVE: fp16-state vs baseline" in md and md in summary.read_text()
