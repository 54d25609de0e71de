"""evalgate.suites.taskcode: loading a task's sibling module by path, and the first JSON object of a model output."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.suites.discovery import SUITES_DIR
from evalgate.suites.taskcode import first_json_object, load_module, sibling


def test_load_module_runs_the_file_afresh_under_a_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / "mysuite"
    folder.mkdir()
    (folder / "helpers.py").write_text("import random\nVALUE = random.random()\nNAME = __name__\n")
    (folder / "task.py").write_text("")
    a, b = load_module(folder / "helpers.py"), sibling(folder / "task.py", "helpers")
    assert a.NAME == b.NAME == "evalgate_mysuite_helpers"
    assert a is not b and a.VALUE != b.VALUE  # executed twice, not cached


def test_load_module_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such task module"):
        sibling(tmp_path / "task.py", "utils")
    (tmp_path / "bad.py").write_text("raise ValueError('broken task file')\n")
    with pytest.raises(ValueError, match="broken task file"):
        load_module(tmp_path / "bad.py")


def test_sibling_is_how_the_hard_tiers_reach_their_utils() -> None:
    hard = load_module(SUITES_DIR / "docparse" / "docparse_hard.py")
    assert hard.U.__name__ == "evalgate_docparse_utils"
    assert Path(hard.U.__file__) == SUITES_DIR / "docparse" / "utils.py"


@pytest.mark.parametrize(("text", "want"), [
    ('{"a": 1}', {"a": 1}),
    ('Answer: {"total": "12.00", "n": null} and {"b": 2}', {"total": "12.00", "n": None}),
    ('{not json} then {"x": {"y": [1, 2]}}', {"x": {"y": [1, 2]}}),
    ('{"a": 1', None),
    ('[1, 2] no object', None),
    ('', None),
    ('{{"a": 1}', {"a": 1}),  # the first brace starts nothing; the second starts an object
])
def test_first_json_object(text: str, want: dict | None) -> None:
    assert first_json_object(text) == want
