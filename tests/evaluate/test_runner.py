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


def test_kill_stops_an_engine_process_that_outlived_its_worker() -> None:
    """A worker that died (SIGKILL) while its engine-core child lives on: ``Worker.kill`` still kills the whole process
    group and returns only once nothing of it runs (no second copy of a side beside a restarted one); a second kill
    signals nothing."""
    import io
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
        worker = runner.Worker.__new__(runner.Worker)  # the parent side only: no worker process of evalgate's
        worker.proc, worker._group_stopped, worker._replies, worker._log = proc, False, io.StringIO(), io.StringIO()
        worker.kill()
        assert procs.group_members(proc.pid) == [] and worker._group_stopped
        worker.kill()  # once: the group is never signalled again
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
