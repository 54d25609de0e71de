"""Run one untrusted Python program (a model's code completion plus its tests) in a subprocess.

What confines the program, in order of how much it can be relied on:

* **Wall-clock timeout.** The child starts a new session (its own process group); when
  ``timeout_s`` passes, the whole group gets SIGKILL (``os.killpg``), and the group is killed
  again after every run, so children left behind by a finished program die too. Without a PID
  namespace (below), a program that deliberately calls ``setsid()`` leaves the group and escapes this.
* **resource limits** set in the program's process before it runs: RLIMIT_CPU (``timeout_s`` + 1 s),
  RLIMIT_AS (``memory_mb``), RLIMIT_FSIZE (``max_file_mb``; stdout/stderr count too: CPython
  ignores SIGXFSZ, so a write past it fails with EFBIG), RLIMIT_CORE = 0 and RLIMIT_NPROC
  (``max_processes``). Linux never enforces RLIMIT_NPROC for uid 0, and counts *every* process of
  the uid: so when evalgate runs as root (as in CI here) the program runs under a **fresh uid of
  its own** (random, in [2^28, 2^30), owning only the working directory). Then RLIMIT_NPROC bounds
  a fork bomb and counts only the program's processes, and the program can neither signal any of
  evalgate's (root's) processes nor write root's files. It keeps one capability,
  CAP_DAC_READ_SEARCH (read any file), because the interpreter's standard library may live where
  only root can read (here under /root/.pyenv); as root it could read those files anyway.
* **Empty working directory** from ``tempfile.mkdtemp``, deleted afterwards; the program text
  arrives on stdin, so the directory holds nothing of ours. The environment is rebuilt from
  scratch (PATH=/usr/bin:/bin, LANG=C.UTF-8, HOME=TMPDIR=the working directory,
  PYTHONHASHSEED=0 so set/dict order of strings is reproducible): nothing of the parent's
  environment (tokens, HOME) is passed on.
* **Interpreter flags** ``-s -S -P``: no user or site packages, nothing prepended to sys.path;
  only the standard library is importable. This is ``-I`` without ``-E``; ``-E`` is unneeded
  because the environment is ours, and it would drop the fixed PYTHONHASHSEED.
* **Namespaces, where the OS allows** (Linux, root or CAP_SYS_ADMIN): a new network namespace
  (no interface is up: every connection fails); a private mount namespace in which the whole
  file system is read-only except the working directory; and a new **PID namespace**: the
  program runs as PID 2 under a small init (PID 1, which mounts a fresh ``/proc``, so the program
  sees only its own processes). ``os.getppid()`` is that init, which signals from inside the
  namespace cannot kill; no process outside the namespace can be named at all; and when the
  program ends or the timeout kills the group, the kernel kills everything left in the namespace
  (forks, ``setsid()`` escapees). Then the program drops its capabilities (bounding set too; all
  of them, or all but CAP_DAC_READ_SEARCH under a fresh uid) and sets no_new_privs.
* **An intermediate process** always stands between evalgate and the program: the interpreter
  evalgate starts forks the program (or the namespace's init) and exits the way it did. Where no
  PID namespace is allowed (an unprivileged user), ``os.getppid()`` is that intermediate, so
  killing it ends the run as a failure but not evalgate.

``SandboxResult.isolation`` says which of ``"net"``, ``"fs"``, ``"pid"``, ``"proc"``, ``"uid"``,
``"caps"`` were in force for the run; as root on Linux all six are. Where ``unshare`` is refused
(an unprivileged user) the program can reach the network, write wherever the user can, and signal
the user's other processes (its grandparent included, found through ``/proc``): that is a guard
against accidents of generated code (infinite loops, memory blow-ups, stray files, runaway
output), not a security boundary. Not limited anywhere: total memory over all the program's
processes (RLIMIT_AS is per process: ``max_processes`` x ``memory_mb`` at most) and disk use inside
the working directory beyond ``max_file_mb`` per file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["SandboxResult", "run_python"]

# Fresh uids for sandboxed programs run by root: outside the usual ranges of system and login users.
_UID_LOW, _UID_HIGH = 1 << 28, 1 << 30

# Runs inside the child, before the program. Process tree (with a PID namespace):
#   P0 (our child, the host's view; its pid is the process group we kill)
#    └─ P1  PID 1 of a new PID namespace: mounts a fresh /proc, reaps, reports P2's status to P0
#        └─ P2  the program: fresh uid (when root), limits, capabilities dropped, then exec()
# Without a PID namespace P1 is the program itself, so its parent is P0 (an intermediate), not evalgate.
# P0 then dies the way the program did (same exit code or signal), so the caller sees the program's status.
_BOOTSTRAP = r"""
import os, sys, json, resource, signal
cfg = json.loads(sys.argv[1])
src = sys.stdin.read()
_fd = os.open(os.devnull, os.O_RDONLY); os.dup2(_fd, 0); os.close(_fd)
got = []
libc = None
mntns = False
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    class _MA(ctypes.Structure):
        _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64),
                    ("prop", ctypes.c_uint64), ("userns", ctypes.c_uint64)]
    def _setattr(path, flags, ma):
        return libc.syscall(442, -100, path, flags, ctypes.byref(ma), ctypes.sizeof(ma)) == 0
    if libc.unshare(0x40000000) == 0:  # CLONE_NEWNET
        got.append("net")
    work = os.getcwd().encode()
    # CLONE_NEWNS, then make every mount private *before* changing any (nothing propagates out).
    if libc.unshare(0x00020000) == 0 and libc.mount(b"none", b"/", None, 0x4000 | (1 << 18), None) == 0:
        mntns = True
        if libc.mount(work, work, None, 0x1000, None) == 0:  # MS_BIND the working dir onto itself
            if _setattr(b"/", 0x8000, _MA(1, 0, 0, 0)):  # AT_RECURSIVE, MOUNT_ATTR_RDONLY
                if _setattr(work, 0, _MA(0, 1, 0, 0)):
                    os.chdir(work)
                    got.append("fs")
                else:
                    _setattr(b"/", 0x8000, _MA(0, 1, 0, 0))
    if libc.unshare(0x20000000) == 0:  # CLONE_NEWPID: our next child is PID 1 of a new PID namespace
        got.append("pid")
except Exception:
    pass


def _die_like(status):
    # Exit the way a child with wait status ``status`` did: same exit code, or same signal.
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _program():
    # The program's own process: fresh uid, capabilities, limits, then exec(). Never returns.
    uid = cfg.get("uid")
    try:
        keep = 1 << 2 if uid is not None and os.geteuid() == 0 else 0  # CAP_DAC_READ_SEARCH, see the module doc
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
        for cap in range(last + 1):
            if not keep >> cap & 1:
                libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
        libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
        if keep:
            libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS: keep the permitted set across setuid
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            libc.prctl(8, 0, 0, 0, 0)
            got.append("uid")
        hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable (x2)
        if libc.capset(ctypes.byref(hdr), ctypes.byref(data)) == 0:
            got.append("caps")
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    except Exception:
        pass
    for name, value in cfg["limits"]:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass
    os.write(cfg["status_fd"], ",".join(got).encode()); os.close(cfg["status_fd"])
    sys.argv = ["<sandbox>"]
    exec(compile(src, "<sandbox>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    sys.exit(0)  # an exception above ends the process with a traceback and exit 1, as in plain python


report_r, report_w = os.pipe()
p1 = os.fork()
if p1 == 0:
    os.close(report_r)
    if "pid" not in got:
        os.close(report_w)
        _program()
    # PID 1 of the namespace. Signals from inside the namespace cannot kill it; when it exits, the kernel
    # kills every process left in the namespace (forks, daemons, setsid() escapees).
    if mntns and libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None) == 0:  # nosuid,nodev,noexec
        got.append("proc")  # the program sees only its own processes
    p2 = os.fork()
    if p2 == 0:
        os.close(report_w)
        _program()
    os.close(cfg["status_fd"])
    status = None
    while status is None:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            break
        if pid == p2:
            status = st
    if status is not None:
        os.write(report_w, str(status).encode())
    os._exit(0)
os.close(report_w)
os.close(cfg["status_fd"])
_, st = os.waitpid(p1, 0)
reported = os.read(report_r, 64)
_die_like(int(reported) if reported else st)
"""


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
        passed: True iff the program exited with status 0 before the wall timeout.
        returncode: exit status; negative = killed by that signal (e.g. -9 after a timeout).
        timed_out: the wall-clock timeout fired, or the CPU limit killed it (SIGXCPU).
        stdout_tail: the last ``tail_chars`` characters of stdout (UTF-8, errors replaced).
        stderr_tail: the same for stderr (a traceback ends up here).
        isolation: which OS isolation was in force: a subset of {"net", "fs", "pid", "proc", "uid",
            "caps"} (see the module doc).
    """

    passed: bool
    returncode: int
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    isolation: frozenset[str] = frozenset()


def _tail(path: str, chars: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4 * chars))
        return f.read().decode("utf-8", errors="replace")[-chars:]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_python(
    program: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    max_processes: int = 64,
    max_file_mb: int = 10,
    tail_chars: int = 2000,
) -> SandboxResult:
    """Run ``program`` (Python source text) in a fresh, limited interpreter; see the module doc.

    Args:
        program: the whole program; it is read from stdin by the child, never written to disk.
        timeout_s: wall-clock limit in seconds; the process group is SIGKILLed after it.
        memory_mb: address-space limit of each process, MiB (a 4 GB allocation fails).
        max_processes: RLIMIT_NPROC: processes (and threads) the program may have at once. As root it
            runs under a fresh uid, so this counts only its own processes; as another user it counts
            all of that user's processes (see the module doc).
        max_file_mb: largest file the program may write, MiB (stdout/stderr included).
        tail_chars: how many trailing characters of stdout/stderr to keep.

    Returns:
        A :class:`SandboxResult`. Never raises for anything the program does; raises
        ``OSError`` only if the parent cannot create temporary files or start the interpreter.
    """
    work = tempfile.mkdtemp(prefix="evalgate-sbx-")
    io_dir = tempfile.mkdtemp(prefix="evalgate-sbx-io-")
    status_r, status_w = os.pipe()
    proc = None
    try:
        src_path = os.path.join(io_dir, "program.py")
        with open(src_path, "w", encoding="utf-8") as f:
            f.write(program)
        cfg = {"status_fd": status_w, "uid": _fresh_uid(work),
               "limits": _limits(timeout_s, memory_mb, max_processes, max_file_mb)}
        out_path, err_path = os.path.join(io_dir, "stdout"), os.path.join(io_dir, "stderr")
        with open(src_path, "rb") as stdin, open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-s", "-S", "-P", "-c", _BOOTSTRAP, json.dumps(cfg)],
                stdin=stdin, stdout=out, stderr=err, cwd=work, env=_environment(work),
                pass_fds=(status_w,), start_new_session=True, close_fds=True,
            )
        os.close(status_w)
        status_w = -1
        timed_out = _wait_or_timeout(proc.pid, timeout_s)
        _kill_group(proc.pid)
        returncode = proc.wait()
        timed_out = timed_out or returncode == -signal.SIGXCPU
        return SandboxResult(
            passed=returncode == 0 and not timed_out,
            returncode=returncode,
            timed_out=timed_out,
            stdout_tail=_tail(out_path, tail_chars),
            stderr_tail=_tail(err_path, tail_chars),
            isolation=frozenset(x for x in os.read(status_r, 256).decode().split(",") if x),
        )
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc.pid)
            proc.wait()
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(io_dir, ignore_errors=True)


def _fresh_uid(work: str) -> int | None:
    """As root: a random uid in [2^28, 2^30) that then owns ``work`` (and nothing else), else None.

    RLIMIT_NPROC then applies (Linux never enforces it for uid 0) and counts only this program's
    processes, and the program can neither signal evalgate's processes nor write any of root's files.
    """
    if os.geteuid() != 0:
        return None
    uid = random.SystemRandom().randrange(_UID_LOW, _UID_HIGH)
    os.chown(work, uid, uid)
    return uid


def _limits(timeout_s: float, memory_mb: int, max_processes: int, max_file_mb: int) -> list[tuple[str, int]]:
    """The ``(resource.RLIMIT_* name, soft = hard value)`` pairs the child sets before the program runs."""
    return [
        ("RLIMIT_CPU", int(timeout_s) + 1),
        ("RLIMIT_AS", memory_mb * 1024 * 1024),
        ("RLIMIT_NPROC", max_processes),
        ("RLIMIT_FSIZE", max_file_mb * 1024 * 1024),
        ("RLIMIT_CORE", 0),
    ]


def _environment(work: str) -> dict[str, str]:
    """The child's whole environment: nothing of the parent's is passed on; fixed hash seed."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": work,
        "TMPDIR": work,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


def _wait_or_timeout(pid: int, timeout_s: float) -> bool:
    """Wait for ``pid`` to exit, at most ``timeout_s`` seconds; True if the time ran out.

    Waits without reaping (WNOWAIT): while the leader is a zombie its pid, which is the group id,
    cannot be reused, so the caller's ``killpg`` can only hit the sandbox's processes.
    """
    deadline = time.monotonic() + timeout_s
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.01)
    return False
