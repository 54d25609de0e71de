"""The docs' "bring your own data" example (``docs/examples/byod/``), built as a user would: copied into an empty
folder, found as a gate project by ``evalgate list``, its task loaded and scored by lm-eval (no engine), and, as an
``engine`` test, gated by ``evalgate run`` on the real engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalgate.cli import main
from evalgate.suites.discovery import load_suite, task_manager

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "byod"
DATA = EXAMPLE / "suites" / "contracts" / "data" / "contracts.jsonl"


def _items() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example in an empty folder, the working directory (nothing of this repository's own layout
    above it: no evalgate.toml, pyproject.toml or thresholds.yaml in tmp_path's parents)."""
    root = tmp_path / "my-gate"
    shutil.copytree(EXAMPLE, root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("EVALGATE_SUITES", raising=False)
    return root


def test_the_example_is_what_the_page_describes() -> None:
    """24 items of 6 contracts, 4 questions each, every one with the fields the task YAML and scorer read."""
    items = _items()
    assert len(items) == 24
    groups = [i["doc_group"] for i in items]
    assert sorted(set(groups)) == [f"c0{k}" for k in range(1, 7)] and all(groups.count(g) == 4 for g in set(groups))
    assert all(set(i) == {"doc_group", "contract", "question", "answer"} for i in items)
    assert all(i["answer"] and "\n" not in i["answer"] for i in items)


def test_evalgate_list_finds_the_project_and_its_suite(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"project: {project} (thresholds.yaml)" in out
    assert f"suites:      {project / 'suites'} (project)" in out
    assert f"thresholds:  {project / 'thresholds.yaml'} (project)" in out
    assert "(built-in)" in out.split("configs:")[1].splitlines()[0]  # no configs/ here: the shipped ones
    assert "fp16-state" in out
    suites = out.split("\nsuites:\n")[1].split()
    assert suites == ["contracts", "contracts_qa", "(exact)"]


def test_lm_eval_loads_the_task_and_the_scorer_scores_it(project: Path) -> None:
    """The task as the engine worker loads it (evalgate's task manager over the project's suites), without an
    engine: its items are the JSONL rows, the prompt is the YAML's template, and the scorer gives exact 1 for the
    reference answer (as a model would write it) and 0 for a wrong or empty one."""
    suite = load_suite("contracts", project / "suites")
    assert suite.tasks == ("contracts_qa",) and suite.primary_metric == {"contracts_qa": "exact"}
    assert suite.spec("contracts_qa").data_files == (str(project / "suites/contracts/data/contracts.jsonl"),)
    task = task_manager(project / "suites").load(["contracts_qa"])["tasks"]["contracts_qa"]
    docs = list(task.test_docs())
    items = _items()
    assert [d["question"] for d in docs] == [i["question"] for i in items]
    assert [d["doc_group"] for d in docs] == [i["doc_group"] for i in items]  # what evalgate reads as clusters
    first = items[0]
    assert task.doc_to_text(docs[0]) == f"Contract: {first['contract']}\nQuestion: {first['question']}\nAnswer:"
    assert task.doc_to_target(docs[0]) == first["answer"] == "Harlow Mills Ltd"
    assert list(task.aggregation()) == ["exact", "parsed"] and task.higher_is_better()["exact"] is True
    for doc, item in zip(docs, items):
        assert task.process_results(doc, [f" {item['answer']}\n"]) == {"exact": 1.0, "parsed": 1.0}
    rent = docs[5]
    assert rent["answer"] == "USD 1,850"
    assert task.process_results(rent, [" usd 1850."]) == {"exact": 1.0, "parsed": 1.0}  # case, separator, stop
    assert task.process_results(rent, [" USD 1,580"]) == {"exact": 0.0, "parsed": 1.0}
    assert task.process_results(rent, ["   "]) == {"exact": 0.0, "parsed": 0.0}


@pytest.mark.engine
def test_evalgate_run_gates_the_example_on_the_real_engine(project: Path) -> None:
    """``evalgate run --config fp16-state`` in the project: the 24 items on both sides of the embedded hybrid, the
    6 contracts as clusters, and a verdict the statistics fix in advance. fp16-state leaves this model's outputs
    (almost) unchanged; at n = 24 the MDE is at least 2.49 * 100 / 24 = 10.4 points, under the example's 15-point
    margin, so the task PASSes by non-inferiority unless a loss is shown. (The embedded 5 M-parameter model answers
    none of these questions right, on either side: the PASS shows the pipeline, not the model; the page says so.)"""
    pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")
    out = project / "run"
    code = main(["run", "--config", "fp16-state", "--suites", "contracts", "--logprob-items", "2", "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    (task,) = doc["tasks"]
    assert (task["suite"], task["task"], task["metric"], task["n"], task["n_clusters"]) == (
        "contracts", "contracts_qa", "exact", 24, 6)
    assert task["margin"] == 15.0 and task["mde"] >= 2.48 * 100 / 24
    items = json.loads((out / "baseline.json").read_text(encoding="utf-8"))["tasks"]["contracts_qa"]["items"]
    assert [i["cluster"] for i in items] == [i["doc_group"] for i in _items()]  # doc_group became the cluster
    assert all(set(i["metrics"]) == {"exact", "parsed"} and i["score"] == i["metrics"]["exact"] for i in items)
    assert doc["verdict"] == "PASS" and task["rule"].startswith("non-inferiority") and code == 0, (
        doc["verdict"], task["reason"])
