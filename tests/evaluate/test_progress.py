"""Progress bars: driven by the engine worker's log, drawn only on a terminal."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from evalgate.evaluate import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_follower_reads_only_new_complete_lines_and_survives_truncation(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("old run\n")
    f = progress.LogFollower(log)
    assert f.new_lines() == []
    with log.open("a") as fh:
        fh.write("a\rb 50%\npart")
    assert f.new_lines() == ["a", "b 50%"]
    with log.open("a") as fh:
        fh.write("ial\n")
    assert f.new_lines() == ["partial"]
    log.write_text("x\n")  # a new worker truncates the log
    assert f.new_lines() == ["x"]


def test_quiet_when_stderr_is_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with progress.engine_progress(tmp_path / "w.log", "candidate bf16", ["docparse"]) as pb:
        assert pb.disable
    assert capsys.readouterr().err == ""


def test_bar_follows_engine_start_and_suites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _Tty()
    monkeypatch.setattr(progress.sys, "stderr", tty)
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    log = tmp_path / "w.log"
    with progress.engine_progress(log, "candidate bf16", ["docparse", "finance"]) as pb:
        assert not pb.disable and pb.total == 3
        log.write_text("evalgate: engine started in 3.0 s; effective config: {}\n"
                       "INFO Engine 000: Running: 4 reqs, Waiting: 2 reqs\n"
                       "evalgate: suite docparse done in 9.0 s\n")
        deadline = time.monotonic() + 5
        while pb.n < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pb.n == 2
    assert pb.n == 3  # completed on exit (finance came from the store or finished last)
    out = tty.getvalue()
    assert "candidate bf16" in out and "3/3 steps" in out


def test_bar_draws_on_a_terminal_without_a_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pty with no window size (`script`, CI log capture) reads as (-1, -1); tqdm alone would draw nothing."""
    import tqdm.std

    tty = _Tty()
    monkeypatch.setattr(progress.sys, "stderr", tty)
    monkeypatch.setattr(tqdm.std, "_screen_shape_wrapper", lambda: (lambda fp: (-1, -1)))
    pb = progress.bar(total=2, desc="baseline", unit="step")
    pb.update(2)
    pb.close()
    assert "baseline: 100%" in tty.getvalue() and "2/2" in tty.getvalue()


def test_lines_per_suite_when_stderr_is_not_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """In a pipe (capsys: not a TTY) no bar is drawn, but the engine start and each suite's start and end (items,
    seconds) are one line each, read from the worker's log as the worker writes them."""
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    log = tmp_path / "w.log"
    with progress.engine_progress(log, "baseline fp32", ["docparse", "finance"]) as pb:
        assert pb.disable
        log.write_text("evalgate: engine started in 31.5 s; effective config: {}\n"
                       "evalgate: suite docparse started (2 tasks)\n"
                       "INFO Engine 000: Running: 4 reqs, Waiting: 2 reqs\n")
        seen = ""
        deadline = time.monotonic() + 5
        while "docparse started" not in seen and time.monotonic() < deadline:  # printed during the run
            time.sleep(0.02)
            seen += capsys.readouterr().err
        assert seen.splitlines() == ["evalgate: baseline fp32: engine started (31.5 s)",
                                     "evalgate: baseline fp32: suite docparse started (2 tasks)"]
        with log.open("a") as fh:
            fh.write("evalgate: suite docparse done in 40.2 s, 12 items (12 generated, 0 reused from the journal)\n"
                     "evalgate: suite finance started (4 tasks)\n"
                     "evalgate: suite finance done in 7.0 s, 20 items (20 generated, ...)\n")  # written as it exits
    assert capsys.readouterr().err.splitlines() == [
        "evalgate: baseline fp32: suite docparse done: 12 items, 40.2 s",
        "evalgate: baseline fp32: suite finance started (4 tasks)",
        "evalgate: baseline fp32: suite finance done: 20 items, 7.0 s",
    ]


def test_a_pipe_hears_a_heartbeat_while_a_suite_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Not a terminal, and a suite runs for minutes without a line of its own: every HEARTBEAT_S seconds one plain line
    names the phase, how long it has run and the engine's queue, so a CI log shows the run is alive."""
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.2)
    log = tmp_path / "w.log"
    with progress.engine_progress(log, "baseline fp32", ["docparse"]):
        log.write_text("evalgate: engine started in 31.5 s; effective config: {}\n"
                       "evalgate: suite docparse started (2 tasks)\n"
                       "INFO Engine 000: Running: 4 reqs, Waiting: 2 reqs\n")
        seen = ""
        deadline = time.monotonic() + 5
        while "still working" not in seen and time.monotonic() < deadline:
            time.sleep(0.02)
            seen += capsys.readouterr().err
    lines = seen.splitlines()
    assert lines[:2] == ["evalgate: baseline fp32: engine started (31.5 s)",
                         "evalgate: baseline fp32: suite docparse started (2 tasks)"]
    assert re.fullmatch(r"evalgate: baseline fp32: still working: suite docparse running \(\d+ s; engine queue: 4 "
                        r"running, 2 waiting\)", lines[2]), lines[2]
    assert "|" not in seen and "\r" not in seen  # plain lines, not a bar


def test_no_heartbeat_before_its_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "POLL_S", 0.01)
    with progress.engine_progress(tmp_path / "w.log", "candidate bf16", ["docparse"]):
        time.sleep(0.1)  # HEARTBEAT_S is a minute
    assert capsys.readouterr().err == ""
    assert [progress._duration(s) for s in (42, 365, 3720)] == ["42 s", "6 min 5 s", "1 h 2 min"]
