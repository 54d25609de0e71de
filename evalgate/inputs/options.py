"""How a gate run is run: one typed model of the run options. Its field defaults are the command line's defaults
(``cli`` reads them from here), so each default is written once.

``RunOptions.check`` refuses values the argparse types let through with the same one-line errors (dotted field =
the option) and exit code 2 as every other bad input.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalgate.errors import ConfigError
from evalgate.inputs.thresholds import MAX_TRAFFIC_REPEATS, concurrency_problem


class RunOptions(BaseModel):
    """Options of ``evalgate run`` / ``ablate`` / the benchmarks that change how (not what) both sides are evaluated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int | None = Field(None, description="items per task (default: all)")
    logprob_items: int = Field(
        8, description="items per task scored for the logit divergence (teacher forcing; costly on CPU; 0 = off)")
    # Teacher forcing costs a full-vocabulary log-softmax at every prompt position (measured: ~30 prompt tokens/s for
    # Gemma's 262k vocabulary on a loaded 2-core CPU), so the evidence comes from the first items of each task.
    timeout: float = Field(3 * 3600, description="seconds per engine run (default 3 h)")
    speed: bool = Field(False, description="measure throughput after the suites (default when thresholds has a "
                                           "traffic: section)")
    no_speed: bool = Field(False, description="do not measure throughput, whatever thresholds say")
    speed_only: bool = Field(False, description=(
        "measure throughput only: no quality suite runs, the verdict is never PASS (INCONCLUSIVE: quality not "
        "measured, or BLOCK from the speed thresholds); the one way to gate a load_format: dummy config"))
    concurrency: list[int] | None = Field(
        None, description="requests in flight, one level or a sweep of up to 16 distinct ones, e.g. 1,16,256 (implies "
                                 "--speed; checked as traffic.concurrency)")
    repeats: int | None = Field(None, description="timed passes per side and level (default 3, at most 100; >= 2 for an interval)")
    precision: float | None = Field(None, description=(
        "target half-width of the speed-up's 95 percent interval as a share of it, 0 < P < 1 (0.02 = +-2 percent): "
        "--repeats pairs, then the pairs Stein's two-stage rule asks for (implies --speed; as traffic.precision)"))
    max_repeats: int | None = Field(None, description="with --precision: interleaved pairs in all at most (default "
                                                      "max(10, repeats), at most 100)")
    max_seconds: float | None = Field(None, description="with --precision: wall-clock budget of the speed phase, "
                                                        "seconds (default: none)")
    placement: str | None = Field(
        None, description="where the two engines live on one GPU: auto, together or alternate (sleep mode, one awake "
                          "at a time; CUDA only); overrides the candidate config's placement")

    @classmethod
    def from_args(cls, args: Any) -> RunOptions:
        """The options an argparse namespace holds (attributes it lacks keep their defaults), checked.

        Raises:
            ConfigError: a value out of range (see ``check``).
        """
        opts = cls(**{k: getattr(args, k) for k in cls.model_fields if hasattr(args, k)})
        opts.check()
        return opts

    def check(self) -> None:
        """Refuse values out of range, naming the option as the field (exit 2).

        Raises:
            ConfigError: ``--limit`` < 1, ``--logprob-items`` < 0, ``--concurrency`` not 1 to 16 distinct
                integers >= 1 (``thresholds.concurrency_problem``), ``--repeats`` outside 1..100, ``--precision``
                outside (0, 1), ``--max-repeats`` outside 2..100, ``--max-seconds`` not a finite number > 0,
                ``--no-speed`` with a speed option, ``--speed-only`` with ``--no-speed``, ``--timeout`` not a finite
                number > 0.
        """
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"must be >= 1, got {self.limit}", field="--limit")
        if self.logprob_items < 0:
            raise ConfigError(f"must be >= 0, got {self.logprob_items}", field="--logprob-items")
        if self.concurrency is not None and (problem := concurrency_problem(self.concurrency, from_log=False)):
            raise ConfigError(problem, field="--concurrency")  # the traffic.concurrency check: one validator
        if self.repeats is not None and self.repeats < 1:
            raise ConfigError(f"must be >= 1, got {self.repeats}", field="--repeats")
        if self.repeats is not None and self.repeats > MAX_TRAFFIC_REPEATS:  # as traffic.repeats in thresholds.yaml
            raise ConfigError(f"must be <= {MAX_TRAFFIC_REPEATS}, got {self.repeats}", field="--repeats")
        if self.precision is not None and not (0 < self.precision < 1):  # as traffic.precision; also rejects nan
            raise ConfigError(f"must be a number with 0 < precision < 1 (0.02 = \u00b12 %), got {self.precision}",
                              field="--precision")
        if self.max_repeats is not None and not (2 <= self.max_repeats <= MAX_TRAFFIC_REPEATS):
            raise ConfigError(f"must be an integer with 2 <= max_repeats <= {MAX_TRAFFIC_REPEATS}, got "
                              f"{self.max_repeats}", field="--max-repeats")
        if self.max_seconds is not None and not (0 < self.max_seconds < math.inf):
            raise ConfigError(f"must be a finite number of seconds > 0, got {self.max_seconds}", field="--max-seconds")
        if self.no_speed and self.wants_speed:
            raise ConfigError("--no-speed contradicts --speed / --concurrency / --repeats / --precision / "
                              "--max-repeats / --max-seconds", field="--no-speed")
        if self.speed_only and self.no_speed:
            raise ConfigError("--speed-only measures nothing but speed; it contradicts --no-speed", field="--speed-only")
        if not (0 < self.timeout < math.inf):  # also rejects nan
            raise ConfigError(f"must be a number of seconds > 0, got {self.timeout}", field="--timeout")

    @property
    def wants_speed(self) -> bool:
        """Whether the command line asks for a speed measurement (``--speed``, ``--concurrency``, ``--repeats``,
        ``--precision``, ``--max-repeats``, ``--max-seconds``)."""
        return (self.speed or bool(self.concurrency) or self.repeats is not None or self.precision is not None
                or self.max_repeats is not None or self.max_seconds is not None)


def default(name: str) -> Any:
    """The default of run option ``name`` (for argparse)."""
    return RunOptions.model_fields[name].default


def describe(name: str) -> str:
    """The help text of run option ``name`` (for argparse)."""
    return RunOptions.model_fields[name].description or ""


LOGPROB_ITEMS: int = default("logprob_items")
