"""``thresholds.yaml``: margins, levels, power, how to treat each outcome, speed and speculative-decoding floors.

The file's schema is :class:`ThresholdsFile` (version :data:`~evalgate.inputs.schema.SCHEMA_VERSION`): every key, its type,
its default and its meaning are the models' fields and docstrings below, from which the docs' key table
(docs/reference/thresholds.md) is generated. Margins are in points (percentage points of a task's primary metric);
``alpha`` is one-sided.

Precedence for a task's margin and alpha, lowest to highest (the most specific entry wins)::

    default (and the top-level alpha)
    < configs.<config>            (replaces the default for every task of that config)
    < suites.<suite> < tasks.<task>
    < configs.<config>.suites.<suite> < configs.<config>.tasks.<task>

``min_identical_share``: ``configs.<config>`` > ``lossless``; ``near_tie_logprob`` and ``max_kl_mean`` are set under
``lossless`` only. Acceptance floors: ``configs.<config>`` > ``spec_decode``; speed floors: ``configs.<config>`` >
``speed``; traffic: ``configs.<config>.traffic`` over ``traffic``, key by key; economics: ``configs.<config>.economics``
over ``economics``, key by key (report only: it never changes a verdict). Every problem raises
``ConfigError(message, path=file, field=dotted.field)`` with a one-line message; nothing is silently defaulted or
ignored (unknown and duplicate keys are errors; ``check_names`` rejects names that match no suite, task or config).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from evalgate.errors import ConfigError
from evalgate.inputs.requestlog import FROM_LOG
from evalgate.inputs.schema import SCHEMA_VERSION, Schema, choice, problem, rule, show, suggest, validate
from evalgate.inputs.yamlio import Wording, read_mapping

__all__ = ["ConfigPolicy", "EconomicsSection", "concurrency_problem", "LevelOverride", "ReplaySection", "SpecDecodeFloors", "SpeedFloors", "TaskThreshold", "Thresholds", "ThresholdsFile",
           "load_thresholds"]

MAX_MARGIN = 100.0  # points: a margin above the whole scale gates nothing
MAX_CONCURRENCY_LEVELS = 16
WORDING = Wording("thresholds", duplicate="invalid YAML at line {line}, column {column}: duplicate key {key!r}",
                  empty="file is empty: expected keys alpha and default.margin",
                  not_utf8="not valid UTF-8: byte 0x{byte:02x} at line {line} (offset {offset})")

# ------------------------------------------------------------------------------------------ value types


def _number(message: str, **constraints: float) -> Any:
    return Annotated[float, Field(strict=True, allow_inf_nan=False, **constraints), rule(message)]


def _integer(minimum: int, maximum: int | None = None) -> Any:
    if maximum is None:
        return Annotated[int, Field(strict=True, ge=minimum), rule(f"{{field}} must be an integer >= {minimum}")]
    return Annotated[int, Field(strict=True, ge=minimum, le=maximum),
                     rule(f"{{field}} must be an integer with {minimum} <= {{field}} <= {maximum:_}")]


# Traffic-profile bounds. Requests per repeat and level: the CPU profile sends 192, the GPU one 256; 100,000 of
# 512 tokens is most of an hour per repeat and side on an H200, and 10^12 would only end at --timeout, after the
# suites' engines ran. Repeats per side: 100 is where ``speed.repeats_needed`` stops counting ("more than 100").
MAX_TRAFFIC_PROMPTS = 100_000
MAX_TRAFFIC_REPEATS = 100

# Bootstrap resamples per task: each is one mean over the task's items, all held at once (8 bytes each), so 10^13
# would fail allocating 80 TB after both engines ran; 10^6 is 100x the default and takes seconds per task.
MAX_BOOTSTRAP_RESAMPLES = 1_000_000


def concurrency_problem(value: Any, *, from_log: bool = True) -> str | None:
    """The one check of a concurrency level or sweep, wherever it is written (``traffic.concurrency``,
    ``configs.<config>.traffic.concurrency``, ``--concurrency`` through ``options.RunOptions.check``): one integer
    >= 1 or a list of 1 to ``MAX_CONCURRENCY_LEVELS`` distinct ones; with ``from_log`` (the YAML keys) also
    ``from-log`` (``requestlog.FROM_LOG``). Returns the problem in words (``must be ..., got ...``), None when
    valid."""
    if from_log and value == FROM_LOG:
        return None
    alt = f" or {FROM_LOG}" if from_log else ""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or len(values) > MAX_CONCURRENCY_LEVELS:
        return (f"must be an integer >= 1 or a list of 1 to {MAX_CONCURRENCY_LEVELS} distinct ones{alt}, got "
                f"{show(value) if values else 'an empty list'}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            return f"must be distinct integers >= 1{alt}, got {show(v)}"
    if len(set(values)) != len(values):
        return f"must be distinct integers >= 1: repeats a level: {values}"
    return None


def _concurrency(value: Any) -> tuple[int, ...] | str:
    """``traffic.concurrency`` (``concurrency_problem``) as a tuple of levels, or ``from-log``."""
    message = concurrency_problem(value)
    if message is not None:
        raise problem(message)
    return value if value == FROM_LOG else tuple(value if isinstance(value, list) else [value])


Margin = Annotated[float, Field(strict=True, ge=0, le=MAX_MARGIN, allow_inf_nan=False),
                   rule("margin must be a finite number >= 0 (points)",
                        less_than_equal=f"margin must be <= {MAX_MARGIN:g} points")]
Alpha = _number("alpha must be a number with 0 < alpha < 0.5", gt=0, lt=0.5)
Share = _number("must be a number with 0 <= share <= 1", ge=0, le=1)
Nats = _number("must be a finite number of nats >= 0", ge=0)
AcceptanceLength = _number("must be a finite number >= 1 (tokens per target step)", ge=1)
Speedup = _number("must be a finite ratio > 0 (candidate / baseline throughput)", gt=0)
Slowdown = _number("must be a fraction with 0 <= max_slowdown < 1 (0.05 = 5 % slower)", ge=0, lt=1)
Millis = _number("must be a finite number of milliseconds > 0", gt=0)
Price = _number("must be a finite number > 0 (US dollars)", gt=0)
Name = Annotated[str, Field(strict=True, min_length=1), rule("keys must be non-empty strings")]
_Empty = BeforeValidator(lambda v: {} if v is None else v)  # a section written with no keys: its defaults
_Frozen = AfterValidator(lambda v: MappingProxyType(dict(v)))
_NONE = Field(default_factory=lambda: MappingProxyType({}))  # an empty, read-only mapping of entries


# ------------------------------------------------------------------------------------------ sections


class SpecDecodeFloors(Schema):
    """``spec_decode``: speculative-decoding floors for one candidate (BLOCK when missed); unset = no floor."""

    min_acceptance_rate: Share = None  # type: ignore[assignment]
    """Accepted / draft tokens, 0..1."""
    min_mean_acceptance_length: AcceptanceLength = None  # type: ignore[assignment]
    """1 + accepted / drafts: tokens per target step, >= 1."""

    def __init__(self, min_acceptance_rate: float | None = None, min_mean_acceptance_length: float | None = None,
                 **data: Any) -> None:
        given = {"min_acceptance_rate": min_acceptance_rate, "min_mean_acceptance_length": min_mean_acceptance_length}
        super().__init__(**{k: v for k, v in given.items() if v is not None}, **data)

    @property
    def any(self) -> bool:
        """Whether some floor is set."""
        return self.min_acceptance_rate is not None or self.min_mean_acceptance_length is not None


class LatencySlos(Schema):
    """Latency service-level objectives (serve mode, ``traffic.mode: serve``): ceilings in ms on the candidate's
    latency percentiles at every measured concurrency level, each the median over the level's repeats of one
    ``vllm bench serve`` pass's percentile; a ceiling missed BLOCKs. The largest TTFT and TPOT ceilings set (p99
    over p50) are also the per-request objectives of ``vllm bench serve --goodput``: goodput is the requests per
    second that meet them. Unset = no objective."""

    max_ttft_p50_ms: Millis = None  # type: ignore[assignment]
    """Median time to first token, ms."""
    max_ttft_p99_ms: Millis = None  # type: ignore[assignment]
    """99th-percentile time to first token, ms."""
    max_tpot_p50_ms: Millis = None  # type: ignore[assignment]
    """Median time per output token (after the first), ms."""
    max_tpot_p99_ms: Millis = None  # type: ignore[assignment]
    """99th-percentile time per output token (after the first), ms."""
    max_itl_p50_ms: Millis = None  # type: ignore[assignment]
    """Median inter-token latency, ms."""
    max_itl_p99_ms: Millis = None  # type: ignore[assignment]
    """99th-percentile inter-token latency, ms."""

    def goodput(self) -> dict[str, float]:
        """The per-request objectives of ``vllm bench serve --goodput`` (vLLM's keys ``ttft`` / ``tpot``, ms): each
        metric's p99 ceiling, else its p50 one; ``{}`` when neither TTFT nor TPOT has a ceiling (ITL has no
        per-request form in vLLM's goodput)."""
        out = {}
        for metric in ("ttft", "tpot"):
            value = getattr(self, f"max_{metric}_p99_ms")
            value = value if value is not None else getattr(self, f"max_{metric}_p50_ms")
            if value is not None:
                out[metric] = value
        return out

    def slos(self) -> dict[str, float]:
        """The ceilings set: ``{"ttft_p99_ms": 500.0, ...}`` (the latency field each one bounds -> ms)."""
        return {name.removeprefix("max_"): v for name in SLO_KEYS if (v := getattr(self, name)) is not None}


SLO_KEYS = tuple(f"max_{m}_p{p}_ms" for m in ("ttft", "tpot", "itl") for p in (50, 99))


class SpeedFloors(LatencySlos):
    """``speed``: BLOCK thresholds on the measured speed-up and (serve mode) latency of one candidate; unset =
    report only."""

    min_speedup: Speedup = None  # type: ignore[assignment]
    """A lossy candidate must show candidate / baseline throughput >= this (the interval's lower end), else BLOCK."""
    max_slowdown: Slowdown = None  # type: ignore[assignment]
    """A lossless candidate may be at most this fraction slower: the interval's upper end must reach
    1 - max_slowdown, else BLOCK."""

    def __init__(self, min_speedup: float | None = None, max_slowdown: float | None = None, **data: Any) -> None:
        given = {"min_speedup": min_speedup, "max_slowdown": max_slowdown, **data}
        super().__init__(**{k: v for k, v in given.items() if v is not None})


class TrafficSection(Schema):
    """``traffic``: the speed measurement after the suites (``evalgate.speed.speedup``). Every key is optional; an unset
    key takes the platform's default (``speed.CUDA_PROFILE`` / ``speed.CPU_PROFILE``)."""

    input_len: _integer(1) = None  # type: ignore[valid-type]
    """Prompt tokens per request."""
    output_len: _integer(1) = None  # type: ignore[valid-type]
    """Output tokens per request; with ``from``: the output budget of a record that records none."""
    concurrency: Annotated[tuple[int, ...] | Literal["from-log"], BeforeValidator(_concurrency)] = None  # type: ignore[assignment]
    """Requests in flight: one integer >= 1 or a list of 1 to 16 distinct ones (a sweep), each <= the engine's
    max_num_seqs; or ``from-log`` (with ``from``): a sweep of the log's typical (median) and peak in-flight
    requests, from each record's arrival and end time."""
    num_prompts: Annotated[int | None, Field(strict=True, ge=1, le=MAX_TRAFFIC_PROMPTS),
                           rule(f"{{field}} must be an integer with 1 <= {{field}} <= {MAX_TRAFFIC_PROMPTS:_}")] = None
    """Requests per repeat and level, 1..100_000; null: = the level's concurrency (one wave); with ``from``: the
    log's first ``num_prompts`` requests (null: all of them)."""
    repeats: _integer(1, MAX_TRAFFIC_REPEATS) = None  # type: ignore[valid-type]
    """Interleaved timed passes per side, 1..100 (>= 2 for an interval); with ``precision``: the first stage's
    pairs (>= 2)."""
    precision: _number("must be a number with 0 < precision < 1 (the interval's half-width as a share of the "
                       "speed-up: 0.02 = \u00b12 %)", gt=0, lt=1) = None  # type: ignore[valid-type]
    """Target half-width of the speed-up's 95 % interval as a share of the ratio, 0 < precision < 1 (0.02 = ±2 %):
    after ``repeats`` pairs, Stein's two-stage rule adds the interleaved pairs that spread needs (up to
    ``max_repeats`` / ``max_seconds``) and the interval uses the first stage's spread (exact coverage; docs: the
    speed guide). Offline mode only. Unset: ``repeats`` pairs, no target."""
    max_repeats: _integer(2, MAX_TRAFFIC_REPEATS) = None  # type: ignore[valid-type]
    """With ``precision``: interleaved pairs in all at most, ``repeats``..100; unset: max(10, repeats)."""
    max_seconds: _number("must be a finite number of seconds > 0", gt=0) = None  # type: ignore[valid-type]
    """With ``precision``: wall-clock budget in seconds of the speed phase (all levels; the first stage always runs;
    a pair that would end past a level's share of what is left is not started); unset: no budget."""
    prompts: choice("random", "suites") = None  # type: ignore[valid-type]
    """random (vLLM's RandomDataset) or suites (the suites' own prompts)."""
    range_ratio: _number("must be a number with 0 <= range_ratio < 1 (0.5: lengths drawn from half to one and a "
                         "half times input_len / output_len)", ge=0, lt=1) = None  # type: ignore[valid-type]
    """With ``prompts: random``: each request's prompt and output lengths drawn uniformly from ``[len * (1 - r),
    len * (1 + r)]``, 0 <= r < 1 (vLLM's ``--random-range-ratio``). With ``num_prompts`` above the concurrency,
    requests then finish one at a time and are refilled, so a pass reaches the steady state that its window is
    timed over; with exact lengths (unset, 0) every request ends at the same step and a refilled pass runs in
    lock-step waves. The speed guide says when to set it."""
    from_: Annotated[str, Field(strict=True, min_length=1, alias="from"),
                     rule("must be the path of a request log (JSON lines)")] = None  # type: ignore[assignment]
    """A recorded request log (JSON lines; relative to this file) whose requests are sent as recorded, each with
    its own output budget: OpenAI ``/v1/chat/completions`` or ``/v1/completions`` bodies, bare or under a
    gateway's ``body``/``request`` key (with ``timestamp``/``start_time`` and ``end_time``/``duration_s``),
    ShareGPT ``conversations`` or vLLM's custom ``prompt``/``output_tokens`` records. ``output_len`` is the budget
    of a record without one; ``input_len`` and ``prompts`` do not apply. Offline mode only. Only lengths, counts
    and the file's hash reach the report (docs: the speed guide)."""
    mode: choice("offline", "serve") = None  # type: ignore[valid-type]
    """offline (vLLM's offline throughput benchmark on the suites' warm engines), or serve (``vllm serve`` +
    ``vllm bench serve``: TTFT / TPOT / ITL)."""

    def fields(self) -> dict[str, Any]:
        """The keys the file set (unset keys left to the platform's defaults)."""
        return self.model_dump(exclude_unset=True, by_alias=True)


class EconomicsSection(Schema):
    """``economics``: what the measured throughput costs (``evalgate.speed.economics``), shown beside the speed-up in
    ``verdict.json``, the reports and ``ablate``. Report only: it never changes a verdict. Needs a speed measurement;
    ``gpu_hour_usd`` must be set (here or in every ``configs.<config>.economics`` that has the section)."""

    gpu_hour_usd: Price = None  # type: ignore[assignment]
    """Price of one GPU-hour, US dollars (> 0): cost per million output tokens = gpu_hour_usd * gpus * 1e6 /
    (output tok/s * 3600)."""
    api_usd_per_mtok: Price = None  # type: ignore[assignment]
    """Optional: an API's price per million output tokens, US dollars (> 0), to compare self-hosting against: the
    break-even utilisation (the share of the hour the GPUs must be busy for self-hosting to be cheaper) and the
    saving at full load."""
    gpus: Annotated[int, Field(strict=True, ge=1),
                    rule("must be an integer >= 1 (GPUs one engine occupies)")] = None  # type: ignore[assignment]
    """GPUs one engine occupies (an integer >= 1); unset: tensor_parallel_size * pipeline_parallel_size of each
    side's engine_args, else 1."""

    def fields(self) -> dict[str, Any]:
        """The keys the file set."""
        return self.model_dump(exclude_unset=True)


class ReplaySection(Schema):
    """``replay``: the replay gate (``evalgate.gate.replay``): recorded requests replayed greedily on both sides after the
    suites, gated on what changed, with no reference answers (docs: the replay guide)."""

    from_: Annotated[str, Field(strict=True, min_length=1),
                     rule("must be the path of a request log (JSON lines)")] = Field(
        alias="from", json_schema_extra={"required": "replay.from is required (the request log, JSON lines)"})
    """The recorded request log (relative to this file): OpenAI ``/v1/chat/completions`` or ``/v1/completions``
    bodies, bare or under a gateway's ``body``/``request`` key, ShareGPT or vLLM custom records (as
    ``traffic.from``); a body's ``response_format`` and ``tools`` are kept for the JSON and tool checks."""
    limit: Annotated[int | None, Field(strict=True, ge=1, le=MAX_TRAFFIC_PROMPTS),
                     rule(f"{{field}} must be an integer with 1 <= {{field}} <= {MAX_TRAFFIC_PROMPTS:_}")] = None
    """Replay only the first ``limit`` requests (after ``only``); null: all of them."""
    only: choice("all", "structured") = "all"  # type: ignore[valid-type]
    """all: every request of the log; structured: only those that ask for JSON (``response_format``) or offer
    ``tools``."""
    max_tokens: _integer(1) = 256  # type: ignore[valid-type]
    """Output tokens per request: the record's own budget capped at this; a record without one gets this."""
    sampling: choice("greedy", "recorded") = "greedy"  # type: ignore[valid-type]
    """greedy: temperature 0 on both sides; recorded: each request's own ``temperature`` / ``top_p`` (absent:
    greedy, 1.0) with a fixed seed, its recorded ``seed`` else ``seed`` + its line number, the same on both sides."""
    seed: _integer(0) = 0  # type: ignore[valid-type]
    """With ``sampling: recorded``: the base of the seed of a request that records none (``seed`` + its line)."""
    min_identical_share: Share = None  # type: ignore[assignment]
    """Share of replayed requests whose greedy outputs must agree (identical, or first differing at a near-tie under
    ``lossless.near_tie_logprob``): BLOCK when the one-sided upper bound of the agreeing share is below it, PASS
    only when its lower bound reaches it. Unset: the config's ``configs.<config>.min_identical_share``, else
    ``lossless.min_identical_share``. A lossy switch sets it to the share it accepts."""
    json_margin: Margin = 5.0  # type: ignore[assignment]
    """Non-inferiority margin in points on the share of JSON-asking requests answered with valid JSON (that also
    conforms to the request's schema): candidate - baseline, McNemar's exact loss test."""
    redact: Annotated[bool, Field(strict=True), rule("must be true or false")] = False
    """true: the report shows each request's SHA-256 and lengths only, never its prompt or either output."""


class LosslessSection(Schema):
    """``lossless``: what configs with ``expect: lossless`` (spec decoding, async scheduling) must keep."""

    min_identical_share: Share = 0.95
    """Share of items whose greedy outputs must agree: byte-identical, or first diverging at a near-tie."""
    near_tie_logprob: Nats = 0.01
    """Nats: a divergence whose first differing token was within this of the baseline's own token (under the
    baseline's decode-time log-probs) is a numerical tie-flip, not a changed model. FP32 reduction-order noise
    flips at gaps this small; an MTP path that corrupts the state moves 0.02-0.75 nats of KL per token."""
    max_kl_mean: Nats = 0.001
    """Nats per token: the largest mean decode-time KL(baseline || candidate) along the outputs' common prefix."""


class DefaultSection(Schema):
    """``default``: what applies to every task no other entry sets."""

    margin: Margin = Field(json_schema_extra={"required": "default.margin is required (points, e.g. 2.0)"})
    """Non-inferiority margin in points, 0..100: a task blocks when the lower confidence bound of
    (candidate - baseline) is below -margin and its loss is significant."""


class LevelEntry(Schema):
    """A ``suites.<suite>`` or ``tasks.<task>`` entry: unset keys inherit (see the precedence)."""

    allow_empty: ClassVar[bool] = False
    margin: Margin = None  # type: ignore[assignment]
    """Non-inferiority margin in points for the tasks the entry covers."""
    alpha: Alpha = None  # type: ignore[assignment]
    """One-sided level for the tasks the entry covers."""


class LevelOverride(LevelEntry, LatencySlos):
    """A ``configs.<config>`` entry (a candidate config's own thresholds; unset = inherit). ``suites`` and ``tasks``
    entries are :class:`LevelEntry` objects; the flat ``suites``/``tasks`` levels hold those too."""

    min_identical_share: Share = None  # type: ignore[assignment]
    """This config's share of agreeing greedy outputs (over ``lossless.min_identical_share``)."""
    min_acceptance_rate: Share = None  # type: ignore[assignment]
    """This config's acceptance-rate floor (over ``spec_decode``)."""
    min_mean_acceptance_length: AcceptanceLength = None  # type: ignore[assignment]
    """This config's mean-acceptance-length floor (over ``spec_decode``)."""
    min_speedup: Speedup = None  # type: ignore[assignment]
    """This config's speed-up floor (over ``speed``)."""
    max_slowdown: Slowdown = None  # type: ignore[assignment]
    """This config's largest slowdown (over ``speed``)."""
    # The latency objectives (``LatencySlos``' keys: max_ttft_p99_ms, ...): this config's, over ``speed``'s.
    traffic: Annotated[TrafficSection, _Empty] = TrafficSection()
    """This config's traffic keys, over the top-level ``traffic`` key by key."""
    economics: Annotated[EconomicsSection, _Empty] = None  # type: ignore[assignment]
    """This config's economics keys, over the top-level ``economics`` key by key."""
    suites: Annotated[dict[Name, LevelEntry], _Empty, _Frozen] = _NONE
    """This config's own suite entries (beat every flat entry)."""
    tasks: Annotated[dict[Name, LevelEntry], _Empty, _Frozen] = _NONE
    """This config's own task entries (beat everything)."""


class ThresholdsFile(Schema):
    """A whole ``thresholds.yaml`` as written (schema version 1). ``load_thresholds`` turns it into
    :class:`Thresholds`."""

    version: Annotated[int, Field(strict=True, ge=SCHEMA_VERSION, le=SCHEMA_VERSION),
                       rule(f"must be {SCHEMA_VERSION} (the only thresholds schema version)")] = SCHEMA_VERSION
    """Schema version of the file."""
    alpha: Alpha = Field(json_schema_extra={"required": "alpha is required (one-sided level, e.g. 0.05)"})
    """One-sided level, 0 < alpha < 0.5, of the non-inferiority bound and of the loss test (Holm across tasks)."""
    default: DefaultSection = Field(json_schema_extra={"required": "default is required (e.g. default: {margin: 2.0})"})
    """What applies to every task no other entry sets."""
    power: _number("power must be a number with 0.5 <= power < 1", ge=0.5, lt=1) = 0.8  # type: ignore[valid-type]
    """Target power: MDE = (z_{1-alpha} + z_power) * SE; a task whose MDE exceeds its margin is INCONCLUSIVE."""
    on_inconclusive: choice("warn", "block") = "block"  # type: ignore[valid-type]
    """block: an INCONCLUSIVE run is reported as BLOCK (exit 1); warn: it exits 5."""
    bootstrap_resamples: _integer(1000, MAX_BOOTSTRAP_RESAMPLES) = 10_000  # type: ignore[valid-type]
    """Paired-bootstrap resamples per task, 1000..1_000_000."""
    seed: _integer(0) = 0  # type: ignore[valid-type]
    """Seeds the bootstrap (one generator per task)."""
    lossless: Annotated[LosslessSection, _Empty] = LosslessSection()
    """Tolerances for configs with ``expect: lossless``."""
    spec_decode: Annotated[SpecDecodeFloors, _Empty] = SpecDecodeFloors()
    """Floors for every candidate that runs speculative decoding."""
    traffic: Annotated[TrafficSection, _Empty] = None  # type: ignore[assignment]
    """Measure speed after the suites (absent: only when the command line asks)."""
    speed: Annotated[SpeedFloors, _Empty] = SpeedFloors()
    """BLOCK thresholds on the measured speed-up."""
    economics: Annotated[EconomicsSection, _Empty] = None  # type: ignore[assignment]
    """What the measured throughput costs per million output tokens (absent: no cost shown)."""
    replay: Annotated[ReplaySection, _Empty] = None  # type: ignore[assignment]
    """Replay recorded requests on both sides and gate on what changed (absent: no replay gate)."""
    suites: Annotated[dict[Name, LevelEntry], _Empty, _Frozen] = _NONE
    """Per suite (folder name)."""
    tasks: Annotated[dict[Name, LevelEntry], _Empty, _Frozen] = _NONE
    """Per task (lm-eval task name)."""
    configs: Annotated[dict[Name, LevelOverride], _Empty, _Frozen] = _NONE
    """Per candidate config (its name as in configs/)."""


def _default(model: type[Schema], name: str) -> Any:
    """The default of ``model.name``: the models are the one place defaults live."""
    return model.model_fields[name].default


# ------------------------------------------------------------------------------------------ the result


@dataclass(frozen=True)
class TaskThreshold:
    """The threshold that applies to one task.

    Attributes:
        margin: non-inferiority margin in points (>= 0); the task blocks when the lower
            confidence bound of (candidate - baseline) is below ``-margin``.
        alpha: one-sided significance level, 0 < alpha < 0.5.
        source: the level that set the margin: ``"tasks.<task>"``, ``"suites.<suite>"``,
            ``"configs.<config>"`` or ``"default"``.
    """

    margin: float
    alpha: float
    source: str


@dataclass(frozen=True)
class Thresholds:
    """A validated thresholds file, flattened for lookups. Build it with ``load_thresholds``.

    The attributes are :class:`ThresholdsFile`'s keys (their meaning and defaults are documented there), with
    ``default.margin`` as ``default_margin``, the ``lossless`` keys at the top (``min_identical_share``,
    ``near_tie_logprob``, ``max_kl_mean``), ``traffic`` as the mapping of the keys the file set, and ``path``, the
    file it came from.
    """

    alpha: float
    default_margin: float
    suites: Mapping[str, LevelEntry] = field(default_factory=lambda: MappingProxyType({}))
    tasks: Mapping[str, LevelEntry] = field(default_factory=lambda: MappingProxyType({}))
    bootstrap_resamples: int = _default(ThresholdsFile, "bootstrap_resamples")
    seed: int = _default(ThresholdsFile, "seed")
    path: Path | None = None
    power: float = _default(ThresholdsFile, "power")
    on_inconclusive: str = _default(ThresholdsFile, "on_inconclusive")
    min_identical_share: float = _default(LosslessSection, "min_identical_share")
    configs: Mapping[str, LevelOverride] = field(default_factory=lambda: MappingProxyType({}))
    near_tie_logprob: float = _default(LosslessSection, "near_tie_logprob")
    max_kl_mean: float = _default(LosslessSection, "max_kl_mean")
    spec_decode: SpecDecodeFloors = SpecDecodeFloors()
    traffic: Mapping[str, Any] | None = None  # the ``traffic`` keys the file set; None: section absent
    speed: SpeedFloors = SpeedFloors()
    economics: Mapping[str, Any] | None = None  # the ``economics`` keys the file set; None: section absent
    replay: ReplaySection | None = None  # the ``replay`` section; None: absent (no replay gate)

    def policy(self, config: str | None) -> ConfigPolicy:
        """Everything this file asks of candidate ``config``, resolved once (the precedence rules of the module
        docstring applied here and nowhere else): see :class:`ConfigPolicy`. ``config`` None: no
        ``configs.<config>`` entry applies (the top-level keys alone)."""
        override = self.configs.get(config) if config is not None else None
        # speed floors and latency objectives: configs.<config> over speed, key by key
        keys = ("min_speedup", "max_slowdown", *SLO_KEYS)
        merged = {k: getattr(self.speed, k) for k in keys}
        own_speed = {k: v for k in keys if override is not None and (v := getattr(override, k)) is not None}
        merged.update(own_speed)
        # acceptance floors: configs.<config> over spec_decode
        rate, length = self.spec_decode.min_acceptance_rate, self.spec_decode.min_mean_acceptance_length
        if override is not None:
            rate = override.min_acceptance_rate if override.min_acceptance_rate is not None else rate
            length = (override.min_mean_acceptance_length if override.min_mean_acceptance_length is not None
                      else length)
        share = (override.min_identical_share if override is not None and override.min_identical_share is not None
                 else self.min_identical_share)
        replay_share = (self.replay.min_identical_share
                        if self.replay is not None and self.replay.min_identical_share is not None else share)
        # traffic and economics: configs.<config>.<section> over the top-level section, key by key
        own_traffic = override.traffic.fields() if override is not None else {}
        traffic = None if self.traffic is None and not own_traffic else {**dict(self.traffic or {}), **own_traffic}
        own_econ = override.economics.fields() if override is not None and override.economics is not None else None
        economics = None if self.economics is None and own_econ is None else {**dict(self.economics or {}),
                                                                                **(own_econ or {})}
        return ConfigPolicy(
            config=config, path=self.path, alpha=self.alpha, power=self.power, on_inconclusive=self.on_inconclusive,
            bootstrap_resamples=self.bootstrap_resamples, seed=self.seed, near_tie_logprob=self.near_tie_logprob,
            max_kl_mean=self.max_kl_mean, identical_share=share, replay_share=replay_share,
            spec_floors=SpecDecodeFloors(min_acceptance_rate=rate, min_mean_acceptance_length=length),
            speed_floors=SpeedFloors(**merged),
            traffic=None if traffic is None else MappingProxyType(traffic),
            economics=None if economics is None else MappingProxyType(economics),
            replay=self.replay,
            own_traffic=frozenset(own_traffic), own_speed=frozenset(own_speed),
            _levels=_TaskLevels(self.default_margin, self.alpha, self.suites, self.tasks, override),
        )

    # The lookups by config name: each one the matching field of ``policy(config)`` (the stages take the policy).

    def replay_share_for(self, config: str | None) -> float:
        """``policy(config).replay_share``."""
        return self.policy(config).replay_share

    def economics_for(self, config: str | None) -> dict[str, Any] | None:
        """``policy(config).economics`` as a dict (None when neither section is there)."""
        got = self.policy(config).economics
        return None if got is None else dict(got)

    def traffic_for(self, config: str | None) -> dict[str, Any] | None:
        """``policy(config).traffic`` as a dict (None when neither section is set)."""
        got = self.policy(config).traffic
        return None if got is None else dict(got)

    def speed_floors_for(self, config: str | None) -> SpeedFloors:
        """``policy(config).speed_floors``."""
        return self.policy(config).speed_floors

    def spec_floors_for(self, config: str | None) -> SpecDecodeFloors:
        """``policy(config).spec_floors``."""
        return self.policy(config).spec_floors

    def for_task(self, suite: str, task: str, config: str | None = None) -> TaskThreshold:
        """``policy(config).task(suite, task)``."""
        return self.policy(config).task(suite, task)

    def identical_share_for(self, config: str | None) -> float:
        """``policy(config).identical_share``."""
        return self.policy(config).identical_share

    def check_names(self, suites: Iterable[str], tasks: Iterable[str],
                    configs: Iterable[str] | None = None) -> None:
        """Raise ConfigError if ``suites.<x>``, ``tasks.<x>`` or (when ``configs`` is given)
        ``configs.<x>`` names no known suite/task/config.

        A misspelt name would otherwise silently fall back to the default margin.
        """
        suites, tasks = list(suites), list(tasks)
        levels = [("", "suites", self.suites, suites), ("", "tasks", self.tasks, tasks)]
        if configs is not None:
            levels.append(("", "configs", self.configs, list(configs)))
        for cname, cfg in self.configs.items():
            levels += [(f"configs.{cname}.", "suites", cfg.suites, suites),
                       (f"configs.{cname}.", "tasks", cfg.tasks, tasks)]
        for prefix, level, entries, known in levels:
            for name in entries:
                if name not in known:
                    raise ConfigError(
                        f"unknown {level[:-1]} {name!r}{suggest(name, known, list_all=False)}",
                        path=self.path,
                        field=f"{prefix}{level}.{name}",
                    )



@dataclass(frozen=True)
class _TaskLevels:
    """The entries a task's margin and alpha are resolved from (``ConfigPolicy.task``)."""

    default_margin: float
    alpha: float
    suites: Mapping[str, LevelEntry]
    tasks: Mapping[str, LevelEntry]
    override: LevelOverride | None


@dataclass(frozen=True)
class ConfigPolicy:
    """What ``thresholds.yaml`` asks of one candidate config, resolved once (``Thresholds.policy(config)``, where
    the config is loaded) and passed to the stages that compare, decide and measure speed, so none of them looks the
    config name up again.

    Attributes:
        config: the candidate config's name (None: no ``configs.<config>`` entry applies). path: the file.
        alpha, power, on_inconclusive, bootstrap_resamples, seed, near_tie_logprob, max_kl_mean: the file's
            top-level and ``lossless`` keys (:class:`ThresholdsFile`).
        identical_share: the share (0..1) of agreeing greedy outputs a lossless config must keep:
            ``configs.<config>.min_identical_share`` > ``lossless.min_identical_share``.
        replay_share: the agreeing share the replay gate requires: ``replay.min_identical_share``, else
            ``identical_share``.
        spec_floors: acceptance floors: ``configs.<config>`` over ``spec_decode``, key by key.
        speed_floors: ``min_speedup`` / ``max_slowdown`` and the latency objectives: ``configs.<config>`` over
            ``speed``, key by key.
        traffic: the ``traffic`` keys: ``configs.<config>.traffic`` over ``traffic``, key by key; None when neither
            is set (speed is then measured only when the command line asks).
        economics: the ``economics`` keys (``gpu_hour_usd``, ``api_usd_per_mtok``, ``gpus``, each only when set):
            ``configs.<config>.economics`` over ``economics``, key by key; None when neither section is there.
            ``load_thresholds`` made sure that ``gpu_hour_usd`` is set when either is.
        replay: the ``replay`` section (None: no replay gate).
        own_traffic, own_speed: the traffic keys and the speed keys (floors, objectives) that ``configs.<config>``
            itself sets (to name the field at fault in an error: ``traffic_field``, ``speed_field``).
    """

    config: str | None
    path: Path | None
    alpha: float
    power: float
    on_inconclusive: str
    bootstrap_resamples: int
    seed: int
    near_tie_logprob: float
    max_kl_mean: float
    identical_share: float
    replay_share: float
    spec_floors: SpecDecodeFloors
    speed_floors: SpeedFloors
    traffic: Mapping[str, Any] | None
    economics: Mapping[str, Any] | None
    replay: ReplaySection | None
    own_traffic: frozenset[str]
    own_speed: frozenset[str]
    _levels: _TaskLevels = field(repr=False)

    @property
    def json_margin(self) -> float:
        """The replay gate's ``replay.json_margin`` (points; its default when there is no ``replay`` section)."""
        return self.replay.json_margin if self.replay is not None else _default(ReplaySection, "json_margin")

    def task(self, suite: str, task: str) -> TaskThreshold:
        """Margin (points) and alpha for ``task`` of ``suite``.

        Precedence (lowest first): default < ``configs.<config>`` < ``suites.<suite>`` <
        ``tasks.<task>`` < ``configs.<config>.suites.<suite>`` < ``configs.<config>.tasks.<task>``.
        """
        lv, config = self._levels, self.config
        margin, alpha, source = lv.default_margin, lv.alpha, "default"
        cfg = lv.override
        chain = [(f"configs.{config}", cfg), (f"suites.{suite}", lv.suites.get(suite)),
                 (f"tasks.{task}", lv.tasks.get(task))]
        if cfg is not None:
            chain += [(f"configs.{config}.suites.{suite}", cfg.suites.get(suite)),
                      (f"configs.{config}.tasks.{task}", cfg.tasks.get(task))]
        for where, entry in chain:
            if entry is None:
                continue
            if entry.margin is not None:
                margin, source = entry.margin, where
            if entry.alpha is not None:
                alpha = entry.alpha
        return TaskThreshold(margin=margin, alpha=alpha, source=source)

    def traffic_field(self, key: str) -> str:
        """The dotted field that set traffic key ``key``: ``configs.<config>.traffic.<key>``, else ``traffic.<key>``
        (also when the value is the platform's default)."""
        return f"configs.{self.config}.traffic.{key}" if key in self.own_traffic else f"traffic.{key}"

    def speed_field(self, key: str) -> str:
        """The dotted field that set speed key ``key`` (a floor or latency objective): ``configs.<config>.<key>``,
        else ``speed.<key>``."""
        return f"configs.{self.config}.{key}" if key in self.own_speed else f"speed.{key}"


def load_thresholds(path: Path) -> Thresholds:
    """Read, parse and validate a thresholds YAML file (schema :class:`ThresholdsFile`).

    Args:
        path: the ``thresholds.yaml`` file (UTF-8; a byte-order mark is accepted).

    Returns:
        A frozen ``Thresholds``; margins in points, alpha one-sided.

    Raises:
        ConfigError: (``path=`` the file, ``field=`` the dotted field when one is at fault) missing file,
            directory, unreadable or non-UTF-8 file, YAML syntax error (with line and column), duplicate key,
            empty file, non-mapping top level, unknown key (with the closest valid key suggested), missing
            ``alpha`` or ``default.margin``, a wrong type (a boolean is not a number) or a value outside its
            field's range (each field's rule in :class:`ThresholdsFile` and its sections).
    """
    path = Path(path)
    doc: ThresholdsFile = validate(ThresholdsFile, read_mapping(path, WORDING), path)
    _check_economics(doc, path)
    return Thresholds(
        alpha=doc.alpha, default_margin=doc.default.margin, suites=doc.suites, tasks=doc.tasks,
        bootstrap_resamples=doc.bootstrap_resamples, seed=doc.seed, path=path, power=doc.power,
        on_inconclusive=doc.on_inconclusive, min_identical_share=doc.lossless.min_identical_share,
        configs=doc.configs, near_tie_logprob=doc.lossless.near_tie_logprob, max_kl_mean=doc.lossless.max_kl_mean,
        spec_decode=doc.spec_decode, speed=doc.speed,
        traffic=None if doc.traffic is None else MappingProxyType(doc.traffic.fields()),
        economics=None if doc.economics is None else MappingProxyType(doc.economics.fields()),
        replay=doc.replay,
    )


def _check_economics(doc: ThresholdsFile, path: Path) -> None:
    """Raise ConfigError when an ``economics`` section would have no GPU-hour price: the top-level one must set
    ``gpu_hour_usd``, and a ``configs.<config>.economics`` must set it when the top level has none."""
    top = doc.economics
    if top is not None and top.gpu_hour_usd is None:
        raise ConfigError("gpu_hour_usd is required in an economics section (US dollars per GPU-hour, e.g. 2.5)",
                          path=path, field="economics.gpu_hour_usd")
    for name, cfg in doc.configs.items():
        if cfg.economics is not None and cfg.economics.gpu_hour_usd is None and top is None:
            raise ConfigError("gpu_hour_usd is required (no top-level economics section sets it)", path=path,
                              field=f"configs.{name}.economics.gpu_hour_usd")
