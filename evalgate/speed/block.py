"""The ``speed`` block of ``verdict.json`` as typed records: what the speed stage hands to the gate and the report.

``speedup.speed_block`` builds a :class:`SpeedBlock` from the measured levels (offline: ``measure.measure_speed``;
serve mode: ``serve.serve_block`` adds each level's :class:`SpeedLatency` per latency field and its
:class:`SpeedGoodput`); a failed measurement is ``SpeedBlock(status="failed", error=..., profile=...)``
(``measure.measure_speed_safely``, ``serve.measure_configs``). The gate (``gate.overrides``: speed floors, latency
objectives), the economics (``economics.economics_block``) and the report read its attributes; the verdict builder
adds the :class:`SpeedThresholds` and ``evalgate.report.verdict`` re-exports every model here under its old name.

Written with ``model_dump(exclude_unset=True)`` (``results.document.Record``): only the keys that were set, in the
order of the fields below, so the JSON keys and values are those evalgate has always written; a document from
before a field existed reads with that field unset and dumps back without it. The block's ``profile`` is the
measured ``profile.TrafficProfile`` itself (read from a document with ``TrafficProfile.from_document``: a failed
measurement's profile may hold only part of it), and its ``sides`` are :class:`MeasuredSide` records (what each side
ran on, and its raw repeat records as the worker or ``vllm bench serve`` reported them). Throughputs are tokens (or requests)
per second, latencies milliseconds, ratios candidate / baseline (a throughput ratio above 1 is faster, a latency
ratio below 1 is faster), shares 0..1.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from evalgate.results.document import Number, Record, described, described_list
from evalgate.speed.profile import TrafficProfile

__all__ = ["MeasuredSide", "SpeedBlock", "SpeedGoodput", "SpeedLatency", "SpeedLevel", "SpeedPrecision", "SpeedSide",
           "SpeedThresholds"]


class SpeedSide(Record):
    """One side's throughput at one concurrency level (``speed.speed_block``)."""

    output_tok_s: list[Number] = described_list("output tokens/s of each repeat (over its steady-state window where it has one: ``worker.throughput.steady_window``)")
    median: Number | None = described("their median, output tok/s")
    total_tok_s: list[Number] = described_list("prompt + output tokens/s of each repeat")
    cv: Number | None = described("coefficient of variation of the repeats")
    request_s: list[Number] | None = described("serve mode: requests/s of each repeat (``vllm bench serve``); "
                                               "absent offline")
    streams: list[Number | None] | None = described("offline: per repeat, the median number of requests that got a "
                                                    "token per engine step in its steady-state window "
                                                    "(``worker.throughput.window_streams``), None for a repeat "
                                                    "without one (a single wave: ``num_prompts`` <= concurrency); "
                                                    "well below the concurrency the engine did not hold every "
                                                    "stream; absent when no repeat had a window")
    preemptions: list[int] | None = described("offline: per repeat, vLLM's preemptions during the pass "
                                              "(``vllm:num_preemptions``: events, a request may count twice); "
                                              "absent when the engine did not report it")


class SpeedPrecision(Record):
    """A level's precision target and what Stein's two-stage rule reached (``precision.precision_record``)."""

    target: Number | None = described("``traffic.precision``: the wanted half-width of the interval, share of the "
                                      "ratio")
    achieved_half_width: Number | None = described("the interval's half-width reached (upper half, share of the "
                                                   "ratio)")
    pairs: int | None = described("interleaved pairs measured in all (first stage included)")
    stopped: str | None = described("``met`` (target reached), ``max_repeats`` or ``max_seconds`` (capped short of "
                                    "it)")
    pairs_needed: int | None = described("pairs in all Stein's rule asked for: max(n0, ceil(t\u00b2 s0\u00b2 / "
                                         "h\u00b2))")
    pair_seconds: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] | None = described("mean wall-clock seconds of one interleaved pair at this level (both "
                                            "passes, sleep/wake included): what each further pair costs; absent in "
                                            "records written before it was kept")


class SpeedLatency(Record):
    """One latency field at one level, serve mode (``serve.LatencyComparison``): per-repeat values in ms, their
    medians, and the ratio candidate / baseline with its paired t interval (below 1: the candidate is faster)."""

    baseline: list[Number] = described_list("the baseline's value of each repeat, ms (that pass's percentile)")
    candidate: list[Number] = described_list("the candidate's value of each repeat, ms")
    baseline_median: Number | None = described("median of the baseline's repeats, ms")
    candidate_median: Number | None = described("median of the candidate's repeats, ms")
    ratio: Number | None = described("candidate / baseline (medians); None where undefined")
    ci_low: Number | None = described("interval of the ratio, low end; None with fewer than 2 repeats")
    ci_high: Number | None = described("interval of the ratio, high end")
    verdict: str = described("``faster``, ``slower`` or ``no measurable speed-up`` (of the inverted interval)", "")


class SpeedGoodput(Record):
    """Goodput at one level, serve mode with latency objectives (``serve.compare_goodput``): requests/s meeting every
    per-request objective, per repeat and side, and the ratio candidate / baseline with its paired t interval."""

    objectives_ms: dict[str, Number] = Field(default_factory=dict, description=(
        "the per-request objectives passed to ``vllm bench serve --goodput``, e.g. ``ttft`` -> ceiling in ms"))
    baseline: list[Number] = described_list("the baseline's goodput of each repeat, requests/s")
    candidate: list[Number] = described_list("the candidate's goodput of each repeat, requests/s")
    baseline_median: Number | None = described("median of the baseline's repeats, requests/s; None without any")
    candidate_median: Number | None = described("median of the candidate's repeats, requests/s; None without any")
    ratio: Number | None = described("candidate / baseline (medians); None when the baseline's median is 0")
    ci_low: Number | None = described("interval of the ratio, low end; None when a repeat's goodput is 0")
    ci_high: Number | None = described("interval of the ratio, high end")


class SpeedLevel(Record):
    """Speed-up at one concurrency level."""

    concurrency: int = described("concurrent requests", 0)
    ratio: Number | None = described("candidate / baseline output tok/s (medians)")
    ci_low: Number | None = described("interval of the ratio, low end; None with fewer than 2 repeats")
    ci_high: Number | None = described("interval of the ratio, high end")
    level: Number | None = described("the interval's level")
    verdict: str = described("``faster``, ``slower`` or ``no measurable speed-up``", "")
    mde_ratio: Number | None = Field(default=None, ge=1, description=(
        "minimum detectable speed-up at these repeats and spread, at the profile's power (>= 1; "
        "``speed.detectable_ratio``); None with fewer than 2 repeats or no spread"))
    repeats_needed: int | None = Field(default=None, ge=2, description=(
        "an unresolved level's repeats in all that would resolve the observed ratio at this spread "
        "(``speed.repeats_needed``; 101 = more than 100); None otherwise"))
    precision: SpeedPrecision | None = described("with ``traffic.precision``: target, half-width reached, pairs, why "
                                                 "it stopped, pairs needed (the interval is then Stein's); None "
                                                 "otherwise")
    baseline: SpeedSide = Field(default_factory=SpeedSide, description="the baseline's throughput")
    candidate: SpeedSide = Field(default_factory=SpeedSide, description="the candidate's throughput")
    latency: dict[str, SpeedLatency] | None = described("serve mode: per latency field (``serve.LATENCY_FIELDS``, "
                                                        "e.g. ``ttft_p99_ms``) its comparison; absent offline")
    goodput: SpeedGoodput | None = described("serve mode with latency objectives: goodput; absent otherwise")


class SpeedThresholds(Record):
    """The speed floors the candidate was gated on (``thresholds.SpeedFloors``)."""

    min_speedup: Number | None = described("a lossy candidate's interval must lie at or above this ratio")
    max_slowdown: Number | None = described("a lossless candidate's interval must reach 1 − this share")
    slos_ms: dict[str, Number] | None = described("latency objectives (serve mode): latency field, e.g. "
                                                  "``ttft_p99_ms`` -> ceiling in ms on the candidate's median over "
                                                  "repeats; absent when none")


class MeasuredSide(Record):
    """What one side's speed was measured on, and its timed passes: the offline worker's ``ready`` reply (less its
    ``event``) or, in serve mode, the server's (``serve._side_info``), with ``runs``."""

    device: str | None = described("the device measured on: the GPU's name, or the CPU's model and logical cores")
    isa: list[str] | None = described("the CPU's SIMD flags that decide kernel speed (``avx*``, ``amx*``, ...); empty "
                                      "on a GPU")
    cuda: str | None = described("the CUDA version torch was built with (offline, on a GPU); absent on a CPU")
    versions: dict[str, str] = Field(default_factory=dict, description="installed package versions, e.g. ``vllm``")
    effective: dict[str, Any] = Field(default_factory=dict, description=(
        "what the engine applied (offline: read back from the engine; serve: the server's engine args and env)"))
    max_num_seqs: int | None = described("offline: the engine's ``max_num_seqs`` (the highest concurrency it runs)")
    max_model_len: int | None = described("offline: the engine's ``max_model_len``, tokens")
    sleep_mode: bool | None = described("offline: the engine runs with sleep mode (``placement: alternate``)")
    server: dict[str, Any] | None = described("serve mode: the server's ``argv``, start-up seconds, log and the "
                                              "arguments it logged; absent offline")
    runs: list[dict[str, Any]] = described_list(
        "every timed pass, in order, as measured: ``concurrency``, ``repeat`` (``stage`` under a precision target) "
        "and the pass's figures (offline ``worker.throughput.measure``: tokens/s, seconds, counts, the steady-state "
        "``window``; serve mode ``engine.serve.ServeRun``: also the latency percentiles and goodput)")


class SpeedBlock(Record):
    """Speed measured beside the quality delta (``speed.speed_block``, or a failed measurement)."""

    status: str = described("``measured`` or ``failed``", "measured")
    error: str | None = described("why the measurement failed (``failed`` only)")
    method: str = described("how the speed-up and its interval are computed", "")
    profile: TrafficProfile = Field(default_factory=lambda: TrafficProfile.from_document({}), description=(
        "the traffic profile measured (``profile.TrafficProfile``; read from a document as it holds it)"))
    levels: list[SpeedLevel] = described_list("one row per concurrency level")
    ratio: Number | None = described("the headline (first level) speed-up")
    ci_low: Number | None = described("its interval, low end")
    ci_high: Number | None = described("its interval, high end")
    verdict: str | None = described("its reading")
    concurrency: int | None = described("its concurrency")
    sides: dict[str, MeasuredSide] = Field(default_factory=dict, description=(
        "per side (``baseline``/``candidate``): device, ISA, versions, raw repeats"))
    thresholds: SpeedThresholds | None = described("the speed floors; None when none apply")
    latency_method: str | None = described("serve mode: how the latency ratios and intervals are computed; absent "
                                           "offline")
    latency: dict[str, SpeedLatency] | None = described("serve mode: the headline (first level) latencies, as in "
                                                        "its ``latency``; absent offline")

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_as_recorded(cls, value: Any) -> TrafficProfile:
        return TrafficProfile.from_document(value)

    @property
    def measured(self) -> bool:
        """The measurement succeeded (``status`` is ``measured``): only such a block has levels to gate or cost."""
        return self.status == "measured"
