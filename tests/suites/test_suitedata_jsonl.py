"""A JSON-lines data file is read line by line before any engine starts, so a bad line is named by its number
(``datasets`` reports only a byte position, from inside the engine worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.suites.data import _data_file_problem


@pytest.mark.parametrize("text,problem", [
    ('{"a": 1}\n{"a": 2}\n{"a": 3} x\n', "line 3: not valid JSON (Extra data: line 1 column 10 (char 9))"),
    ('{"a": 1}\n\n{"a": \n', "line 3: not valid JSON (Expecting value: line 1 column 7 (char 6))"),
    ('{"a": 1}\n[1, 2]\n', "line 2: a JSON list, not an object (one item per line)"),
    ('"text"\n', "line 1: a JSON str, not an object (one item per line)"),
])
def test_the_first_bad_line_is_named(tmp_path: Path, text: str, problem: str) -> None:
    data = tmp_path / "items.jsonl"
    data.write_text(text, encoding="utf-8")
    assert _data_file_problem(str(data)) == problem


def test_non_utf8_is_named_with_its_byte(tmp_path: Path) -> None:
    data = tmp_path / "items.jsonl"
    data.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    assert _data_file_problem(str(data)) == "is not UTF-8 text (invalid start byte at byte 16)"


def test_good_lines_and_blank_lines_pass(tmp_path: Path) -> None:
    data = tmp_path / "items.jsonl"
    data.write_text('{"a": 1}\n\n  \n{"a": 2}\n', encoding="utf-8")
    assert _data_file_problem(str(data)) is None


def test_a_glob_names_the_matched_file(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n', encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("nope\n", encoding="utf-8")
    assert _data_file_problem(str(tmp_path / "*.jsonl")) == (
        f"line 1: not valid JSON (Expecting value: line 1 column 1 (char 0)) (matched {tmp_path / 'b.jsonl'})")
