"""The ``evalgate`` command line: one thin function per command, each returning an exit code.

Exit codes (``errors.ExitCode``): 0 PASS, 1 BLOCK, 2 usage/config error, 3 runtime error,
4 NO-OP, 5 INCONCLUSIVE (too few items to decide; only with ``on_inconclusive: warn``), 130 interrupted.
Errors print one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import logging
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NoReturn, Sequence

from evalgate.errors import ConfigError, EvalgateError, ExitCode
from evalgate.project import builtin_dir

log = logging.getLogger("evalgate")
# The thresholds shipped with evalgate; a command uses its project's (project.layout) unless --thresholds is given.
THRESHOLDS_FILE = builtin_dir() / "thresholds.yaml"
_VERDICT_EXIT = {"PASS": ExitCode.PASS, "BLOCK": ExitCode.BLOCK, "NO-OP": ExitCode.NO_OP,
                 "INCONCLUSIVE": ExitCode.INCONCLUSIVE}


def _error_outputs(cmd):  # type: ignore[no-untyped-def]
    """Decorate a command so that a failure still leaves ``verdict.junit.xml`` and ``summary.md`` (an error)
    in its run directory (``args.run_dir`` once known, else ``--out``), for CI to publish."""
    import functools

    @functools.wraps(cmd)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return cmd(args)
        except (Exception, KeyboardInterrupt) as exc:  # an interrupt (Ctrl-C, a CI cancel's SIGTERM) too
            out = getattr(args, "run_dir", None) or getattr(args, "out", None)
            if out:
                from evalgate.outputs import write_error_outputs

                if isinstance(exc, KeyboardInterrupt):
                    msg, code = "interrupted (SIGINT or SIGTERM) before a verdict", int(ExitCode.INTERRUPTED)
                else:
                    msg = str(exc) if isinstance(exc, EvalgateError) else f"internal error: {type(exc).__name__}: {exc}"
                    code = int(getattr(exc, "exit_code", ExitCode.RUNTIME))
                try:
                    write_error_outputs(Path(out), msg, code, getattr(args, "config", None) or args.command)
                except OSError:
                    pass
            raise

    return wrapper


@_error_outputs
def cmd_run(args: argparse.Namespace) -> int:
    """Gate a candidate config against its baseline; write the run directory; exit with the verdict."""
    from evalgate import config as config_mod
    from evalgate.engine import check_platform
    from evalgate.gating import gate_runs
    from evalgate.model import evalgate_home
    from evalgate.outputs import write_outputs
    from evalgate.progress import engine_progress
    from evalgate.report import render_terminal
    from evalgate.runner import check_engine_values, evaluate_config, start_config
    from evalgate.store import ResultStore, tasks_to_json, write_json_atomic
    from evalgate.suites import check_datasets, default_suites_dir, list_suites, load_suite
    from evalgate.thresholds import load_thresholds

    _check_run_args(args)
    t0 = time.monotonic()
    configs_dir = Path(args.configs_dir)
    cand = config_mod.load_config(args.config, configs_dir)
    base = config_mod.load_baseline(cand, configs_dir)
    for cfg in (base, cand):
        check_platform(cfg.engine_args, cfg.path)
    thresholds = load_thresholds(Path(args.thresholds))
    suites_dir = Path(args.suites_dir) if args.suites_dir else default_suites_dir()
    suites = [load_suite(n, suites_dir) for n in args.suites] if args.suites else list_suites(suites_dir)
    if not suites:
        raise ConfigError("no suites found", path=suites_dir)
    all_suites = list_suites(suites_dir)
    # Every task's data must be at hand before an engine starts; offline, lm-eval must not wait on the hub.
    os.environ.update(check_datasets(suites))
    thresholds.check_names([s.name for s in all_suites], [t for s in all_suites for t in s.tasks],
                           [*config_mod.list_configs(configs_dir), cand.name])
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else Path("runs") / f"{cand.name.replace('/', '_')}-{stamp}"
    args.run_dir = out
    store = ResultStore(evalgate_home() / "store")
    timings = {"load": time.monotonic() - t0}

    profile = _speed_profile(args, thresholds, cand)
    # vLLM validates the candidate's values before the baseline runs: a refused value costs seconds, not a baseline.
    limits = {"candidate": check_engine_values(cand, out / "logs" / "candidate-check.log", args.timeout)}
    if profile is not None:  # a profile the engines cannot run is refused before any engine starts
        limits["baseline"] = check_engine_values(base, out / "logs" / "baseline-check.log", args.timeout)
        _check_profile(profile, limits, {"baseline": base, "candidate": cand}, thresholds)
    runs: dict[str, Any] = {}
    workers: dict[str, Any] = {}
    speed: dict[str, Any] | None = None
    try:
        for role, cfg in (("baseline", base), ("candidate", cand)):
            log.info("%s '%s': %s (engine log: %s)", role, cfg.name, ", ".join(s.name for s in suites),
                     out / "logs" / f"{role}.log")
            t1 = time.monotonic()
            kwargs = dict(limit=args.limit, store=store, log_path=out / "logs" / f"{role}.log", timeout_s=args.timeout,
                          reference=runs.get("baseline"), logprob_items=args.logprob_items)
            with engine_progress(out / "logs" / f"{role}.log", f"{role} {cfg.name}", [s.name for s in suites]):
                if profile is None:
                    runs[role] = evaluate_config(cfg, suites, **kwargs)
                else:  # the engine stays up for the speed phase, after both sides' suites
                    workers[role], runs[role] = start_config(cfg, suites, **kwargs)
            timings[f"{role}:total"] = time.monotonic() - t1
            timings.update({f"{role}:{k}": v for k, v in runs[role].timings.items()})
            write_json_atomic(out / f"{role}.json", {"config": cfg.name, "effective": runs[role].effective,
                                                     "spec_decode": runs[role].spec_decode,
                                                     "evidence_sources": runs[role].evidence_sources,
                                                     "tasks": tasks_to_json(runs[role].tasks)})
        if profile is not None:
            t3 = time.monotonic()
            speed = _measure(workers, profile)
            timings["speed"] = time.monotonic() - t3
    except BaseException:  # an error or Ctrl-C: stop the engines now (they run in sessions of their own)
        for w in workers.values():
            w.kill()
        raise
    for w in workers.values():
        w.close()
    doc, manifest = gate_runs(runs, thresholds, suites, limit=args.limit, stamp=stamp, timings=timings, speed=speed)
    write_json_atomic(out / "manifest.json", manifest)
    write_json_atomic(out / "verdict.json", doc)
    paths = write_outputs(doc, out)
    print(render_terminal(doc))
    print(f"report: {paths['html']}")
    if speed is not None and speed.get("status") != "measured":
        from evalgate.runner import SpeedError

        # The quality results are in the store and in the run directory; the run as a whole failed (exit 3).
        raise SpeedError(f"quality verdict {doc['verdict']} (kept in {out / 'verdict.json'}), but the speed "
                         f"measurement failed: {speed.get('error')}")
    return int(_VERDICT_EXIT[doc["verdict"]])


def _measure(workers: dict[str, Any], profile: Any) -> dict[str, Any]:
    """The speed block, or ``{"status": "failed", "error", "profile"}`` when a measurement failed (exit 3 later)."""
    from evalgate.runner import SpeedError
    from evalgate.speedrun import measure_speed

    log.info("speed: %s in / %s out tokens, concurrency %s, %s repeats per side, interleaved",
             profile.input_len, profile.output_len, ",".join(map(str, profile.concurrency)), profile.repeats)
    try:
        return measure_speed(workers, profile)
    except SpeedError as exc:
        return {"status": "failed", "error": str(exc), "profile": profile.as_dict()}
    except Exception as exc:  # noqa: BLE001 - a bug in the speed phase must not lose the quality verdict either
        return {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}", "profile": profile.as_dict()}


def _speed_profile(args: argparse.Namespace, thresholds: Any, cand: Any) -> Any:
    """The traffic profile to measure, or None: speed is measured when the thresholds file has a ``traffic``
    section (or ``configs.<name>.traffic``) or the command line passes ``--speed`` / ``--concurrency``, and not
    with ``--no-speed``."""
    from evalgate.engine import has_cuda
    from evalgate.speed import resolve_profile

    fields = thresholds.traffic_for(cand.name)
    wanted = args.speed or bool(args.concurrency) or args.repeats is not None or fields is not None
    if args.no_speed or not wanted:
        return None
    profile = resolve_profile(fields, cuda=has_cuda(), concurrency=args.concurrency, repeats=args.repeats)
    if profile.mode == "serve":
        raise ConfigError("traffic.mode 'serve' (vllm serve + vllm bench serve) is not available in this version; "
                          "use mode: offline", path=thresholds.path, field="traffic.mode")
    return profile


def _check_profile(profile: Any, limits: dict[str, dict[str, int]], configs: dict[str, Any], thresholds: Any) -> None:
    """ConfigError (exit 2) when either engine cannot run ``profile`` (too long for max_model_len, or more
    concurrent requests than max_num_seqs)."""
    from evalgate.speed import profile_problems

    for role, cfg in configs.items():
        for fld, msg in profile_problems(profile, limits.get(role, {})):
            raise ConfigError(f"{msg} of {role} config {cfg.name} ({cfg.path})", path=thresholds.path,
                              field=f"traffic.{fld}")


def _concurrency_list(text: str) -> list[int]:
    """``--concurrency 1,16,256`` as a list of distinct integers >= 1 (argparse type)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be integers separated by commas, e.g. 1,16,256; got {text!r}") from None
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"must be distinct integers >= 1, e.g. 1,16,256; got {text!r}")
    return values


@_error_outputs
def cmd_ablate(args: argparse.Namespace) -> int:
    """Each switch of a recipe alone, then cumulatively, against the recipe's baseline: quality and speed per switch
    (``evalgate.ablate``); writes ``ablation.html``, ``ablation.json`` and one run directory per variant.
    Exit 0, or 3 when a variant's engine or speed measurement failed (the others are kept)."""
    from evalgate import ablate
    from evalgate import config as config_mod
    from evalgate.engine import check_platform
    from evalgate.errors import EngineError
    from evalgate.gating import gate_runs
    from evalgate.model import evalgate_home
    from evalgate.outputs import write_outputs
    from evalgate.runner import check_engine_values, start_config
    from evalgate.store import ResultStore, write_json_atomic
    from evalgate.suites import default_suites_dir, list_suites, load_suite
    from evalgate.thresholds import load_thresholds

    _check_run_args(args)
    configs_dir = Path(args.configs_dir)
    recipe = config_mod.load_config(args.config, configs_dir)
    base = config_mod.load_baseline(recipe, configs_dir)
    check_platform(base.engine_args, base.path)
    thresholds = load_thresholds(Path(args.thresholds))
    suites_dir = Path(args.suites_dir) if args.suites_dir else default_suites_dir()
    suites = [load_suite(n, suites_dir) for n in args.suites] if args.suites else list_suites(suites_dir)
    if not suites:
        raise ConfigError("no suites found", path=suites_dir)
    known = {n: config_mod.load_config(n, configs_dir, check_engine_args=False) for n in config_mod.list_configs(configs_dir)}

    def refuse(cfg: Any) -> str:
        try:
            check_platform(cfg.engine_args, cfg.path)
        except ConfigError as exc:
            return str(exc).split(": ", 2)[-1]
        return ""

    variants = ablate.plan_variants(base, recipe, known, refuse)
    if args.kind != "all":  # e.g. the alone rows in one command, the cumulative ones in another (the store is shared)
        variants = [v for v in variants if v.kind == args.kind]
    if args.switches:  # only these switches' alone rows (the cumulative rows need the whole chain)
        names = {s.key for v in variants for s in v.switches}
        unknown = [k for k in args.switches if k not in names]
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a switch of {recipe.name}; its switches: {', '.join(sorted(names))}",
                              field="--switches")
        variants = [v for v in variants if v.kind != "alone" or v.switches[0].key in args.switches]
    if not variants:
        raise ConfigError(f"{recipe.name} does not differ from its baseline {base.name}: nothing to ablate",
                          path=recipe.path)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else Path("runs") / f"ablate-{recipe.name.replace('/', '_')}-{stamp}"
    args.run_dir = out
    args.speed = not args.no_speed  # an ablation measures speed unless told not to
    profile = _speed_profile(args, thresholds, recipe)
    if profile is not None:
        limits = {"baseline": check_engine_values(base, out / "logs" / "baseline-check.log", args.timeout)}
        _check_profile(profile, limits, {"baseline": base}, thresholds)
    store = ResultStore(evalgate_home() / "store")
    docs: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    refused: dict[str, str] = {}
    kwargs = dict(limit=args.limit, store=store, timeout_s=args.timeout, logprob_items=args.logprob_items)
    base_worker, base_run = start_config(base, suites, log_path=out / "logs" / "baseline.log", **kwargs)
    info = dict(base_worker.info)
    try:
        for v in variants:
            name = v.config.name
            if v.skipped or name in docs or name in failed or name in refused:
                continue
            slug = name.replace("/", "_").replace("~", "-")
            log.info("ablate: %s %s (config %s)", v.kind, v.label, name)
            timings: dict[str, float] = {}
            try:
                worker, run = start_config(v.config, suites, log_path=out / "logs" / f"{slug}.log",
                                           reference=base_run, **kwargs)
            except ConfigError as exc:  # vLLM refused a value of this variant: skip it, as the platform check does
                refused[name] = str(exc)
                continue
            except EngineError as exc:
                failed[name] = str(exc)
                continue
            try:
                speed = None
                if profile is not None:
                    t0 = time.monotonic()
                    speed = _measure({"baseline": base_worker, "candidate": worker}, profile)
                    timings["speed"] = time.monotonic() - t0
            except BaseException:
                worker.kill()
                raise
            worker.close()
            doc, manifest = gate_runs({"baseline": base_run, "candidate": run}, thresholds, suites, limit=args.limit,
                                      stamp=stamp, timings=timings, speed=speed,
                                      gate_name=name if name in known else recipe.name)
            write_json_atomic(out / "variants" / slug / "verdict.json", doc)
            write_json_atomic(out / "variants" / slug / "manifest.json", manifest)
            write_outputs(doc, out / "variants" / slug)
            docs[name] = doc
            if speed is not None and speed.get("status") != "measured":
                failed[name] = f"speed measurement failed: {speed.get('error')}"
    except BaseException:
        base_worker.kill()
        raise
    base_worker.close()
    variants = [dataclasses.replace(v, skipped=v.skipped or refused.get(v.config.name, "")) for v in variants]
    rows = ablate.ablation_rows(variants, docs)
    for r in rows:
        if r["config"] in failed and not r.get("verdict"):
            r["skipped"] = f"failed: {failed[r['config']]}"
    meta = {"recipe": recipe.name, "baseline": base.name, "model": recipe.model, "limit": args.limit,
            "profile": None if profile is None else profile.as_dict(), "device": info.get("device", "?"),
            "isa": info.get("isa", []), "method": __import__("evalgate.speed", fromlist=["METHOD"]).METHOD,
            "versions": info.get("versions", {}), "created": stamp}
    write_json_atomic(out / "ablation.json", {"meta": meta, "rows": rows})
    (out / "ablation.html").write_text(ablate.render_html(rows, meta), encoding="utf-8")
    print(ablate.render_table(rows))
    print(f"report: {out / 'ablation.html'}")
    if failed:
        raise EngineError(f"{len(failed)} variant(s) failed (the others are in {out / 'ablation.html'}): "
                          + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return int(ExitCode.PASS)


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render report.html, verdict.junit.xml and summary.md from a stored run's verdict.json (exit 0)."""
    from evalgate.report import render_terminal
    from evalgate.runs import rerender

    doc, paths = rerender(Path(args.run_dir), Path(args.out) if args.out else None)
    print(render_terminal(doc))
    print(f"report: {paths['html']}")
    return int(ExitCode.PASS)


@_error_outputs
def cmd_compare(args: argparse.Namespace) -> int:
    """Gate RUN_B's candidate against RUN_A's candidate (stored runs); exit with the verdict."""
    from evalgate.report import render_terminal
    from evalgate.runs import compare_runs

    a, b = Path(args.run_a), Path(args.run_b)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else Path("runs") / f"compare-{a.name}-vs-{b.name}-{stamp}"
    # A refusal (a missing or malformed run, incomparable runs) happens before anything is written. With --out,
    # CI asked for that directory and gets an error summary there; without it, no directory of our own naming (nor
    # runs/) is left behind, only the one-line error. Once the comparison has started writing, the error joins it.
    if args.out:
        args.run_dir = out
    try:
        doc = compare_runs(a, b, Path(args.thresholds), out)
    except BaseException:
        if out.is_dir():
            args.run_dir = out
        raise
    print(render_terminal(doc))
    print(f"report: {out / 'report.html'}")
    return int(_VERDICT_EXIT[doc["verdict"]])


def cmd_changed_configs(args: argparse.Namespace) -> int:
    """Print the configs a change needs gated (one per line; reasons on stderr)."""
    import json

    from evalgate.ci import changed_configs
    from evalgate.suites import default_suites_dir

    found = changed_configs(args.base, args.head, configs_dir=Path(args.configs_dir),
                            suites_dir=Path(args.suites_dir) if args.suites_dir else default_suites_dir(),
                            thresholds_file=Path(args.thresholds))
    for name, reason in found.items():
        print(f"evalgate: {name}: {reason}", file=sys.stderr)
    print(json.dumps(list(found)) if args.json else "\n".join(found))
    return int(ExitCode.PASS)


def _check_run_args(args: argparse.Namespace) -> None:
    """Command-line values of ``run`` that argparse's types let through (before anything is loaded)."""
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"must be >= 1, got {args.limit}", field="--limit")
    if args.logprob_items < 0:
        raise ConfigError(f"must be >= 0, got {args.logprob_items}", field="--logprob-items")
    if getattr(args, "repeats", None) is not None and args.repeats < 1:
        raise ConfigError(f"must be >= 1, got {args.repeats}", field="--repeats")
    if getattr(args, "no_speed", False) and (args.speed or args.concurrency or args.repeats is not None):
        raise ConfigError("--no-speed contradicts --speed / --concurrency / --repeats", field="--no-speed")
    if not (0 < args.timeout < float("inf")):  # also rejects nan
        raise ConfigError(f"must be a number of seconds > 0, got {args.timeout}", field="--timeout")
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError("exists and is not a directory (the run directory)", path=args.out, field="--out")


def _near(ref: str, config_path: Path, configs_dir: Path) -> str:
    """Resolve a baseline name next to the config file first, then in configs/ (like ``extends``)."""
    for cand in (config_path.parent / ref, config_path.parent / f"{ref}.yaml"):
        if cand.is_file():
            return str(cand)
    return ref


def cmd_plan(args: argparse.Namespace) -> int:
    """Items each task needs so that MDE <= --margin, from a pilot run's discordance, against the items its suite
    holds: a task that needs more cannot be powered at that margin, and the line says which margin it can (exit 0)."""
    from evalgate.compare import plan_tasks
    from evalgate.store import read_json, tasks_from_json
    from evalgate.thresholds import load_thresholds

    if not args.margin > 0 or args.margin > 100:
        raise ConfigError(f"must be > 0 and <= 100 points, got {args.margin}", field="--margin")
    thresholds = load_thresholds(Path(args.thresholds))
    name = Path(args.config).stem if args.config.endswith((".yaml", ".yml")) else args.config
    if not args.from_dir:
        _find_config(args.config, Path(args.configs_dir))  # a config that does not exist has no pilot to find
    if args.assume_discordance is not None:
        return _plan_assumed(args, name, thresholds)
    pilot = Path(args.from_dir) if args.from_dir else _latest_run(name)
    sides = {role: read_json(pilot / f"{role}.json", f"{role} results") for role in ("baseline", "candidate")}
    gated = sides["candidate"].get("config") if isinstance(sides["candidate"], dict) else None
    by_path = args.config.endswith((".yaml", ".yml"))  # a path names the config by its file's stem only
    if isinstance(gated, str) and gated and name not in (gated, *([Path(gated).name] if by_path else [])):
        _find_config(args.config, Path(args.configs_dir))
        raise ConfigError(f"pilot run {pilot} gated config '{gated}', not '{name}'; pass --config {gated} or a run "
                          f"of {name}", field="--config")
    tasks = {role: tasks_from_json(d.get("tasks", {}) if isinstance(d, dict) else {}, pilot / f"{role}.json")
             for role, d in sides.items()}
    available, unknown = _suite_sizes(tasks["baseline"])
    plans = plan_tasks(tasks["baseline"], tasks["candidate"], thresholds, margin=args.margin, config=name,
                       available=available)
    print(f"pilot: {pilot} (config {name}); margin {args.margin:g} pts, power {thresholds.power:g}")
    print(f"{'suite/task':34} {'n':>5} {'changed':>7} {'SE':>6} {'MDE':>6} {'alpha':>6} {'items needed':>13} "
          f"{'suite has':>9}")
    for t in plans:
        need = "-" if t.items_needed is None else ("\u2265" if t.basis == "floor" else "") + str(t.items_needed)
        if t.clusters_needed is not None:
            need += f" ({t.clusters_needed} docs)"
        have = "?" if t.available is None else str(t.available)
        print(f"{t.suite + '/' + t.task:34} {t.n:>5} {t.changed:>7} {t.se:>6.2f} {t.mde:>6.2f} {t.alpha:>6.3g} {need:>13} "
              f"{have:>9}")
    for t in plans:
        if t.exceeds_suite:
            least = "at least " if t.basis == "floor" else ""
            basis = "if no item changes" if t.basis == "floor" else "at this discordance"
            fix = (f"raise the margin to {math.ceil(t.min_margin * 10 - 1e-9) / 10:.1f} pts or more (the whole suite's "
                   f"MDE {basis}) or add items") if t.min_margin is not None else "raise the margin or add items"
            print(f"{t.suite}/{t.task}: needs {least}{t.items_needed} items; suite has {t.available}: cannot be powered "
                  f"at a {args.margin:g}-point margin; {fix}")
    for task, why in unknown.items():
        print(f"{task}: suite size unknown ({why}); cannot check the items needed against it")
    floors = [t for t in plans if t.basis == "floor"]
    if floors:
        print(f"\u2265N: no item changed in the pilot ({', '.join(t.task for t in floors)}), so there is no discordance to "
              "extrapolate from: N is a floor, not an estimate. No run of fewer items is powered for this margin "
              "(the SE is never below 100/N), and N suffice only if (almost) no item changes; a larger pilot "
              "that sees changes gives an estimate")
    manifest = pilot / "manifest.json"
    model = read_json(manifest, "run manifest").get("model") if manifest.is_file() else None
    print(f"\nat full size, MDE extrapolated from the pilot's discordance (power {thresholds.power:g}):")
    _print_full_size([(t.suite, t.task, t.available, t.min_margin) for t in plans], model or _config_model(args),
                     thresholds, name)
    return int(ExitCode.PASS)


def _config_model(args: argparse.Namespace) -> str | None:
    """The model the planned config evaluates (None when the config cannot be loaded)."""
    from evalgate.config import load_config

    try:
        return load_config(args.config, Path(args.configs_dir), check_engine_args=False).model
    except EvalgateError:
        return None


def _plan_assumed(args: argparse.Namespace, name: str, thresholds: Any) -> int:
    """``plan --assume-discordance P``: every task of every suite at full size, MDE at an assumed discordance."""
    from evalgate.power import mde_at_discordance
    from evalgate.suites import default_suites_dir, list_suites

    p = args.assume_discordance
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"must be a share in [0, 1], got {p}", field="--assume-discordance")
    rows = []
    for suite in list_suites(default_suites_dir()):
        sizes, _ = _suite_sizes({t: _Named(suite.name) for t in suite.tasks})
        for task in suite.tasks:
            n = sizes.get(task)
            alpha = thresholds.for_task(suite.name, task, name).alpha
            rows.append((suite.name, task, n, mde_at_discordance(p, n, alpha, thresholds.power) if n else None))
    print(f"no pilot: MDE at full size assuming {100 * p:g} % of items change score between baseline and candidate "
          f"(an assumption, not a measurement: a pilot run gives the real figure, 'evalgate plan --from RUN_DIR'); "
          f"MDE = (z_(1-alpha) + z_power) * max(100 * sqrt({p:g} / n), 100 / n), power {thresholds.power:g}")
    _print_full_size(rows, _config_model(args), thresholds, name)
    return int(ExitCode.PASS)


class _Named:
    """The one attribute ``_suite_sizes`` reads of a task result: its suite."""

    def __init__(self, suite: str) -> None:
        self.suite = suite


def _print_full_size(rows: list[tuple[str, str, int | None, float | None]], model: str | None, thresholds: Any,
                     config: str) -> None:
    """One line per (suite, task, items at full size, MDE at full size): the FP32 baseline's accuracy that the task
    YAML records for ``model`` (``metadata.evalgate``; '-' when none), the items, the MDE and the gate's margin."""
    from evalgate.suites import default_suites_dir, load_suite, task_notes

    print(f"{'suite/task':34} {'baseline':>8} {'items':>6} {'MDE':>6} {'margin':>6}  measured ({model or 'model unknown'})")
    loaded: dict[str, Any] = {}
    for suite, task, n, mde_full in rows:
        try:
            loaded.setdefault(suite, load_suite(suite, default_suites_dir()))
            notes = task_notes(loaded[suite], task)
        except ConfigError as exc:
            print(f"{suite + '/' + task:34} {'?':>8}  ({exc})")
            continue
        acc = notes.baseline_accuracy.get(model or "")
        margin = thresholds.for_task(suite, task, config).margin
        print(f"{suite + '/' + task:34} {'-' if acc is None else f'{100 * acc:.1f}%':>8} {n if n else '?':>6} "
              f"{'-' if mde_full is None else f'{mde_full:.2f}':>6} {margin:>6g}  {notes.measured or '-'}")


def _suite_sizes(tasks: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Items each task's suite holds (``suites.count_items``, from the current ``suites/``): ``(sizes, unknown)``,
    ``unknown`` mapping a task to why its size could not be had (suite gone, data not generated locally)."""
    from evalgate.suites import count_items, default_suites_dir, load_suite

    sizes: dict[str, int] = {}
    unknown: dict[str, str] = {}
    loaded: dict[str, Any] = {}
    for name, t in sorted(tasks.items()):
        try:
            if t.suite not in loaded:
                loaded[t.suite] = load_suite(t.suite, default_suites_dir())
            sizes[name] = count_items(loaded[t.suite], name)
        except ConfigError as exc:
            unknown[name] = str(exc)
    return sizes, unknown


def _find_config(ref: str, configs_dir: Path) -> None:
    """ConfigError (exit 2, like ``run``: with the closest known name) when config ``ref`` does not exist."""
    from evalgate.config import _find

    _find(ref, configs_dir, None, field="--config")


def _latest_run(config: str) -> Path:
    """The newest ``runs/<config>-<UTC time>`` directory holding both sides' results."""
    found = sorted(p for p in Path("runs").glob(f"{config.replace('/', '_')}-*")
                   if (p / "baseline.json").is_file() and (p / "candidate.json").is_file())
    if not found:
        raise ConfigError(f"no pilot run of '{config}' under runs/; run 'evalgate run --config {config} --limit 40' "
                          "or pass --from RUN_DIR (or --assume-discordance P to plan without one)", field="--from")
    return found[-1]


def cmd_model_prepare(args: argparse.Namespace) -> int:
    """Convert the embedded default model once (idempotent) and print where it lives."""
    from evalgate.model import prepare_embedded_model

    t0 = time.monotonic()
    path = prepare_embedded_model(force=args.force)
    print(f"{path} ({time.monotonic() - t0:.1f} s)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Print the configs (with their baseline and description) and the suites (with their tasks)."""
    from evalgate.config import list_configs, load_config
    from evalgate.suites import default_suites_dir, list_suites

    from evalgate.project import describe

    for line in describe(args.layout):
        print(line)
    configs_dir = Path(args.configs_dir)
    print("configs:")
    for name in list_configs(configs_dir):
        c = load_config(name, configs_dir, check_engine_args=False)
        print(f"  {name:24} vs {c.baseline or '-':12} {c.description}")
    print("suites:")
    for s in list_suites(Path(args.suites_dir) if args.suites_dir else default_suites_dir()):
        tasks = [f"{t.name} ({t.metric}{', lm-eval built-in' if t.builtin else ''})" for t in s.specs]
        print(f"  {s.name:24} {', '.join(tasks)}")
    return 0


class _UsageError(Exception):
    """A command-line error found by argparse (exit 2, one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr from ``main`` (not the usage block plus ``SystemExit``)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evalgate", description="Accuracy-regression gate for vLLM engine changes.", epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks and engine logs")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="gate a candidate config against its baseline")
    r.add_argument("--config", required=True, help="config name in configs/ or path to a YAML file")
    r.add_argument("--limit", type=int, default=None, help="items per task (default: all)")
    r.add_argument("--suites", nargs="+", default=None, help="suites to run (default: all)")
    r.add_argument("--out", default=None, help="run directory (default: runs/<config>-<UTC time>)")
    r.add_argument("--thresholds", default=None, help="thresholds file; default: the project's thresholds.yaml, else the built-in one")
    r.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per engine run (default 3 h)")
    r.add_argument("--logprob-items", type=int, default=8, metavar="N",
                   help="items per task scored for the logit divergence (teacher forcing; costly on CPU; 0 = off)")
    _speed_args(r)
    r.set_defaults(func=cmd_run)

    ab = sub.add_parser("ablate", help="each switch of a recipe alone and cumulatively: speed-up and quality per switch")
    ab.add_argument("--config", required=True, help="the recipe config (its differences from its baseline are the switches)")
    ab.add_argument("--limit", type=int, default=None, help="items per task (default: all)")
    ab.add_argument("--suites", nargs="+", default=None, help="suites to run (default: all)")
    ab.add_argument("--out", default=None, help="output directory (default: runs/ablate-<config>-<UTC time>)")
    ab.add_argument("--thresholds", default=None, help="thresholds file (traffic profile, margins); default: the project's thresholds.yaml, else the built-in one")
    ab.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per engine (default 3 h)")
    ab.add_argument("--logprob-items", type=int, default=8, metavar="N", help="as for run")
    ab.add_argument("--kind", choices=("all", "alone", "cumulative"), default="all",
                    help="which rows: each switch alone, the cumulative recipe, or both (default)")
    ab.add_argument("--switches", type=lambda t: [k for k in t.split(",") if k], default=None, metavar="KEY[,KEY]",
                    help="only these switches' alone rows, e.g. mamba_backend,speculative_config")
    _speed_args(ab)
    ab.set_defaults(func=cmd_ablate)

    m = sub.add_parser("model", help="the embedded default model")
    msub = m.add_subparsers(dest="model_command", required=True)
    mp = msub.add_parser("prepare", help="convert the packaged Gemma 3 270M GGUF (the dense family's model) to a local checkpoint; the hybrid ships ready")
    mp.add_argument("--force", action="store_true", help="convert again even if done")
    mp.set_defaults(func=cmd_model_prepare)

    ls = sub.add_parser("list", help="list configs and suites")
    ls.set_defaults(func=cmd_list)

    rp = sub.add_parser("report", help="re-render report.html, verdict.junit.xml and summary.md of a stored run")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding verdict.json")
    rp.add_argument("--out", default=None, help="write there instead of RUN_DIR")
    rp.set_defaults(func=cmd_report)

    cp = sub.add_parser("compare", help="gate two stored runs: RUN_B's candidate against RUN_A's candidate")
    cp.add_argument("run_a", metavar="RUN_A", help="run whose candidate results are the baseline side")
    cp.add_argument("run_b", metavar="RUN_B", help="run whose candidate results are the candidate side")
    cp.add_argument("--out", default=None, help="run directory (default: runs/compare-<A>-vs-<B>-<UTC time>)")
    cp.add_argument("--thresholds", default=None, help="thresholds file; default: the project's thresholds.yaml, else the built-in one")
    cp.set_defaults(func=cmd_compare)

    cc = sub.add_parser("changed-configs", help="list the configs a git change needs gated (for CI)")
    cc.add_argument("--base", required=True, help="git ref to compare against, e.g. origin/main")
    cc.add_argument("--head", default="HEAD", help="git ref of the change (default HEAD)")
    cc.add_argument("--thresholds", default=None, help="thresholds file; default: the project's thresholds.yaml, else the built-in one")
    cc.add_argument("--json", action="store_true", help="print a JSON list instead of one name per line")
    cc.set_defaults(func=cmd_changed_configs)

    pl = sub.add_parser("plan", help="items needed per task for a margin, from a pilot run's discordance, against each suite's size")
    pl.add_argument("--config", required=True, help="the candidate config the pilot ran")
    pl.add_argument("--margin", type=float, required=True, help="non-inferiority margin, points")
    source = pl.add_mutually_exclusive_group()
    source.add_argument("--from", dest="from_dir", default=None,
                        help="pilot run directory (default: the newest runs/<config>-*)")
    source.add_argument("--assume-discordance", type=float, default=None, metavar="P",
                        help="no pilot: every task at full size, MDE assuming a share P of items changes score")
    pl.add_argument("--thresholds", default=None, help="thresholds file (alpha, power); default: the project's thresholds.yaml, else the built-in one")
    pl.add_argument("--configs-dir", default=None, help=_CONFIGS_HELP)
    pl.set_defaults(func=cmd_plan)
    for sp in (r, ab, ls, cc):
        sp.add_argument("--configs-dir", default=None, help=_CONFIGS_HELP)
        sp.add_argument("--suites-dir", default=None, help=_SUITES_HELP)
    return p


_CONFIGS_HELP = "configs folder (default: the project's configs/, else the built-in ones)"
_SUITES_HELP = "suites folder (default: $EVALGATE_SUITES, else the project's suites/, else the built-in ones)"
_EPILOG = """Project: evalgate looks from the working directory upward for the nearest directory holding evalgate.toml,
a pyproject.toml with [tool.evalgate], or thresholds.yaml, and uses its configs/, suites/ and thresholds.yaml (the
table may name other paths: configs = "...", suites = "...", thresholds = "..."); whatever the project lacks comes
from the copies shipped with evalgate. 'evalgate list' says which were used.
Environment: EVALGATE_SUITES (suites folder, below --suites-dir), EVALGATE_HOME (models and the result store;
default ~/.cache/evalgate), HF_HOME / HF_DATASETS_OFFLINE (lm-eval built-in tasks' datasets)."""


def _apply_layout(args: argparse.Namespace) -> None:
    """Fill the configs/suites/thresholds options a command has but was not given from ``project.layout``."""
    from evalgate.project import layout

    if not any(hasattr(args, a) for a in ("configs_dir", "suites_dir", "thresholds")):
        return
    lay = layout(getattr(args, "configs_dir", None), getattr(args, "suites_dir", None),
                 getattr(args, "thresholds", None))
    args.layout = lay
    for attr, value in (("configs_dir", lay.configs), ("suites_dir", lay.suites), ("thresholds", lay.thresholds)):
        if hasattr(args, attr):
            setattr(args, attr, str(value))


def _speed_args(p: argparse.ArgumentParser) -> None:
    """``--speed``, ``--no-speed``, ``--concurrency``, ``--repeats`` (the traffic profile's command-line overrides)."""
    p.add_argument("--speed", action="store_true",
                   help="measure throughput after the suites (default when thresholds has a traffic: section)")
    p.add_argument("--no-speed", action="store_true", help="do not measure throughput, whatever thresholds say")
    p.add_argument("--concurrency", type=_concurrency_list, default=None, metavar="C[,C...]",
                   help="requests in flight, one level or a sweep, e.g. 1,16,256 (implies --speed)")
    p.add_argument("--repeats", type=int, default=None, metavar="N",
                   help="timed passes per side and level (default 3; >= 2 for an interval)")


def _sigterm_interrupts() -> None:
    """Treat SIGTERM (how CI cancels a job) like Ctrl-C: the engine worker is killed, error outputs are written,
    exit 130. Only possible from the main thread (elsewhere the default stays)."""
    import signal
    import threading

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Returns the exit code (a command-line error is exit 2, one line on stderr)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"evalgate: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    # Our progress lines at INFO; other libraries' chatter (vLLM, Triton probes) only at WARNING and up.
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="evalgate: %(message)s",
                        stream=sys.stderr)
    log.setLevel(logging.DEBUG if args.debug else logging.INFO)
    _sigterm_interrupts()
    try:
        _apply_layout(args)
        return int(args.func(args))
    except EvalgateError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"evalgate: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("evalgate: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the boundary: an internal error is exit 3, never a pass
        if args.debug:
            traceback.print_exc()
        print(f"evalgate: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return int(ExitCode.RUNTIME)


if __name__ == "__main__":
    sys.exit(main())
