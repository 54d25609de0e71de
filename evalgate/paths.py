"""Output directories checked before any engine starts: a run directory (``--out``), evalgate's home and its store.

A directory evalgate will write into is refused up front (``ConfigError``, exit 2, naming the option or variable and
the path) when it cannot be written: it exists as a regular file, a component of its path is a file, a name is too
long, the file system refuses (permissions, read-only). Found later, the same fault would throw away an engine's
finished generations, or end as an ``internal error`` naming no field.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from evalgate.errors import ConfigError


def check_writable_dir(path: Path, *, field: str, what: str, keep: bool = False) -> None:
    """Refuse ``path`` as an output directory unless a file can be created in it.

    The check is real, not ``os.access`` (which says yes to root on a read-only tree and knows nothing of name
    lengths): the missing directories are created, a probe file is created and removed in the deepest one, and,
    unless ``keep``, the directories this call created are removed again, so that a refusal later in the load
    leaves nothing behind.

    Args:
        path: the directory (it need not exist yet).
        field: the option or variable named in the message, e.g. ``--out`` or ``EVALGATE_HOME``.
        what: what the directory is for, e.g. ``the run directory``.
        keep: leave the directories this call created in place.
    Raises:
        ConfigError (exit 2): ``path`` exists and is not a directory, or it cannot be created or written
            (the OS reason: ``File name too long``, ``Not a directory``, ``Permission denied``, ...).
    """
    try:
        if path.exists() and not path.is_dir():
            raise ConfigError(f"exists and is not a directory ({what})", path=path, field=field)
        created = _make_dirs(path)
        try:
            probe = path / f".evalgate-write-probe.{secrets.token_hex(6)}"
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            probe.unlink()
        finally:
            if not keep:
                for d in reversed(created):
                    try:
                        d.rmdir()
                    except OSError:  # someone else wrote into it meanwhile: keep it
                        break
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot write {what} here: {reason}", path=_short(path), field=field) from None


def _make_dirs(path: Path) -> list[Path]:
    """``mkdir -p path``; returns the directories created, outermost first (OSError when one cannot be)."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        if p.is_symlink():  # a dangling or looping link: mkdir would fail with a less clear reason
            raise OSError(40, "a broken or looping symbolic link", str(p))
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created: list[Path] = []
    for d in reversed(missing):
        d.mkdir()
        created.append(d)
    return created


def _short(path: Path, limit: int = 200) -> Path | str:
    """``path`` for a one-line message: itself, or for an over-long path its start and end only (a string)."""
    text = str(path)
    return path if len(text) <= limit else f"{text[:120]}...{text[-60:]} ({len(text)} characters)"
