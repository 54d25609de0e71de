#!/usr/bin/env python3
"""Inject a real engine death into a running ``evalgate run`` or ``evalgate ablate`` from outside (issue 25 item 2:
a side whose engine dies in the speed phase is restarted, its suites from the store, the lost pass repeated).

Given the run's (or ablation's) output directory and the name of one engine worker's log under ``<out>/logs/``
(``baseline``, ``candidate``, or an ablation variant's slug), it waits until that worker has finished ``--after``
speed passes (``--event pass``: the worker prints ``evalgate: <label> at concurrency <c>: ...`` after each pass) or
woken ``--after`` times (``--event wake``, ``placement: alternate``: ``evalgate: woke in <s> s``, printed right before
the pass it was woken for), waits ``--delay`` seconds more (``--event wake --delay 5``: 5 s into that pass; a 512/512
pass at c=256 on an H100 takes ~28 s), then SIGKILLs that worker's engine-core
process: a process of the worker's process group whose command line names vLLM's ``EngineCore`` when vLLM runs the
engine core in a child process, else the worker itself (evalgate runs vLLM in-process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the worker *is* the engine-core process). It prints one JSON line saying
what it killed and when, and exits 0; 1 when the condition was not met within ``--timeout``, or at once (no
waiting) when, once it was met, no live worker runs that spec.

The worker is found by its command line, ``python -m evalgate.worker <out>/logs/<name>.spec.json`` (the spec is
written beside the log: ``evalgate.evaluate.procs.spawn``); a restarted side's worker logs to
``<name>.restart<n>.log``, so each call kills once. Linux only (``/proc``). Imports nothing of evalgate's.

    python benchmarks/kill_engine.py --out /tmp/r/ablate --log baseline --after 2 &
    evalgate ablate --config scale/recipe --speed-only ... --out /tmp/r/ablate
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from datetime import datetime, timezone

# evalgate.worker.main._serve_commands prints one per finished pass, and one per wake (alternate placement)
EVENTS = {"pass": re.compile(r"^evalgate: .* at concurrency \d+", re.M),
          "wake": re.compile(r"^evalgate: woke in ", re.M)}


def events_done(log_path: str, event: str = "pass") -> int:
    """How many ``event``s (finished speed passes, or wakes) the worker logging to ``log_path`` has printed (0 while
    there is no log)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return len(EVENTS[event].findall(f.read()))
    except OSError:
        return 0


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def find_worker(spec_path: str) -> int | None:
    """The pid of the live ``python -m evalgate.worker SPEC`` whose spec resolves to ``spec_path``."""
    want = os.path.realpath(spec_path)
    for pid in _pids():
        args = _cmdline(pid)
        if "evalgate.worker" not in args or not args or (_stat(pid) or ("Z",))[0] in ("Z", "X"):
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if os.path.realpath(os.path.join(cwd, args[-1])) == want:
            return pid
    return None


def engine_core(worker: int) -> tuple[int, str]:
    """The process to kill for ``worker``'s engine: an ``EngineCore`` process of its group, else the worker."""
    for pid in _pids():
        st = _stat(pid)
        if pid != worker and st and st[1] == worker and st[0] not in ("Z", "X") and \
                "EngineCore" in " ".join(_cmdline(pid)):
            return pid, "vLLM's EngineCore child process of the worker"
    return worker, "the worker process itself (vLLM's engine core runs in it: VLLM_ENABLE_V1_MULTIPROCESSING=0)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the run's or ablation's output directory (--out of evalgate)")
    ap.add_argument("--log", required=True, help="the worker's log name under <out>/logs/ (baseline, candidate, or "
                                                 "an ablation variant's slug)")
    ap.add_argument("--after", type=int, default=1, metavar="N", help="kill after the worker's Nth event (default 1: "
                                                                      "its warm-up pass, or its first wake)")
    ap.add_argument("--event", choices=sorted(EVENTS), default="pass", help="what --after counts: finished speed "
                                                                            "passes (default) or wakes (alternate)")
    ap.add_argument("--delay", type=float, default=0.0, metavar="S", help="seconds to wait after that (default 0)")
    ap.add_argument("--timeout", type=float, default=3600.0, metavar="S", help="give up after S seconds (exit 1)")
    ap.add_argument("--poll", type=float, default=0.2, metavar="S", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    log_path = os.path.join(args.out, "logs", f"{args.log}.log")
    spec_path = os.path.join(args.out, "logs", f"{args.log}.spec.json")
    t0 = time.monotonic()
    deadline = t0 + args.timeout

    def report(**fields: object) -> None:
        print(json.dumps({"time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          "waited_s": round(time.monotonic() - t0, 1), "log": log_path, **fields}), flush=True)

    while events_done(log_path, args.event) < args.after:
        if time.monotonic() > deadline:
            report(killed=None, why=f"fewer than {args.after} {args.event} events in the log after {args.timeout:g} s")
            return 1
        time.sleep(args.poll)
    time.sleep(args.delay)
    worker = find_worker(spec_path)
    if worker is None:
        report(killed=None, why=f"no live worker running {spec_path}")
        return 1
    pid, what = engine_core(worker)
    cmd = " ".join(_cmdline(pid))[:300]
    os.kill(pid, signal.SIGKILL)
    report(killed=pid, worker=worker, what=what, cmdline=cmd, passes=events_done(log_path),
           wakes=events_done(log_path, "wake"), signal="SIGKILL")
    return 0


if __name__ == "__main__":
    sys.exit(main())
