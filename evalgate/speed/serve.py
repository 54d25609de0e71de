"""The serve-mode speed phase: baseline and candidate ``vllm serve`` measured in interleaved repeats.

Per concurrency level, repeat i benchmarks baseline then candidate when i is even, candidate then baseline when odd
(ABBA, as ``evalgate.speed.measure`` does offline), each pass one ``vllm bench serve`` with its own warm-up requests
(excluded). ``together=True`` keeps both servers up for the whole phase (no restarts; fits on CPU, where the KV
cache is host RAM); ``together=False`` runs one server at a time and restarts a side when the order switches
(one GPU whose memory one server claims). The statistics are ``evalgate.speed.speedup``'s: output tok/s gives the
headline speed-up (``compare_speed``: ratio of medians, paired t interval on log ratios), and each latency
(TTFT / TPOT / ITL p50 and p99) gets the same ratio candidate / baseline and interval (``paired_log_interval``);
a latency ratio below 1 is faster.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from evalgate.engine.device import cpu_info
from evalgate.engine.platform import has_cuda
from evalgate.engine.serve import (
    STARTUP_TIMEOUT_S,
    ServeError,
    Server,
    ServeRun,
    free_port,
    log_tail,
    run_bench,
    server_command,
    server_env,
    vllm_version,
)
from evalgate.errors import EvalgateError
from evalgate.models.embedded import resolve_model
from evalgate.speed.block import MeasuredSide, SpeedBlock, SpeedGoodput, SpeedLatency
from evalgate.speed.speedup import (
    SpeedComparison,
    TrafficProfile,
    compare_speed,
    describe,
    paired_log_interval,
    speed_block,
)

ROLES = ("baseline", "candidate")
LATENCY_FIELDS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms")
LATENCY_METHOD = ("latency ratio candidate / baseline: ratio of medians, paired t interval on log ratios "
                  "(interleaved repeats); below 1 = the candidate is faster")


@dataclass(frozen=True)
class ServeSide:
    """One side of the comparison.

    Attributes:
        model: what ``vllm serve`` loads (a resolved local path; ``model.resolve_model``).
        engine_args: the config's engine args (vLLM ``EngineArgs`` names).
        env: the config's environment variables for the server.
        log_path: the server's log (the benchmark's goes to ``<log_path>.bench``).
    """

    model: str
    engine_args: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path = Path("serve.log")


@dataclass(frozen=True)
class LatencyComparison:
    """One latency metric at one level: per-repeat values (ms), ratio of medians candidate / baseline, interval."""

    metric: str
    baseline: tuple[float, ...]
    candidate: tuple[float, ...]
    ratio: float
    ci_low: float
    ci_high: float
    verdict: str

    def as_record(self) -> SpeedLatency:
        """The level's ``latency[metric]`` entry: both sides' values and medians (ms), the ratio and its interval
        (None where not finite) and the reading; every key set."""
        num = _num
        return SpeedLatency(baseline=list(self.baseline), candidate=list(self.candidate),
                            baseline_median=statistics.median(self.baseline),
                            candidate_median=statistics.median(self.candidate),
                            ratio=num(self.ratio), ci_low=num(self.ci_low), ci_high=num(self.ci_high),
                            verdict=self.verdict)


def compare_latency(metric: str, baseline: list[float], candidate: list[float], level: float) -> LatencyComparison:
    """Candidate / baseline ratio of a latency (lower is better) with ``speed.paired_log_interval``; verdict
    ``faster`` when the whole interval is below 1, ``slower`` above 1, else ``no measurable speed-up``."""
    lo, hi = paired_log_interval(baseline, candidate, level)
    base = statistics.median(baseline)
    ratio = statistics.median(candidate) / base if base > 0 else math.nan
    # A latency ratio r is a speed-up of 1/r: speed.describe reads the inverted interval.
    verdict = describe(1 / hi if hi > 0 else math.nan, 1 / lo if lo > 0 else math.nan)
    return LatencyComparison(metric, tuple(baseline), tuple(candidate), ratio, lo, hi, verdict)


def compare_goodput(baseline: list[float | None], candidate: list[float | None], objectives: Mapping[str, float],
                    level: float) -> SpeedGoodput:
    """Goodput at one level: per repeat the requests per second meeting every per-request objective
    (``vllm bench serve --goodput``; ``objectives`` in ms), each side's median, the ratio of medians candidate /
    baseline and its paired t interval on log ratios (``speed.paired_log_interval``, as for throughput). The ratio
    and interval are None where undefined: a side whose goodput is 0 in some repeat (no request met the objectives)
    has no log ratio, and a ratio of 0 is shown as such. A repeat without a goodput (None) is left out.

    Returns:
        The level's ``goodput`` entry, every key set (``objectives_ms``, ``baseline``, ``candidate``, both
        medians, ``ratio``, ``ci_low``, ``ci_high``).
    """
    b = [float(x) for x in baseline if x is not None]
    k = [float(x) for x in candidate if x is not None]
    b_med = statistics.median(b) if b else None
    k_med = statistics.median(k) if k else None
    ratio = lo = hi = None
    if b and k and len(b) == len(k) and b_med is not None and k_med is not None and b_med > 0:
        ratio = k_med / b_med
        if min(b) > 0 and min(k) > 0:
            low, high = paired_log_interval(b, k, level)
            lo, hi = _num(low), _num(high)
    return SpeedGoodput(objectives_ms=dict(objectives), baseline=b, candidate=k, baseline_median=b_med,
                        candidate_median=k_med, ratio=ratio, ci_low=lo, ci_high=hi)


def serve_problems(profile: TrafficProfile) -> list[tuple[str, str]]:
    """``(traffic field, message)`` for each part of ``profile`` serve mode cannot measure: ``vllm bench serve``
    here sends vLLM's random dataset only (``prompts: suites`` is an offline-mode feature), and its repeats are a fixed
    count (``traffic.precision``'s two-stage rule is an offline-mode feature). Empty when it fits."""
    if profile.precision is not None:
        return [("precision", "a precision target (Stein's two-stage rule) is measured in offline mode only (serve "
                              "mode runs a fixed number of repeats); set traffic.mode: offline or use repeats")]
    if profile.requests is not None:  # traffic.from: the rendered requests live in the offline worker only
        return [("from", "a request log is replayed in offline mode only (serve mode sends vLLM's random dataset); "
                         "set traffic.mode: offline")]
    if profile.prompts != "random":
        return [("prompts", f"mode: serve measures vLLM's random dataset only, got prompts: {profile.prompts} "
                            f"(use prompts: random, or mode: offline)")]
    return []


class _Servers:
    """Starts servers on demand; with ``together=False`` at most one runs (the other is stopped first)."""

    def __init__(self, sides: Mapping[str, ServeSide], stack: contextlib.ExitStack, *, together: bool, cuda: bool,
                 startup_timeout_s: float) -> None:
        self.sides, self.stack, self.together, self.cuda = sides, stack, together, cuda
        self.startup_timeout_s = startup_timeout_s
        self.running: dict[str, Server] = {}
        self.info: dict[str, dict[str, Any]] = {role: {"startups_s": []} for role in sides}

    def get(self, role: str) -> Server:
        if role in self.running:
            server = self.running[role]
            if not server.alive():
                raise ServeError(f"vllm serve ({role}) died during the speed phase (log {server.log_path}: "
                                 f"{log_tail(server.log_path)})")
            return server
        if not self.together:
            for other in list(self.running):
                self.running.pop(other).stop()
        side = self.sides[role]
        port = free_port()
        argv = server_command(side.model, side.engine_args, port)
        server = self.stack.enter_context(Server(argv, server_env(side.env, self.cuda), side.log_path, port,
                                                 self.startup_timeout_s))
        self.running[role] = server
        self.info[role].update(argv=argv[argv.index("serve"):], log=str(side.log_path))  # what vLLM's CLI parses
        self.info[role]["startups_s"].append(round(server.startup_s, 2))
        return server


def measure_serve(sides: Mapping[str, ServeSide], profile: TrafficProfile, *, together: bool = True,
                  cuda: bool = False, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                  progress: Callable[[str], None] | None = None) -> SpeedBlock:
    """Measure ``profile`` (``mode: serve``) on both sides in interleaved repeats and compare.

    Args:
        sides: ``baseline`` and ``candidate`` -> ``ServeSide``.
        profile: input_len / output_len / concurrency levels / num_prompts / repeats / level.
        together: both servers up at once (default; CPU) or one at a time (one GPU).
        cuda: whether the host has CUDA (else ``VLLM_TARGET_DEVICE=cpu`` in the servers' env).
    Returns:
        The measured ``speed`` block (``serve_block``): ``speed.speed_block`` of the output tok/s comparison (so
        every reader of the offline block reads this one), each level with ``latency`` (``LATENCY_FIELDS`` ->
        ``block.SpeedLatency``, ms), ``goodput`` when ``profile.goodput`` is set, and per side ``request_s``;
        ``sides[role]`` has ``runs`` (every ``ServeRun``), ``server`` (argv from ``serve`` on, log, start-up
        seconds, vLLM version, vLLM's logged parsed args), ``device``, ``isa``.
    Raises:
        ServeError: a server did not come up or died, or a benchmark failed; every server is stopped first.
    """
    say = progress or (lambda _msg: None)
    runs: dict[str, list[ServeRun]] = {role: [] for role in ROLES}
    with contextlib.ExitStack() as stack:
        servers = _Servers(sides, stack, together=together, cuda=cuda, startup_timeout_s=startup_timeout_s)
        for c in profile.concurrency:
            for i in range(profile.repeats):
                for role in (ROLES if i % 2 == 0 else ROLES[::-1]):
                    server = servers.get(role)
                    runs[role].append(run_bench(server, sides[role].model, input_len=profile.input_len,
                                                output_len=profile.output_len, num_prompts=profile.prompts_at(c),
                                                concurrency=c, repeat=i, goodput=profile.goodput,
                                                range_ratio=profile.range_ratio or 0.0))
                b, k = runs["baseline"][-1], runs["candidate"][-1]
                say(f"serve c={c} repeat {i + 1}/{profile.repeats}: TTFT p50 {b.ttft_p50_ms:.1f} -> "
                    f"{k.ttft_p50_ms:.1f} ms, TPOT p50 {b.tpot_p50_ms:.2f} -> {k.tpot_p50_ms:.2f} ms, "
                    f"{b.output_tok_s:,.0f} -> {k.output_tok_s:,.0f} output tok/s")
    return serve_block(runs, profile, {role: _side_info(servers.info[role], sides[role], cuda) for role in ROLES})


def measure_configs(base: Any, cand: Any, profile: TrafficProfile, log_dir: Path, *, cuda: bool | None = None,
                    progress: Callable[[str], None] | None = None) -> SpeedBlock:
    """The speed phase of ``evalgate run`` in serve mode, for two ``config.EngineConfig``s (after their suites,
    with their engines stopped): ``measure_serve`` with servers logging to ``log_dir/<role>-serve.log``, both up
    at once on CPU and one at a time with CUDA.

    Returns:
        The measured ``speed`` block (``measure_serve``), or ``SpeedBlock(status="failed", error=one line,
        profile=profile)`` when a server or a benchmark failed, or the embedded model could not be
        prepared (the run keeps its quality results and exits 3, as for the offline measurement).
    """
    if cuda is None:
        cuda = has_cuda()
    sides = {role: ServeSide(resolve_model(cfg.model), dict(cfg.engine_args), dict(cfg.env),
                             Path(log_dir) / f"{role}-serve.log") for role, cfg in (("baseline", base), ("candidate", cand))}
    try:
        return measure_serve(sides, profile, together=not cuda, cuda=cuda, progress=progress)
    except EvalgateError as exc:  # ServeError, or the embedded model could not be prepared
        return SpeedBlock(status="failed", error=str(exc), profile=profile)


def serve_block(runs: Mapping[str, list[ServeRun]], profile: TrafficProfile,
                info: Mapping[str, dict[str, Any]]) -> SpeedBlock:
    """The measured ``speed`` block from measured runs (pure: no I/O). ``runs``: per role, ``ServeRun``s in order,
    paired by (concurrency, repeat); ``info``: per role what ``sides[role]`` records beside its ``runs``. See
    ``measure_serve`` for the shape; the top-level ``latency`` is the first level's (empty without levels)."""
    levels: list[SpeedComparison] = []
    extra: list[tuple[dict[str, SpeedLatency], SpeedGoodput | None, dict[str, list[float]]]] = []
    for c in profile.concurrency:
        per = {role: [r for r in runs[role] if r.concurrency == c] for role in ROLES}
        col = {role: {f: [getattr(r, f) for r in per[role]] for f in ("output_tok_s", "total_tok_s", "request_s",
                                                                      *LATENCY_FIELDS)} for role in ROLES}
        b, k = col["baseline"], col["candidate"]
        levels.append(compare_speed(c, b["output_tok_s"], k["output_tok_s"], profile.level,
                                    b["total_tok_s"], k["total_tok_s"], profile.power))
        latency = {f: compare_latency(f, b[f], k[f], profile.level).as_record() for f in LATENCY_FIELDS}
        goodput = compare_goodput([r.goodput_s for r in per["baseline"]], [r.goodput_s for r in per["candidate"]],
                                  profile.goodput, profile.level) if profile.goodput else None
        extra.append((latency, goodput, {role: col[role]["request_s"] for role in ROLES}))
    sides = {role: MeasuredSide.model_validate({**info[role], "runs": [r.as_dict() for r in runs[role]]})
             for role in ROLES}
    block = speed_block(levels, profile, sides)
    rows = []
    for row, (latency, goodput, request_s) in zip(block.levels, extra):
        update: dict[str, Any] = {"latency": latency, **{
            role: getattr(row, role).model_copy(update={"request_s": request_s[role]}) for role in ROLES}}
        if goodput is not None:
            update["goodput"] = goodput
        rows.append(row.model_copy(update=update))
    return block.model_copy(update={"levels": rows, "latency_method": LATENCY_METHOD,
                                    "latency": rows[0].latency if rows else {}})


def _side_info(info: Mapping[str, Any], side: ServeSide, cuda: bool) -> dict[str, Any]:
    server = {**info, "vllm": vllm_version(), **logged_args(side.log_path)}
    return {**_device(cuda), "versions": {"vllm": vllm_version()},
            "effective": {"engine_args": dict(side.engine_args), "env": dict(side.env)}, "server": server}


def logged_args(log_path: Path) -> dict[str, str]:
    """vLLM's own log lines of what it parsed (``non-default args: {...}``) and the engine config it built."""
    out: dict[str, str] = {}
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if "non-default args:" in line:
            out["non_default_args"] = line.split("non-default args:", 1)[1].strip()
        elif "Initializing a V1 LLM engine" in line:
            out["engine_config"] = line.split("Initializing", 1)[1].strip()[:4000]
    return out


def _device(cuda: bool) -> dict[str, Any]:
    """The device the servers ran on, without importing torch here: the GPU's name (nvidia-smi) or the CPU's."""
    if cuda:
        import subprocess

        try:
            name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30, check=True).stdout.splitlines()[0].strip()
            return {"device": name, "isa": []}
        except (OSError, subprocess.SubprocessError, IndexError):
            return {"device": "CUDA GPU (nvidia-smi unavailable)", "isa": []}
    return cpu_info()


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else x
