"""Engine failures, with fake engine workers (no vLLM): evalgate.evaluate.runner._run_worker and evaluate_config.

``_run_worker`` starts ``sys.executable -m evalgate.worker SPEC``; the tests point ``sys.executable`` at a
small script that plays a failing engine: exits non-zero, is killed by a signal, hangs (with a child of
its own), exits 0 without writing results, or writes some suites' results and then crashes. Each must
become an ``EngineError`` (exit 3) with the worker's last log lines on one line — never a pass — and
whatever suites finished before the failure must stay in the store and not be recomputed.
"""

from __future__ import annotations

import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import evalgate.evaluate.runner as runner
from evalgate.errors import EngineError, ExitCode
from evalgate.inputs.config import EngineConfig, Sampling
from evalgate.results.store import ResultStore
from evalgate.suites.discovery import Suite
from taskfixtures import json_task

PYTHON = sys.executable  # the real interpreter, for fake workers written in Python


def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, *, python: bool = False) -> Path:
    """Make ``_run_worker`` start ``body`` instead of the engine worker. It gets the spec path as ``$3``
    (shell) or ``sys.argv[3]`` (Python) because it is called as ``EXE -m evalgate.worker SPEC``."""
    script = tmp_path / "fake-python"
    # The suite pre-flight (``EXE -m evalgate.evaluate.preflight``, before any engine) runs on the real interpreter.
    preflight = f'[ "$2" = evalgate.evaluate.preflight ] && exec "{PYTHON}" "$@"\n'
    if python:
        code = tmp_path / "fake_worker.py"
        code.write_text(textwrap.dedent(body), encoding="utf-8")
        script.write_text(f'#!/bin/sh\n{preflight}exec "{PYTHON}" "{code}" "$@"\n', encoding="utf-8")
    else:
        script.write_text("#!/bin/sh\n" + preflight + textwrap.dedent(body), encoding="utf-8")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return script


def config(tmp_path: Path) -> EngineConfig:
    model = tmp_path / "model"  # a local path: resolve_model passes it through (no embedded model needed)
    model.mkdir(exist_ok=True)
    return EngineConfig(name="cand", path=tmp_path / "cand.yaml", model=str(model), engine_args={"dtype": "float32"},
                        env={"EVALGATE_FAKE": "1"}, sampling=Sampling())


def suite(tmp_path: Path, name: str) -> Suite:
    return Suite(name=name, path=tmp_path / "suites" / name, tasks=(f"{name}_task",),
                 primary_metric={f"{name}_task": "acc"}, content_hash=name * 8)


def run_worker(tmp_path: Path, timeout_s: float = 30.0) -> EngineError:
    with pytest.raises(EngineError) as ei:
        runner._run_worker({"suites": []}, config(tmp_path), tmp_path / "logs" / "candidate.log", timeout_s)
    return ei.value


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------------------------------ _run_worker


def test_worker_exits_non_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_worker(tmp_path, monkeypatch, """
        echo "INFO loading model"
        echo "Traceback (most recent call last):"
        echo "RuntimeError: Engine core initialization failed. See root cause above."
        exit 7
    """)
    err = run_worker(tmp_path)
    msg = str(err)
    assert err.exit_code == ExitCode.RUNTIME == 3
    assert "engine for cand exited with code 7" in msg
    assert "RuntimeError: Engine core initialization failed" in msg and "INFO loading model" in msg
    assert str(tmp_path / "logs" / "candidate.log") in msg
    assert "\n" not in msg


def test_worker_gets_the_config_env_and_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_worker(tmp_path, monkeypatch, """
        echo "args: $1 $2 env: $EVALGATE_FAKE spec: $(cat "$3")"
        exit 1
    """)
    msg = str(run_worker(tmp_path))
    assert 'args: -m evalgate.worker env: 1 spec: {' in msg and '"suites": []' in msg


def test_worker_killed_by_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_worker(tmp_path, monkeypatch, """
        echo "allocating KV cache"
        kill -9 $$
    """)
    msg = str(run_worker(tmp_path))
    assert "engine for cand was killed by signal 9 (SIGKILL; out of memory?" in msg
    assert "allocating KV cache" in msg and "\n" not in msg


def test_worker_killed_by_oom_style_sigkill_after_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the kernel's OOM killer does: SIGKILL out of the blue, mid-output.
    fake_worker(tmp_path, monkeypatch, """
        import os, signal, sys
        for i in range(50):
            print(f"Processed prompts: {i * 2}%|###   | {i}/50 [00:01<00:10, 3.1it/s]", flush=True)
        print("ValueError: not the last line but an error line", flush=True)
        for i in range(30):
            print(f"INFO step {i}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """, python=True)
    msg = str(run_worker(tmp_path))
    assert "killed by signal 9" in msg
    assert "it/s]" not in msg, "progress bars are not log lines"
    assert "ValueError: not the last line but an error line" in msg, "error lines are kept before the last lines"
    assert "INFO step 29" in msg


def test_worker_hangs_times_out_and_its_process_group_is_killed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "child.pid"
    fake_worker(tmp_path, monkeypatch, f"""
        sleep 600 &
        echo $! > "{pidfile}"
        echo "worker $$ waiting for the engine core"
        sleep 600
    """)
    start = time.monotonic()
    err = run_worker(tmp_path, timeout_s=1.0)
    assert time.monotonic() - start < 30
    msg = str(err)
    assert "engine for cand timed out after 1 s" in msg and "waiting for the engine core" in msg
    assert err.exit_code == ExitCode.RUNTIME
    worker_pid = int(msg.split("worker ")[1].split()[0])
    child_pid = int(pidfile.read_text())
    assert not alive(worker_pid), "the worker must be killed"
    deadline = time.monotonic() + 5
    while alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child_pid), "the worker's child must die with its process group"


def test_worker_interrupted_kills_its_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pidfile = tmp_path / "worker.pid"
    fake_worker(tmp_path, monkeypatch, f'echo $$ > "{pidfile}"\nsleep 600\n')
    real_wait = runner.subprocess.Popen.wait

    def wait(self, timeout=None):
        if timeout is not None:  # the gate's own wait: the user presses Ctrl-C
            deadline = time.monotonic() + 10
            while not pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            raise KeyboardInterrupt
        return real_wait(self)

    monkeypatch.setattr(runner.subprocess.Popen, "wait", wait)
    with pytest.raises(KeyboardInterrupt):
        runner._run_worker({}, config(tmp_path), tmp_path / "logs" / "candidate.log", 30)
    assert not alive(int(pidfile.read_text()))


# ------------------------------------------------------------------------------------------ evaluate_config


def evaluate(tmp_path: Path, suites: list[Suite], store: ResultStore):
    return runner.evaluate_config(config(tmp_path), suites, limit=2, store=store,
                                  log_path=tmp_path / "logs" / "candidate.log", timeout_s=30)


def test_worker_exits_0_without_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_worker(tmp_path, monkeypatch, 'echo "engine started"\nexit 0\n')
    with pytest.raises(EngineError, match="finished without results for suite 'a'") as ei:
        evaluate(tmp_path, [suite(tmp_path, "a")], ResultStore(tmp_path / "store"))
    assert ei.value.exit_code == ExitCode.RUNTIME


WRITE_FIRST_SUITE_THEN = """
    import json, sys
    from pathlib import Path
    from evalgate.results.store import ResultStore
    spec = json.loads(Path(sys.argv[3]).read_text())
    with open({calls!r}, "a") as f:
        f.write(" ".join(s["name"] for s in spec["suites"]) + "\\n")
    store = ResultStore(Path(spec["store"]))
    for i, s in enumerate(spec["suites"]):
        if i == {crash_at}:
            print(f"RuntimeError: engine died during suite {{s['name']}}", flush=True)
            sys.exit(1)
        store.put(s["key"], {{"suite": s["name"], "effective": {{"dtype": "float32"}},
                              "tasks": {{t: {{"suite": s["name"], "metric": "acc", "items": []}} for t in s["tasks"]}},
                              "timings": {{"suite:" + s["name"]: 1.0}}}})
        print(f"suite {{s['name']}} done", flush=True)
"""


def test_partial_results_stay_in_the_store_and_are_not_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    calls = tmp_path / "calls.txt"
    store = ResultStore(tmp_path / "store")
    suites = [suite(tmp_path, n) for n in ("a", "b", "c")]
    # First run: suites a and b finish, then the engine dies in c.
    fake_worker(tmp_path, monkeypatch, WRITE_FIRST_SUITE_THEN.format(calls=str(calls), crash_at=2), python=True)
    with pytest.raises(EngineError, match="exited with code 1") as ei:
        evaluate(tmp_path, suites, store)
    assert "RuntimeError: engine died during suite c" in str(ei.value)
    kept = sorted(p.name for p in store.root.glob("*.json"))
    assert len(kept) == 2, "the two finished suites are kept"
    # Second run: only c is asked for; a and b come from the store.
    fake_worker(tmp_path, monkeypatch, WRITE_FIRST_SUITE_THEN.format(calls=str(calls), crash_at=99), python=True)
    with caplog.at_level("INFO", logger="evalgate"):
        run = evaluate(tmp_path, suites, store)
    assert calls.read_text().splitlines() == ["a b c", "c"]
    assert sorted(run.cached) == ["a", "b"]
    assert ": a, b from the store (2 of 3 suites)" in caplog.text  # the reuse is said, not silent
    assert sorted(run.tasks) == ["a_task", "b_task", "c_task"]
    assert run.timings["suite:c"] == 1.0 and run.timings["suite:a"] == 0.0


def test_a_failed_worker_never_yields_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Even when every suite is in the store but one, a crash on that one is an error, not a partial pass.
    calls = tmp_path / "calls.txt"
    store = ResultStore(tmp_path / "store")
    suites = [suite(tmp_path, n) for n in ("a", "b")]
    fake_worker(tmp_path, monkeypatch, WRITE_FIRST_SUITE_THEN.format(calls=str(calls), crash_at=99), python=True)
    evaluate(tmp_path, suites[:1], store)
    fake_worker(tmp_path, monkeypatch, WRITE_FIRST_SUITE_THEN.format(calls=str(calls), crash_at=0), python=True)
    with pytest.raises(EngineError, match="engine died during suite b"):
        evaluate(tmp_path, suites, store)
    assert calls.read_text().splitlines() == ["a", "b"]


# ------------------------------------------------------------------------------------------ through the CLI


def _cli_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cand_engine_args: str, worker: str) -> tuple[int, Path]:
    """``evalgate run`` of a two-config project in ``tmp_path`` (baseline dtype float32, candidate
    ``cand_engine_args``) with the fake worker ``worker``; returns the exit code and the run directory."""
    from evalgate import cli

    (tmp_path / "model").mkdir()
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "base.yaml").write_text(f"model: {tmp_path / 'model'}\nengine_args: {{dtype: float32}}\n")
    (configs / "cand.yaml").write_text(f"extends: base\nengine_args: {cand_engine_args}\n")
    suites = tmp_path / "suites" / "s1"
    suites.mkdir(parents=True)
    (suites / "t.yaml").write_text(json_task("s1_task", "data.jsonl", "generate_until",
                                             "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n", ("exact_match",)))
    (suites / "data.jsonl").write_text('{"q": "1+1=", "a": "2"}\n')  # a valid suite: it passes the pre-flight
    (tmp_path / "thresholds.yaml").write_text("alpha: 0.05\ndefault: {margin: 2.0}\n")
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    fake_worker(tmp_path, monkeypatch, worker)
    out = tmp_path / "run"
    code = cli.main(["run", "--config", "cand", "--configs-dir", str(configs), "--suites-dir", str(tmp_path / "suites"),
                     "--thresholds", str(tmp_path / "thresholds.yaml"), "--out", str(out), "--limit", "2"])
    return code, out


def test_engine_crash_through_the_cli_is_exit_3_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The candidate's value check (a worker with "check_only") passes; the baseline's engine then dies.
    code, out = _cli_run(tmp_path, monkeypatch, "{dtype: bfloat16}",
                         'grep -q check_only "$3" && exit 0\necho "RuntimeError: CPU out of memory"\nkill -9 $$\n')
    err = capsys.readouterr().err
    assert code == ExitCode.RUNTIME
    errors = [ln for ln in err.splitlines() if ln.startswith("evalgate: error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert "engine for base was killed by signal 9" in errors[0] and "CPU out of memory" in errors[0]
    assert (out / "logs" / "baseline.log").read_text().startswith("RuntimeError: CPU out of memory")
    assert (out / "logs" / "candidate-check.spec.json").is_file()
    # Never a PASS: no verdict.json; CI's files say ERROR (exit 3) and carry the one-line cause.
    assert not (out / "verdict.json").exists()
    summary = (out / "summary.md").read_text()
    assert summary.startswith("## \U0001f4a5 evalgate ERROR: cand (exit 3)") and "No verdict: the check fails." in summary
    junit = ET.fromstring((out / "verdict.junit.xml").read_text())
    assert (junit.get("tests"), junit.get("failures"), junit.get("errors")) == ("1", "0", "1")
    error = junit.find("./testsuite/testcase/error")
    assert error is not None and error.get("type") == "exit 3" and error.get("message") == errors[0].removeprefix(
        "evalgate: error: ")


def test_a_refused_candidate_value_stops_the_run_before_the_baseline_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # The check worker reports vLLM's refusal the way the real one does; any other worker would leave a mark.
    code, out = _cli_run(tmp_path, monkeypatch, "{speculative_config: mtp}",
                         'if grep -q check_only "$3"; then echo "evalgate-config-error: AttributeError: \'str\' '
                         'object has no attribute \'items\'"; exit 2; fi\ntouch "$3.engine-started"\n')
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == ExitCode.USAGE
    assert err == (f"evalgate: error: {tmp_path / 'configs' / 'cand.yaml'}: engine_args: vLLM rejected a value: "
                   "AttributeError: 'str' object has no attribute 'items'")
    assert not list((out / "logs").glob("*.engine-started")) and not (out / "logs" / "baseline.log").exists()
