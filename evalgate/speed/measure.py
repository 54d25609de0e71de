"""Parent side of the speed measurement: which profile to measure (``speed_profile``, checked against both
engines' limits: ``check_profile``), then interleaved repeats on two live engine workers (``runner.Worker``).

Both workers have finished their suites and keep their engines warm. Per concurrency level: one warm-up pass per
side (different prompts, a short output; excluded), then ``repeats`` timed passes per side, interleaved: repeat i
runs baseline then candidate when i is even, candidate then baseline when odd (an ABBA order, so a steady drift of
the host's load does not favour the side measured second). Statistics: ``evalgate.speed.speedup``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from evalgate.engine import argnames
from evalgate.engine.platform import has_cuda
from evalgate.errors import ConfigError
from evalgate.evaluate.placement import WARMUP_LABEL
from evalgate.evaluate.runner import SpeedError
from evalgate.inputs.options import RunOptions
from evalgate.inputs.requestlog import FROM_LOG, concurrency_from_log, read_request_log
from evalgate.inputs.thresholds import MAX_TRAFFIC_PROMPTS, SLO_KEYS, ConfigPolicy
from evalgate.speed.block import MeasuredSide, SpeedBlock
from evalgate.speed.precision import (
    BY_REPEATS,
    BY_SECONDS,
    MET,
    pair_cap,
    precision_problems,
    precision_record,
    stein_interval,
    stein_plan,
)
from evalgate.speed.serve import serve_problems
from evalgate.speed.speedup import (
    UNMEASURABLE,
    SpeedComparison,
    TrafficProfile,
    compare_speed,
    describe,
    profile_problems,
    profile_words,
    repeats_needed,
    repeats_words,
    resolve_profile,
    speed_block,
    spread_problems,
)

log = logging.getLogger("evalgate")
WARMUP_OUTPUT_LEN = 16  # tokens: enough to run the decode path at the level's batch size


def measure_speed(workers: Mapping[str, Any], profile: TrafficProfile,
                  progress: Callable[[str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> SpeedBlock:
    """Measure ``profile`` on both sides and compare; ``workers`` maps ``baseline``/``candidate`` to an object with
    ``measure(command) -> result`` (``throughput.measure``'s fields) and ``info`` (its ``ready`` reply).

    Without ``profile.precision``: ``repeats`` interleaved pairs per level. With it (Stein's two-stage rule,
    ``evalgate.speed.precision``): ``repeats`` pairs (the first stage), then the pairs ``stein_plan`` asks for, still
    interleaved, until that count, ``precision.pair_cap`` pairs in all, or the ``max_seconds`` budget ends; the
    level's interval is then Stein's (``stein_interval``) and its row records ``precision``. The budget (seconds,
    from this call's start, by ``clock``) is shared out: each level may use an equal share of what is left when it
    starts; a second-stage pair is not started when the mean duration of the level's pairs so far would take it past
    that share (the first stage always runs). A pair in which a side's engine was restarted (a result with
    ``after_restart``: ``placement.Alternation`` restarts a side whose engine died, warms it up with the level's
    ``WARMUP_LABEL`` command and repeats the lost pass) is left out of that mean, and of the ``pair_seconds`` its
    ``precision`` record reports: the restart's minutes are not a pair's duration.

    Returns:
        The measured ``speed`` block (``speedup.speed_block``: a ``block.SpeedBlock``, throughputs in tok/s, one
        ``SpeedLevel`` per concurrency level) with every raw repeat under ``sides[role]["runs"]`` (with
        ``precision``, each marked ``stage`` 1 or 2; a repeat measured on a side restarted during or right before it,
        ``after_restart: true``).
    Raises:
        SpeedError (from a worker): a measurement failed.
    """
    say = progress or log.info
    start = clock()
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    levels = []
    sent: dict[str, Any] = {}
    for k, c in enumerate(profile.concurrency):
        n = profile.prompts_at(c)
        cmd = {"input_len": profile.input_len, "output_len": profile.output_len, "num_prompts": n,
               "prompts": profile.prompts, "concurrency": c}
        if profile.range_ratio:
            cmd["range_ratio"] = profile.range_ratio
        warm = {**cmd, "output_len": min(profile.output_len, WARMUP_OUTPUT_LEN), "num_prompts": min(n, c), "seed": 1,
                "label": WARMUP_LABEL}
        if profile.requests is not None:  # traffic.from: the log's requests (engine.replay), warm-up its first ones
            cmd = {"log": {"path": profile.requests["path"], "sha256": profile.requests["sha256"], "num_prompts": n,
                           "output_len": profile.output_len}, "concurrency": c}
            warm = {**cmd, "warmup": True, "label": WARMUP_LABEL}
        level_start = clock()
        for role in ("baseline", "candidate"):
            r = workers[role].measure(warm)
            if "requests_summary" in r:
                sent[role] = r["requests_summary"]
        out: dict[str, list[float]] = {"baseline": [], "candidate": []}
        total: dict[str, list[float]] = {"baseline": [], "candidate": []}
        pair_seconds: list[float] = []

        def pair(i: int, planned: int, stage: int | None) -> None:
            t0 = clock()
            order = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
            restarted = False
            for role in order:
                r = workers[role].measure({**cmd, "label": f"repeat {i + 1}/{planned}"})
                r.pop("requests_summary", None)  # the warm-up's reply recorded it
                restarted = restarted or bool(r.get("after_restart"))
                out[role].append(float(r["output_tok_s"]))
                total[role].append(float(r["total_tok_s"]))
                runs[role].append({"concurrency": c, "repeat": i, **({"stage": stage} if stage else {}), **r})
            if not restarted:  # a pair with a side's restart (minutes) would inflate the budget's estimate of the next
                pair_seconds.append(clock() - t0)
            say(f"speed c={c} repeat {i + 1}/{planned}: baseline {out['baseline'][-1]:,.0f}, candidate "
                f"{out['candidate'][-1]:,.0f} output tok/s")

        stage1 = 1 if profile.precision is not None else None
        for i in range(profile.repeats):
            pair(i, profile.repeats, stage1)
        comp = compare_speed(c, out["baseline"], out["candidate"], profile.level, total["baseline"],
                             total["candidate"], profile.power)
        if profile.precision is not None:
            deadline = None
            if profile.max_seconds is not None:  # this level's share of the budget left when it started
                left = start + profile.max_seconds - level_start
                deadline = level_start + left / (len(profile.concurrency) - k)
            comp = _second_stage(comp, profile, out, total, pair, pair_seconds, deadline, clock, say)
        levels.append(comp)
    sides = {role: MeasuredSide.model_validate({**{k: v for k, v in (workers[role].info or {}).items()
                                                  if k != "event"}, "runs": runs[role]})
             for role in ("baseline", "candidate")}
    if profile.requests is not None:
        profile = with_sent_requests(profile, sent)
    return speed_block(levels, profile, sides)


def _second_stage(first: SpeedComparison, profile: TrafficProfile, out: dict[str, list[float]], total: dict[str, list[float]],
                  pair: Callable[[int, int, int | None], None], pair_seconds: list[float], deadline: float | None,
                  clock: Callable[[], float], say: Callable[[str], None]) -> SpeedComparison:
    """Stein's second stage at one level (``measure_speed``): plan from the first stage's pairs, measure the pairs it
    asks for (``pair(i, planned, 2)`` appends one interleaved pair to ``out``/``total``) within the pair cap and the
    level's ``deadline``, and return ``first`` (a ``SpeedComparison`` of the first stage) recomputed over all pairs
    with Stein's interval, its reading and the ``precision`` record."""
    import dataclasses


    plan = stein_plan(out["baseline"], out["candidate"], profile.precision, profile.level)
    cap = pair_cap(profile.repeats, profile.max_repeats)
    planned = min(plan.pairs_needed, cap)
    if plan.pairs_needed > profile.repeats:
        say(f"speed c={first.concurrency}: first-stage spread {plan.sd:.4f} (log ratio) needs {plan.pairs_needed} "
            f"pairs in all for \u00b1{100 * profile.precision:g} %; measuring up to {planned}")
    stopped, i = MET, profile.repeats
    while i < plan.pairs_needed:
        if i >= cap:
            stopped = BY_REPEATS
            break
        if deadline is not None and clock() + (_mean_seconds(pair_seconds) or 0.0) > deadline:
            stopped = BY_SECONDS
            break
        pair(i, planned, 2)
        i += 1
    comp = compare_speed(first.concurrency, out["baseline"], out["candidate"], profile.level, total["baseline"],
                         total["candidate"], profile.power)
    lo, hi = stein_interval(out["baseline"], out["candidate"], plan)
    verdict = describe(lo, hi)
    need = repeats_needed(out["baseline"], out["candidate"], profile.level, profile.power) \
        if verdict == UNMEASURABLE else None
    return dataclasses.replace(comp, ci_low=lo, ci_high=hi, verdict=verdict, repeats_needed=need,
                               precision=precision_record(profile.precision, plan, i, stopped,
                                                          pair_seconds=_mean_seconds(pair_seconds)))


def _mean_seconds(pair_seconds: list[float]) -> float | None:
    """Mean seconds of the level's pairs, or None when there is none or a clock gave no positive time."""
    mean = sum(pair_seconds) / len(pair_seconds) if pair_seconds else 0.0
    return mean if mean > 0 else None


def with_sent_requests(profile: TrafficProfile, sent: Mapping[str, dict[str, Any]]) -> TrafficProfile:
    """``profile`` with what each side's worker sent of the request log (``engine.replay.load_requests``'
    summaries, by role): ``requests.sent`` (the baseline's: count and token-length quantiles; the candidate's too,
    as ``sent_candidate``, when its tokenizer counted differently) and ``requests.same_requests`` (both sides sent
    the same prompt texts and output budgets: equal ``requests_sha256``)."""
    base, cand = sent.get("baseline"), sent.get("candidate")
    meta = dict(profile.requests or {})
    meta["sent"] = base
    if cand != base:
        meta["sent_candidate"] = cand
    meta["same_requests"] = bool(base and cand and base.get("requests_sha256") == cand.get("requests_sha256"))
    return profile.replace(requests=meta)


def speed_profile(options: RunOptions, policy: ConfigPolicy, *, default_on: bool = False) -> TrafficProfile | None:
    """The traffic profile to measure, or None: speed is measured when the candidate's policy has traffic keys
    (``policy.traffic``: the thresholds' ``traffic`` section or ``configs.<name>.traffic``), the command line asks
    for it (``--speed``/``--concurrency``/``--repeats``/``--precision``/...) or ``default_on`` (ablate), and never
    with ``--no-speed``. ``policy``: ``Thresholds.policy(candidate)``.

    Raises:
        ConfigError: the profile is invalid (also its precision keys together: ``precision.precision_problems``;
            ``range_ratio`` with ``prompts: suites``), asks ``mode: serve`` for what serve mode cannot measure
            (``servespeed.serve_problems``), or the installed vLLM lacks the benchmark code the mode calls
            (``check_benchmark_code``).
    """
    fields = policy.traffic
    if options.no_speed or not (default_on or options.wants_speed or fields is not None):
        refuse_unmeasured_slos(policy, "--no-speed" if options.no_speed else None)
        return None
    fields = dict(fields or {})
    log_path = fields.pop("from", None)
    from_log = fields.get("concurrency") == FROM_LOG
    if from_log:
        fields.pop("concurrency")
    profile = resolve_profile(fields, cuda=has_cuda(), concurrency=options.concurrency, repeats=options.repeats,
                              power=policy.power,  # the speed MDE at the quality side's power
                              precision=getattr(options, "precision", None),
                              max_repeats=getattr(options, "max_repeats", None),
                              max_seconds=getattr(options, "max_seconds", None))

    for fld, msg in precision_problems(profile.repeats, profile.precision, profile.max_repeats, profile.max_seconds):
        path, dotted = traffic_source(policy, fld, options)
        raise ConfigError(msg, path=path, field=dotted)
    for fld, msg in spread_problems(profile):
        path, dotted = traffic_source(policy, fld, options)
        raise ConfigError(msg, path=path, field=dotted)
    if profile.range_ratio and profile.prompts != "random":
        path, dotted = traffic_source(policy, "range_ratio", options)
        raise ConfigError(f"varies vLLM's random prompts only, got prompts: {profile.prompts} (the suites' prompts "
                          f"keep their own lengths); remove it or use prompts: random", path=path, field=dotted)
    if log_path is not None or from_log:
        profile = log_profile(profile, fields, log_path, from_log and not options.concurrency, policy, options)
    if profile.mode == "serve":
        for fld, msg in serve_problems(profile):
            path, dotted = traffic_source(policy, fld, options)
            raise ConfigError(msg, path=path, field=dotted)
    profile = with_latency_slos(profile, policy)
    check_benchmark_code(profile.mode, policy, options, replay=profile.requests is not None)
    return profile


def _slo_field(policy: ConfigPolicy) -> str:
    """The dotted field of the policy's first latency objective: ``configs.<name>.max_...`` or ``speed.max_...``."""
    key = next(k for k in SLO_KEYS if getattr(policy.speed_floors, k) is not None)
    return policy.speed_field(key)


def refuse_unmeasured_slos(policy: ConfigPolicy, flag: str | None) -> None:
    """ConfigError (exit 2, naming the objective's file and field) when the policy has a latency objective but
    the run measures no speed (``flag``: ``--no-speed``, else no ``traffic`` section and no speed flag): the
    objective could never be checked, and the gate would block on it after both engines ran."""
    if policy.speed_floors.slos():
        why = "--no-speed turns the speed phase off" if flag else "no speed is measured (no traffic section, no --speed)"
        raise ConfigError(f"a latency objective needs a serve-mode speed measurement, but {why}: set "
                          f"traffic: {{mode: serve}} or remove the objective", path=policy.path,
                          field=_slo_field(policy))


def with_latency_slos(profile: TrafficProfile, policy: ConfigPolicy) -> TrafficProfile:
    """``profile`` with the per-request goodput objectives of the policy's latency SLOs
    (``thresholds.LatencySlos``: ``speed.max_ttft_p99_ms`` ..., or ``configs.<name>.max_...``) when it is measured in
    serve mode; unchanged when no SLO is set.

    Raises:
        ConfigError (exit 2), naming the SLO's file and field: an SLO with ``mode: offline``, which measures
            throughput only (no per-request latency), so the objective could never be checked.
    """
    slos = policy.speed_floors
    if not slos.slos():
        return profile
    if profile.mode != "serve":
        raise ConfigError("a latency objective is measured in serve mode only (offline mode measures throughput, "
                          "not per-request latency): set traffic.mode: serve", path=policy.path,
                          field=_slo_field(policy))
    return profile.replace(goodput=slos.goodput() or None)


def log_profile(profile: TrafficProfile, fields: dict[str, Any], log_path: str | None, from_log: bool,
                policy: ConfigPolicy, options: RunOptions) -> TrafficProfile:
    """``profile`` turned into the replay of the request log ``log_path`` (``traffic.from``, relative to the
    thresholds file): the log read and checked (``requestlog.read_request_log``), ``num_prompts`` its request count
    (or the first ``traffic.num_prompts``), and with ``from_log`` the concurrency levels the log's timestamps imply
    (``requestlog.concurrency_from_log``: typical, then peak). ``fields``: the traffic keys set (``from`` and a
    ``from-log`` concurrency taken out).

    Raises:
        ConfigError (exit 2): ``concurrency: from-log`` without ``from``; ``input_len``, ``prompts`` or
            ``range_ratio`` beside ``from``; more ``num_prompts`` than the log holds, or a log of more than ``MAX_TRAFFIC_PROMPTS``
            requests without ``num_prompts``; and every problem of the log itself (naming its file, line and
            field).
    """

    def refuse(fld: str, msg: str) -> None:
        path, dotted = traffic_source(policy, fld, options)
        raise ConfigError(msg, path=path, field=dotted)

    if log_path is None:
        refuse("concurrency", f"concurrency: {FROM_LOG} needs a request log: set traffic.from")
    for key in ("input_len", "prompts", "range_ratio"):
        if key in fields:
            refuse(key, "does not apply with traffic.from (the logged requests are sent as recorded); remove it")
    base = Path(policy.path).parent if policy.path is not None else Path(".")
    log = read_request_log(Path(os.path.normpath(base / str(log_path))), times=from_log)
    count = len(log.requests)
    n = fields.get("num_prompts")
    if n is not None and n > count:
        refuse("num_prompts", f"asks for {n} requests, but the request log {log.path} holds {count}")
    if n is None and count > MAX_TRAFFIC_PROMPTS:
        refuse("from", f"the request log holds {count:_} requests, more than {MAX_TRAFFIC_PROMPTS:_} per repeat: set "
                       f"traffic.num_prompts to send its first ones")
    concurrency = profile.concurrency
    conc: dict[str, Any] = {"source": "--concurrency" if options.concurrency else
                            "traffic.concurrency" if "concurrency" in fields else "default"}
    if from_log:
        levels = concurrency_from_log(log)
        conc = {"source": FROM_LOG, **levels}
        concurrency = tuple(dict.fromkeys((levels["typical"], levels["peak"])))
    meta = {"path": str(log.path), "sha256": log.sha256, "requests": count, "formats": log.formats(),
            "concurrency": conc}
    return profile.replace(input_len=None, prompts="log", concurrency=concurrency,
                           num_prompts=n if n is not None else count, requests=meta)


def check_benchmark_code(mode: str, policy: ConfigPolicy, options: RunOptions | None = None, *, replay: bool = False) -> None:
    """ConfigError (exit 2, naming the installed vLLM and ``traffic.mode``) when the installed vLLM lacks the
    benchmark code speed mode ``mode`` calls (``engine.argnames.missing_offline_benchmark`` /
    ``missing_serve_benchmark``: read from vLLM's source, no import), before any engine starts; with ``replay`` (a
    request log), also its custom-dataset loader (``missing_log_replay``, naming ``traffic.from``)."""
    missing = argnames.missing_serve_benchmark() if mode == "serve" else argnames.missing_offline_benchmark()
    if replay and not missing and argnames.missing_log_replay():
        missing, mode = argnames.missing_log_replay(), "offline (traffic.from)"
    if missing:
        path, dotted = traffic_source(policy, "from" if mode.endswith("(traffic.from)") else "mode", options)
        raise ConfigError(f"speed mode '{mode}' needs {'; '.join(missing)}, which the installed vLLM "
                          f"({argnames.installed_vllm_version()}) lacks", path=path, field=dotted)


def traffic_source(policy: ConfigPolicy, fld: str, options: RunOptions | None = None) -> tuple[Path | None, str]:
    """``(file, dotted field)`` that set traffic field ``fld`` of the policy's profile, for an error message: the
    command line (``--concurrency`` / ``--repeats`` / ``--precision`` / ``--max-repeats`` / ``--max-seconds``: no
    file), else the thresholds file and ``policy.traffic_field(fld)`` (``configs.<config>.traffic.<fld>``, else
    ``traffic.<fld>``, also when the value is the platform's default)."""
    flag = fld if fld in ("concurrency", "repeats", "precision", "max_repeats", "max_seconds") else None
    if options is not None and flag and getattr(options, flag, None) not in (None, [], ()):
        return None, f"--{flag.replace('_', '-')}"
    return policy.path, policy.traffic_field(fld)


def check_profile(profile: TrafficProfile, configs: dict[str, Any], limits: dict[str, dict[str, int]], policy: ConfigPolicy, *,
                  options: RunOptions | None = None) -> None:
    """ConfigError (exit 2) when an engine of ``configs`` (role -> config) cannot run ``profile`` (too long for its
    max_model_len, or more concurrent requests than its max_num_seqs); ``limits``: role -> the engine's limits
    (``runner.check_engine_values``); ``policy`` (the candidate's) and ``options`` (the run options) let the
    message name where the field was set (``traffic_source``)."""
    for role, cfg in configs.items():
        for fld, msg in profile_problems(profile, limits.get(role, {})):
            path, dotted = traffic_source(policy, fld, options)
            raise ConfigError(f"{msg} of {role} config {cfg.name} ({cfg.path})", path=path, field=dotted)


def check_speed_only_profile(profile: TrafficProfile | None, policy: ConfigPolicy,
                             options: RunOptions | None = None) -> None:
    """ConfigError (exit 2) when a ``--speed-only`` run's ``profile`` needs the suites: ``prompts: suites`` takes
    its prompts from the suites' items, and a speed-only run runs none. ``policy``: the candidate's."""
    if profile is not None and profile.prompts == "suites":
        path, dotted = traffic_source(policy, "prompts", options)
        raise ConfigError("is 'suites' (the suites' own prompts), but --speed-only runs no suite; use prompts: random "
                          "(or a request log, traffic.from)", path=path, field=dotted)


def measure_speed_safely(workers: dict[str, Any], profile: TrafficProfile) -> SpeedBlock:
    """The speed block (``measure_speed``), or, when a measurement failed, a failed one:
    ``SpeedBlock(status="failed", error=one line, profile=profile)`` (only those keys set, so it is
    written as ``{"status", "error", "profile"}``): the quality verdict is still written (the run then exits 3).
    Raises nothing: an unexpected exception becomes an ``internal error: ...`` failure too."""
    # repeats_words says "per side" only where it is true: a precision target's budget is the whole speed phase's.
    log.info("speed: %s, concurrency %s, %s", profile_words(profile),
             ",".join(map(str, profile.concurrency)), repeats_words(profile, interleaved=True))
    try:
        return measure_speed(workers, profile)
    except SpeedError as exc:
        return SpeedBlock(status="failed", error=str(exc), profile=profile)
    except Exception as exc:  # noqa: BLE001 - a bug in the speed phase must not lose the quality verdict either
        return SpeedBlock(status="failed", error=f"internal error: {type(exc).__name__}: {exc}", profile=profile)
