"""evalgate.suites.scoring: the sandbox pool gives the results of sequential run_python calls; the coding suite's
completions start in it as they are answered and its scorer picks them up instead of running them again."""

from __future__ import annotations

from concurrent.futures import wait
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalgate.suites import scoring
from evalgate.suites.sandbox import run_python
from evalgate.suites.taskcode import load_module

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = [
    "print('ok')\n",
    "assert 1 + 1 == 3, 'wrong'\n",
    "def broken(:\n",
    "import sys\nsys.stderr.write('err\\n')\nsys.exit(3)\n",
    "while True:\n    pass\n",  # killed by the 1.5 s timeout
    "import os\nprint(sorted(os.listdir('.')), os.getcwd() != '/')\n",
    "x = bytearray(2 * 1024 ** 3)\n",  # over the memory limit
]
LIMITS = {"timeout_s": 1.5, "memory_mb": 256}


def _outcome(r: object) -> tuple:
    return (r.passed, r.returncode, r.timed_out, r.stdout_tail, r.stderr_tail, r.isolation)  # type: ignore[attr-defined]


def _coding_utils():
    return load_module(ROOT / "suites" / "coding" / "utils.py")


def test_pool_results_equal_sequential_sandbox_runs() -> None:
    sequential = [_outcome(run_python(p, **LIMITS)) for p in PROGRAMS]
    pool = scoring.SandboxPool(workers=3)
    try:
        futures = [pool.submit(p, **LIMITS) for p in PROGRAMS]
        wait(futures, timeout=60)
        pooled = [_outcome(pool.run(p, **LIMITS)) for p in PROGRAMS]
    finally:
        pool.close()
    assert pooled == sequential
    assert [s[0] for s in sequential] == [True, False, False, False, False, True, False]
    assert sequential[4][2]  # the loop timed out


def test_humaneval_programs_score_alike_through_the_pool() -> None:
    utils = _coding_utils()
    docs = utils.read_problems()[:6]
    completions = [d["canonical_solution"] for d in docs[:3]] + ["    return None\n"] * 3
    programs = [utils.build_program(d, c) for d, c in zip(docs, completions)]
    sequential = [run_python(p, timeout_s=utils.TIMEOUT_S).passed for p in programs]
    pool = scoring.SandboxPool(workers=2)
    try:
        for p in programs:
            pool.submit(p, timeout_s=utils.TIMEOUT_S)
        pooled = [pool.run(p, timeout_s=utils.TIMEOUT_S).passed for p in reversed(programs)][::-1]
    finally:
        pool.close()
    assert pooled == sequential == [True, True, True, False, False, False]


def test_run_uses_the_submitted_result_once_and_keys_on_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict]] = []

    def counting(program: str, **limits: object) -> object:
        calls.append((program, limits))
        return run_python(program, **limits)

    monkeypatch.setattr(scoring, "run_python", counting)
    pool = scoring.SandboxPool(workers=1)
    try:
        pool.submit("print(1)\n", timeout_s=5.0)
        pool.submit("print(1)\n", timeout_s=5.0)  # the same program: not run twice
        assert pool.run("print(1)\n", timeout_s=5.0).stdout_tail == "1\n"
        assert len(calls) == 1 and pool.pending() == 0
        assert pool.run("print(1)\n", timeout_s=4.0).passed  # other limits: another run, now
        assert pool.run("print(1)\n", timeout_s=5.0).passed  # handed over once: later asks run it again
        assert [c[1]["timeout_s"] for c in calls] == [5.0, 4.0, 5.0]
    finally:
        pool.close()


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every program the pool (or a scorer) runs, in order; they still run for real."""
    seen: list[str] = []

    def counting(program: str, **limits: object) -> object:
        seen.append(program)
        return run_python(program, **limits)

    monkeypatch.setattr(scoring, "run_python", counting)
    return seen


def test_coding_answers_start_in_the_pool_and_the_scorer_picks_them_up(calls: list[str]) -> None:
    utils = _coding_utils()  # registers coding_humaneval's program
    docs = utils.read_problems()[:2]
    try:
        for doc, completion in zip(docs, [docs[0]["canonical_solution"], "    return None\n"]):
            scoring.on_answer(SimpleNamespace(task_name=utils.TASK, doc=doc), completion)
        scoring.on_answer(SimpleNamespace(task_name="docparse_fields", doc={}), "{}")  # no program: ignored
        assert scoring.pool().pending() == 2
        scores = [utils.process_results(docs[0], [docs[0]["canonical_solution"]]),
                  utils.process_results(docs[1], ["    return None\n"])]
        assert scores == [{"pass_at_1": 1.0}, {"pass_at_1": 0.0}]
        assert len(calls) == 2 and scoring.pool().pending() == 0  # each program ran once, before its scorer asked
    finally:
        scoring.shutdown()


def test_a_failing_program_builder_does_not_break_generation(
        monkeypatch: pytest.MonkeyPatch, calls: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """A task whose program builder raises: ``on_answer`` returns (generation goes on), logs one warning naming the
    task and the error, submits nothing; the next task's answers are still pre-scored, once each."""
    def broken(doc: dict, completion: str) -> str:
        raise KeyError("prompt")

    monkeypatch.setitem(scoring._programs, "t", (broken, {}))
    monkeypatch.setitem(scoring._programs, "ok", (lambda doc, completion: f"print({completion})\n", {"timeout_s": 5.0}))
    try:
        with caplog.at_level("WARNING", logger=scoring.__name__):
            assert scoring.on_answer(SimpleNamespace(task_name="t", doc={}), "x") is None
        warnings = [r for r in caplog.records if r.name == scoring.__name__]
        assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
        assert warnings[0].getMessage() == (
            "pre-scoring t failed ('prompt'); it is scored after generation instead")
        assert scoring.pool().pending() == 0 and calls == []
        scoring.on_answer(SimpleNamespace(task_name="ok", doc={}), "7")
        assert scoring.pool().pending() == 1
        assert scoring.pool().run("print(7)\n", timeout_s=5.0).stdout_tail == "7\n"
        assert calls == ["print(7)\n"] and scoring.pool().pending() == 0
    finally:
        scoring.shutdown()


def test_default_workers_leaves_a_core_and_fits_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring.os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(scoring, "_available_bytes", lambda: 64 * 2**30)
    assert scoring.default_workers(512) == 7
    monkeypatch.setattr(scoring, "_available_bytes", lambda: 3 * 512 * 2**20 + 1)
    assert scoring.default_workers(512) == 3
    monkeypatch.setattr(scoring.os, "sched_getaffinity", lambda pid: {0})
    assert scoring.default_workers(512) == 1


def test_a_queued_program_runs_in_the_asking_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    release = threading.Event()
    ran_in: dict[str, str] = {}

    def recording(program: str, **limits: object) -> object:
        ran_in[program] = threading.current_thread().name
        if program.startswith("# blocker"):
            assert release.wait(30)
        return run_python(program, **limits)

    monkeypatch.setattr(scoring, "run_python", recording)
    pool = scoring.SandboxPool(workers=1)
    try:
        blocker = pool.submit("# blocker\nprint(0)\n")  # occupies the only worker until released
        pool.submit("print(2)\n")  # queued behind it
        assert pool.run("print(2)\n").stdout_tail == "2\n"  # taken off the queue, run here
        assert ran_in["print(2)\n"] == threading.current_thread().name
        release.set()
        assert blocker.result(timeout=30).passed and ran_in["# blocker\nprint(0)\n"].startswith("evalgate-sandbox")
        assert pool.run("# blocker\nprint(0)\n").stdout_tail == "0\n"  # started in the pool: its result, waited for
        assert sorted(ran_in) == ["# blocker\nprint(0)\n", "print(2)\n"]  # each ran once
    finally:
        release.set()
        pool.close()


def test_wait_seconds_count_the_time_scorers_spend_on_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the worker logs as ``sandbox_wait:<suite>``: time inside ``run`` (running a program or waiting for a
    pool thread's), not time the pool spends while nobody asks. Injected clock: each program takes 2.0 s."""
    clock = {"t": 100.0}
    monkeypatch.setattr(scoring.time, "monotonic", lambda: clock["t"])

    def two_seconds(program: str, **limits: object) -> object:
        clock["t"] += 2.0
        return SimpleNamespace(passed=True)

    monkeypatch.setattr(scoring, "run_python", two_seconds)
    pool = scoring.SandboxPool(workers=1)
    try:
        assert pool.wait_s == 0.0
        pool.run("a")  # not submitted: runs here, 2 s
        pool.run("b")
        assert pool.wait_s == pytest.approx(4.0)
        fut = pool.submit("c")
        wait([fut])  # finished in the pool before anyone asked: handing it over costs no clock time
        pool.run("c")
        assert pool.wait_s == pytest.approx(4.0)
    finally:
        pool.close()
    monkeypatch.setattr(scoring, "_pool", None)
    assert scoring.wait_seconds() == 0.0


@pytest.mark.parametrize("module, task", [("mbpp.py", "coding_mbpp"), ("coding_small.py", "coding_small")])
def test_every_coding_task_prescores_through_the_pool(calls: list[str], module: str, task: str) -> None:
    """MBPP and coding_small register their programs like HumanEval: an answered completion runs once, in the
    pool, and the task's own process_results takes that result (the reference body passes, a wrong one fails)."""
    mod = load_module(ROOT / "suites" / "coding" / module)
    assert scoring._programs[task][0] is mod.build_program
    if task == "coding_small":
        docs = mod.make_items(5, 2, "t")
        right = [d["canonical_solution"] for d in docs]
    else:
        docs = [{"test_imports": [], "test_list": ["assert f(2) == 4"]}, {"test_imports": [], "test_list": ["assert f(1) == 1"]}]
        right = ["def f(x):\n    return x * 2\n", "def f(x):\n    return x\n"]
    try:
        answers = [right[0], "    return None\n" if task == "coding_small" else "def f(x):\n    return 0\n"]
        for doc, completion in zip(docs, answers):
            scoring.on_answer(SimpleNamespace(task_name=task, doc=doc), completion)
        assert scoring.pool().pending() == 2
        assert [mod.process_results(d, [a]) for d, a in zip(docs, answers)] == [{"pass_at_1": 1.0}, {"pass_at_1": 0.0}]
        assert len(calls) == 2 and scoring.pool().pending() == 0
    finally:
        scoring.shutdown()
