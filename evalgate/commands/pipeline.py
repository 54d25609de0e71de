"""One gate, top to bottom: load -> evaluate both sides -> compare -> decide -> render (``gate``).

Every verdict evalgate writes comes out of ``gate(job)``; a *job* (``evalgate.commands.jobs``) says where its two sides
come from:

* ``EngineJob`` (``evalgate run``, and the benchmarks that run it): a candidate config and its baseline, loaded and
  checked before any engine starts, both evaluated by engine workers (or served from the store), speed measured on
  the warm workers;
* ``VariantJob`` (``evalgate ablate``): one variant of a recipe against a baseline already evaluated on a live worker;
* ``StoredJob`` (``evalgate compare``): two stored run directories; nothing is evaluated.

The statistics are ``compare.compare_tasks``; every decision is the gate's, in one call (``gate.judge_run``);
``decide_and_render`` is the one place that turns comparisons into the verdict
document and writes it (``manifest.json``, ``verdict.json``, report, JUnit, Markdown).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalgate.compare.pairing import TaskComparison, compare_tasks
from evalgate.compare.replay import ReplayComparison, ReplayRun
from evalgate.errors import ConfigError, ExitCode, StoreError
from evalgate.evaluate.manifest import side
from evalgate.evaluate.runner import ConfigRun, SpeedError, versions
from evalgate.gate import judge_run
from evalgate.inputs.thresholds import ConfigPolicy, Thresholds
from evalgate.report.document import build_verdict
from evalgate.report.outputs import write_outputs
from evalgate.results.manifest import Manifest, SuiteEntry
from evalgate.results.records import TaskResult
from evalgate.results.store import write_json_atomic
from evalgate.speed.block import SpeedBlock
from evalgate.suites.discovery import list_suites, load_suite
from evalgate.suites.files import Suite

VERDICT_EXIT = {"PASS": ExitCode.PASS, "BLOCK": ExitCode.BLOCK, "NO-OP": ExitCode.NO_OP,
                "INCONCLUSIVE": ExitCode.INCONCLUSIVE}
ROLES = ("baseline", "candidate")
log = logging.getLogger("evalgate")


@dataclass
class Evaluated:
    """Both sides evaluated: what compare, decide and render need.

    Attributes:
        tasks: role (``baseline``/``candidate``) -> task name -> ``TaskResult``.
        effective: role -> the engine config as applied (read back; ``{}`` when unknown).
        gate_name: the config whose ``configs.<name>`` thresholds apply. expect: ``lossy`` or ``lossless``.
        manifest: the run manifest (``timings["compare"]`` is added by ``gate``).
        speed: the speed block (``speed.block.SpeedBlock``: ``measure.measure_speed_safely`` or serve mode's
            ``serve.measure_configs``, measured or failed), None when speed was not measured.
        files: JSON files to write into the run directory with the verdict (name -> object), e.g. a compare's
            ``baseline.json``; a run writes its sides' files as each side finishes instead.
        pair: for two stored runs, ``"A vs B"``: a comparison that fails is then "not comparable".
        replay: the replay gate's answers of both sides (``compare.replay.ReplayRun``), None when no replay ran.
    """

    tasks: dict[str, dict[str, TaskResult]]
    effective: dict[str, dict[str, Any]]
    gate_name: str | None
    expect: str
    manifest: Manifest
    speed: SpeedBlock | None = None
    files: dict[str, Any] = field(default_factory=dict)
    pair: str | None = None
    replay: ReplayRun | None = None


class Job(Protocol):
    """Where a gate's two sides come from: ``load`` reads and checks the inputs (no engine yet) and returns the
    thresholds; ``evaluate`` evaluates both sides; ``out`` is the run directory (known once ``load`` returned)."""

    out: Path

    def load(self) -> Thresholds: ...

    def evaluate(self, thresholds: Thresholds) -> Evaluated: ...


@dataclass
class Outcome:
    """A gate's result: the verdict document, the run directory, the speed block (None: not measured) and the HTML
    report's path."""

    doc: dict[str, Any]
    out: Path
    speed: SpeedBlock | None
    report: Path | None = None

    @property
    def exit_code(self) -> int:
        """The verdict's exit code (0 PASS, 1 BLOCK, 4 NO-OP, 5 INCONCLUSIVE)."""
        return int(VERDICT_EXIT[self.doc["verdict"]])

    @property
    def speed_failed(self) -> str | None:
        """Why the speed measurement failed (its ``error``), None when it was measured or not asked for."""
        if self.speed is None or self.speed.measured:
            return None
        return str(self.speed.error)

    def check_speed(self) -> None:
        """Raise ``SpeedError`` (exit 3) when the speed measurement failed: the quality verdict is kept on disk, but
        the run as a whole failed."""
        if self.speed_failed is not None:
            raise SpeedError(f"quality verdict {self.doc['verdict']} (kept in {self.out / 'verdict.json'}), but the "
                             f"speed measurement failed: {self.speed_failed}")


def gate(job: Job) -> Outcome:
    """The gate, in the order it runs: load, evaluate both sides, compare, decide, render.

    Returns:
        The ``Outcome`` (verdict document, run directory, speed block).
    Raises:
        ConfigError (exit 2): bad input, refused before any engine starts (or a value vLLM refuses).
        EngineError, StoreError (exit 3): an engine failed, a stored run is missing or the runs are not comparable.
    """
    thresholds = job.load()                     # 1. load: configs, thresholds, suites; bad input ends here
    sides = job.evaluate(thresholds)            # 2. evaluate both sides: engines, the store, or stored runs
    policy = thresholds.policy(sides.gate_name)  # the gated config's thresholds, resolved once
    t0 = time.monotonic()
    try:                                        # 3. compare: the paired statistics, per task
        comparisons = compare_tasks(sides.tasks["baseline"], sides.tasks["candidate"], policy)
    except StoreError as exc:
        if sides.pair is None:
            raise
        raise StoreError(f"runs are not comparable ({sides.pair}): {exc}") from exc
    replay = None if sides.replay is None else sides.replay.compare(
        near_tie=policy.near_tie_logprob, alpha=policy.alpha, seed=policy.seed, n_resamples=policy.bootstrap_resamples)
    sides.manifest.timings["compare"] = time.monotonic() - t0
    doc, paths = decide_and_render(comparisons, sides, policy, job.out, replay=replay)  # 4. decide and 5. render: one call
    return Outcome(doc, job.out, sides.speed, paths["html"])


def decide_and_render(comparisons: list[TaskComparison], sides: Evaluated, policy: ConfigPolicy,
                      out: Path, replay: ReplayComparison | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """The verdict: the gate's one decision over the comparisons (``gate.judge_run``: the accuracy rule, then health,
    speculative-decoding and speed floors and latency objectives, then the replay gate over ``replay``, the
    ``compare.replay.ReplayComparison`` of ``sides.replay``), laid out by ``document.build_verdict``, then
    ``sides.files``, ``manifest.json``, ``verdict.json`` and the rendered outputs (``outputs.write_outputs``) in
    ``out``; ``policy``: ``Thresholds.policy(sides.gate_name)``. Returns the verdict document and the rendered files'
    paths (``{"html", "junit", "markdown"}``)."""
    manifest = sides.manifest
    judgement = judge_run(comparisons, policy, manifest, expect=sides.expect, effective=sides.effective,
                          speed=sides.speed, replay=replay)
    verdict = build_verdict(judgement, comparisons, manifest, near_tie=policy.near_tie_logprob, speed=sides.speed,
                            speed_floors=policy.speed_floors, economics=policy.economics, replay_run=sides.replay)
    doc = verdict.to_dict()
    for filename, obj in sides.files.items():
        write_json_atomic(out / filename, obj)
    write_json_atomic(out / "manifest.json", manifest.as_json())
    write_json_atomic(out / "verdict.json", doc)
    return doc, write_outputs(verdict, out)


def stamp_now() -> str:
    """The run's UTC time stamp, e.g. ``20261201T104705Z`` (run directory names, ``manifest.created``)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def run_manifest(runs: dict[str, ConfigRun], thresholds: Thresholds, suites: list[Suite], *, limit: int | None, stamp: str,
                 timings: dict[str, float], placement: dict[str, Any] | None = None,
                 speed_only: bool = False) -> Manifest:
    """The manifest of two evaluated configs (``runs``: role -> ``runner.ConfigRun``); ``placement``: the
    ``placement.placement_record`` (None: not written); ``speed_only``: ``--speed-only`` (written only when set)."""
    extra: dict[str, Any] = {} if placement is None else {"placement": placement}
    if speed_only:
        extra["speed_only"] = True
    return Manifest(**extra, created=stamp, model=runs["candidate"].config.model, limit=limit, versions=versions(),
                    thresholds=str(thresholds.path), timings=timings,
                    suites=[SuiteEntry(name=s.name, tasks=list(s.tasks), content_hash=s.content_hash) for s in suites],
                    baseline=side(runs["baseline"]), candidate=side(runs["candidate"]))


def evaluated_runs(runs: dict[str, ConfigRun], manifest: Manifest, *, gate_name: str | None = None,
                   speed: SpeedBlock | None = None) -> Evaluated:
    """``Evaluated`` of two ``runner.ConfigRun``s; ``gate_name`` defaults to the candidate's config name; ``speed``:
    the speed block (None: not measured)."""
    cand = runs["candidate"].config
    return Evaluated(tasks={r: runs[r].tasks for r in ROLES}, effective={r: runs[r].effective for r in ROLES},
                     gate_name=gate_name or cand.name, expect=cand.expect, manifest=manifest, speed=speed)


def load_suites(suites_dir: Path, names: list[str] | None, config: Any = None) -> list[Suite]:
    """The suites a command runs: ``names`` (``--suites``) when given; else ``config``'s ``suites`` (an
    ``inputs.config.EngineConfig``; None: no config's choice); else every *text* suite under ``suites_dir``. An image
    suite (``Suite.modality``: its items carry images) runs only when named, by ``--suites`` or a config: it needs a
    model that reads images, which the text configs are not (one line on the log says which were left out).

    The config's ``suites`` is checked whether or not ``--suites`` overrides it (each named suite loaded under
    ``suites_dir``): a config that names a suite the project lacks is refused, never silently ignored.

    Raises:
        ConfigError: a suite named twice; an unknown suite (one the config names, even when ``--suites`` wins: naming
            its file and ``suites``); no suite to run.
    """
    twice = sorted({n for n in names or [] if (names or []).count(n) > 1})
    if twice:  # a suite listed twice (a typo for another?) would appear twice in the manifest and the runs: refuse
        raise ConfigError(f"suite {twice[0]!r} is named more than once", field="--suites")
    chosen = _config_suites(suites_dir, config) if config is not None and config.suites else None
    if names:
        suites = [load_suite(n, suites_dir) for n in names]
    elif chosen is not None:
        suites = chosen
    else:
        every = list_suites(suites_dir)
        suites = [s for s in every if s.modality == "text"]
        left = [s.name for s in every if s.modality != "text"]
        if left and not suites:
            raise ConfigError(f"no text suite here, only image suites ({', '.join(left)}): name the ones to run "
                              "(--suites, or a config's suites)", path=suites_dir)
        if left:
            log.info("suites: %s left out (image suites run when named: --suites, or a config's suites)",
                     ", ".join(left))
    if not suites:
        raise ConfigError("no suites found", path=suites_dir)
    return suites


def _config_suites(suites_dir: Path, config: Any) -> list[Suite]:
    """The suites ``config``'s ``suites`` names, loaded; a suite that cannot be loaded is ConfigError naming the
    file of the config chain that set ``suites`` and the field."""
    suites = []
    for n in config.suites:
        try:
            suites.append(load_suite(n, suites_dir))
        except ConfigError as exc:  # the config named it: say which file and key
            raise ConfigError(exc.message, path=config.suites_from or config.path, field="suites") from None
    return suites
