"""The one error hierarchy of evalgate and the exit codes the CLI maps it to.

Only ``evalgate.cli.main`` catches these; it prints ``str(error)`` as one line on stderr and
exits with ``error.exit_code``. An error is never a pass: every code here is non-zero.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes. CI tells a regression (1) from a broken run (2, 3), a no-op (4) and a run
    too small to decide (5; only with ``on_inconclusive: warn``, else it is reported as 1)."""

    PASS = 0
    BLOCK = 1
    USAGE = 2  # bad command line, config, thresholds or suite
    RUNTIME = 3  # engine failed, store corrupt, internal error
    NO_OP = 4  # the candidate's effective engine config equals the baseline's
    INCONCLUSIVE = 5  # too few items to decide (MDE > margin), or undecided; thresholds say "warn"
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # stdout closed early (``evalgate list | head -1``): 128 + SIGPIPE, as the shell reports it


class EvalgateError(Exception):
    """Base class. ``str(err)`` is a one-line message that names the file and field when known."""

    exit_code: ExitCode = ExitCode.RUNTIME


class ConfigError(EvalgateError):
    """A config, thresholds file, suite or command-line value is invalid (exit 2)."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, path: object = None, field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}"
            if field:
                where += f": {field}"
            where += ": "
        elif field:
            where = f"{field}: "
        super().__init__(f"{where}{message}")
        self.message = message  # without the file and field
        self.path = path
        self.field = field


class SuiteCodeError(ConfigError):
    """A suite's own code raised on an item in the engine worker, after engines started (exit 2, naming the suite's
    file and function: ``worker.suite_fault``). ``ablate`` counts it as its variant's failure, not as a value vLLM
    refused."""


class EngineError(EvalgateError):
    """The engine failed to start, crashed, ran out of memory or timed out (exit 3).

    ``died``: the engine's worker process itself ended (its exit code or signal was read: a crash, an OOM kill), as
    opposed to an error it reported while alive; ``timed_out``: the run's ``--timeout`` ran out (the worker was
    killed for it). The speed phase restarts a side only for a worker that died."""

    exit_code = ExitCode.RUNTIME

    def __init__(self, message: str, *, died: bool = False, timed_out: bool = False) -> None:
        super().__init__(message)
        self.died, self.timed_out = died, timed_out


class StoreError(EvalgateError):
    """A stored result is missing, partial or corrupt (exit 3)."""

    exit_code = ExitCode.RUNTIME


class ModelError(EvalgateError):
    """The embedded model cannot be prepared (package missing, disk full) (exit 3)."""

    exit_code = ExitCode.RUNTIME
