"""evalgate.suites.sandbox.run_python: pass/fail, timeouts, limits, working dir, env, isolation."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evalgate.suites.sandbox import SandboxResult, run_python
from evalgate.suites.taskcode import load_module

IS_ROOT = os.geteuid() == 0


def test_correct_program_passes() -> None:
    r = run_python("import json, math, collections, re, hashlib\nassert math.isqrt(17) == 4\nprint('ok')")
    assert r.passed is True
    assert r.returncode == 0
    assert r.timed_out is False
    assert r.stdout_tail == "ok\n"
    assert r.stderr_tail == ""


def test_failing_assert_fails_with_traceback() -> None:
    r = run_python("def f():\n    return 1\nassert f() == 2, 'wrong'\n")
    assert r.passed is False
    assert r.returncode == 1
    assert r.timed_out is False
    assert "AssertionError: wrong" in r.stderr_tail


def test_syntax_error_fails() -> None:
    r = run_python("def broken(:\n")
    assert r.passed is False
    assert "SyntaxError" in r.stderr_tail


def test_infinite_loop_times_out_quickly() -> None:
    start = time.monotonic()
    r = run_python("while True:\n    pass\n", timeout_s=1.5)
    elapsed = time.monotonic() - start
    assert r.passed is False
    assert r.timed_out is True
    assert r.returncode == -9
    assert elapsed < 5.0


def test_sleeping_program_times_out_on_wall_clock() -> None:
    start = time.monotonic()
    r = run_python("import time\nprint('started', flush=True)\ntime.sleep(60)\n", timeout_s=1.0)
    assert r.timed_out is True
    assert r.passed is False
    assert r.stdout_tail == "started\n"
    assert time.monotonic() - start < 5.0


def test_memory_hog_fails() -> None:
    r = run_python("x = bytearray(4 * 1024 ** 3)\nprint(len(x))\n", memory_mb=512)
    assert r.passed is False
    assert r.timed_out is False
    assert "MemoryError" in r.stderr_tail
    assert r.stdout_tail == ""


def test_cwd_is_empty_temp_dir_and_env_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_SECRET_TOKEN", "hunter2")
    program = (
        "import os\n"
        "cwd = os.getcwd()\n"
        "print(cwd)\n"
        "print(sorted(os.listdir('.')))\n"
        "print('EVALGATE_SECRET_TOKEN' in os.environ, os.environ['PATH'], os.environ['HOME'] == cwd)\n"
        "open('scratch.txt', 'w').write('x')\n"
    )
    r = run_python(program)
    assert r.passed is True, r.stderr_tail
    cwd, listing, env_line = r.stdout_tail.splitlines()
    assert os.path.basename(cwd).startswith("evalgate-sbx-")
    assert listing == "[]"
    assert env_line == "False /usr/bin:/bin True"
    assert not os.path.exists(cwd), "the working directory must be deleted afterwards"


def test_write_outside_temp_dir(tmp_path) -> None:
    target = tmp_path / "escape.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('escaped')\n")
    if "fs" not in r.isolation:
        pytest.skip("no mount namespace here (not root): writes outside the temp dir are not blocked")
    assert r.passed is False
    assert "Read-only file system" in r.stderr_tail
    assert not target.exists()


def test_output_is_truncated_to_tail() -> None:
    r = run_python("for i in range(100000):\n    print(i)\n", tail_chars=100)
    assert r.passed is True
    assert len(r.stdout_tail) == 100
    assert r.stdout_tail.endswith("99998\n99999\n")


def test_file_size_limit() -> None:
    """RLIMIT_FSIZE at 1 MiB: a 3 MiB write fails with EFBIG (Python ignores SIGXFSZ, so the write raises and the
    program exits 1); a 512 KiB write under the same limit succeeds."""
    r = run_python("open('big.bin', 'wb').write(b'0' * (3 * 1024 * 1024))\n", max_file_mb=1)
    assert (r.passed, r.returncode, r.timed_out) == (False, 1, False)
    assert r.stderr_tail.endswith("OSError: [Errno 27] File too large\n")
    small = run_python("open('big.bin', 'wb').write(b'0' * (512 * 1024))\nprint('ok')\n", max_file_mb=1)
    assert (small.passed, small.returncode, small.stdout_tail) == (True, 0, "ok\n")


def test_network_is_unreachable_where_isolated() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n")
    finally:
        server.close()
    if "net" not in r.isolation:
        pytest.skip("no network namespace here (not root): the network is not isolated")
    assert r.passed is False
    assert "OSError" in r.stderr_tail or "unreachable" in r.stderr_tail.lower()


def test_isolation_in_force_as_root() -> None:
    r = run_python("pass\n")
    if not IS_ROOT:
        pytest.skip("namespaces need root")
    assert r.isolation == frozenset({"net", "fs", "pid", "proc", "uid", "caps"})


def _state(pid: str) -> str | None:
    """The state letter of a host process (R, S, Z, ...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _alive(pid: int) -> bool:
    return _state(str(pid)) not in (None, "Z")


def _live_processes_of_uid(uid: int) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                real_uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        if int(real_uid) == uid and _state(entry) not in (None, "Z"):
            found.append(entry)
    return found


def _wait_until_gone(check, seconds: float = 5.0) -> list:
    deadline = time.monotonic() + seconds
    left = check()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = check()
    return left


def test_bounded_fork_loop_is_contained() -> None:
    # At most 20 forks, each child sleeping: harmless even where RLIMIT_NPROC would not apply.
    program = (
        "import os, time\n"
        "pids = []\n"
        "for _ in range(20):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "print(os.getuid(), len(pids), ' '.join(map(str, pids)), flush=True)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    r = run_python(program, timeout_s=2.0, max_processes=5)
    assert r.timed_out is True
    assert time.monotonic() - start < 6.0
    uid, count, *pids = r.stdout_tail.split()
    assert int(count) < 20, "RLIMIT_NPROC stopped the loop (as root: the sandbox runs it under a fresh uid)"
    if "uid" in r.isolation:  # pids printed are the PID namespace's: look for the fresh uid's processes instead
        assert not _wait_until_gone(lambda: _live_processes_of_uid(int(uid))), "children must die with the sandbox"
    else:
        assert not _wait_until_gone(lambda: [p for p in pids if _alive(int(p))]), "children must die with the group"


# ---------------------------------------------------------------------------------- hostile programs
# Each runs twice: alone through run_python (with what must hold of the result and of the world
# afterwards), and as the first lines of an otherwise *correct* HumanEval completion through the coding
# suite's process_results, which must score it 0 — so the item can only pass if the hostile action goes
# unnoticed. This test process surviving is itself checked by every case (kill-parent, kill-everything).


@dataclass(frozen=True)
class Hostile:
    """A hostile program.

    Attributes:
        name: test id.
        code: its source (module level), from ``ctx``: ``target`` (a file outside the sandbox),
            ``port``/``server`` (a socket this test listens on).
        result: asserts on the SandboxResult (besides ``passed is False``).
        world: asserts on ``ctx`` afterwards (the file is intact, nothing connected).
        needs: isolation it needs to be contained at all (otherwise skipped, with the reason).
        limits: run_python keyword arguments.
    """

    name: str
    code: Callable[[dict], str]
    result: Callable[[SandboxResult], None] = lambda r: None
    world: Callable[[dict], None] = lambda ctx: None
    needs: frozenset[str] = frozenset()
    limits: dict = field(default_factory=dict)

    @property
    def timeout_s(self) -> float:
        return self.limits.get("timeout_s", 10.0)


def _timed_out(r: SandboxResult) -> None:
    assert r.timed_out, r


def _memory_error(r: SandboxResult) -> None:
    assert "MemoryError" in r.stderr_tail and not r.timed_out, r


def _file_size_limit(r: SandboxResult) -> None:
    # CPython ignores SIGXFSZ, so the write past RLIMIT_FSIZE fails with EFBIG instead of killing it.
    assert r.returncode == -signal.SIGXFSZ or "File too large" in r.stderr_tail, r


def _fork_bomb_left_nothing(r: SandboxResult) -> None:
    # It ends either at the wall clock or when the program's own fork hits RLIMIT_NPROC (uncaught
    # BlockingIOError); in both cases nothing of it may be left running.
    if "uid" in r.isolation:
        uid = int(r.stdout_tail.split()[0])
        assert not _wait_until_gone(lambda: _live_processes_of_uid(uid)), "processes outlived the sandbox"


def _target_intact(ctx: dict) -> None:
    assert ctx["target"].read_text() == "keep me"


def _nothing_connected(ctx: dict) -> None:
    ctx["server"].settimeout(0)
    with pytest.raises((BlockingIOError, socket.timeout)):
        ctx["server"].accept()


HOSTILE = [
    Hostile("infinite-loop", lambda ctx: "while True:\n    pass\n", _timed_out, limits={"timeout_s": 1.5}),
    # Run only where RLIMIT_NPROC binds (as root: under the sandbox's fresh uid; see _preflight).
    Hostile("fork-bomb", lambda ctx: "import os\nprint(os.getuid(), flush=True)\nwhile True:\n    os.fork()\n",
            _fork_bomb_left_nothing, limits={"timeout_s": 2.0, "max_processes": 16}),
    Hostile("memory-hog", lambda ctx: "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 ** 2))\n",
            _memory_error, limits={"memory_mb": 256}),
    Hostile("delete-outside", lambda ctx: f"import os\nos.remove({str(ctx['target'])!r})\n", world=_target_intact),
    Hostile("wipe-outside-dir", lambda ctx: f"import shutil\nshutil.rmtree({str(ctx['target'].parent)!r})\n",
            world=_target_intact),
    Hostile("connect-socket", lambda ctx: f"import socket\nsocket.create_connection(('127.0.0.1', {ctx['port']}), "
                                          "timeout=2).sendall(b'leak')\n",
            world=_nothing_connected, needs=frozenset({"net"})),
    Hostile("kill-parent", lambda ctx: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"),
    # kill(-1) signals every process the caller may signal: only sane inside a PID namespace under a fresh uid.
    Hostile("kill-everything", lambda ctx: "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
            needs=frozenset({"pid", "uid"})),
    Hostile("huge-file", lambda ctx: "f = open('big.bin', 'wb')\nwhile True:\n    f.write(b'0' * 2 ** 20)\n",
            _file_size_limit, limits={"max_file_mb": 2}),
    Hostile("huge-stdout", lambda ctx: "import sys\nwhile True:\n    sys.stdout.write('x' * 2 ** 20)\n",
            _file_size_limit, limits={"max_file_mb": 2}),
]


def _preflight(h: Hostile) -> None:
    isolation = run_python("pass\n").isolation
    if not h.needs <= isolation:
        pytest.skip(f"{h.name}: needs {sorted(h.needs - isolation)} isolation (root on Linux), not available here")
    if h.name == "fork-bomb" and IS_ROOT and "uid" not in isolation:
        pytest.skip("fork-bomb: as root without a fresh uid RLIMIT_NPROC does not bind (an unbounded bomb)")


@pytest.fixture
def ctx(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious.txt"
    target.write_text("keep me")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    yield {"target": target, "port": server.getsockname()[1], "server": server}
    server.close()


@pytest.mark.parametrize("h", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained(h: Hostile, ctx: dict) -> None:
    _preflight(h)
    start = time.monotonic()
    r = run_python(h.code(ctx), **h.limits)
    assert r.passed is False, r
    assert time.monotonic() - start < h.timeout_s + 5
    h.result(r)
    h.world(ctx)


@pytest.fixture(scope="module")
def coding():
    module = load_module(Path(__file__).resolve().parents[2] / "suites" / "coding" / "utils.py")
    return module, module.read_problems()[0]  # HumanEval/0, has_close_elements


def test_canonical_solution_passes_through_process_results(coding) -> None:
    module, doc = coding
    assert module.process_results(doc, [doc["canonical_solution"]]) == {"pass_at_1": 1.0}


@pytest.mark.parametrize("h", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_completion_is_contained_and_scored_a_failure(h: Hostile, ctx: dict, coding,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    module, doc = coding
    _preflight(h)
    # The suite's own settings, except: a shorter wall clock, and the heavy cases as small as above.
    monkeypatch.setattr(module, "TIMEOUT_S", min(module.TIMEOUT_S, h.timeout_s))
    from evalgate.suites import scoring  # the suite's scorer runs its programs through scoring's pool

    real = scoring.run_python
    monkeypatch.setattr(scoring, "run_python", lambda program, **kw: real(program, **{
        **kw, **{k: v for k, v in h.limits.items() if k != "timeout_s"}}))
    completion = "".join(f"    {line}\n" for line in h.code(ctx).splitlines()) + doc["canonical_solution"]
    assert module.process_results(doc, [completion]) == {"pass_at_1": 0.0}
    h.world(ctx)
