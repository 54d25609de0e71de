"""evalgate.sandbox.run_python: pass/fail, timeouts, limits, working dir, env, isolation."""

from __future__ import annotations

import os
import socket
import time

import pytest

from evalgate.sandbox import run_python

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
    r = run_python("open('big.bin', 'wb').write(b'0' * (3 * 1024 * 1024))\n", max_file_mb=1)
    assert r.passed is False
    assert r.returncode != 0


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
    assert r.isolation == frozenset({"net", "fs", "caps"})


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_bounded_fork_loop_is_contained() -> None:
    # At most 20 forks, each child sleeping: harmless even where RLIMIT_NPROC does not apply.
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
        "print(len(pids), ' '.join(map(str, pids)), flush=True)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    r = run_python(program, timeout_s=2.0, max_processes=5)
    assert r.timed_out is True
    assert time.monotonic() - start < 6.0
    count, *pids = r.stdout_tail.split()
    if IS_ROOT:
        assert int(count) == 20  # Linux never applies RLIMIT_NPROC to uid 0 (documented)
    else:
        assert int(count) < 20  # the limit stopped the loop
    deadline = time.monotonic() + 3.0
    while any(_alive(int(p)) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(int(p))], "children must die with the process group"
