"""The ``evalgate`` command line: one thin function per command, each returning an exit code.

``run``, ``compare`` and ``ablate`` turn their arguments into a job for ``pipeline.gate`` (load -> evaluate both
sides -> compare -> decide -> render); the run options are ``options.RunOptions`` (its defaults are the
defaults here). Exit codes (``errors.ExitCode``): 0 PASS, 1 BLOCK, 2 usage/config error, 3 runtime error,
4 NO-OP, 5 INCONCLUSIVE (too few items to decide; only with ``on_inconclusive: warn``), 130 interrupted.
Errors print one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn, Sequence

from evalgate.errors import EvalgateError, ExitCode
from evalgate.inputs.options import default as option_default
from evalgate.inputs.options import describe as option_help
from evalgate.inputs.project import builtin_dir
from evalgate.inputs.thresholds import concurrency_problem

log = logging.getLogger("evalgate")
# The thresholds shipped with evalgate; a command uses its project's (project.layout) unless --thresholds is given.
THRESHOLDS_FILE = builtin_dir() / "thresholds.yaml"


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
                from evalgate.report.outputs import write_error_outputs

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
    from evalgate.commands.jobs import EngineJob
    from evalgate.commands.pipeline import gate
    from evalgate.inputs.options import RunOptions
    from evalgate.report.render import render_terminal

    job = EngineJob(config=args.config, configs_dir=Path(args.configs_dir), suites_dir=_suites_dir(args),
                    thresholds_path=Path(args.thresholds), suite_names=args.suites, options=RunOptions.from_args(args),
                    out=Path(args.out) if args.out else None, announce=lambda out: setattr(args, "run_dir", out))
    outcome = gate(job)
    print(render_terminal(outcome.doc))
    print(f"report: {outcome.report}")
    outcome.check_speed()  # the quality results are kept; a failed speed measurement fails the run (exit 3)
    return outcome.exit_code


@_error_outputs
def cmd_ablate(args: argparse.Namespace) -> int:
    """Each switch of a recipe alone, then cumulatively, against the recipe's baseline: quality and speed per switch
    (``evalgate.commands.ablate``); writes ``ablation.html``, ``ablation.json`` and one run directory per variant.
    Exit 0, or 3 when a variant's engine or speed measurement failed (the others are kept)."""
    from evalgate.commands.ablate import run_ablation
    from evalgate.inputs.options import RunOptions

    run_ablation(args.config, Path(args.configs_dir), _suites_dir(args), Path(args.thresholds), args.suites,
                 RunOptions.from_args(args), kind=args.kind, only=args.switches,
                 out=Path(args.out) if args.out else None, announce=lambda out: setattr(args, "run_dir", out))
    return int(ExitCode.PASS)


@_error_outputs
def cmd_score(args: argparse.Namespace) -> int:
    """Score one config alone (no baseline, no verdict): a per-task table with 95 % intervals, ``score.json`` and
    ``summary.md`` in the run directory, a warning per task at 0 % or 100 % (``evalgate.commands.score``); exit 0."""
    from evalgate.commands.score import ScoreJob, render_table, run_score
    from evalgate.inputs.options import RunOptions

    job = ScoreJob(config=args.config, configs_dir=Path(args.configs_dir), suites_dir=_suites_dir(args),
                   suite_names=args.suites, options=RunOptions.from_args(args),
                   out=Path(args.out) if args.out else None, announce=lambda out: setattr(args, "run_dir", out))
    outcome = run_score(job)
    print(render_table(outcome.doc["config"], outcome.scores))
    print(f"score: {outcome.files['json']}")
    return int(ExitCode.PASS)


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render report.html, verdict.junit.xml and summary.md from a stored run's verdict.json (exit 0)."""
    from evalgate.commands.stored import rendering, rerender
    from evalgate.report.render import render_terminal

    doc, paths = rerender(Path(args.run_dir), Path(args.out) if args.out else None)
    with rendering(Path(args.run_dir) / "verdict.json"):
        text = render_terminal(doc)
    print(text)
    print(f"report: {paths['html']}")
    return int(ExitCode.PASS)


@_error_outputs
def cmd_compare(args: argparse.Namespace) -> int:
    """Gate RUN_B's candidate against RUN_A's candidate (stored runs); exit with the verdict."""
    from evalgate.commands.jobs import StoredJob
    from evalgate.commands.pipeline import gate, stamp_now
    from evalgate.report.render import render_terminal

    a, b = Path(args.run_a), Path(args.run_b)
    out = Path(args.out) if args.out else Path("runs") / f"compare-{a.name}-vs-{b.name}-{stamp_now()}"
    # A refusal (a missing or malformed run, incomparable runs) happens before anything is written. With --out,
    # CI asked for that directory and gets an error summary there; without it, no directory of our own naming (nor
    # runs/) is left behind, only the one-line error. Once the comparison has started writing, the error joins it.
    if args.out:
        args.run_dir = out
    try:
        outcome = gate(StoredJob(a, b, Path(args.thresholds), out))
    except BaseException:
        try:
            if out.is_dir():
                args.run_dir = out
        except OSError:  # an --out the OS cannot even look up (a name too long): the error says so already
            pass
        raise
    print(render_terminal(outcome.doc))
    print(f"report: {outcome.report}")
    return outcome.exit_code


def cmd_changed_configs(args: argparse.Namespace) -> int:
    """Print the configs a change needs gated (one per line; reasons on stderr)."""
    import json

    from evalgate.commands.changed_configs import changed_configs
    from evalgate.suites.discovery import default_suites_dir

    found = changed_configs(args.base, args.head, configs_dir=Path(args.configs_dir),
                            suites_dir=Path(args.suites_dir) if args.suites_dir else default_suites_dir(),
                            thresholds_file=Path(args.thresholds))
    for name, reason in found.items():
        print(f"evalgate: {name}: {reason}", file=sys.stderr)
    print(json.dumps(list(found)) if args.json else "\n".join(found))
    return int(ExitCode.PASS)


def cmd_plan(args: argparse.Namespace) -> int:
    """Items each task needs so that MDE <= its margin (``--margin``, else the thresholds file's), from a pilot run's
    discordance, against the items its suite holds (``evalgate.commands.plan``); exit 0."""
    from evalgate.commands.plan import plan

    plan(args.config, args.margin, Path(args.thresholds), Path(args.configs_dir),
         Path(args.from_dir) if args.from_dir else None, args.assume_discordance)
    return int(ExitCode.PASS)


def _suites_dir(args: argparse.Namespace) -> Path:
    from evalgate.suites.discovery import default_suites_dir

    return Path(args.suites_dir) if args.suites_dir else default_suites_dir()


def _concurrency_list(text: str) -> list[int]:
    """``--concurrency 1,16,256`` as a list of integers (argparse type), its levels checked by ``traffic.concurrency``'s
    validator (``thresholds.concurrency_problem``, which ``RunOptions.check`` applies to options built in code)."""
    try:
        values = [int(v) for v in text.split(",")]  # an empty element (",4", "1,,16") is an error too
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be integers separated by commas, e.g. 1,16,256; got {text!r}") from None
    problem = concurrency_problem(values, from_log=False)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return values


def _switch_list(text: str) -> list[str]:
    """``--switches mamba_backend,speculative_config`` as a list of engine-arg / env names (argparse type); an empty
    name (",", "a,,b") is an error, not "every switch"."""
    names = [k.strip() for k in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"must be switch names separated by commas, e.g. mamba_backend; got {text!r}")
    return names


def cmd_model_prepare(args: argparse.Namespace) -> int:
    """Convert the embedded default model once (idempotent) and print where it lives."""
    from evalgate.models.embedded import prepare_embedded_model

    t0 = time.monotonic()
    path = prepare_embedded_model(force=args.force)
    print(f"{path} ({time.monotonic() - t0:.1f} s)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Print the configs (with their baseline and description) and the suites (with their tasks), in columns as
    wide as their longest entry (a config name, a baseline, a suite name), so every row lines up.

    A config's baseline is named as ``run`` resolves it (``config.load_baseline``: next to the config's file first),
    so ``dense/bf16``'s ``extends: baseline`` shows as ``dense/baseline``; one that cannot be resolved shows as
    written, marked ``(unresolved)``. Raises ConfigError for a config that cannot be loaded.
    """
    from evalgate.errors import ConfigError
    from evalgate.inputs.config import list_configs, load_baseline, load_config
    from evalgate.inputs.project import describe
    from evalgate.suites.discovery import default_suites_dir, list_suites

    for line in describe(args.layout):
        print(line)
    configs_dir = Path(args.configs_dir)
    rows = []
    for name in list_configs(configs_dir):
        c = load_config(name, configs_dir, check_engine_args=False)
        base = "-"
        if c.baseline:
            try:
                base = load_baseline(c, configs_dir, check_engine_args=False).name
            except ConfigError:
                base = f"{c.baseline} (unresolved)"
        rows.append((name, base, c.description))
    suites = list_suites(Path(args.suites_dir) if args.suites_dir else default_suites_dir())
    # One first column for configs and suites, as wide as the longest name; columns two spaces apart.
    first = max([len(name) for name, _, _ in rows] + [len(s.name) for s in suites] + [1])
    width = max([len(base) for _, base, _ in rows] + [1])
    print("configs:")
    for name, base, description in rows:
        print(f"  {name:{first}}  vs {base:{width}}  {description}".rstrip())
    print("suites:")
    for s in suites:
        tasks = [f"{t.name} ({t.metric}{', lm-eval built-in' if t.builtin else ''})" for t in s.specs]
        # an image suite is not in the default run: it needs a model that reads images
        images = "; image suite: runs when named (--suites, or a config's suites)" if s.modality == "image" else ""
        print(f"  {s.name:{first}}  {', '.join(tasks)}{images}")
    return 0


class _UsageError(Exception):
    """A command-line error found by argparse (exit 2, one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr from ``main`` (not the usage block plus ``SystemExit``)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The ``evalgate`` argument parser: one subcommand per ``cmd_*``; run options' defaults and help come from
    ``options.RunOptions``."""
    p = _Parser(prog="evalgate", description="Accuracy-regression gate for vLLM engine changes.", epilog=_EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks and engine logs")
    sub = p.add_subparsers(dest="command", required=True)
    r = _gate_args(sub.add_parser("run", help="gate a candidate config against its baseline"),
                   config="config name in configs/ or path to a YAML file",
                   out="run directory (default: runs/<config>-<UTC time>)",
                   thresholds="thresholds file; default: the project's thresholds.yaml, else the built-in one")
    r.set_defaults(func=cmd_run)
    ab = _gate_args(sub.add_parser("ablate", help="each switch of a recipe alone and cumulatively: speed-up and "
                                                  "quality per switch"),
                    config="the recipe config (its differences from its baseline are the switches)",
                    out="output directory (default: runs/ablate-<config>-<UTC time>)",
                    thresholds="thresholds file (traffic profile, margins); default: the project's thresholds.yaml, "
                               "else the built-in one")
    ab.add_argument("--kind", choices=("all", "alone", "cumulative"), default="all",
                    help="which rows: each switch alone, the cumulative recipe, or both (default)")
    ab.add_argument("--switches", type=_switch_list, default=None, metavar="KEY[,KEY]",
                    help="only these switches' alone rows, e.g. mamba_backend,speculative_config")
    ab.set_defaults(func=cmd_ablate)
    sc = _score_parser(sub)
    _model_parser(sub)
    ls = sub.add_parser("list", help="list configs and suites")
    ls.set_defaults(func=cmd_list)
    _stored_run_parsers(sub)
    cc = sub.add_parser("changed-configs", help="list the configs a git change needs gated (for CI)")
    cc.add_argument("--base", required=True, help="git ref to compare against, e.g. origin/main")
    cc.add_argument("--head", default="HEAD", help="git ref of the change (default HEAD)")
    cc.add_argument("--thresholds", default=None, help=_THRESHOLDS_HELP)
    cc.add_argument("--json", action="store_true", help="print a JSON list instead of one name per line")
    cc.set_defaults(func=cmd_changed_configs)
    _plan_parser(sub)
    for sp in (r, ab, sc, ls, cc):
        sp.add_argument("--configs-dir", default=None, help=_CONFIGS_HELP)
        sp.add_argument("--suites-dir", default=None, help=_SUITES_HELP)
    return p


def _gate_args(p: argparse.ArgumentParser, *, config: str, out: str, thresholds: str) -> argparse.ArgumentParser:
    """The options ``run`` and ``ablate`` share: config, suites, output, thresholds and the run options."""
    p.add_argument("--config", required=True, help=config)
    p.add_argument("--limit", type=int, default=option_default("limit"), help=option_help("limit"))
    p.add_argument("--suites", nargs="+", default=None,
                   help="suites to run (default: the config's suites, else every text suite)")
    p.add_argument("--out", default=None, help=out)
    p.add_argument("--thresholds", default=None, help=thresholds)
    p.add_argument("--timeout", type=float, default=option_default("timeout"), help=option_help("timeout"))
    p.add_argument("--logprob-items", type=int, default=option_default("logprob_items"), metavar="N",
                   help=option_help("logprob_items"))
    p.add_argument("--speed", action="store_true", help=option_help("speed"))
    p.add_argument("--no-speed", action="store_true", help=option_help("no_speed"))
    p.add_argument("--speed-only", action="store_true", help=option_help("speed_only"))
    p.add_argument("--concurrency", type=_concurrency_list, default=option_default("concurrency"), metavar="C[,C...]",
                   help=option_help("concurrency"))
    p.add_argument("--repeats", type=int, default=option_default("repeats"), metavar="N", help=option_help("repeats"))
    p.add_argument("--precision", type=float, default=option_default("precision"), metavar="P",
                   help=option_help("precision"))
    p.add_argument("--max-repeats", type=int, default=option_default("max_repeats"), metavar="N",
                   help=option_help("max_repeats"))
    p.add_argument("--max-seconds", type=float, default=option_default("max_seconds"), metavar="S",
                   help=option_help("max_seconds"))
    p.add_argument("--placement", choices=("auto", "together", "alternate"), default=option_default("placement"),
                   help=option_help("placement"))
    return p


def _score_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    sc = sub.add_parser("score", help="score one config alone (no baseline, no verdict): per-task means with 95-percent "
                                      "intervals; stored for later gates")
    sc.add_argument("--config", required=True, help="config name in configs/ or path to a YAML file (any config; "
                                                    "its baseline is not needed)")
    sc.add_argument("--limit", type=int, default=option_default("limit"), help=option_help("limit"))
    sc.add_argument("--suites", nargs="+", default=None,
                    help="suites to run (default: the config's suites, else every text suite)")
    sc.add_argument("--out", default=None, help="run directory (default: runs/score-<config>-<UTC time>)")
    sc.add_argument("--timeout", type=float, default=option_default("timeout"), help=option_help("timeout"))
    sc.add_argument("--logprob-items", type=int, default=option_default("logprob_items"), metavar="N",
                    help=option_help("logprob_items") + "; a later run reuses the score at the same value")
    sc.set_defaults(func=cmd_score)
    return sc


def _model_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    m = sub.add_parser("model", help="the embedded default model")
    msub = m.add_subparsers(dest="model_command", required=True)
    mp = msub.add_parser("prepare", help="convert the packaged Gemma 3 270M GGUF (the dense family's model) to a "
                                         "local checkpoint; the hybrid ships ready")
    mp.add_argument("--force", action="store_true", help="convert again even if done")
    mp.set_defaults(func=cmd_model_prepare)


def _stored_run_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``report`` and ``compare``: commands on stored run directories."""
    rp = sub.add_parser("report", help="re-render report.html, verdict.junit.xml and summary.md of a stored run")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding verdict.json")
    rp.add_argument("--out", default=None, help="write there instead of RUN_DIR")
    rp.set_defaults(func=cmd_report)
    cp = sub.add_parser("compare", help="gate two stored runs: RUN_B's candidate against RUN_A's candidate")
    cp.add_argument("run_a", metavar="RUN_A", help="run whose candidate results are the baseline side")
    cp.add_argument("run_b", metavar="RUN_B", help="run whose candidate results are the candidate side")
    cp.add_argument("--out", default=None, help="run directory (default: runs/compare-<A>-vs-<B>-<UTC time>)")
    cp.add_argument("--thresholds", default=None, help=_THRESHOLDS_HELP)
    cp.set_defaults(func=cmd_compare)


def _plan_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pl = sub.add_parser("plan", help="items needed per task for a margin, from a pilot run's discordance, against "
                                     "each suite's size")
    pl.add_argument("--config", required=True, help="the candidate config the pilot ran")
    pl.add_argument("--margin", type=float, default=None,
                    help="non-inferiority margin, points, for every task (default: each task's own margin from the "
                         "thresholds file, as the gate applies it to --config; the output says which and where from)")
    source = pl.add_mutually_exclusive_group()
    source.add_argument("--from", dest="from_dir", default=None,
                        help="pilot run directory (default: the newest runs/<config>-*)")
    source.add_argument("--assume-discordance", type=float, default=None, metavar="P",
                        help="no pilot: every task's items needed for --margin and its MDE at full size, assuming "
                             "a share P of items changes score")
    pl.add_argument("--thresholds", default=None, help="thresholds file (alpha, power); default: the project's "
                                                       "thresholds.yaml, else the built-in one")
    pl.add_argument("--configs-dir", default=None, help=_CONFIGS_HELP)
    pl.set_defaults(func=cmd_plan)


_THRESHOLDS_HELP = "thresholds file; default: the project's thresholds.yaml, else the built-in one"
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
    from evalgate.inputs.project import layout

    if not any(hasattr(args, a) for a in ("configs_dir", "suites_dir", "thresholds")):
        return
    lay = layout(getattr(args, "configs_dir", None), getattr(args, "suites_dir", None),
                 getattr(args, "thresholds", None))
    args.layout = lay
    for attr, value in (("configs_dir", lay.configs), ("suites_dir", lay.suites), ("thresholds", lay.thresholds)):
        if hasattr(args, attr):
            setattr(args, attr, str(value))


def _refuse_empty_paths(args: argparse.Namespace) -> None:
    """An empty path option (``--suites-dir "$UNSET"``) would silently mean the working directory: exit 2."""
    from evalgate.errors import ConfigError

    for attr in ("configs_dir", "suites_dir", "thresholds", "out", "from_dir"):
        if getattr(args, attr, None) == "":
            raise ConfigError("must not be empty (an unset variable?)", field=f"--{attr.replace('_', '-')}"
                              if attr != "from_dir" else "--from")


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
        _refuse_empty_paths(args)
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
    except BrokenPipeError:
        # The reader of stdout went away (a pager or `head` closed the pipe): not an internal error. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again, and exit as a process killed by SIGPIPE
        # would; never 0: the output was not all delivered. Files the command wrote are complete (atomic writes).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.BROKEN_PIPE)
    except Exception as exc:  # noqa: BLE001 - the boundary: an internal error is exit 3, never a pass
        if args.debug:
            traceback.print_exc()
        print(f"evalgate: internal error: {type(exc).__name__}: {exc} "
              "(rerun as `evalgate --debug <command> ...` for the traceback)", file=sys.stderr)
        return int(ExitCode.RUNTIME)


if __name__ == "__main__":
    sys.exit(main())
