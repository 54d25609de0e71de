"""A suite whose own code raises on an item the pre-flight never tries (item 2; the pre-flight scores item 0), run
by the real vLLM CPU engine on the embedded hybrid: exit 2 with one line naming the suite's file, its function and
the error, not exit 3 with an engine log tail; the suite that finished before it stays in the store and the failing
suite's generations stay journaled, so a fixed suite reruns without generating them again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402

pytestmark = pytest.mark.engine

TASK = """task: {name}_task
dataset_path: ""
custom_dataset: !function utils.load_data
output_type: generate_until
test_split: test
doc_to_text: "Q: {{{{q}}}}\\nA:"
doc_to_target: "{{{{a}}}}"
generation_kwargs: {{until: ["\\n"], max_gen_toks: 4}}
process_results: !function utils.process_results
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""
UTILS = """import datasets


def load_data(**_):
    rows = [{{"q": f"{name} {{n}} plus {{n}}", "a": str(2 * n)}} for n in range(4)]  # each suite its own prompts
    return {{"test": datasets.Dataset.from_list(rows)}}


def process_results(doc, results):
    if doc["q"].startswith("{name} {bad}"):
        raise ValueError("cannot score this answer")
    return {{"exact_match": float(results[0].strip() == doc["a"])}}
"""


def _suite(root: Path, name: str, bad: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "t.yaml").write_text(TASK.format(name=name))
    (folder / "utils.py").write_text(UTILS.format(name=name, bad=bad))
    return folder


def test_a_suite_raising_past_item_0_is_exit_2_naming_its_code_and_keeps_finished_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    suites = tmp_path / "suites"
    _suite(suites, "aok", bad="never")
    bad = _suite(suites, "zbad", bad="2 ")  # item 2 ("2 plus 2"); the pre-flight scores item 0 only
    out = tmp_path / "score"
    args = ["score", "--config", "baseline", "--suites-dir", str(suites), "--limit", "4", "--out", str(out)]
    code = main([*args, "--suites", "aok", "zbad"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalgate: error")]
    assert code == 2, err
    assert len(err) == 1 and err[0] == (
        f"evalgate: error: {(bad / 'utils.py').resolve()}: process_results: suite zbad's code raised in the engine "
        "worker: ValueError: cannot score this answer (line 11); a task's code must take every item and any output "
        "(the pre-flight tries item 0 with an empty and the target output only); fix the suite or leave it out "
        "(suites already finished stay stored, generations already made stay journaled)"), err
    journal = _journal_lines(tmp_path / "home")
    assert journal == 8  # aok's 4 generations and zbad's 4 (lm-eval generates every item before scoring any)

    (bad / "utils.py").write_text(UTILS.format(name="zbad", bad="never"))  # the suite fixed
    assert main([*args, "--suites", "aok", "zbad"]) == 0
    doc = json.loads((out / "score.json").read_text())
    assert "aok" in doc["cached_suites"] and "zbad" not in doc["cached_suites"]  # aok from the store
    assert _journal_lines(tmp_path / "home") == journal  # zbad's answers from the journal: nothing generated again
    assert [t["task"] for t in doc["tasks"]] == ["aok_task", "zbad_task"] and all(t["items"] == 4 for t in doc["tasks"])


def _journal_lines(home: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (home / "store" / "journal").glob("*.jsonl"))
