"""The parent side of evaluation (``evalgate.evaluate.runner``, ``evalgate.evaluate.procs``): store keys and the worker's spec,
collecting stored suites into a ``ConfigRun``, and how a worker's end becomes an error. No engine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evalgate.engine.protocol import CONFIG_ERROR_EXIT, CONFIG_ERROR_TAG, LOGPROBS_K
from evalgate.errors import ConfigError, EngineError
from evalgate.evaluate import runner
from evalgate.evaluate.procs import exit_error, tail
from evalgate.inputs.config import EngineConfig, Sampling
from evalgate.results.store import ResultStore, tasks_to_json
from evalgate.suites.discovery import Suite
from runfixtures import task


def _cfg(tmp_path: Path, dtype: str = "float32") -> EngineConfig:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return EngineConfig(name="c", path=tmp_path / "c.yaml", model=str(model), engine_args={"dtype": dtype}, env={},
                        sampling=Sampling())


def _suite(tmp_path: Path, name: str) -> Suite:
    return Suite(name=name, path=tmp_path / "suites" / name, tasks=(f"{name}_t",), primary_metric={f"{name}_t": "m"},
                 content_hash=hashlib.sha256(name.encode()).hexdigest())


def _plan(tmp_path: Path, dtype: str = "float32", **kw: object) -> runner._Plan:
    args = {"limit": 5, "store": ResultStore(tmp_path / "store"), "reference": None, "logprob_items": 8, **kw}
    return runner._plan(_cfg(tmp_path, dtype), [_suite(tmp_path, "a"), _suite(tmp_path, "b")], **args)


def test_store_keys_change_with_what_defines_a_result(tmp_path: Path) -> None:
    keys = _plan(tmp_path).keys
    assert set(keys) == {"a", "b"} and keys["a"] != keys["b"]
    assert _plan(tmp_path).keys == keys  # deterministic
    for change in ({"limit": 6}, {"logprob_items": 0}, {"dtype": "bfloat16"}):
        assert _plan(tmp_path, **change).keys["a"] != keys["a"], change


def test_an_image_suites_key_carries_the_image_library_and_a_text_suites_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from evalgate.suites.files import TaskSpec

    text = _suite(tmp_path, "a")
    pages = replace(_suite(tmp_path, "p"), specs=(TaskSpec("p_t", tmp_path, False, "m", modality="image"),))
    assert (text.modality, pages.modality) == ("text", "image")
    args = {"limit": 5, "store": ResultStore(tmp_path / "store"), "reference": None, "logprob_items": 8}
    from importlib import metadata

    from PIL import features

    assert runner.image_library() == {"pillow": metadata.version("pillow"),
                                      "freetype2": str(features.version("freetype2") or "absent")}
    before = runner._plan(_cfg(tmp_path), [text, pages], **args).keys
    assert before["a"] == _plan(tmp_path).keys["a"]  # a text suite's key is what it was
    monkeypatch.setattr(runner, "image_library", lambda: {"pillow": "0.0", "freetype2": "absent"})
    after = runner._plan(_cfg(tmp_path), [text, pages], **args).keys
    assert after["a"] == before["a"] and after["p"] != before["p"]


def test_store_and_journal_keys_follow_results_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalgate.results import store

    version = store.RESULTS_VERSION
    before = _plan(tmp_path)
    monkeypatch.setattr(store, "RESULTS_VERSION", version + 1)
    after = _plan(tmp_path)
    assert all(after.keys[s] != before.keys[s] for s in ("a", "b"))
    assert after.journal != before.journal and after.scores != before.scores  # generations are not reused either
    monkeypatch.setattr(store, "RESULTS_VERSION", version)
    assert _plan(tmp_path).keys == before.keys


def test_the_spec_carries_the_missing_suites_and_the_logprob_settings(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert [s["name"] for s in plan.spec["suites"]] == ["a", "b"] and plan.missing == plan.suites
    assert plan.spec["logprob_items"] == 8 and plan.spec["logprobs_k"] == LOGPROBS_K
    assert plan.spec["suites"][0]["key"] == plan.keys["a"] and plan.spec["reference"] is None
    off = _plan(tmp_path, logprob_items=0)
    assert off.spec["logprobs_k"] == 0  # no divergence asked for: no decode-time log-probs either


def _entry(name: str, n: int, spec: dict[str, float], source: str, gens: dict[str, int]) -> dict[str, object]:
    return {"suite": name, "effective": {"engine_args": {"dtype": "float32"}},
            "tasks": tasks_to_json({f"{name}_t": task(f"{name}_t", name, ["o"] * n, [1.0] * n)}),
            "spec_decode": spec, "evidence_sources": {"spec_decode": source}, "generations": gens,
            "timings": {f"suite:{name}": 2.0}}


def test_collect_sums_counters_and_zeroes_the_timings_of_cached_suites(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store")
    first = _plan(tmp_path, store=store)
    store.put(first.keys["a"], _entry("a", 3, {"spec_decode_num_drafts": 2.0}, "per_request", {"generated": 3}))
    plan = _plan(tmp_path, store=store)  # suite a is now stored; b is still missing
    assert [s.name for s in plan.missing] == ["b"] and [s["name"] for s in plan.spec["suites"]] == ["b"]
    with pytest.raises(EngineError, match="finished without results for suite 'b'"):
        runner._collect(plan, store, tmp_path / "log")
    store.put(plan.keys["b"], _entry("b", 2, {"spec_decode_num_drafts": 5.0}, "engine_counters", {"generated": 2}))
    run = runner._collect(plan, store, tmp_path / "log")
    assert sorted(run.tasks) == ["a_t", "b_t"] and len(run.tasks["b_t"].items) == 2
    assert run.spec_decode == {"spec_decode_num_drafts": 7.0}  # 2 + 5
    assert run.evidence_sources == {"spec_decode": runner.MIXED_SOURCES}
    assert run.cached == ["a"] and run.generations == {"generated": 2}  # only the suite computed now
    assert run.timings == {"suite:a": 0.0, "suite:b": 2.0}
    assert run.effective["sampling"] == vars(Sampling()) and run.effective["env"]["requested"] == {}


def test_a_refused_value_is_a_config_error_with_vllms_reason(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text(f"loading\n{CONFIG_ERROR_TAG} ValueError: max_num_seqs must be > 0\n")
    err = exit_error(CONFIG_ERROR_EXIT, _cfg(tmp_path), log)
    assert isinstance(err, ConfigError) and err.field == "engine_args"
    assert str(err).endswith("vLLM rejected a value: ValueError: max_num_seqs must be > 0")


def test_a_killed_worker_names_the_signal_and_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("step 1\nRuntimeError: boom\nstep 2\n 50%|#####     | 5/10 [00:01<00:01, 5.0it/s]\nlast\n")
    err = exit_error(-9, _cfg(tmp_path), log, " while measuring")
    assert isinstance(err, EngineError) and not isinstance(err, ConfigError)
    assert "engine for c was killed by signal 9 (SIGKILL; out of memory?" in str(err)
    assert " while measuring; last log lines: RuntimeError: boom | step 1 | step 2 | last" in str(err)
    assert "it/s" not in tail(log)  # progress bars are dropped
    assert "exited with code 1;" in str(exit_error(1, _cfg(tmp_path), log))


def _counting_killpg(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``os.killpg(pgid, sig)`` call (still sent), in order."""
    import os

    from evalgate.evaluate import procs

    calls: list[tuple[int, int]] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        calls.append((pgid, sig))
        real(pgid, sig)

    monkeypatch.setattr(procs.os, "killpg", killpg)
    return calls


def _bare_worker(proc: object, tmp_path: Path | None = None) -> runner.Worker:
    """The parent side of a worker around ``proc`` only: no worker process of evalgate's."""
    import io

    worker = runner.Worker.__new__(runner.Worker)
    worker.proc, worker._group_stopped, worker._replies, worker._log = proc, False, io.StringIO(), io.StringIO()
    if tmp_path is not None:
        worker.cfg, worker.log_path = _cfg(tmp_path), tmp_path / "w.log"
        worker.log_path.write_text("last line\n")
        worker.timeout_s, worker.deadline = 60.0, float("inf")
    return worker


def test_kill_stops_an_engine_process_that_outlived_its_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that died (SIGKILL) while its engine-core child lives on: ``Worker.kill`` still kills the whole process
    group (one SIGKILL to it) and returns only once nothing of it runs (no second copy of a side beside a restarted
    one), returning no pid; a second kill signals nothing."""
    import os
    import signal
    import subprocess
    import sys

    from evalgate.evaluate import procs

    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
            " print(c.pid, flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(proc.stdout.readline())  # type: ignore[union-attr]
    proc.stdout.close()  # type: ignore[union-attr]
    try:
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        assert procs.group_members(proc.pid) == [child]  # the "engine" outlived its worker
        calls = _counting_killpg(monkeypatch)
        worker = _bare_worker(proc)
        assert worker.kill() == []
        assert procs.group_members(proc.pid) == [] and worker._group_stopped
        assert calls == [(proc.pid, signal.SIGKILL)]
        assert worker.kill() == []  # once: the group is never signalled again
        assert calls == [(proc.pid, signal.SIGKILL)]
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kill_never_signals_a_reaped_worker_whose_group_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker already reaped with nothing of its group left: its process-group id may name an unrelated group by
    now, so ``Worker.kill`` sends no signal at all."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert proc.wait() == 0
    calls = _counting_killpg(monkeypatch)
    assert _bare_worker(proc).kill() == [] and calls == []


class _Proc:
    """A stand-in ``Popen``: alive (``poll`` None) until waited for."""

    def __init__(self, pid: int, events: list[str]) -> None:
        self.pid, self.events = pid, events

    def poll(self) -> int | None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        self.events.append(f"wait {self.pid}")
        return -9


def test_kill_group_returns_the_pids_still_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group member that outlives the wait (an engine stuck in the kernel) is returned, not ignored."""
    from evalgate.evaluate import procs

    events: list[str] = []
    monkeypatch.setattr(procs.os, "killpg", lambda pgid, sig: events.append(f"kill {pgid}"))
    monkeypatch.setattr(procs, "group_members", lambda pgid: [pgid + 1])
    assert procs.kill_group(_Proc(100, events), wait_s=0.2) == [101]  # type: ignore[arg-type]
    assert events == ["kill 100", "wait 100"]


def test_kill_groups_signals_every_group_before_waiting_for_any(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C with two engines up: both groups get their SIGKILL first, then one shared wait (not 30 s each)."""
    from evalgate.evaluate import procs

    events: list[str] = []
    alive = {100: 3, 200: 5}  # scans until each group is gone

    def members(pgid: int) -> list[int]:
        events.append(f"scan {pgid}")
        alive[pgid] -= 1
        return [pgid + 1] if alive[pgid] > 0 else []

    monkeypatch.setattr(procs.os, "killpg", lambda pgid, sig: events.append(f"kill {pgid}"))
    monkeypatch.setattr(procs, "group_members", members)
    assert procs.kill_groups([_Proc(100, events), _Proc(200, events)], wait_s=5) == []  # type: ignore[list-item]
    assert events[:4] == ["kill 100", "kill 200", "wait 100", "wait 200"]
    assert "kill" not in " ".join(events[4:])


def test_kill_workers_kills_every_worker_once_in_one_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """``runner.kill_workers``: each live ``Worker``'s group once (a worker listed twice, or stopped before, is not
    signalled again) through one ``kill_groups`` call."""
    from evalgate.evaluate import runner as r

    groups: list[list[int]] = []
    monkeypatch.setattr(r, "kill_groups", lambda ps: groups.append([p.pid for p in ps]) or [])
    a, b, c = (_bare_worker(_Proc(pid, [])) for pid in (1, 2, 3))
    c._group_stopped = True
    assert r.kill_workers([a, b, a, c]) == []
    assert groups == [[1, 2]] and all(w._group_stopped for w in (a, b, c))


def _replying_worker(tmp_path: Path, replies: str, code: str = "import time; time.sleep(600)") -> runner.Worker:
    """A ``Worker`` whose process runs ``code`` and whose reply pipe holds ``replies`` (then EOF)."""
    import io
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True, start_new_session=True)
    worker = _bare_worker(proc, tmp_path)
    worker._replies = io.StringIO(replies)  # type: ignore[assignment]
    return worker


def _select_now(monkeypatch: pytest.MonkeyPatch) -> None:
    import select

    monkeypatch.setattr(select, "select", lambda r, w, x, t: (r, [], []))


def test_a_worker_that_exits_in_a_pass_is_a_speed_error_that_died(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The reply pipe closes and the worker's exit code is read: ``died`` (the speed phase restarts that side)."""
    _select_now(monkeypatch)
    worker = _replying_worker(tmp_path, "", "import sys; sys.exit(1)")
    with pytest.raises(runner.SpeedError) as err:
        worker.measure({"concurrency": 4})
    assert err.value.died and not err.value.timed_out
    assert "exited with code 1 while measuring throughput at concurrency 4" in str(err.value)
    assert exit_error(-9, _cfg(tmp_path), worker.log_path).died  # type: ignore[union-attr]


def test_an_error_reply_or_a_timeout_is_a_speed_error_that_did_not_die(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A live worker's error reply (vLLM raised) and a ``--timeout`` expiry are SpeedErrors without ``died`` (the
    speed part fails at once; a restart would give a hung phase a fresh deadline)."""
    _select_now(monkeypatch)
    worker = _replying_worker(tmp_path, json.dumps({"event": "error", "message": "ValueError: bad"}) + "\n")
    try:
        with pytest.raises(runner.SpeedError, match="ValueError: bad") as err:
            worker.measure({"concurrency": 4})
        assert not err.value.died and not err.value.timed_out and worker.proc.poll() is None
        worker.deadline = 0.0  # the run's --timeout ran out
        with pytest.raises(runner.SpeedError, match="timed out after 60 s while waking up") as err:
            worker.wake()
        assert err.value.timed_out and not err.value.died and worker.proc.poll() is not None
    finally:
        worker.kill()


def test_check_engine_values_reads_the_limits_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run_worker(spec: dict[str, object], cfg: EngineConfig, log_path: Path, timeout_s: float) -> None:
        assert spec["check_only"] is True and spec["engine_args"] == {"dtype": "float32"}
        log_path.write_text(f"x\nevalgate-engine-limits: {json.dumps({'max_num_seqs': 7, 'max_model_len': 99})}\n")

    monkeypatch.setattr(runner, "_run_worker", fake_run_worker)
    assert runner.check_engine_values(_cfg(tmp_path), tmp_path / "check.log", 5) == {"max_num_seqs": 7,
                                                                                    "max_model_len": 99}


# ------------------------------------------------------------------------------------------------ hub templates

def _hub_cfg(tmp_path: Path) -> EngineConfig:
    """``chat.template: model`` on a hub model: the parent cannot read the template (template_sha256 None)."""
    from evalgate.inputs.chat import Chat, ChatSpec

    return EngineConfig(name="hub", path=tmp_path / "hub.yaml", model="org/hub-vl", engine_args={}, env={},
                        sampling=Sampling(), chat=ChatSpec(Chat(template="model")))


def _hub_plan(tmp_path: Path, store: ResultStore) -> runner._Plan:
    return runner._plan(_hub_cfg(tmp_path), [_suite(tmp_path, "a"), _suite(tmp_path, "b")], limit=5, store=store,
                        reference=None, logprob_items=8)


def test_a_hub_templates_stored_suites_are_served_only_under_the_form_the_worker_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The text form of a hub model's own template (string or content parts) is decided in the worker, after the
    keys are made: each stored entry records it, one that does not (stored before) or one of another form is
    computed again, and the manifest's protocol records the form the run used."""
    store = ResultStore(tmp_path / "store")
    plan = _hub_plan(tmp_path, store)
    assert plan.protocol["template_sha256"] is None and "content" not in plan.protocol
    # stored before the worker reported its form: no record, so a miss
    store.put(plan.keys["a"], _entry("a", 1, {}, "per_request", {}))
    store.put(plan.keys["b"], _entry("b", 1, {}, "per_request", {}))
    assert [s.name for s in _hub_plan(tmp_path, store).missing] == ["a", "b"]
    # both recorded, one form: served
    store.put(plan.keys["a"], {**_entry("a", 1, {}, "per_request", {}), "content": "parts"})
    store.put(plan.keys["b"], {**_entry("b", 1, {}, "per_request", {}), "content": "parts"})
    both = _hub_plan(tmp_path, store)
    assert both.missing == []
    assert runner._collect(both, store, tmp_path / "log").protocol == {**plan.protocol, "content": "parts"}
    # two forms among them: which is current cannot be told here, so neither is served
    store.put(plan.keys["b"], {**_entry("b", 1, {}, "per_request", {}), "content": "string"})
    assert [s.name for s in _hub_plan(tmp_path, store).missing] == ["a", "b"]
    # a stored suite of another form than the worker resolves now: computed again by a second worker pass
    store.put(plan.keys["b"], _entry("b", 1, {}, "per_request", {}))  # b unrecorded: missing; a: parts, stored
    runs: list[list[str]] = []

    def fake_worker(spec: dict, cfg: EngineConfig, log_path: Path, timeout_s: float) -> None:
        runs.append([s["name"] for s in spec["suites"]])
        for s in spec["suites"]:  # the worker files each suite with the form it resolved
            store.put(s["key"], {**_entry(s["name"], 2, {}, "per_request", {"generated": 2}), "content": "string"})

    monkeypatch.setattr(runner, "_run_worker", fake_worker)
    run = runner.evaluate_config(_hub_cfg(tmp_path), [_suite(tmp_path, "a"), _suite(tmp_path, "b")], limit=5,
                                 store=store, log_path=tmp_path / "log", timeout_s=60)
    assert runs == [["b"], ["a"]] and run.cached == []
    assert run.protocol == {**plan.protocol, "content": "string"}
    assert len(run.tasks["a_t"].items) == 2  # a's entry is the one computed now


def test_a_file_or_local_templates_keys_and_stored_entries_are_what_they_were(tmp_path: Path) -> None:
    """Only a hub model's own template records the form in entries: a local config's entry without it is served."""
    store = ResultStore(tmp_path / "store")
    plan = _plan(tmp_path, store=store)
    store.put(plan.keys["a"], _entry("a", 1, {}, "per_request", {}))
    again = _plan(tmp_path, store=store)
    assert again.keys == plan.keys and [s.name for s in again.missing] == ["b"]
    store.put(plan.keys["b"], _entry("b", 1, {}, "per_request", {}))
    assert runner._collect(_plan(tmp_path, store=store), store, tmp_path / "log").protocol == plan.protocol
