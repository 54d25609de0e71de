"""Progress bars (tqdm) for the slow steps, shown only when stderr is a terminal.

The engine runs in a worker process whose output goes to its log file, so the parent follows that log:
``engine_progress`` advances one step when the engine has started and one per finished suite (the worker's
``evalgate: engine started`` / ``evalgate: suite NAME done`` lines), and shows the engine's request queue
(vLLM's periodic ``Running: N reqs, Waiting: M reqs``) beside the bar, refreshed twice a second so the
elapsed time moves during long generations. In CI and pipes (stderr not a terminal) nothing is drawn; instead one
line per event goes to stderr, so a long run in a pipe still says where it is: the engine started (seconds), each
suite started, each suite done (items, seconds); and while nothing else is said (a suite of the embedded model's
full size runs for many minutes on a CPU), one line every ``HEARTBEAT_S`` seconds names the phase, how long it has
run and the engine's request queue, so a CI log shows the run is alive.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

_STARTED = re.compile(r"^evalgate: engine started")
_SUITE_DONE = re.compile(r"^evalgate: suite (\S+) done")
_STARTED_IN = re.compile(r"^evalgate: engine started in ([\d.]+) s")
_SUITE_START = re.compile(r"^evalgate: suite (\S+) started")
_SUITE_DONE_IN = re.compile(r"^evalgate: suite (\S+) done in ([\d.]+) s(?:, (\d+) items)?")
_QUEUE = re.compile(r"Running: (\d+) reqs, Waiting: (\d+) reqs")
POLL_S = 0.5
HEARTBEAT_S = 60.0  # a pipe's "still running" line after this many seconds without a progress line


def enabled(stream: IO[str] | None = None) -> bool:
    """True when progress bars should be drawn: the stream (default stderr) is an interactive terminal."""
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def bar(iterable: Any = None, **kwargs: Any) -> Any:
    """A tqdm bar on stderr that is silent (disabled) when stderr is not a terminal."""
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("disable", not enabled(kwargs["file"]))
    kwargs.setdefault("leave", True)
    # A pseudo-terminal without a size (`script`, some CI log capture) reads as (-1, -1) and tqdm then draws
    # nothing (no row left for the bar): fall back to 100x24.
    size = shutil.get_terminal_size((100, 24))
    kwargs.setdefault("ncols", size.columns)
    kwargs.setdefault("nrows", size.lines)
    return tqdm(iterable, **kwargs)


class LogFollower:
    """Reads the complete lines appended to a log file since the last call (handles truncation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Skip what a previous run left in the file; a new worker truncates it and we start over.
        self.offset = path.stat().st_size if path.exists() else 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        """Lines (split on newlines and carriage returns) written since the previous call."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self._partial = 0, b""
        if size == self.offset:
            return []
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(size - self.offset)
        self.offset += len(chunk)
        data = self._partial + chunk
        parts = re.split(rb"[\r\n]", data)
        self._partial = parts.pop()
        return [p.decode("utf-8", errors="replace") for p in parts if p.strip()]


@contextmanager
def engine_progress(log_path: Path, desc: str, suites: list[str]) -> Iterator[Any]:
    """A bar for one side of a run: engine start plus one step per suite, driven by the worker's log.

    Args:
        log_path: the worker's log (``evaluate_config``'s ``log_path``).
        desc: the bar's label, e.g. ``"candidate bf16"``.
        suites: the suites being evaluated (the bar's total is ``1 + len(suites)``).
    Yields:
        The tqdm bar (disabled when stderr is not a terminal). On normal exit it is completed: suites served
        from the store never start a worker.
    """
    pb = bar(total=1 + len(suites), desc=desc, unit="step",
             bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar}| {elapsed}{postfix}")
    if pb.disable:
        with _progress_lines(log_path, desc):
            try:
                yield pb
            finally:
                pb.close()
        return
    follower = LogFollower(log_path)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            for line in follower.new_lines():
                if _STARTED.search(line):
                    pb.update(1)
                    pb.set_postfix_str("engine started", refresh=False)
                elif m := _SUITE_DONE.search(line):
                    pb.update(1)
                    pb.set_postfix_str(f"{m.group(1)} done", refresh=False)
                elif m := _QUEUE.search(line):
                    pb.set_postfix_str(f"{m.group(1)} running, {m.group(2)} waiting", refresh=False)
            pb.refresh()

    thread = threading.Thread(target=poll, name="evalgate-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield pb
        ok = True
    finally:
        stop.set()
        thread.join()
        if ok:
            pb.update(pb.total - pb.n)
            pb.set_postfix_str("done")
        pb.close()


def progress_line(desc: str, line: str) -> str | None:
    """The one stderr line (without a newline) for a worker log ``line`` when stderr is not a terminal, or None.

    ``desc`` names the side, e.g. ``"baseline fp32"``. Worker lines and what they become::

        evalgate: engine started in 31.2 s; ...        -> evalgate: baseline fp32: engine started (31.2 s)
        evalgate: suite finance started (4 tasks)      -> evalgate: baseline fp32: suite finance started (4 tasks)
        evalgate: suite finance done in 40.1 s, 12 items (...)
                                                       -> evalgate: baseline fp32: suite finance done: 12 items, 40.1 s
    """
    if m := _STARTED_IN.search(line):
        return f"evalgate: {desc}: engine started ({m.group(1)} s)"
    if m := _SUITE_START.search(line):
        rest = line[m.end():].strip()
        return f"evalgate: {desc}: suite {m.group(1)} started" + (f" {rest}" if rest else "")
    if m := _SUITE_DONE_IN.search(line):
        items = f"{m.group(3)} items, " if m.group(3) is not None else ""
        return f"evalgate: {desc}: suite {m.group(1)} done: {items}{m.group(2)} s"
    return None


def _duration(seconds: float) -> str:
    """``42 s``, ``6 min 5 s``, ``1 h 2 min``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


class _Heartbeat:
    """What a pipe's "still running" line says: the phase the worker's log last announced, since when, and the
    engine's latest request queue (vLLM's ``Running: N reqs, Waiting: M reqs``)."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.phase, self.since, self.queue = "starting the engine", time.monotonic(), ""
        self.said = self.since  # when the last line was written

    def follow(self, line: str) -> None:
        if _STARTED_IN.search(line):
            self.phase, self.since = "engine started, no suite running yet", time.monotonic()
        elif m := _SUITE_START.search(line):
            self.phase, self.since, self.queue = f"suite {m.group(1)} running", time.monotonic(), ""
        elif m := _SUITE_DONE.search(line):
            self.phase, self.since, self.queue = f"suite {m.group(1)} done, the next step running", time.monotonic(), ""
        elif m := _QUEUE.search(line):
            self.queue = f"; engine queue: {m.group(1)} running, {m.group(2)} waiting"

    def due(self, now: float) -> str | None:
        """The line to write at ``now`` when ``HEARTBEAT_S`` have passed since the last one, else None."""
        if now - self.said < HEARTBEAT_S:
            return None
        return f"evalgate: {self.desc}: still working: {self.phase} ({_duration(now - self.since)}{self.queue})"


@contextmanager
def _progress_lines(log_path: Path, desc: str) -> Iterator[None]:
    """While the body runs, follow the worker's log and write ``progress_line``'s lines to stderr (read when each is
    written, so a captured or redirected stderr gets them), and a heartbeat line (``_Heartbeat``) after each
    ``HEARTBEAT_S`` seconds without one; the log is read once more at the end, so a suite that finished just before
    the worker exited is reported too."""
    follower = LogFollower(log_path)
    stop = threading.Event()
    beat = _Heartbeat(desc)

    def say(text: str) -> None:
        beat.said = time.monotonic()
        try:
            print(text, file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed: progress is not worth failing the run for
            pass

    def emit() -> None:
        for line in follower.new_lines():
            beat.follow(line)
            text = progress_line(desc, line)
            if text is not None:
                say(text)

    def poll() -> None:
        while not stop.wait(POLL_S):
            emit()
            text = beat.due(time.monotonic())
            if text is not None:
                say(text)

    thread = threading.Thread(target=poll, name="evalgate-progress-lines", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        emit()
