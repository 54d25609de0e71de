"""Blame a suite's own code for an error raised while lm-eval ran it in the worker, past the pre-flight.

The parent's pre-flight (``evaluate.preflight``) runs each task's code on item 0; code that raises on a later item
(``process_results`` meeting an answer it cannot parse, a loader's ``sys.exit()``) is only met in the worker. Such an
error is the suite's fault (bad input: exit 2, naming its file and function), not the engine's (exit 3), when the
traceback, read from where it was raised outwards, reaches a frame of the suite's own folder before any frame of
evalgate's package: the suite's code raised it, or a library it called did. An error raised in evalgate's own code
(the engine adapter, the sandbox) or only in lm-eval and vLLM is not blamed on the suite.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

# What a suite's code may raise and be blamed for: any exception, and ``SystemExit`` (its ``sys.exit()`` ends no
# worker); ``KeyboardInterrupt`` stays an interrupt. The same set as the pre-flight's ``TASK_CODE_ERRORS``.
SUITE_CODE_ERRORS = (Exception, SystemExit)
_EVALGATE = Path(__file__).resolve().parents[1]  # the evalgate package


def suite_fault(exc: BaseException, folder: Path, suite: str) -> dict[str, Any] | None:
    """The report blaming suite ``suite`` (its folder ``folder``) for ``exc``, or None when ``exc`` is not its code's.

    The exception and its causes (``__cause__``, then ``__context__``: lm-eval may re-raise) are read in turn; the
    first whose traceback, from the raise outwards, meets a frame in ``folder`` before one in evalgate's package is
    blamed on that frame (so an error raised while handling the suite's own error is the suite's too).

    Returns:
        ``{"path": file of that frame, "field": its function, "message": one line}`` (the parent turns it into a
        ``SuiteCodeError``, exit 2), or None.
    """
    folder = folder.resolve()
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        frame = _suite_frame(err, folder)
        if frame is not None:
            what = " ".join(_describe(err).split())[:300]
            return {"path": frame.filename, "field": frame.name,
                    "message": f"suite {suite}'s code raised in the engine worker: {what} (line {frame.lineno}); a "
                               "task's code must take every item and any output (the pre-flight tries item 0 with an "
                               "empty and the target output only); fix the suite or leave it out (suites already "
                               "finished stay stored, generations already made stay journaled)"}
        err = err.__cause__ or err.__context__
    return None


def _describe(err: BaseException) -> str:
    """``Type: message`` of ``err`` (the suite's own ``__str__`` may itself raise: then the type alone)."""
    if isinstance(err, SystemExit):
        return (f"SystemExit: sys.exit({err.code!r}) was called; a task's code must raise an exception, never end the "
                "process")
    try:
        text = str(err)
    except Exception:  # noqa: BLE001 - a broken __str__ of the suite's exception: name its type only
        text = ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _suite_frame(err: BaseException, folder: Path) -> traceback.FrameSummary | None:
    """The innermost frame of ``err``'s traceback in ``folder``, if no evalgate frame lies between it and the raise.
    Frames of generated code (``<string>``, ``<frozen ...>``, ``<template>``) name no file and are passed over."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename.startswith("<") or not Path(frame.filename).is_absolute():
            continue
        try:
            path = Path(frame.filename).resolve()
        except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop (Python 3.11)
            continue
        if path.is_relative_to(folder):
            return frame
        if path.is_relative_to(_EVALGATE):
            return None
    return None
