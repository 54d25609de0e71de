"""The typed verdict (evalgate.report.verdict): reads what evalgate wrote before, dumps it back unchanged, renders it.

``tests/verdicts/v1/*.json`` were written by ``report.gate_document`` as it was before the Verdict model existed
(commit b24be7d), from the fixtures of ``runfixtures`` and ``test_speed`` (and one lossless, spec-decoding run).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pydantic
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from evalgate.commands.stored import read_verdict, rerender  # noqa: E402
from evalgate.errors import StoreError  # noqa: E402
from evalgate.report.verdict import TaskVerdict, Verdict, as_verdict  # noqa: E402
from runfixtures import blocking_document, document, same_json, task  # noqa: E402

GOLDEN = Path(__file__).parents[1] / "verdicts" / "v1"
NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def _dumps(obj: object) -> str:
    """As ``store.write_json_atomic`` writes JSON."""
    return json.dumps(obj, indent=1, ensure_ascii=False, allow_nan=True)


def test_the_golden_documents_are_all_there() -> None:
    assert NAMES == ["blocking", "inconclusive", "lossless", "noop", "speed_block", "speed_pass"]


@pytest.mark.parametrize("name", NAMES)
def test_an_old_document_dumps_back_byte_identical(name: str) -> None:
    text = (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
    verdict = Verdict.model_validate(json.loads(text))
    assert _dumps(verdict.to_dict()) == text


def _golden(name: str) -> object:
    return json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))


def test_todays_builder_writes_the_same_document_as_before() -> None:
    same_json(json.loads(_dumps(blocking_document())), _golden("blocking"))
    n = 30
    base = {"a": task("a", "s", ["x"] * n, [1.0] * n), "b": task("b", "s2", ["y"] * n, [0.5] * n)}
    cand = {"a": task("a", "s", ["x"] * (n - 1) + ["z"], [1.0] * (n - 1) + [0.0]), "b": task("b", "s2", ["y"] * n, [0.5] * n)}
    same_json(json.loads(_dumps(document(base, cand, same_config=True))), _golden("noop"))
    same_json(json.loads(_dumps(document(base, cand))), _golden("inconclusive"))


@pytest.mark.parametrize("name", NAMES)
def test_an_old_run_directory_renders_through_evalgate_report(name: str, tmp_path: Path) -> None:
    raw = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    (tmp_path / "verdict.json").write_text(json.dumps(raw), encoding="utf-8")
    verdict, paths = rerender(tmp_path)
    assert verdict.verdict == raw["verdict"] and [t.task for t in verdict.tasks] == [t["task"] for t in raw["tasks"]]
    html = paths["html"].read_text(encoding="utf-8")
    assert f'<span class="verdict {raw["verdict"]}">{raw["verdict"]}</span>' in html and "<script" not in html
    root = ET.fromstring(paths["junit"].read_text(encoding="utf-8"))
    blocked = sum(t["verdict"] == "BLOCK" for t in raw["tasks"]) if raw["verdict"] != "NO-OP" else 0
    speed_missed = any(r.startswith("speed: ") for r in raw["reasons"])
    assert root.get("failures") == str(blocked + speed_missed)
    assert root.get("tests") == str(len(raw["tasks"]) + ("speed" in raw))
    md = paths["markdown"].read_text(encoding="utf-8")
    assert md.startswith("## ") and f"evalgate {raw['verdict']}: " in md.splitlines()[0]


def test_a_document_from_before_later_keys_reads_renders_and_keeps_them_absent(tmp_path: Path) -> None:
    raw = json.loads((GOLDEN / "blocking.json").read_text(encoding="utf-8"))
    for key in ("spec_decode", "spec_decode_source", "version"):
        del raw[key]
    for t in raw["tasks"]:
        for key in ("tie_flips", "items_needed_basis", "evidence", "cross_check", "gated", "lossless"):
            del t[key]
    verdict = as_verdict(raw)
    assert verdict.to_dict() == raw  # nothing is invented on the way back
    assert verdict.version == 1 and verdict.tasks[0].evidence is None and verdict.tasks[0].tie_flips is None
    (tmp_path / "verdict.json").write_text(json.dumps(raw), encoding="utf-8")
    _, paths = rerender(tmp_path)
    html = paths["html"].read_text(encoding="utf-8")
    assert "s / t" in html and "No speculative-decoding counters" in html


def test_unknown_keys_are_kept_and_numbers_keep_their_json_type() -> None:
    doc = {"verdict": "PASS", "future": {"x": 1}, "tasks": [{"task": "t", "verdict": "PASS", "margin": 2,
                                                            "delta": 0.5, "later": [1, 2]}]}
    out = as_verdict(doc).to_dict()
    assert out == doc and isinstance(out["tasks"][0]["margin"], int) and isinstance(out["tasks"][0]["delta"], float)


def test_a_missing_verdict_reads_as_block() -> None:
    assert as_verdict({"tasks": [{}]}).verdict == "BLOCK"
    assert TaskVerdict.model_validate({}).verdict == "BLOCK"


def test_a_wrong_type_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps({"verdict": "PASS", "tasks": [{"task": "t", "n": "many"}], "manifest": {}}))
    with pytest.raises(StoreError, match=r"verdict\.json: not an evalgate verdict document: tasks\[0\]\.n: "
                                         r"expected a whole number, got a string \(\"many\"\)$"):
        read_verdict(path)
    path.write_text(json.dumps({"verdict": "MAYBE", "tasks": [], "manifest": {}}))
    with pytest.raises(StoreError, match=r"not an evalgate verdict document: verdict: expected one of 'PASS', "
                                         r"'BLOCK', 'NO-OP' or 'INCONCLUSIVE', got a string \(\"MAYBE\"\)$"):
        read_verdict(path)
    path.write_text(json.dumps({"tasks": [], "manifest": {}}))
    with pytest.raises(StoreError, match=r"verdict\.json: not an evalgate verdict document$"):
        read_verdict(path)


def _models(model: type[pydantic.BaseModel], seen: set[type]) -> None:
    """Every model reachable from ``model`` through its fields' annotations, into ``seen``."""
    import typing

    if model in seen:
        return
    seen.add(model)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            ann = stack.pop()
            if isinstance(ann, type) and issubclass(ann, pydantic.BaseModel):
                _models(ann, seen)
            stack.extend(typing.get_args(ann))


def test_every_field_of_every_part_is_described() -> None:
    seen: set[type] = set()
    _models(Verdict, seen)
    assert len(seen) >= 15
    missing = [f"{m.__name__}.{name}" for m in seen for name, f in m.model_fields.items() if not f.description]
    assert missing == []
    assert all(m.__doc__ for m in seen)


def test_a_failed_speed_block_keeps_its_keys_in_order_and_renders_as_an_error() -> None:
    from evalgate.report.outputs import render_junit, render_markdown

    raw = json.loads((GOLDEN / "speed_pass.json").read_text(encoding="utf-8"))
    raw["speed"] = {"status": "failed", "error": "engine died", "profile": {"input_len": 8}, "thresholds": None}
    verdict = as_verdict(raw)
    assert _dumps(verdict.to_dict()) == _dumps(raw) and verdict.speed.levels == []
    root = ET.fromstring(render_junit(verdict))
    assert root.get("errors") == "1" and root.get("failures") == "0"
    assert "**Speed**: not measured: engine died" in render_markdown(verdict)
