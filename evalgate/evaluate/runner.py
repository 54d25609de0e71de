"""Parent side of evaluation: plan a config's suites against the store, start an engine worker, collect results.

The parent never imports vLLM. For each suite it computes the store key; suites not in the store are evaluated by
one worker process (``python -m evalgate.worker SPEC``, which runs ``evalgate.worker.main``) that starts the
engine once and files each finished suite in the store at once, so a crash loses only the suite in flight.
A worker that fails, dies or times out becomes an ``EngineError`` carrying the last lines of its log. ``Worker``
is the handle of a worker kept alive after its suites to answer speed-measurement commands.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalgate.engine.device import device_identity
from evalgate.engine.protocol import JOURNAL_FORMAT, LIMITS_TAG, LOGPROBS_K, key_versions, versions
from evalgate.engine.readback import READBACK_VERSION
from evalgate.errors import EngineError
from evalgate.evaluate.procs import exit_error, kill_group, kill_groups, spawn, tail
from evalgate.inputs.chat import PARTS, STRING, check_content, check_model_template, protocol
from evalgate.inputs.config import EngineConfig
from evalgate.inputs.options import LOGPROB_ITEMS
from evalgate.models.embedded import model_fingerprint, resolve_model
from evalgate.results import store as result_store
from evalgate.results.records import TaskResult
from evalgate.results.store import ResultStore, content_key, tasks_from_json

if TYPE_CHECKING:
    from collections.abc import Iterable

    from evalgate.suites.discovery import Suite

__all__ = ["ConfigRun", "SpeedError", "Worker", "check_engine_values", "evaluate_config", "kill_workers",
           "start_config", "versions", "with_requested_runtime"]
MIXED_SOURCES = "mixed"  # suites of one run whose evidence came from different sources

log = logging.getLogger("evalgate")


@dataclass
class ConfigRun:
    """Everything one config produced over the requested suites.

    Attributes:
        config: the resolved config.
        tasks: per-task results, by task name.
        effective: the engine config as vLLM applied it (see ``VllmEngine.effective_config``).
        spec_decode: speculative-decoding counters summed over the suites evaluated in this run.
        evidence_sources: where evidence came from, e.g. ``{"spec_decode": "per_request"}`` (vLLM's per-request
            metrics) or ``"engine_counters"`` (engine-wide counters diffed per suite; vLLM 0.26), ``"mixed"`` when
            suites differ.
        timings: seconds, e.g. ``{"engine_start": 31.2, "suite:docparse": 40.1}``; cached suites are 0.
        cached: names of suites served from the store.
        generations: ``{"reused": n, "generated": m}`` over the suites computed in this run: requests
            answered from the generation journal (a resumed run) vs by the engine.
        journal, scores: this config's generation journal and teacher-forced log-prob journal (paths).
        device: the hardware the config ran on (``engine.device.device_identity``; part of every store key).
        protocol: how prompts were sent (``chat.protocol``: completion or chat, template sha256, kwargs, system
            prompt hash; part of every store key).
    """

    config: EngineConfig
    tasks: dict[str, TaskResult]
    effective: dict[str, Any]
    spec_decode: dict[str, float] = field(default_factory=dict)
    evidence_sources: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    cached: list[str] = field(default_factory=list)
    generations: dict[str, int] = field(default_factory=dict)
    journal: str = ""
    scores: str = ""
    device: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Plan:
    """What evaluating one config needs: its store keys, the suites already stored, and the worker's spec."""

    cfg: EngineConfig
    suites: list[Suite]
    keys: dict[str, str]
    cached: dict[str, Any]
    missing: list[Suite]
    spec: dict[str, Any]
    journal: str
    scores: str
    fingerprint: str = ""  # model_fingerprint of the checkpoint the engine loads
    device: dict[str, Any] = field(default_factory=dict)  # the hardware it runs on (device.device_identity)
    protocol: dict[str, Any] = field(default_factory=dict)  # how prompts are sent (chat.protocol)
    suite_specs: dict[str, dict[str, Any]] = field(default_factory=dict)  # each suite's worker spec, by name


def _hub_template(proto: dict[str, Any]) -> bool:
    """A chat protocol whose template the parent could not read (a hub model's own: ``template_sha256`` None): the
    worker decides how its text messages go (``worker.main.resolve_content``), after the keys are made."""
    return proto.get("mode") == "chat" and proto.get("template_sha256") is None


def _stale(plan: _Plan, form: str | None) -> list[Suite]:
    """The stored suites of a hub-template config filed under another text form than ``form``, the one the worker
    resolved now (the hub template changed): they are computed again. None (not decided): nothing is stale."""
    if not _hub_template(plan.protocol) or form is None:
        return []
    return [s for s in plan.suites if s.name in plan.cached and plan.cached[s.name].get("content") != form]


def _recompute(plan: _Plan, stale: list[Suite]) -> None:
    """Move ``stale`` suites from the plan's stored ones to those its worker computes."""
    log.warning("%s: the model's chat template now takes its messages another way than when %s were stored; "
                "computing them again", plan.cfg.name, ", ".join(s.name for s in stale))
    for s in stale:
        plan.cached.pop(s.name, None)
    plan.missing = [s for s in plan.suites if s.name not in plan.cached]
    plan.spec["suites"] = [plan.suite_specs[s.name] for s in plan.missing]


def _worker_form(plan: _Plan, store: ResultStore) -> str | None:
    """The text form the worker filed with the suites it computed (hub-template configs), None when it filed none."""
    forms = {(store.get(plan.keys[s.name]) or {}).get("content") for s in plan.missing}
    return next(iter(forms)) if len(forms) == 1 else None


def evaluate_config(cfg: EngineConfig, suites: list[Suite], *, limit: int | None, store: ResultStore,
                    log_path: Path, timeout_s: float, reference: ConfigRun | None = None,
                    logprob_items: int = LOGPROB_ITEMS) -> ConfigRun:
    """Results of ``cfg`` on ``suites``: from the store where possible, else from an engine worker.

    Args:
        cfg: the config to evaluate.
        suites: suites to run (all their tasks).
        limit: items per task (None = all).
        store: the result cache.
        log_path: where the worker's stdout/stderr go.
        timeout_s: wall-clock limit for the worker, in seconds.
        reference: the baseline's run, for a candidate: the worker then compares each item's decode-time
            log-probs with the baseline's (decode divergence) and scores the baseline's outputs under the candidate
            engine (teacher-forced logit divergence). None for a baseline, which scores its own outputs.
        logprob_items: how many items per task (the first, by item id) get the logit divergence; 0 = none.
    Raises:
        EngineError: the worker failed, was killed or timed out (with the tail of its log).
        ModelError: the embedded model cannot be prepared.
    """
    plan = _plan(cfg, suites, limit=limit, store=store, reference=reference, logprob_items=logprob_items)
    if plan.missing:
        _run_worker(plan.spec, cfg, log_path, timeout_s)
        stale = _stale(plan, _worker_form(plan, store))
        if stale:
            _recompute(plan, stale)
            _run_worker({**plan.spec, "suites": [plan.suite_specs[s.name] for s in stale]}, cfg, log_path, timeout_s)
    return _collect(plan, store, log_path)


def start_config(cfg: EngineConfig, suites: list[Suite], *, limit: int | None, store: ResultStore, log_path: Path,
                 timeout_s: float, reference: ConfigRun | None = None,
                 logprob_items: int = LOGPROB_ITEMS, sleep_mode: bool = False) -> tuple[Worker, ConfigRun]:
    """Like ``evaluate_config``, but the worker stays alive after its suites (always started, even when every suite
    is stored) to take speed-measurement commands (``Worker.measure``); the caller closes it. ``sleep_mode``
    (``placement: alternate``) starts the engine with vLLM's ``enable_sleep_mode``, outside the config's identity and
    store keys (it does not change outputs), so the worker also takes ``Worker.sleep`` / ``Worker.wake``.

    Returns:
        ``(worker, run)``: the live worker and the config's suite results (already in the store).
    Raises:
        EngineError, ConfigError: as ``evaluate_config``; the worker is stopped first.
    """
    plan = _plan(cfg, suites, limit=limit, store=store, reference=reference, logprob_items=logprob_items)
    plan.spec["suites"] = [s for s in plan.spec["suites"] if s["name"] in {m.name for m in plan.missing}]
    plan.spec["serve_commands"] = True
    plan.spec["sleep_mode"] = sleep_mode
    worker = Worker(plan.spec, cfg, log_path, timeout_s)
    try:
        worker.wait_ready()
        stale = _stale(plan, worker.info.get("content"))
        if stale:  # a hub template taken another way than when these were stored: a worker that computes them
            worker.close()
            _recompute(plan, stale)
            worker = Worker(plan.spec, cfg, log_path, timeout_s)
            worker.wait_ready()
        # No suite ran (--speed-only): the effective config is the one the worker read back when it started.
        return worker, _collect(plan, store, log_path, live_effective=(worker.info or {}).get("effective"),
                               live_content=(worker.info or {}).get("content"))
    except BaseException:
        worker.kill()
        raise


def _plan(cfg: EngineConfig, suites: list[Suite], *, limit: int | None, store: ResultStore,
          reference: ConfigRun | None, logprob_items: int) -> _Plan:
    model_path = resolve_model(cfg.model)
    model_template = check_model_template(cfg.chat, model_path, cfg.path)
    # a template that loses a message's text in both forms is refused before this config's engine starts
    check_content(cfg.chat, cfg.chat.template_text if cfg.chat.template_text is not None else model_template, cfg.path)
    proto = protocol(cfg.chat, model_template)  # chat and completion prompts score differently: part of every key
    vers = key_versions()  # the keys keep their form; the manifest shows versions()
    fingerprint = model_fingerprint(model_path)
    # Results are facts about a config on a machine: kernels and numerics differ between GPU models and CPU ISAs,
    # so a result stored on one is never served as a side on another.
    device = device_identity(cfg.env)
    # Generations are journaled per config (not per suite): a killed run resumes item by item.
    # Read at call time from its one definition (store.RESULTS_VERSION), so a bump reaches every key.
    results_version = result_store.RESULTS_VERSION
    journal_key = content_key({"config": cfg.identity(), "model_fingerprint": fingerprint, "versions": vers,
                               "device": device, "protocol": proto,
                               "journal_format": JOURNAL_FORMAT, "results_version": results_version})
    keys = {s.name: content_key({
        "config": cfg.identity(), "model_fingerprint": fingerprint, "results_version": results_version,
        "device": device, "protocol": proto, "suite": s.name, "suite_hash": s.content_hash, "tasks": list(s.tasks), "limit": limit, "versions": vers,
        "readback_version": READBACK_VERSION, "journal_format": JOURNAL_FORMAT,
        # A candidate's items carry evidence measured against this baseline's generations.
        "reference": None if reference is None else Path(reference.journal).name, "logprob_items": logprob_items,
        # An image suite's pages may be drawn by PIL (suites.pages): the same files, other pixels under another
        # Pillow or FreeType. Text suites' keys keep their form.
        **({"image_library": image_library()} if s.modality == "image" else {}),
        # Under a chat template an image suite's text tasks render as text, its image tasks with image parts (the
        # switch is per task since results of such a mixed suite were stored with every task's messages as image
        # parts): the mixed suite's results are keyed by which entries ran with images. Others keep their keys.
        **({"image_entries": list(s.image_entries)}
           if s.modality == "image" and proto["mode"] == "chat" and len(s.image_entries) < len(s.entries) else {}),
    }) for s in suites}
    cached = {name: e for name, key in keys.items() if (e := store.get(key)) is not None}
    if _hub_template(proto):
        # a hub model's own template: its text form is the worker's decision, not in the key. An entry that does
        # not record it (stored before evalgate did), or entries that disagree, are computed again.
        cached = {name: e for name, e in cached.items() if e.get("content") in (STRING, PARTS)}
        if len({e["content"] for e in cached.values()}) > 1:
            cached = {}
    missing = [s for s in suites if s.name not in cached]
    if cached:  # say so: a rerun that reuses results should not look like one that recomputed them
        log.info("%s: %s from the store (%d of %d suites)", cfg.name, ", ".join(sorted(cached)), len(cached),
                 len(suites))
    suite_specs = _suite_specs(suites, keys)
    journal = str(store.root / "journal" / f"{journal_key}.jsonl")
    scores = str(store.root / "scores" / f"{journal_key}.jsonl")
    spec = {"model": model_path, "engine_args": cfg.engine_args, "env": cfg.env,
            "sampling": vars(cfg.sampling), "limit": limit, "store": str(store.root),
            "journal": journal, "scores": scores, "logprobs_k": LOGPROBS_K if logprob_items > 0 else 0,
            "logprob_items": logprob_items, "chat": cfg.chat.worker_spec(model_template),
            "reference": None if reference is None else {"journal": reference.journal, "scores": reference.scores},
            "suites": [suite_specs[s.name] for s in missing]}
    return _Plan(cfg, suites, keys, cached, missing, spec, journal, scores, fingerprint, device, proto, suite_specs)


def _suite_specs(suites: list[Suite], keys: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each suite's part of the worker spec, by name."""
    return {s.name: {"name": s.name, "dir": str(s.path.parent), "hash": s.content_hash, "tasks": list(s.tasks),
                        "metrics": s.primary_metric, "key": keys[s.name], "builtins": s.builtins,
                        "entries": [list(e) for e in s.entries] or [[t, None] for t in s.tasks],
                        "id_fields": {t.name: t.id_field for t in s.specs if t.id_field},
                        **({"uses": list(s.uses)} if s.uses else {}),
                        # which entries run with images (a text task of an image suite keeps text prompts)
                        **({"modality": "image", "image_entries": list(s.image_entries)}
                           if s.modality == "image" else {})} for s in suites}


def image_library() -> dict[str, str]:
    """The versions of what draws and encodes an image suite's pages, part of that suite's store key:
    ``{"pillow": version, "freetype2": version or "absent"}`` (PIL's own report; no image is drawn)."""
    from importlib import metadata

    from PIL import features

    return {"pillow": metadata.version("pillow"), "freetype2": str(features.version("freetype2") or "absent")}


def _collect(plan: _Plan, store: ResultStore, log_path: Path,
             live_effective: dict[str, Any] | None = None, live_content: str | None = None) -> ConfigRun:
    """The config's ``ConfigRun`` from the store, once its worker has filed every missing suite; its effective config
    is the stored suites' read-back, or, when no suite was asked for (``--speed-only``), ``live_effective`` (the
    read-back a live worker sent when it started)."""
    cfg, suites, keys, cached, missing = plan.cfg, plan.suites, plan.keys, dict(plan.cached), plan.missing
    for s in missing:
        entry = store.get(keys[s.name])
        if entry is None:
            raise EngineError(f"engine worker for {cfg.name} finished without results for suite "
                              f"'{s.name}'; log: {log_path}")
        cached[s.name] = entry
    run = ConfigRun(config=cfg, tasks={}, effective={}, journal=plan.journal, scores=plan.scores,
                    cached=[s.name for s in suites if s not in missing], device=plan.device,
                    protocol=plan.protocol)
    for s in suites:
        entry = cached[s.name]
        run.tasks.update(tasks_from_json(entry["tasks"], store.path(keys[s.name])))
        run.effective = run.effective or entry["effective"]
        for k, v in entry.get("spec_decode", {}).items():
            run.spec_decode[k] = run.spec_decode.get(k, 0.0) + v
        for k, v in entry.get("evidence_sources", {}).items():
            seen = run.evidence_sources.get(k)
            run.evidence_sources[k] = v if seen in (None, v) else MIXED_SOURCES
        if s in missing:
            for k, v in entry.get("generations", {}).items():
                run.generations[k] = run.generations.get(k, 0) + v
        for k, v in entry.get("timings", {}).items():
            run.timings[k] = v if s in missing else 0.0
    if _hub_template(plan.protocol):  # the form the worker resolved (suites agree: _plan, _stale), else the live one
        forms = {cached[s.name].get("content") for s in suites} or {live_content}
        if len(forms) == 1 and (form := next(iter(forms))) in (STRING, PARTS):
            run.protocol = {**plan.protocol, "content": form}
    if not suites and live_effective:
        run.effective = dict(live_effective)
    run.effective = with_requested_runtime(run.effective, cfg, plan.fingerprint)
    return run


def with_requested_runtime(effective: dict[str, Any], cfg: EngineConfig, weights: str | None = None) -> dict[str, Any]:
    """The engine's read-back plus what evalgate itself applies: the sampling parameters it sends with every
    request, the environment it starts the engine with and which checkpoint it loads (the NO-OP check compares all
    of it).

    Sampling and env are not engine config, so vLLM cannot report them; but a candidate that changes only the
    temperature or ``max_tokens`` changes outputs, and must never be called NO-OP. Nor must a candidate that
    loads other weights with the same engine args (a quantized or re-trained checkpoint): ``weights``, the
    checkpoint's ``model.model_fingerprint``, becomes ``model.weights`` (content, not path: the same checkpoint
    named two ways is still the same). Returns a new dict.
    """
    env = dict(effective.get("env", {}))
    env["requested"] = dict(cfg.env)
    out = {**effective, "env": env, "sampling": vars(cfg.sampling).copy()}
    if weights is not None:
        out["model"] = {**effective.get("model", {}), "weights": weights}
    return out


def _run_worker(spec: dict[str, Any], cfg: EngineConfig, log_path: Path, timeout_s: float) -> None:
    """Run a worker for ``spec`` to its end (at most ``timeout_s`` seconds), its output in ``log_path``.

    Raises:
        ConfigError: vLLM refused an engine-arg value. EngineError: the worker failed, was killed or timed out.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as log:
        proc = spawn(spec, cfg, log_path, log)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise EngineError(f"engine for {cfg.name} timed out after {timeout_s:g} s; "
                              f"last log lines: {tail(log_path)} (log: {log_path})") from None
        except KeyboardInterrupt:
            kill_group(proc)
            raise
    if rc != 0:
        raise exit_error(rc, cfg, log_path)


class SpeedError(EngineError):
    """The speed measurement failed (exit 3); the quality results it followed are already in the store. ``died``:
    the worker process ended (``EngineError``); ``timed_out``: ``--timeout`` ran out."""


class Worker:
    """A live engine worker: it evaluates its suites, says so, then answers speed-measurement commands.

    Commands go to the worker's stdin, one JSON line each; replies come back one JSON line each on a pipe of
    their own (stdout and stderr go to the log, which vLLM fills). The worker exits on ``close`` (or when its
    stdin closes: the gate died). ``timeout_s`` bounds the worker's whole life, as for ``evaluate_config``.
    """

    def __init__(self, spec: dict[str, Any], cfg: EngineConfig, log_path: Path, timeout_s: float) -> None:
        self.cfg, self.log_path = cfg, log_path
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        log_path.parent.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        self._log = log_path.open("w", encoding="utf-8")
        try:
            self.proc = spawn({**spec, "reply_fd": write_fd}, cfg, log_path, self._log, stdin=subprocess.PIPE,
                               text=True, encoding="utf-8", pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r", encoding="utf-8")
        self.info: dict[str, Any] = {}
        self._group_stopped = False  # its process group killed or ended with close: never signalled again

    def wait_ready(self) -> dict[str, Any]:
        """Block until the worker has filed its suites; returns its ``ready`` reply (device, limits, versions).

        Raises:
            ConfigError: vLLM refused an engine-arg value. EngineError: the worker died or timed out.
        """
        self.info = self._reply("evaluating its suites")
        return self.info

    def measure(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one measurement command; returns the worker's result (``throughput.measure``'s fields; for a
        ``{"replay": spec}`` command, ``{"outputs": [...]}``: ``worker.replay_gate.generate``'s answers).

        Raises:
            SpeedError: the worker reported a failure, died or timed out.
        """
        what = ("replaying the recorded requests (replay gate)" if command.get("replay") else
                f"measuring throughput at concurrency {command.get('concurrency')}")
        reply = self._send(command, what)
        if reply.get("event") == "error":
            kind = "replay of the recorded requests" if command.get("replay") else "throughput measurement"
            raise SpeedError(f"{kind} of {self.cfg.name} failed: {reply.get('message')} (log: {self.log_path})")
        return reply["result"]

    def sleep(self, level: int = 1) -> float:
        """Put the engine to sleep (vLLM's ``LLM.sleep(level)``); returns the seconds the worker took.

        Raises:
            SpeedError: the worker reported a failure, died or timed out.
        """
        return self._command({"sleep": level}, f"sleeping (level {level})")

    def wake(self) -> float:
        """Wake the engine (``LLM.wake_up()``, then ``LLM.reset_prefix_cache()``); returns the seconds it took.

        Raises:
            SpeedError: the worker reported a failure, died or timed out.
        """
        return self._command({"wake": True}, "waking up")

    def _send(self, command: dict[str, Any], doing: str) -> dict[str, Any]:
        """Write one command line to the worker and return its reply; a dead or silent worker is a SpeedError."""
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass  # the worker is gone: _reply reports how it ended
        try:
            return self._reply(doing)
        except EngineError as exc:
            raise SpeedError(str(exc), died=exc.died, timed_out=exc.timed_out) from None

    def _command(self, command: dict[str, Any], doing: str) -> float:
        reply = self._send(command, doing)
        if reply.get("event") == "error":
            raise SpeedError(f"{self.cfg.name} failed while {doing}: {reply.get('message')} (log: {self.log_path})")
        return float(reply.get("seconds", 0.0))

    def close(self) -> None:
        """Ask the worker to exit; kill its process group if it does not within 60 s."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)
        self._group_stopped = True
        self._cleanup()

    def kill(self) -> list[int]:
        """Stop the worker now with its whole process group, e.g. on an error, a Ctrl-C, or before its side is
        restarted; also when the worker itself already died (vLLM's engine-core process may outlive it: its group is
        killed all the same, once; a group of which nothing runs any more is not signalled: ``procs.kill_group``).

        Returns:
            The process ids of its group still running ``procs.GROUP_GONE_S`` seconds after the SIGKILL (empty: gone;
            always empty once the group was stopped before).
        """
        left: list[int] = []
        if not self._group_stopped:
            left = kill_group(self.proc)
            self._group_stopped = True
        self._cleanup()
        return left

    def _cleanup(self) -> None:
        for f in (self._replies, self._log):
            try:
                f.close()
            except OSError:
                pass

    def _reply(self, doing: str) -> dict[str, Any]:
        import select

        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise EngineError(f"engine for {self.cfg.name} timed out after {self.timeout_s:g} s while {doing}; "
                                  f"last log lines: {tail(self.log_path)} (log: {self.log_path})", timed_out=True)
            ready, _, _ = select.select([self._replies], [], [], min(left, 5.0))
            if ready:
                line = self._replies.readline()
                if line:
                    return json.loads(line)
                break  # EOF: the worker exited
        raise exit_error(self.proc.wait(), self.cfg, self.log_path, f" while {doing}")  # EngineError: died


def kill_workers(workers: Iterable[Worker]) -> list[int]:
    """``Worker.kill`` of several workers at once (an error or a Ctrl-C with both sides' engines up): every live
    ``Worker``'s process group gets its SIGKILL first, then all are waited for together (``procs.kill_groups``: at
    most ``procs.GROUP_GONE_S`` in all, not per worker); each worker is killed once, however often it is listed.

    Returns:
        The process ids still running after the wait (empty: all gone).
    """
    unique: list[Worker] = list({id(w): w for w in workers}.values())
    left = kill_groups([w.proc for w in unique if not w._group_stopped])
    for w in unique:
        w._group_stopped = True
        w._cleanup()
    return left


def check_engine_values(cfg: EngineConfig, log_path: Path, timeout_s: float,
                        replay: dict[str, Any] | None = None, *, images: bool = False) -> dict[str, Any]:
    """Have vLLM validate ``cfg``'s engine-arg values in a short worker (no model weights loaded, ~5 s).

    ``evalgate run`` calls it for the candidate before the baseline's engine starts, so a value vLLM refuses costs
    seconds, not a whole baseline run.

    Returns:
        The engine's resolved limits, ``{"max_num_seqs": n, "max_model_len": tokens}`` (what ``vllm.LLM`` would
        apply; a traffic profile is checked against them), or ``{}`` when vLLM did not report them. With ``replay``
        (``inputs.replay.ReplayPlan.spec``) also ``replay_prompt_tokens`` (the requests' prompt lengths under the
        model's tokenizer) or ``replay_error`` (why they cannot be rendered). With ``images``, also
        ``image_input``: whether vLLM takes images for the model (``worker.main.image_input``; the parent judges it:
        ``evaluate.modality``), and for a chat-protocol config ``chat_images``: whether its chat template places an
        image (``worker.main.chat_image_input``).
    Raises:
        ConfigError: vLLM refused a value (its reason, naming the config file).
        EngineError: the check itself could not run (its log tail).
    """
    model_path = resolve_model(cfg.model)
    spec = {"check_only": True, "model": model_path, "engine_args": cfg.engine_args,
            "sampling": vars(cfg.sampling),
            **({"replay": replay, "chat": cfg.chat.worker_spec()} if replay else {}),
            **({"check_images": True} if images else {})}
    if images and cfg.chat.is_chat:  # where the chat template puts an image: the template the engine will use
        spec["chat"] = cfg.chat.worker_spec(check_model_template(cfg.chat, model_path, cfg.path))
    _run_worker(spec, cfg, log_path, timeout_s)
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    found = [ln.split(LIMITS_TAG, 1)[1] for ln in lines if LIMITS_TAG in ln]
    return json.loads(found[-1]) if found else {}
