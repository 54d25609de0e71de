"""Scoring overlapped with generation: sandboxed programs run while the engine is still generating.

lm-eval scores a task only after ``generate_until`` has returned every completion, calling the task's
``process_results`` one document at a time; run that way, the coding suite's sandboxed programs execute one after
another after the last generation. Instead:

1. A suite's ``utils.py`` registers, per task, how a (document, completion) pair becomes the program its scorer
   runs, and the sandbox limits it runs under (:func:`register_program`).
2. The engine adapter calls :func:`on_answer` for every request the moment its text is known (journaled
   generations before the engine starts, new ones as the engine finishes them: ``engine.make_lm(on_answer=...)``).
   It builds that program and submits it to the process-wide :class:`SandboxPool`: a few threads, each waiting on
   one sandboxed subprocess (``sandbox.run_python``, limits unchanged), so at most ``workers`` programs run at once
   (bounded by cores and memory, :func:`default_workers`).
3. The task's ``process_results`` asks the pool for the same program (:meth:`SandboxPool.run`): it gets the result
   of the identical earlier submission (same program text and limits), waiting for it if it is still running. A
   program nobody submitted (a filter changed the text, a direct call), or one still queued, runs there and then:
   once generation is over the scorer's own thread works off the queue beside the pool.

The result of a program is a function of its text and limits only, and the key is exactly those, so the scores
equal sequential ``run_python`` calls by construction: the pool changes only *when* programs run. Nothing here
is a correctness dependency: if pre-scoring fails or is skipped, ``process_results`` runs the program itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from evalgate.suites.sandbox import SandboxResult, run_python

__all__ = ["SandboxPool", "default_workers", "on_answer", "pool", "register_program", "shutdown"]

log = logging.getLogger(__name__)
_DEFAULT_MEMORY_MB = 512  # sandbox.run_python's default address-space limit per program


def default_workers(memory_mb: int = _DEFAULT_MEMORY_MB) -> int:
    """How many sandboxed programs may run at once: the cores this process may use less one (the engine's),
    and no more than fit in the memory available now at ``memory_mb`` MiB each; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    fit = _available_bytes() // (memory_mb * 2**20)
    return max(1, min(cores - 1, fit))


def _available_bytes() -> int:
    """MemAvailable from /proc/meminfo, in bytes (a large number where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 40


class SandboxPool:
    """Runs sandboxed programs on a bounded number of threads; results are looked up by (program, limits).

    Args:
        workers: programs run at once (each thread waits on one ``run_python`` subprocess); default
            :func:`default_workers`.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="evalgate-sandbox")
        self._futures: dict[tuple[str, tuple[tuple[str, Any], ...]], Future[SandboxResult]] = {}
        self._lock = threading.Lock()
        self.wait_s = 0.0  # seconds callers of run() spent waiting for, or running, programs (where a suite's tail goes)

    def submit(self, program: str, **limits: Any) -> Future[SandboxResult]:
        """Start ``run_python(program, **limits)`` on the pool (once per distinct program and limits)."""
        key = (program, tuple(sorted(limits.items())))
        with self._lock:
            fut = self._futures.get(key)
            if fut is None:
                fut = self._futures[key] = self._executor.submit(run_python, program, **limits)
            return fut

    def run(self, program: str, **limits: Any) -> SandboxResult:
        """The result of ``run_python(program, **limits)``: an earlier submission's (waited for if it is running),
        else run now in the calling thread (also when it was submitted but has not started: the caller is idle
        anyway, so it works off the queue beside the pool once generation is over).

        The result is handed over once and then forgotten (the pool keeps no finished results). Raises what
        ``run_python`` raises (``OSError`` when no subprocess can be started)."""
        with self._lock:
            fut = self._futures.pop((program, tuple(sorted(limits.items()))), None)
        t0 = time.monotonic()
        try:
            if fut is None or fut.cancel():  # cancel() succeeds only for a submission that has not started
                return run_python(program, **limits)
            return fut.result()
        finally:
            self.wait_s += time.monotonic() - t0

    def pending(self) -> int:
        """Submitted programs not yet handed over by :meth:`run`."""
        with self._lock:
            return len(self._futures)

    def close(self) -> None:
        """Cancel programs not started yet, forget the rest; running ones finish in their threads."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            self._futures.clear()


_programs: dict[str, tuple[Callable[[dict[str, Any], str], str], dict[str, Any]]] = {}
_pool: SandboxPool | None = None
_pool_lock = threading.Lock()


def pool() -> SandboxPool:
    """This process's pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SandboxPool()
        return _pool


def wait_seconds() -> float:
    """Seconds this process's scorers have spent in :meth:`SandboxPool.run` (0.0 before any pool exists)."""
    with _pool_lock:
        return 0.0 if _pool is None else _pool.wait_s


def shutdown() -> None:
    """Close this process's pool, if any (the engine worker does it when it is done)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.close()
            _pool = None


def register_program(task: str, build: Callable[[dict[str, Any], str], str], **limits: Any) -> None:
    """Declare that lm-eval task ``task`` scores a completion by running ``build(doc, completion)`` in the sandbox
    with ``limits`` (``run_python`` keyword arguments), so :func:`on_answer` can start it early."""
    _programs[task] = (build, dict(limits))


def on_answer(request: Any, text: str) -> None:
    """Start the sandboxed run of a finished completion, if its task registered a program (see the module doc).

    ``request`` is lm-eval's ``Instance`` (its ``task_name`` and ``doc``). Never raises: pre-scoring is an
    optimisation, and the task's own ``process_results`` runs the program if it was not started here.
    """
    entry = _programs.get(getattr(request, "task_name", None) or "")
    if entry is None:
        return
    build, limits = entry
    try:
        pool().submit(build(request.doc, text), **limits)
    except Exception as exc:  # noqa: BLE001 - see the docstring: the scorer recomputes, so log and go on
        log.warning("pre-scoring %s failed (%s); it is scored after generation instead", request.task_name, exc)
