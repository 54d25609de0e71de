"""``evalgate.engine.pgroup``: the one /proc scan of a process group, used by the worker plumbing
(``evaluate.procs``) and by ``vllm serve``'s stop (``engine.serve``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from evalgate.engine import pgroup, serve
from evalgate.evaluate import procs


def test_group_members_and_alive_follow_a_real_group() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        assert pgroup.group_members(proc.pid) == [proc.pid] and pgroup.group_alive(proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert pgroup.group_members(proc.pid) == [] and not pgroup.group_alive(proc.pid)


def test_the_worker_plumbing_and_serve_scan_with_the_one_helper(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No copy of the scan of its own: ``procs.group_members`` is ``pgroup``'s, and ``serve.stop_group`` asks
    ``pgroup.group_alive`` whether anything of the server's group is left."""
    assert procs.group_members is pgroup.group_members
    asked: list[int] = []
    monkeypatch.setattr(serve, "group_alive", lambda pgid: asked.append(pgid) or False)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    serve.stop_group(proc, 5.0)
    assert proc.poll() is not None and asked and set(asked) == {proc.pid}
    assert not hasattr(serve, "_group_alive")
