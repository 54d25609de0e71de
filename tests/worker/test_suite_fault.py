"""``worker.suite_fault``: an error raised while lm-eval runs a suite is blamed on the suite only when its own code
raised it (or a library it called did), never when evalgate's code or lm-eval alone did; the parent turns the
worker's report into exit 2 naming the suite's file and function (``procs.exit_error``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evalgate.engine.protocol import SUITE_ERROR_EXIT, SUITE_ERROR_TAG
from evalgate.errors import ConfigError, EngineError, ExitCode, SuiteCodeError
from evalgate.evaluate.procs import exit_error
from evalgate.worker.suite_fault import suite_fault

UTILS = """import json


def process_results(doc, results):
    if doc["n"] == 2:
        return {"exact_match": json.loads(results[0])}  # a library the suite calls raises
    if doc["n"] == 3:
        raise SystemExit(4)
    if doc["n"] == 4:
        return doc["evalgate_helper"]()  # evalgate's own code raises below the suite's
    return {"exact_match": 1.0}
"""


def _utils(tmp_path: Path) -> tuple[Path, ModuleType]:
    folder = tmp_path / "suites" / "docs"
    folder.mkdir(parents=True)
    (folder / "utils.py").write_text(UTILS)
    spec = importlib.util.spec_from_file_location("suite_fault_utils", folder / "utils.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return folder, module


def _raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - what the worker catches
        return exc
    raise AssertionError("did not raise")


def test_the_suites_own_code_is_blamed_with_its_file_function_and_line(tmp_path: Path) -> None:
    folder, utils = _utils(tmp_path)
    exc = _raised(utils.process_results, {"n": 2}, ["not json"])
    fault = suite_fault(exc, folder, "docs")
    assert fault is not None
    assert fault["path"] == str((folder / "utils.py").resolve()) and fault["field"] == "process_results"
    assert fault["message"].startswith("suite docs's code raised in the engine worker: JSONDecodeError: Expecting "
                                       "value: line 1 column 1 (char 0) (line 6); a task's code must take every item")


def test_sys_exit_in_the_suites_code_is_blamed_as_such(tmp_path: Path) -> None:
    folder, utils = _utils(tmp_path)
    fault = suite_fault(_raised(utils.process_results, {"n": 3}, ["x"]), folder, "docs")
    assert fault is not None and fault["field"] == "process_results"
    assert "SystemExit: sys.exit(4) was called; a task's code must raise an exception" in fault["message"]
    assert "(line 8)" in fault["message"]


def test_an_error_raised_in_evalgates_code_under_the_suite_is_not_the_suites(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite calls into evalgate, which raises: evalgate's fault (the worker fails: exit 3), not bad input.
    evalgate's package is stood in for by a folder whose helper raises."""
    from evalgate.worker import suite_fault as sf

    folder, utils = _utils(tmp_path)
    package = tmp_path / "evalgate_pkg"
    package.mkdir()
    (package / "helper.py").write_text("def boom():\n    raise ValueError('inside evalgate')\n")
    spec = importlib.util.spec_from_file_location("suite_fault_helper", package / "helper.py")
    assert spec is not None and spec.loader is not None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    exc = _raised(utils.process_results, {"n": 4, "evalgate_helper": helper.boom}, ["x"])
    assert suite_fault(exc, folder, "docs") is not None  # the helper outside the package: the suite called it
    monkeypatch.setattr(sf, "_EVALGATE", package.resolve())
    assert suite_fault(exc, folder, "docs") is None


def test_the_evalgate_package_is_this_checkouts() -> None:
    from evalgate.worker import suite_fault as sf

    assert (sf._EVALGATE / "worker" / "suite_fault.py").is_file()


def test_an_error_with_no_frame_in_the_suite_is_not_the_suites(tmp_path: Path) -> None:
    folder, _ = _utils(tmp_path)
    assert suite_fault(_raised(json.loads, "{"), folder, "docs") is None
    other = tmp_path / "suites" / "other"
    other.mkdir()
    _, utils = _utils(tmp_path / "b")
    assert suite_fault(_raised(utils.process_results, {"n": 2}, ["x"]), other, "other") is None


def test_an_error_re_raised_by_the_caller_is_blamed_through_its_cause(tmp_path: Path) -> None:
    """lm-eval may wrap a task's error in its own (``raise ... from exc``): the suite's frame is in the cause."""
    folder, utils = _utils(tmp_path)

    def lm_eval_like() -> None:
        try:
            utils.process_results({"n": 2}, ["x"])
        except ValueError as exc:
            raise RuntimeError("task failed") from exc

    fault = suite_fault(_raised(lm_eval_like), folder, "docs")
    assert fault is not None and "JSONDecodeError" in fault["message"] and fault["field"] == "process_results"


def test_the_parent_turns_the_report_into_exit_2_naming_the_file_and_function(tmp_path: Path) -> None:
    fault = {"path": "/s/docs/utils.py", "field": "process_results", "message": "suite docs's code raised: X"}
    log = tmp_path / "w.log"
    # Another process's output may land after the report, on its line (the log is shared): still read.
    log.write_text(f"INFO engine up\n{SUITE_ERROR_TAG} {json.dumps(fault)}INFO 12-07 engine core\nshutting down\n")
    cfg = type("Cfg", (), {"name": "baseline", "path": tmp_path / "baseline.yaml"})()
    err = exit_error(SUITE_ERROR_EXIT, cfg, log)
    assert isinstance(err, SuiteCodeError) and isinstance(err, ConfigError) and err.exit_code == ExitCode.USAGE
    assert str(err) == "/s/docs/utils.py: process_results: suite docs's code raised: X"


@pytest.mark.parametrize("line", ["", f"{SUITE_ERROR_TAG} not json", f'{SUITE_ERROR_TAG} {{"path": 1}}'],
                         ids=["no-tag", "bad-json", "bad-fields"])
def test_an_exit_without_a_readable_report_stays_an_engine_error(tmp_path: Path, line: str) -> None:
    """Fail closed: an exit code 65 without the worker's report is the engine's failure (exit 3), not a pass."""
    log = tmp_path / "w.log"
    log.write_text(f"INFO engine up\n{line}\n")
    cfg = type("Cfg", (), {"name": "baseline", "path": tmp_path / "baseline.yaml"})()
    err = exit_error(SUITE_ERROR_EXIT, cfg, log)
    assert isinstance(err, EngineError) and err.died and err.exit_code == ExitCode.RUNTIME
    assert "exited with code 65" in str(err)


def test_generated_code_frames_are_never_the_suites_even_run_from_its_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``<string>`` (a dataclass ``__init__``, ``exec``) resolves under the working directory; run from the suite's
    folder it must still not be blamed on the suite."""
    folder, _ = _utils(tmp_path)
    monkeypatch.chdir(folder)
    namespace: dict[str, Any] = {}
    exec(compile("def f():\n    raise RuntimeError('engine died')\n", "<string>", "exec"), namespace)  # noqa: S102
    assert suite_fault(_raised(namespace["f"]), folder, "docs") is None


def test_an_exception_whose_str_raises_is_named_by_its_type(tmp_path: Path) -> None:
    folder = tmp_path / "suites" / "docs"
    folder.mkdir(parents=True)
    (folder / "broken.py").write_text("class Odd(Exception):\n    def __str__(self):\n        raise KeyError('x')\n\n\n"
                                      "def f():\n    raise Odd()\n")
    spec = importlib.util.spec_from_file_location("suite_fault_broken", folder / "broken.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fault = suite_fault(_raised(module.f), folder, "docs")
    assert fault is not None and fault["field"] == "f"
    assert fault["message"].startswith("suite docs's code raised in the engine worker: Odd (line 7); ")
