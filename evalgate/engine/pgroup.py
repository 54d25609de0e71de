"""Process groups on Linux: which processes of a group still run, read from ``/proc`` (one scan for every caller:
``evaluate.procs``, which kills an engine worker's group, and ``engine.serve``, which stops ``vllm serve``'s)."""

from __future__ import annotations

import os


def group_members(pgid: int) -> list[int]:
    """The process ids of process group ``pgid`` still running (zombies, already dead, are left out), read from
    Linux's ``/proc``; empty where there is none (or no ``/proc``: see ``group_alive``)."""
    members = []
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue  # the process exited while we looked
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(pid))
    return members


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process of group ``pgid`` is left: ``group_members`` on Linux, else
    ``killpg(pgid, 0)`` (which also counts zombies, e.g. orphans a container's init does not reap)."""
    if os.path.isfile("/proc/self/stat"):
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
