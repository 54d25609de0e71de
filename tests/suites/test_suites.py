"""The three suites (generators, prompts, scorers, lm-eval loading) and evalgate.suites.discovery."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.suites.discovery import SUITES_DIR, content_hash, count_items, default_suites_dir, list_suites, load_suite
from evalgate.suites.taskcode import load_module


def _utils(suite: str):
    return load_module(SUITES_DIR / suite / "utils.py")


DOC = _utils("docparse")
FIN = _utils("finance")
CODE = _utils("coding")


def _digest(items: list[dict]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


# sha256 of the generated test items (json, sorted keys). A change here changes every baseline
# (the suite content hash changes anyway); update only on purpose, with a version bump.
ITEM_DIGESTS = {
    "docparse": "3260f3f59ce4f6f66cf3fb4cf95a7845713b9181ae87b4c5c321dde373cd06cb",
    "finance": "f6e441986df3be7ef84b15ceac6569c6921f9ce5d3334aabded4b7673cd2a264",
    "coding": "c312d5e992a5d92a1e86d08a7b222854665372d41ba6d45d64c91032fffd635b",
}


# ---------------------------------------------------------------- generators
@pytest.mark.parametrize(("suite", "module"), [("docparse", DOC), ("finance", FIN), ("coding", CODE)])
def test_items_hash_is_pinned(suite: str, module) -> None:
    assert _digest(module.load_data()["test"].to_list()) == ITEM_DIGESTS[suite]


@pytest.mark.parametrize("module", [DOC, FIN], ids=["docparse", "finance"])
def test_generator_is_deterministic(module) -> None:
    a = module.load_data(version=1.0)["test"].to_list()
    b = module.load_data(version=1.0)["test"].to_list()
    assert len(a) == 200
    assert a == b
    assert _digest(a) == _digest(b)
    assert len({d["id"] for d in a}) == 200
    other = module.load_data(seed=1)["test"].to_list()
    assert _digest(other) != _digest(a)


def test_docparse_items_shape() -> None:
    items = DOC.load_data()["test"].to_list()
    assert [d["kind"] for d in items[:4]] == ["invoice", "receipt", "form", "table"]
    assert all(d["doc_group"] == d["id"] for d in items)
    for d in items:
        gold = json.loads(d["target"])
        assert list(gold) == d["fields"] and 3 <= len(d["fields"]) <= 4
        for v, t in zip(gold.values(), d["types"]):
            assert DOC.normalize(v, t) == (v.casefold() if t == "text" else v)  # gold is canonical


def test_finance_items_share_doc_groups() -> None:
    items = FIN.load_data()["test"].to_list()
    groups: dict[str, list[dict]] = {}
    for d in items:
        groups.setdefault(d["doc_group"], []).append(d)
    assert len(groups) == 50
    assert all(len(g) == 4 and len({d["statement"] for d in g}) == 1 for g in groups.values())
    assert all(len({d["qtype"] for d in g}) == 4 for g in groups.values())
    assert {d["qtype"] for d in items} == set(FIN.QTYPES)


def test_fewshot_examples_are_disjoint_from_test_items() -> None:
    docs = DOC.load_data()["test"].to_list()
    shot_docs = {s["document"] for s in DOC.FEWSHOT}
    shot_targets = {s["target"] for s in DOC.FEWSHOT}
    assert not shot_docs & {d["document"] for d in docs}
    assert not shot_targets & {d["target"] for d in docs}
    fin = FIN.load_data()["test"].to_list()
    shots = [s for pair in FIN.FEWSHOT.values() for s in pair]
    assert not {s["statement"] for s in shots} & {d["statement"] for d in fin}
    assert all(s["id"].startswith("finance-shot-") for s in shots)


def test_prompts_hold_two_worked_examples_then_the_item() -> None:
    doc = DOC.load_data()["test"][0]
    prompt = DOC.doc_to_text(doc)
    assert prompt.count("Document:") == 3 and prompt.count("JSON:") == 3
    assert prompt.endswith(doc["document"] + "\nFields: vendor, invoice_no, date, total\nJSON:")
    item = FIN.load_data()["test"][0]
    prompt = FIN.doc_to_text(item)
    assert prompt.count("Statement:") == 3 and prompt.count("Answer:") == 3
    assert prompt.endswith(f"Question: {item['question']}\nAnswer:")


# ---------------------------------------------------------------- docparse scorer
_DP = {"fields": ["vendor", "invoice_no", "date", "total"], "types": ["text", "text", "date", "number"],
       "target": '{"vendor": "Acme Supply Ltd", "invoice_no": "INV-1234", "date": "2024-03-05", "total": "1234.50"}'}


def _dp(output: str) -> dict[str, float]:
    return DOC.process_results(_DP, [output])


def test_docparse_exact_json() -> None:
    assert _dp(' {"vendor": "Acme Supply Ltd", "invoice_no": "INV-1234", "date": "2024-03-05", "total": "1234.50"}') == {
        "field_acc": 1.0, "all_fields": 1.0, "json_valid": 1.0}


def test_docparse_json_with_trailing_prose_and_normalisation() -> None:
    out = '{"Vendor": " ACME  supply ltd", "invoice no": "inv-1234", "date": "March 5, 2024", "total": 1234.5} Done!'
    assert _dp(out) == {"field_acc": 1.0, "all_fields": 1.0, "json_valid": 1.0}
    assert _dp('{"vendor":"Acme Supply Ltd","invoice_no":"INV-1234","date":"03/05/2024","total":"$1,234.50"}')[
        "field_acc"] == 1.0


def test_docparse_wrong_field() -> None:
    out = '{"vendor": "Acme Supply Ltd", "invoice_no": "INV-1234", "date": "2024-05-03", "total": "1234.51"}'
    assert _dp(out) == {"field_acc": 0.5, "all_fields": 0.0, "json_valid": 1.0}


def test_docparse_key_value_fallback() -> None:
    out = "vendor: Acme Supply Ltd\ninvoice_no: INV-1234\ndate: 5 Mar 2024\ntotal: 1,234.50 USD"
    assert _dp(out) == {"field_acc": 1.0, "all_fields": 1.0, "json_valid": 0.0}
    truncated = '{"vendor": "Acme Supply Ltd", "invoice_no": "INV-9", "date": "2024-03-05", "total": "1234.5'
    assert _dp(truncated) == {"field_acc": 0.75, "all_fields": 0.0, "json_valid": 0.0}


def test_docparse_garbage_and_empty() -> None:
    assert _dp("I don't know") == {"field_acc": 0.0, "all_fields": 0.0, "json_valid": 0.0}
    assert _dp("") == {"field_acc": 0.0, "all_fields": 0.0, "json_valid": 0.0}
    assert _dp('["Acme Supply Ltd"]')["json_valid"] == 0.0


# ---------------------------------------------------------------- finance scorer
@pytest.mark.parametrize(
    ("text", "value"),
    [(" 1470", 1470.0), (" $1,470", 1470.0), (" (1,234)", -1234.0), (" -1,234.5", -1234.5),
     (" 12.5%", 12.5), ("The change is 1,470 thousand.", 1470.0), (" 2020\nAnswer: 2021", 2021.0),
     ("Answer: 500 - 30 = 470\nQuestion: 7", 470.0), (" \u22123.2", -3.2), (" .5", 0.5), ("none", None),
     # the working the few-shot examples show: the result is the line's last number, not the year
     (" Revenue 2023 = 1,125", 1125.0), (" (440 - 347) / 347 * 100 = 26.8\n\nStatement: 2022", 26.8),
     ("\n 3,022 - 2,817 = 205", 205.0)],
)
def test_finance_number_extraction(text: str, value: float | None) -> None:
    assert FIN.extract_number(text) == value


def test_finance_tolerance_boundary() -> None:
    assert FIN.is_match(101.0, 100.0) is True
    assert FIN.is_match(101.01, 100.0) is False
    assert FIN.is_match(-99.0, -100.0) is True
    assert FIN.is_match(0.005, 0.0) is True
    assert FIN.is_match(0.006, 0.0) is False
    assert FIN.is_match(None, 1.0) is False


def test_finance_process_results() -> None:
    doc = {"target": "-15.9"}
    assert FIN.process_results(doc, [" -15.9\n"]) == {"num_match": 1.0, "parsed": 1.0}
    assert FIN.process_results(doc, [" (15.8)%"]) == {"num_match": 1.0, "parsed": 1.0}
    assert FIN.process_results(doc, [" 15.9"]) == {"num_match": 0.0, "parsed": 1.0}
    assert FIN.process_results(doc, [" unknown"]) == {"num_match": 0.0, "parsed": 0.0}


def test_finance_gold_answers_follow_from_the_table() -> None:
    items = FIN.make_items(123, 30, 4, "t")
    for d in items:
        if d["qtype"] == "sum":
            item = d["question"].split("combined ")[1].split(" of ")[0]
            row = next(line for line in d["statement"].split("\n") if line.lower().startswith(item))
            nums = [FIN.extract_number(x) for x in row[19:].split()]
            assert sum(nums) == float(d["target"])


# ---------------------------------------------------------------- coding
def test_humaneval_has_164_problems() -> None:
    docs = CODE.load_data()["test"].to_list()
    assert len(docs) == 164
    assert docs[0]["id"] == docs[0]["doc_group"] == "HumanEval/0"
    assert docs[163]["id"] == "HumanEval/163"
    assert docs[0]["entry_point"] == "has_close_elements"


def test_humaneval_canonical_solutions_pass_and_empty_fails() -> None:
    docs = CODE.load_data()["test"].to_list()
    for d in docs[:5]:
        assert CODE.process_results(d, [d["canonical_solution"]]) == {"pass_at_1": 1.0}
        assert CODE.process_results(d, [""]) == {"pass_at_1": 0.0}
    wrong = docs[0]["canonical_solution"].replace("return True", "return False")
    assert CODE.process_results(docs[0], [wrong]) == {"pass_at_1": 0.0}


def test_every_canonical_solution_passes_in_the_sandbox() -> None:
    """The sandbox (stdlib only, limits) must not fail a correct HumanEval solution."""
    docs = CODE.load_data()["test"].to_list()
    failed = [d["id"] for d in docs if CODE.process_results(d, [d["canonical_solution"]])["pass_at_1"] != 1.0]
    assert failed == []


# ---------------------------------------------------------------- lm-eval loading
@pytest.fixture(scope="module")
def task_dict():
    from lm_eval.tasks import get_task_dict

    from evalgate.suites.discovery import task_manager

    return get_task_dict([t for s in list_suites(SUITES_DIR) for t in s.tasks], task_manager())


@pytest.mark.parametrize(("task", "n", "metric"), [
    ("docparse_fields", 200, "field_acc"), ("finance_tableqa", 200, "num_match"), ("coding_humaneval", 164, "pass_at_1")])
def test_tasks_load_through_lm_eval(task_dict, task: str, n: int, metric: str) -> None:
    t = task_dict[task]
    docs = list(t.test_docs())
    assert len(docs) == n
    assert t.OUTPUT_TYPE == "generate_until"
    assert list(t.aggregation())[0] == metric
    assert t.higher_is_better()[metric] is True
    assert t.config.generation_kwargs["do_sample"] is False
    assert t.config.generation_kwargs["max_gen_toks"] <= (256 if task == "coding_humaneval" else 96)
    assert isinstance(t.doc_to_text(docs[0]), str) and docs[0]["id"]
    scores = t.process_results(docs[0], [""])
    assert scores[metric] == 0.0


def test_count_items_matches_what_lm_eval_loads(task_dict) -> None:
    """The size `evalgate plan` checks against is the number of docs lm-eval evaluates (no --limit)."""
    for suite in list_suites(SUITES_DIR):
        for name in suite.tasks:
            assert count_items(suite, name) == len(list(task_dict[name].test_docs())), name


def test_count_items_errors(tmp_path: Path) -> None:
    root = tmp_path / "suites"
    (root / "x").mkdir(parents=True)
    (root / "x" / "gen.yaml").write_text("task: gen\ncustom_dataset: !function utils.load_data\n"
                                         "dataset_kwargs: {n: 7}\nmetadata: {version: 1.0}\ntest_split: test\n"
                                         "metric_list: [{metric: acc}]\n")
    (root / "x" / "hub.yaml").write_text("task: hub\ndataset_path: someone/dataset\ntest_split: test\n"
                                         "metric_list: [{metric: acc}]\n")
    (root / "x" / "bad.yaml").write_text("task: bad\ncustom_dataset: !function utils.broken\ntest_split: test\n"
                                         "metric_list: [{metric: acc}]\n")
    (root / "x" / "utils.py").write_text("def load_data(n, version, **_):\n    return {'test': list(range(n))}\n\n"
                                         "def broken(**_):\n    raise RuntimeError('no data today')\n")
    suite = load_suite("x", root)
    assert count_items(suite, "gen") == 7  # called with metadata and dataset_kwargs, as lm-eval does
    with pytest.raises(ConfigError, match="no custom_dataset"):
        count_items(suite, "hub")
    with pytest.raises(ConfigError, match="RuntimeError: no data today"):
        count_items(suite, "bad")
    with pytest.raises(ConfigError, match="has no task 'nope'"):
        count_items(suite, "nope")


def test_lm_eval_prompt_matches_utils(task_dict) -> None:
    t = task_dict["coding_humaneval"]
    doc = next(iter(t.test_docs()))
    assert t.doc_to_text(doc) == doc["prompt"]
    t = task_dict["docparse_fields"]
    doc = next(iter(t.test_docs()))
    assert t.doc_to_text(doc) == DOC.doc_to_text(doc)


# ---------------------------------------------------------------- evalgate.suites.discovery
def test_list_suites_real_tree() -> None:
    suites = {s.name: s for s in list_suites(SUITES_DIR)}
    assert {"coding", "docparse", "finance", "longgen"} <= set(suites)
    assert {"docparse_fields", "docparse_hard"} <= set(suites["docparse"].tasks)
    assert suites["docparse"].primary_metric["docparse_hard"] == "all_fields"
    assert suites["finance"].primary_metric["finance_tableqa"] == "num_match"
    assert suites["coding"].primary_metric["coding_humaneval"] == "pass_at_1"
    assert suites["longgen"].primary_metric == {"longgen_shipments": "row_acc"}
    # the real-data tiers (tests/suites/test_real_data.py) sit beside the generated tasks
    assert suites["coding"].primary_metric["coding_mbpp"] == "pass_at_1"
    assert suites["finance"].primary_metric["finance_tatqa"] == "em"
    assert suites["finance"].primary_metric["finance_finqa"] == "exe_acc"
    assert all(len(s.content_hash) == 64 for s in suites.values())
    assert load_suite("finance").content_hash == suites["finance"].content_hash


def test_default_suites_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EVALGATE_SUITES", raising=False)
    assert default_suites_dir() == SUITES_DIR == Path(__file__).resolve().parents[2] / "suites"
    monkeypatch.setenv("EVALGATE_SUITES", str(tmp_path))
    assert default_suites_dir() == tmp_path.resolve()


# What the mini suite's ``!function utils.load_data`` / ``utils.agg`` name (evalgate checks they exist).
MINI_UTILS = "x = 1\n\n\ndef load_data(**_):\n    return {}\n\n\ndef agg(items):\n    return 0.0\n"


def _suite(root: Path, name: str = "mini", text: str | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "t.yaml").write_text(text if text is not None else (
        "task: mini_task\ncustom_dataset: !function utils.load_data\n"
        "metric_list:\n  - metric: acc_x\n    aggregation: mean\n  - metric: other\n"))
    (d / "utils.py").write_text(MINI_UTILS)
    return d


def test_load_suite_and_content_hash(tmp_path: Path) -> None:
    d = _suite(tmp_path)
    s = load_suite("mini", tmp_path)
    assert (s.name, s.tasks, s.primary_metric, s.path) == ("mini", ("mini_task",), {"mini_task": "acc_x"}, d)
    h = s.content_hash
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"junk")
    (d / "stale.pyc").write_bytes(b"junk")
    assert content_hash(d) == h
    (d / "utils.py").write_text(MINI_UTILS.replace("x = 1", "x = 2"))
    assert content_hash(d) != h
    (d / "utils.py").write_text(MINI_UTILS)
    assert content_hash(d) == h
    other = tmp_path / "copy"
    shutil.copytree(d, other)
    assert content_hash(other) == h, "the hash depends on contents, not on where the folder is"


@pytest.mark.parametrize(("text", "field", "words"), [
    ("metric_list:\n  - metric: a\n", "task", "missing or empty task name"),
    ("task: t\n", "metric_list", "missing or empty metric_list"),
    ("task: t\nmetric_list: []\n", "metric_list", "missing or empty metric_list"),
    ("task: t\nmetric_list:\n  - aggregation: mean\n", "metric_list[0].metric", "no metric name"),
    ("task: [unclosed\n", None, "cannot parse YAML"),
    ("task: t\ntask: u\nmetric_list:\n  - metric: a\n", "task", "duplicate key 'task' (line 2)"),
    ("task: t\nmetric_list:\n  - metric: a\n    aggregation: mean\n    aggregation: median\n",
     "metric_list[0].aggregation", "duplicate key 'aggregation' (line 5)"),
    ("task: t\nmetric_list:\n  - metric: a\n    higher_is_better: false\n",
     "metric_list[0].higher_is_better", "must be true for the primary metric 'a', got false: evalgate's gate assumes higher is better"),
    ("task: t\nmetric_list:\n  - metric: a\n    aggregation: median\n",
     "metric_list[0].aggregation", "must be 'mean' for the primary metric 'a', got 'median'"),
    ("task: t\nmetric_list:\n  - metric: a\n    aggregation: !function utils.agg\n",
     "metric_list[0].aggregation", "got 'utils.agg'"),
])
def test_load_suite_bad_yaml(tmp_path: Path, text: str, field: str | None, words: str) -> None:
    _suite(tmp_path, text=text)
    with pytest.raises(ConfigError) as e:
        load_suite("mini", tmp_path)
    assert e.value.field == field
    assert Path(e.value.path) == tmp_path / "mini" / "t.yaml"
    assert words in str(e.value) and str(tmp_path / "mini" / "t.yaml") in str(e.value)
    assert e.value.exit_code == ExitCode.USAGE


def test_load_suite_accepts_mean_higher_is_better_and_a_non_primary_lower_is_better(tmp_path: Path) -> None:
    _suite(tmp_path, text="task: t\nmetric_list:\n  - metric: a\n    aggregation: mean\n    higher_is_better: true\n"
                          "  - metric: err\n    aggregation: median\n    higher_is_better: false\n")
    assert load_suite("mini", tmp_path).primary_metric == {"t": "a"}


def test_load_suite_missing_suggests_close_name(tmp_path: Path) -> None:
    _suite(tmp_path, "finance")
    with pytest.raises(ConfigError, match=r"no suite named 'financ'; did you mean 'finance'\?"):
        load_suite("financ", tmp_path)
    with pytest.raises(ConfigError, match="known suites: finance"):
        load_suite("zzz", tmp_path)
    with pytest.raises(ConfigError, match="invalid suite name"):
        load_suite("../finance", tmp_path)
    with pytest.raises(ConfigError, match="suites directory does not exist"):
        load_suite("finance", tmp_path / "nope")


def test_load_suite_without_yaml(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "utils.py").write_text("")
    with pytest.raises(ConfigError, match="no task YAML") as e:
        load_suite("empty", tmp_path)
    assert Path(e.value.path) == tmp_path / "empty"
    assert list_suites(tmp_path) == []


def test_list_suites_rejects_duplicate_task_names(tmp_path: Path) -> None:
    _suite(tmp_path, "a")
    _suite(tmp_path, "b")
    with pytest.raises(ConfigError, match="task 'mini_task' is defined by suites 'a' and 'b'"):
        list_suites(tmp_path)
