"""Parent side of the speed measurement: which profile to measure (``speed_profile``, checked against both
engines' limits: ``check_profile``), then interleaved repeats on two live engine workers (``runner.Worker``).

Both workers have finished their suites and keep their engines warm. Per concurrency level: one warm-up pass per
side (different prompts, a short output; excluded), then ``repeats`` timed passes per side, interleaved: repeat i
runs baseline then candidate when i is even, candidate then baseline when odd (an ABBA order, so a steady drift of
the host's load does not favour the side measured second). Statistics: ``evalgate.speed``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from evalgate.errors import ConfigError
from evalgate.speed import TrafficProfile, compare_speed, speed_block

log = logging.getLogger("evalgate")
WARMUP_OUTPUT_LEN = 16  # tokens: enough to run the decode path at the level's batch size


def measure_speed(workers: Mapping[str, Any], profile: TrafficProfile,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure ``profile`` on both sides and compare; ``workers`` maps ``baseline``/``candidate`` to an object with
    ``measure(command) -> result`` (``throughput.measure``'s fields) and ``info`` (its ``ready`` reply).

    Returns:
        The ``speed`` block (``speed.speed_block``) with every raw repeat under ``sides.<role>.runs``.
    Raises:
        SpeedError (from a worker): a measurement failed.
    """
    say = progress or log.info
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "candidate": []}
    levels = []
    for c in profile.concurrency:
        n = profile.prompts_at(c)
        cmd = {"input_len": profile.input_len, "output_len": profile.output_len, "num_prompts": n,
               "prompts": profile.prompts, "concurrency": c}
        warm = {**cmd, "output_len": min(profile.output_len, WARMUP_OUTPUT_LEN), "num_prompts": min(n, c), "seed": 1,
                "label": "warm-up"}
        for role in ("baseline", "candidate"):
            workers[role].measure(warm)
        out: dict[str, list[float]] = {"baseline": [], "candidate": []}
        total: dict[str, list[float]] = {"baseline": [], "candidate": []}
        for i in range(profile.repeats):
            order = ("baseline", "candidate") if i % 2 == 0 else ("candidate", "baseline")
            for role in order:
                r = workers[role].measure({**cmd, "label": f"repeat {i + 1}/{profile.repeats}"})
                out[role].append(float(r["output_tok_s"]))
                total[role].append(float(r["total_tok_s"]))
                runs[role].append({"concurrency": c, "repeat": i, **r})
            say(f"speed c={c} repeat {i + 1}/{profile.repeats}: baseline {out['baseline'][-1]:,.0f}, candidate "
                f"{out['candidate'][-1]:,.0f} output tok/s")
        levels.append(compare_speed(c, out["baseline"], out["candidate"], profile.level,
                                    total["baseline"], total["candidate"], profile.power))
    sides = {role: {**{k: v for k, v in (workers[role].info or {}).items() if k != "event"}, "runs": runs[role]}
             for role in ("baseline", "candidate")}
    return speed_block(levels, profile, sides)


def speed_profile(options: Any, thresholds: Any, config_name: str, *, default_on: bool = False) -> Any:
    """The traffic profile to measure, or None: speed is measured when the thresholds file has a ``traffic``
    section (or ``configs.<name>.traffic``), the command line asks for it (``--speed``/``--concurrency``/
    ``--repeats``) or ``default_on`` (ablate), and never with ``--no-speed``.

    Raises:
        ConfigError: the profile is invalid, asks ``mode: serve`` for what serve mode cannot measure
            (``servespeed.serve_problems``), or the installed vLLM lacks the benchmark code the mode calls
            (``check_benchmark_code``).
    """
    from evalgate.engine import has_cuda
    from evalgate.speed import resolve_profile

    fields = thresholds.traffic_for(config_name)
    if options.no_speed or not (default_on or options.wants_speed or fields is not None):
        return None
    profile = resolve_profile(fields, cuda=has_cuda(), concurrency=options.concurrency, repeats=options.repeats,
                              power=thresholds.power)  # the speed MDE at the quality side's power
    if profile.mode == "serve":
        from evalgate.servespeed import serve_problems

        for fld, msg in serve_problems(profile):
            path, dotted = traffic_source(thresholds, config_name, fld, options)
            raise ConfigError(msg, path=path, field=dotted)
    check_benchmark_code(profile.mode, thresholds, config_name, options)
    return profile


def check_benchmark_code(mode: str, thresholds: Any, config_name: str, options: Any = None) -> None:
    """ConfigError (exit 2, naming the installed vLLM and ``traffic.mode``) when the installed vLLM lacks the
    benchmark code speed mode ``mode`` calls (``engine.argnames.missing_offline_benchmark`` /
    ``missing_serve_benchmark``: read from vLLM's source, no import), before any engine starts."""
    from evalgate.engine import argnames

    missing = argnames.missing_serve_benchmark() if mode == "serve" else argnames.missing_offline_benchmark()
    if missing:
        path, dotted = traffic_source(thresholds, config_name, "mode", options)
        raise ConfigError(f"speed mode '{mode}' needs {'; '.join(missing)}, which the installed vLLM "
                          f"({argnames.installed_vllm_version()}) lacks", path=path, field=dotted)


def traffic_source(thresholds: Any, config: str | None, fld: str, options: Any = None) -> tuple[Any, str]:
    """``(file, dotted field)`` that set traffic field ``fld`` of ``config``'s profile, for an error message: the
    command line (``--concurrency`` / ``--repeats``: no file), ``configs.<config>.traffic.<fld>``, else
    ``traffic.<fld>`` (also when the value is the platform's default)."""
    flag = {"concurrency": "concurrency", "repeats": "repeats"}.get(fld)
    if options is not None and flag and getattr(options, flag, None) not in (None, [], ()):
        return None, f"--{flag}"
    override = thresholds.configs.get(config) if config is not None else None
    if override is not None and fld in override.traffic.fields():
        return thresholds.path, f"configs.{config}.traffic.{fld}"
    return thresholds.path, f"traffic.{fld}"


def check_profile(profile: Any, configs: dict[str, Any], limits: dict[str, dict[str, int]], thresholds: Any, *,
                  config: str | None = None, options: Any = None) -> None:
    """ConfigError (exit 2) when an engine of ``configs`` (role -> config) cannot run ``profile`` (too long for its
    max_model_len, or more concurrent requests than its max_num_seqs); ``limits``: role -> the engine's limits
    (``runner.check_engine_values``); ``config`` (the candidate's name) and ``options`` (the run options) let the
    message name where the field was set (``traffic_source``)."""
    from evalgate.speed import profile_problems

    for role, cfg in configs.items():
        for fld, msg in profile_problems(profile, limits.get(role, {})):
            path, dotted = traffic_source(thresholds, config, fld, options)
            raise ConfigError(f"{msg} of {role} config {cfg.name} ({cfg.path})", path=path, field=dotted)


def measure_speed_safely(workers: dict[str, Any], profile: Any) -> dict[str, Any]:
    """The speed block (``speedrun.measure_speed``), or ``{"status": "failed", "error", "profile"}`` when a
    measurement failed: the quality verdict is still written (the run then exits 3)."""
    from evalgate.runner import SpeedError

    log.info("speed: %s in / %s out tokens, concurrency %s, %s repeats per side, interleaved",
             profile.input_len, profile.output_len, ",".join(map(str, profile.concurrency)), profile.repeats)
    try:
        return measure_speed(workers, profile)
    except SpeedError as exc:
        return {"status": "failed", "error": str(exc), "profile": profile.as_dict()}
    except Exception as exc:  # noqa: BLE001 - a bug in the speed phase must not lose the quality verdict either
        return {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}", "profile": profile.as_dict()}
