"""The suite pre-flight (``evalgate.evaluate.preflight``): what it refuses beyond the bad-input corpus, and what it passes.

The corpus cases (``tests/bad_inputs/suites/preflight-*``, run by ``test_bad_inputs.py`` through ``evalgate run``
with engine start-up replaced by tripwires) cover one suite error per class. Here: every shipped suite passes; the
``ablate`` path refuses before its baseline engine; a member of a group is named by its own YAML; a scorer that fails
only on the target is caught; the good corpus suites (one ``generate_until``, one ``multiple_choice`` task) pass; a
pre-flight that crashes or hangs is exit 3, never a pass; a task's ``sys.exit()`` is exit 2 on its YAML, while a
KeyboardInterrupt stays an interrupt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import evalgate.evaluate.runner
from evalgate import cli
from evalgate.errors import ConfigError, ExitCode
from evalgate.evaluate.preflight import ITEMS, PreflightError, check_suites, run_checks
from evalgate.suites.discovery import list_suites, load_suite

REPO = Path(__file__).resolve().parents[2]
B = REPO / "tests" / "bad_inputs"
G = B / "good"
DATA = '{"q": "1+1=", "a": "2"}\n{"q": "2+2=", "a": "4"}\n'


def _task(name: str, extra: str = "", text: str = "Q: {{q}}") -> str:
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files: {{test: data.jsonl}}\n"
            f"test_split: test\noutput_type: generate_until\ndoc_to_text: '{text}'\ndoc_to_target: '{{{{a}}}}'\n"
            f"metric_list:\n  - metric: exact_match\n{extra}")


def _suite(root: Path, files: dict[str, str]) -> Path:
    folder = root / "s1"
    folder.mkdir(parents=True)
    (folder / "data.jsonl").write_text(DATA, encoding="utf-8")
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return root


def test_every_shipped_suite_passes_the_preflight() -> None:
    """The shipped suites, every task, as ``evalgate run`` checks them (a subprocess); each task's item 0 built and
    scored."""
    suites = list_suites(REPO / "suites")
    result = check_suites(suites, limit=None, timeout=600)
    expected = {t: 1 for s in suites for t in s.tasks}
    assert len(expected) >= 10
    assert result["tasks"] == expected
    assert ITEMS == 1


def test_the_good_corpus_suites_pass_in_process() -> None:
    """One generate_until task (exact_match) and one multiple_choice task (acc, its choices and label fields)."""
    assert run_checks(G / "suites", ["s1", "s2"], limit=2) == {"tasks": {"s1_task": 1, "s2_task": 1}}


def test_a_scorer_failing_only_on_the_target_is_caught(tmp_path: Path) -> None:
    """An empty output scores; the target as output divides by zero: the second dummy finds it."""
    root = _suite(tmp_path, {
        "t.yaml": _task("t1", "process_results: !function utils.process_results\n"),
        "utils.py": "def process_results(doc, results):\n"
                    "    if results[0]:\n"
                    "        return {'exact_match': 1 / 0}\n"
                    "    return {'exact_match': 0.0}\n"})
    with pytest.raises(ConfigError) as ei:
        run_checks(root, ["s1"], limit=None)
    assert ei.value.field == "process_results"
    assert Path(ei.value.path) == root / "s1" / "t.yaml"
    assert ei.value.message.startswith("task t1: scoring the target as output for item 0: ZeroDivisionError")
    assert "(utils.py line 3)" in ei.value.message


def test_a_group_member_is_named_by_its_own_yaml(tmp_path: Path) -> None:
    """A group lists two tasks of the suite; the second's template is wrong: its YAML and name are blamed, not the
    group's or the first task's."""
    root = _suite(tmp_path, {
        "g.yaml": "group: g\ntask: [t_ok, t_bad]\n",
        "t_ok.yaml": _task("t_ok"),
        "t_bad.yaml": _task("t_bad", text="Q: {{qq}}")})
    assert [e for e, _ in load_suite("s1", root).entries] == ["g"]
    with pytest.raises(ConfigError) as ei:
        run_checks(root, ["s1"], limit=None)
    assert Path(ei.value.path) == root / "s1" / "t_bad.yaml"
    assert ei.value.field == "doc_to_text"
    assert ei.value.message.startswith("task t_bad: building the task: the template uses a variable the item "
                                       "lacks: 'qq' is undefined")


def test_ablate_refuses_a_bad_suite_before_the_baseline_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``evalgate ablate`` runs the same pre-flight: exit 2, one line naming the YAML, field and task; no engine."""
    started: list[str] = []

    def trip(*a, **k):
        started.append("engine")
        raise AssertionError("an engine started")

    for name in ("start_config", "evaluate_config", "check_engine_values", "_run_worker"):
        monkeypatch.setattr(evalgate.evaluate.runner, name, trip)
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    case = B / "suites" / "preflight-scorer-keyerror"
    code = cli.main(["ablate", "--config", str(G / "configs" / "cand.yaml"), "--configs-dir", str(G / "configs"),
                     "--thresholds", str(G / "thresholds.yaml"), "--suites-dir", str(case), "--no-speed",
                     "--out", str(tmp_path / "out"), "--limit", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ExitCode.USAGE
    assert not started
    assert len(err) == 1, err
    assert err[0] == (f"evalgate: error: {case / 's1' / 't.yaml'}: process_results: task t1: scoring an empty output "
                      "for item 0: KeyError: 'answer' (utils.py line 3); item 0 has the fields q, a")


# A task whose items come from the suite's own loader (utils.load_data), which the tests below make crash or hang.
LOADER_TASK = ("task: t1\ndataset_path: ''\ncustom_dataset: !function utils.load_data\ntest_split: test\n"
               "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\nmetric_list:\n  - metric: exact_match\n")


def test_a_preflight_that_crashes_is_exit_3(tmp_path: Path) -> None:
    """The suite's data loader kills its process: no outcome, so a runtime error (exit 3), never a pass."""
    root = _suite(tmp_path, {
        "t.yaml": LOADER_TASK,
        "utils.py": "import os\n\ndef load_data(**kwargs):\n    os._exit(7)\n"})
    with pytest.raises(PreflightError) as ei:
        check_suites([load_suite("s1", root)], limit=None, timeout=300)
    assert ei.value.exit_code == ExitCode.RUNTIME
    assert "the suite pre-flight crashed" in str(ei.value) and "exit code 7" in str(ei.value)


def test_a_preflight_that_hangs_is_killed_at_the_timeout(tmp_path: Path) -> None:
    root = _suite(tmp_path, {
        "t.yaml": LOADER_TASK,
        "utils.py": "import time\n\ndef load_data(**kwargs):\n    time.sleep(600)\n"})
    with pytest.raises(PreflightError) as ei:
        check_suites([load_suite("s1", root)], limit=None, timeout=20)
    assert ei.value.exit_code == ExitCode.RUNTIME
    assert "did not finish within --timeout 20 s" in str(ei.value)


def test_a_function_metric_and_aggregation_pass(tmp_path: Path) -> None:
    """lm-eval calls a ``!function`` metric or aggregation itself (``ConfigurableTask.__init__``: ``callable``), so a
    secondary metric given as one is valid and is not refused as a metric lm-eval does not know; the item is built
    and scored (``utils.nonempty`` is found by lm-eval and returns a number)."""
    root = _suite(tmp_path, {
        "t.yaml": _task("t1", "  - metric: !function utils.nonempty\n    aggregation: !function utils.mean\n"
                              "    higher_is_better: true\n"),
        "utils.py": "def nonempty(references, predictions, **kwargs):\n    return float(bool(predictions[0]))\n\n"
                    "def mean(items):\n    return sum(items) / len(items)\n"})
    assert run_checks(root, ["s1"], limit=None) == {"tasks": {"t1": 1}}


def test_a_dotted_metric_without_its_module_is_still_refused(tmp_path: Path) -> None:
    """A dotted name that is no ``!function`` of the YAML's folder (no ``utils.py`` beside it) is still an unknown
    metric, refused before lm-eval would try the Hugging Face evaluate hub for it."""
    root = _suite(tmp_path, {"t.yaml": _task("t1", "  - metric: utils.nonempty\n")})
    with pytest.raises(ConfigError) as ei:
        run_checks(root, ["s1"], limit=None)
    assert ei.value.field == "metric_list[1].metric"
    assert "'utils.nonempty' is not a metric lm-eval knows" in ei.value.message


def test_a_groups_inline_task_reads_its_data_beside_the_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An inline task of a group with a relative ``data_files``: evalgate resolves it against the YAML's folder
    (``load_suite``, ``check_datasets``), and so must lm-eval's ``TaskManager`` (``taskindex.task_manager``, which the
    worker uses too), whatever the working directory; it read ``./data.jsonl`` of the cwd and the valid suite was
    refused."""
    root = _suite(tmp_path / "suites", {
        "g.yaml": "group: g\ntask:\n  - task: inline\n    dataset_path: json\n"
                  "    dataset_kwargs:\n      data_files: {test: data.jsonl}\n    test_split: test\n"
                  "    output_type: generate_until\n    doc_to_text: '{{q}}'\n    doc_to_target: '{{a}}'\n"
                  "    metric_list:\n      - metric: exact_match\n"})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no data.jsonl here
    assert load_suite("s1", root).specs[0].data_files == (str(root / "s1" / "data.jsonl"),)
    assert run_checks(root, ["s1"], limit=None) == {"tasks": {"g::inline": 1}}


# A task whose prompt comes from the suite's own Python (utils.text), which the tests below make end the process.
FUNCTION_TASK = _task("t1").replace("doc_to_text: 'Q: {{q}}'", "doc_to_text: !function utils.text")


def test_a_task_calling_sys_exit_is_bad_input_of_its_suite(tmp_path: Path) -> None:
    """``sys.exit()`` in a task's code is that suite's fault: exit 2 naming the YAML, the field and the task, in
    process and as ``evalgate run`` meets it (the pre-flight subprocess), never a crashed pre-flight (exit 3)."""
    root = _suite(tmp_path, {
        "t.yaml": FUNCTION_TASK,
        "utils.py": "import sys\n\ndef text(doc):\n    sys.exit(3)\n"})
    with pytest.raises(ConfigError) as ei:
        run_checks(root, ["s1"], limit=None)
    assert (Path(ei.value.path), ei.value.field, ei.value.exit_code) == (root / "s1" / "t.yaml", "doc_to_text", 2)
    assert ei.value.message.startswith("task t1: ")
    assert ("SystemExit: sys.exit(3) was called; a task's code must raise an exception, never end the process "
            "(utils.py line 4)") in ei.value.message
    with pytest.raises(ConfigError) as sub:
        check_suites([load_suite("s1", root)], limit=None, timeout=300)
    assert (sub.value.path, sub.value.field, sub.value.message) == (ei.value.path, ei.value.field, ei.value.message)


def test_a_data_loader_calling_sys_exit_while_handling_an_error_is_blamed_for_the_exit(tmp_path: Path) -> None:
    """``except ...: sys.exit(0)`` in the loader: the SystemExit is named (not the error it was handling), on the
    field that names the loader; exit code 0 is no pass."""
    root = _suite(tmp_path, {
        "t.yaml": LOADER_TASK,
        "utils.py": "import sys\n\ndef load_data(**kwargs):\n    try:\n        {}['x']\n    except KeyError:\n"
                    "        sys.exit(0)\n"})
    with pytest.raises(ConfigError) as ei:
        check_suites([load_suite("s1", root)], limit=None, timeout=300)
    assert (Path(ei.value.path), ei.value.field) == (root / "s1" / "t.yaml", "custom_dataset")
    assert "SystemExit: sys.exit(0) was called" in ei.value.message and "KeyError" not in ei.value.message


def test_a_keyboard_interrupt_in_a_tasks_code_is_not_bad_input(tmp_path: Path) -> None:
    """Only SystemExit joins the errors a task is blamed for: a KeyboardInterrupt raised while the pre-flight runs a
    task's code goes on as an interrupt, never a finding (exit 2)."""
    root = _suite(tmp_path, {
        "t.yaml": FUNCTION_TASK,
        "utils.py": "def text(doc):\n    raise KeyboardInterrupt\n"})
    with pytest.raises(KeyboardInterrupt):
        run_checks(root, ["s1"], limit=None)


def test_ctrl_c_during_the_preflight_stays_an_interrupt_and_stops_it(tmp_path: Path) -> None:
    """A Ctrl-C in the command while the pre-flight subprocess runs a task's code (here: a loader that sleeps) is
    re-raised as KeyboardInterrupt (the CLI's exit 130), and the pre-flight's process is gone."""
    import os
    import signal

    pid_file = tmp_path / "pid"
    root = _suite(tmp_path / "suites", {
        "t.yaml": LOADER_TASK,
        "utils.py": f"import os, time\n\ndef load_data(**kwargs):\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))"
                    "\n    time.sleep(600)\n"})

    def interrupt(signum: int, frame: Any) -> None:
        if pid_file.is_file() and pid_file.read_text():
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            check_suites([load_suite("s1", root)], limit=None, timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    with pytest.raises(ProcessLookupError):  # killed with its process group and reaped
        os.kill(int(pid_file.read_text()), 0)
