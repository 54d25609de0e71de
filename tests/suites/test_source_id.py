"""The dataset's own item id (``ItemResult.source_id``): read from the task's docs, stored with the item, shown
(escaped) in the report and summary instead of lm-eval's position ``item N``."""

from __future__ import annotations

import dataclasses
import re

import pytest

from evalgate.report.outputs import render_markdown
from evalgate.report.render import render_html
from evalgate.results.store import tasks_from_json, tasks_to_json
from evalgate.worker.suite_eval import source_id
from runfixtures import EVIL_SCRIPT, document, task


@pytest.mark.parametrize(("doc", "expected"), [
    ({"id": "convfinqa-Single_JKHY/2009/page_28.pdf-3", "uid": "u"}, "convfinqa-Single_JKHY/2009/page_28.pdf-3"),
    ({"doc_id": 17, "qid": "q"}, "17"),
    ({"uid": "", "qid": "q-9"}, "q-9"),           # an empty id is no id
    ({"id": True, "task_id": "HumanEval/3"}, "HumanEval/3"),  # a bool is no id
    ({"id": None, "question": "x"}, None),
    ("not a mapping", None),
])
def test_source_id_is_the_first_id_field_the_doc_holds(doc, expected) -> None:
    assert source_id(doc) == expected


def _with_ids(t, ids):
    return dataclasses.replace(t, items=tuple(dataclasses.replace(i, source_id=s) for i, s in zip(t.items, ids)))


def test_source_id_is_stored_with_the_item_and_old_records_read_as_none() -> None:
    t = _with_ids(task("t", "s", ["a", "b"], [1.0, 0.0]), ["FUNSD-0001", None])
    data = tasks_to_json({"t": t})
    assert data["t"]["items"][0]["source_id"] == "FUNSD-0001" and "source_id" not in data["t"]["items"][1]
    back = tasks_from_json(data, "x.json")["t"]
    assert [i.source_id for i in back.items] == ["FUNSD-0001", None]


def test_report_shows_the_dataset_id_escaped_instead_of_item_n() -> None:
    n = 40
    evil = "inv-7" + EVIL_SCRIPT
    base = {"t": _with_ids(task("t", "s", ["ok"] * n, [1.0] * n), [evil] + [f"inv-{i}" for i in range(1, n)])}
    cand_scores = [0.0] * 10 + [1.0] * (n - 10)
    cand = {"t": task("t", "s", [f"bad {i}" for i in range(10)] + ["ok"] * (n - 10), cand_scores)}  # no ids
    doc = document(base, cand, margin=10.0)
    flips = doc["tasks"][0]["flipped"]
    assert [f["source_id"] for f in flips] == [evil] + [f"inv-{i}" for i in range(1, 10)]
    html = render_html(doc)
    assert "<script>" not in html and "inv-7&lt;script&gt;" in html
    shown = re.findall(r'<span class="source-id">([^<]*)</span>', html)
    assert sorted(shown) == sorted(["inv-7&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"]
                                   + [f"inv-{i}" for i in range(1, 10)])
    assert "> item 0:" not in html and "(item 0, " in html  # lm-eval's position moves beside the hash
    md = render_markdown(doc)
    assert "t #3 (inv-3)" in md and "&lt;script&gt;" in md and "<script>" not in md


def test_a_field_the_task_names_comes_first() -> None:
    doc = {"id": "row-3", "invoice_no": "INV-2024-0042"}
    assert source_id(doc, "invoice_no") == "INV-2024-0042"
    assert source_id(doc, "missing") == "row-3"  # not in this doc: the usual fields


def test_the_task_names_its_id_field_in_metadata_evalgate(tmp_path) -> None:
    from evalgate.suites.discovery import load_suite
    from evalgate.suites.tasknotes import task_notes

    d = tmp_path / "s"
    d.mkdir()
    (d / "t.yaml").write_text("task: t\ndataset_path: json\ndataset_kwargs: {data_files: {test: d.jsonl}}\n"
                              "test_split: test\nmetric_list: [{metric: exact_match}]\n"
                              "metadata: {evalgate: {id_field: invoice_no}}\n")
    (d / "u.yaml").write_text("task: u\ndataset_path: json\ndataset_kwargs: {data_files: {test: d.jsonl}}\n"
                              "test_split: test\nmetric_list: [{metric: exact_match}]\n")
    suite = load_suite("s", tmp_path)
    assert (suite.spec("t").id_field, suite.spec("u").id_field) == ("invoice_no", None)
    assert task_notes(suite, "t").baseline_accuracy == {}  # plan reads the same block: id_field is a known key
