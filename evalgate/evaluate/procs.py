"""A worker process's plumbing, parent side: start it in a session of its own (killed with the gate), stop its whole
process group, and turn how it ended (exit code, signal, log tail) into a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from evalgate.engine.pgroup import group_members
from evalgate.engine.protocol import CONFIG_ERROR_EXIT, CONFIG_ERROR_TAG, SUITE_ERROR_EXIT, SUITE_ERROR_TAG
from evalgate.errors import ConfigError, EngineError, SuiteCodeError
from evalgate.results.store import write_json_atomic

LOG_TAIL_LINES = 8


def spawn(spec: dict[str, Any], cfg: Any, log_path: Path, log: Any, **popen: Any) -> subprocess.Popen[Any]:
    """Start ``python -m evalgate.worker SPEC`` (the spec written beside the log) in a session of its own, killed
    when this process dies, with the config's environment; stdout and stderr to ``log``."""
    spec_path = log_path.with_suffix(".spec.json")
    write_json_atomic(spec_path, spec)
    return subprocess.Popen([sys.executable, "-m", "evalgate.worker", str(spec_path)], stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **cfg.env}, start_new_session=True,
                            preexec_fn=_die_with_parent, **popen)


def exit_error(rc: int, cfg: Any, log_path: Path, doing: str = "") -> ConfigError | SuiteCodeError | EngineError:
    """The error a worker's non-zero exit code ``rc`` means (``doing``: what it was doing, for the message): a
    ``ConfigError`` for a value vLLM's pre-flight refused, a ``SuiteCodeError`` for a suite whose own code raised on
    an item (naming the suite's file and function: ``worker.suite_fault``), else an ``EngineError`` with ``died`` set (the worker
    process ended: where the speed phase learns that a side's engine died, ``placement.Alternation``)."""
    if rc == SUITE_ERROR_EXIT:  # a suite's own code raised on an item in the worker
        fault = _suite_error(log_path)
        if fault is not None:
            return SuiteCodeError(fault["message"], path=fault["path"], field=fault["field"])
    if rc == CONFIG_ERROR_EXIT:  # the worker's pre-flight (EngineArgs -> engine config, no model loaded) refused
        reason = _config_error(log_path)
        if reason.startswith("chat.template: "):  # the worker's check of a template the parent could not read
            return ConfigError(reason.split(": ", 1)[1], path=cfg.path, field="chat.template")
        return ConfigError(f"vLLM rejected a value: {reason}", path=cfg.path, field="engine_args")
    how = f"was killed by signal {-rc} ({_signal_hint(-rc)})" if rc < 0 else f"exited with code {rc}"
    return EngineError(f"engine for {cfg.name} {how}{doing}; last log lines: {tail(log_path)} (log: {log_path})",
                       died=True)


def _config_error(log_path: Path) -> str:
    """The reason the worker's pre-flight printed for a refused engine-arg value."""
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((ln.split(CONFIG_ERROR_TAG, 1)[1].strip() for ln in reversed(lines) if CONFIG_ERROR_TAG in ln),
                "vLLM rejected the engine args")


def _suite_error(log_path: Path) -> dict[str, str] | None:
    """The worker's report blaming a suite's code (``worker.suite_fault``), or None when its log holds none."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for ln in reversed(lines):
        if SUITE_ERROR_TAG in ln:
            try:  # raw_decode: another process's output may follow the report on the shared log line
                fault, _ = json.JSONDecoder().raw_decode(ln.split(SUITE_ERROR_TAG, 1)[1].lstrip())
            except ValueError:
                return None
            if isinstance(fault, dict) and all(isinstance(fault.get(k), str) for k in ("path", "field", "message")):
                return fault
            return None
    return None


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


GROUP_GONE_S = 30.0  # how long kill_group waits for the group's last process (an engine freeing its memory) to end


def kill_group(proc: subprocess.Popen[Any], wait_s: float = GROUP_GONE_S) -> list[int]:
    """SIGKILL the process group of ``proc`` (the worker and everything it started, e.g. vLLM's engine-core process,
    which may outlive a worker that already died), reap ``proc``, then wait up to ``wait_s`` until no process of the
    group is left (a killed engine's memory is free only once it has exited): an engine started next never runs
    beside the one killed.

    The group is signalled only while it is still ours: ``proc`` not yet reaped, or a live member of the group (which
    keeps its id reserved). Once ``proc`` was reaped and nothing of its group runs, its id may already name an
    unrelated group, which is never signalled.

    Returns:
        The process ids of the group still running after ``wait_s`` (empty: it is gone).
    """
    return kill_groups([proc], wait_s)


def kill_groups(procs: list[subprocess.Popen[Any]], wait_s: float = GROUP_GONE_S) -> list[int]:
    """``kill_group`` of several workers at once (a Ctrl-C or an error with both sides' engines up): SIGKILL every
    group first, then reap each ``proc`` and wait up to ``wait_s`` in all (not per group) until none of them runs.

    Returns:
        The process ids still running after ``wait_s``, of all the groups (empty: all gone).
    """
    import signal
    import time

    for proc in procs:
        if proc.poll() is None or group_members(proc.pid):  # else its id may name another group by now
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for proc in procs:
        proc.wait()
    deadline = time.monotonic() + wait_s
    while True:
        left = [pid for proc in procs for pid in group_members(proc.pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def tail(log_path: Path, n: int = LOG_TAIL_LINES) -> str:
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
