"""One gate, top to bottom: load -> evaluate both sides -> compare -> decide -> render (``gate``).

Every verdict evalgate writes comes out of ``gate(job)``; a *job* says where its two sides come from:

* ``EngineJob`` (``evalgate run``, and the benchmarks that run it): a candidate config and its baseline, loaded and
  checked before any engine starts, both evaluated by engine workers (or served from the store), speed measured on
  the warm workers;
* ``VariantJob`` (``evalgate ablate``): one variant of a recipe against a baseline already evaluated on a live worker;
* ``StoredJob`` (``evalgate compare``): two stored run directories; nothing is evaluated.

The statistics are ``compare.compare_tasks``; every decision is the gate's (``gate.decide`` and what
``report.gate_document`` applies); ``decide_and_render`` is the one place that turns comparisons into the verdict
document and writes it (``manifest.json``, ``verdict.json``, report, JUnit, Markdown).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalgate.errors import ConfigError, ExitCode, StoreError
from evalgate.manifest import Manifest, SuiteEntry, side
from evalgate.options import RunOptions
from evalgate.outputs import write_outputs
from evalgate.store import write_json_atomic

log = logging.getLogger("evalgate")
VERDICT_EXIT = {"PASS": ExitCode.PASS, "BLOCK": ExitCode.BLOCK, "NO-OP": ExitCode.NO_OP,
                "INCONCLUSIVE": ExitCode.INCONCLUSIVE}
ROLES = ("baseline", "candidate")


@dataclass
class Evaluated:
    """Both sides evaluated: what compare, decide and render need.

    Attributes:
        tasks: role (``baseline``/``candidate``) -> task name -> ``TaskResult``.
        effective: role -> the engine config as applied (read back; ``{}`` when unknown).
        gate_name: the config whose ``configs.<name>`` thresholds apply. expect: ``lossy`` or ``lossless``.
        manifest: the run manifest (``timings["compare"]`` is added by ``gate``).
        speed: the speed block (``speedrun.measure_speed``), None when speed was not measured.
        files: JSON files to write into the run directory with the verdict (name -> object), e.g. a compare's
            ``baseline.json``; a run writes its sides' files as each side finishes instead.
        pair: for two stored runs, ``"A vs B"``: a comparison that fails is then "not comparable".
    """

    tasks: dict[str, dict[str, Any]]
    effective: dict[str, dict[str, Any]]
    gate_name: str | None
    expect: str
    manifest: Manifest
    speed: dict[str, Any] | None = None
    files: dict[str, Any] = field(default_factory=dict)
    pair: str | None = None


class Job(Protocol):
    """Where a gate's two sides come from: ``load`` reads and checks the inputs (no engine yet) and returns the
    thresholds; ``evaluate`` evaluates both sides; ``out`` is the run directory (known once ``load`` returned)."""

    out: Path

    def load(self) -> Any: ...

    def evaluate(self, thresholds: Any) -> Evaluated: ...


@dataclass
class Outcome:
    """A gate's result: the verdict document, the run directory and the speed block (None: not measured)."""

    doc: dict[str, Any]
    out: Path
    speed: dict[str, Any] | None

    @property
    def exit_code(self) -> int:
        """The verdict's exit code (0 PASS, 1 BLOCK, 4 NO-OP, 5 INCONCLUSIVE)."""
        return int(VERDICT_EXIT[self.doc["verdict"]])

    @property
    def speed_failed(self) -> str | None:
        """Why the speed measurement failed, None when it was measured or not asked for."""
        if self.speed is None or self.speed.get("status") == "measured":
            return None
        return str(self.speed.get("error"))

    def check_speed(self) -> None:
        """Raise ``SpeedError`` (exit 3) when the speed measurement failed: the quality verdict is kept on disk, but
        the run as a whole failed."""
        from evalgate.runner import SpeedError

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
    from evalgate.compare import compare_tasks

    thresholds = job.load()                     # 1. load: configs, thresholds, suites; bad input ends here
    sides = job.evaluate(thresholds)            # 2. evaluate both sides: engines, the store, or stored runs
    t0 = time.monotonic()
    try:                                        # 3. compare: the paired statistics, per task
        comparisons = compare_tasks(sides.tasks["baseline"], sides.tasks["candidate"], thresholds,
                                    config=sides.gate_name)
    except StoreError as exc:
        if sides.pair is None:
            raise
        raise StoreError(f"runs are not comparable ({sides.pair}): {exc}") from exc
    sides.manifest.timings["compare"] = time.monotonic() - t0
    doc = decide_and_render(comparisons, sides, thresholds, job.out)  # 4. decide and 5. render: one call
    return Outcome(doc, job.out, sides.speed)


def decide_and_render(comparisons: list[Any], sides: Evaluated, thresholds: Any, out: Path) -> dict[str, Any]:
    """The verdict: ``gate.decide`` over the comparisons, the gate's escalations (``report.gate_document``: health,
    speculative-decoding and speed floors), then ``sides.files``, ``manifest.json``, ``verdict.json`` and the
    rendered outputs (``outputs.write_outputs``) in ``out``. Returns the verdict document."""
    from evalgate.gate import decide
    from evalgate.report import gate_document

    name = sides.gate_name
    decision = decide([(c.suite, c.task, c.comparison) for c in comparisons], thresholds,
                      baseline_effective=sides.effective["baseline"], candidate_effective=sides.effective["candidate"],
                      config=name, expect=sides.expect,
                      outputs={c.task: c.agreement(thresholds.near_tie_logprob) for c in comparisons})
    manifest = sides.manifest.as_json()
    doc = gate_document(decision, comparisons, manifest, spec_floors=thresholds.spec_floors_for(name),
                        near_tie=thresholds.near_tie_logprob, speed=sides.speed,
                        speed_floors=thresholds.speed_floors_for(name))
    for filename, obj in sides.files.items():
        write_json_atomic(out / filename, obj)
    write_json_atomic(out / "manifest.json", manifest)
    write_json_atomic(out / "verdict.json", doc)
    write_outputs(doc, out)
    return doc


def stamp_now() -> str:
    """The run's UTC time stamp, e.g. ``20261201T104705Z`` (run directory names, ``manifest.created``)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def run_manifest(runs: dict[str, Any], thresholds: Any, suites: list[Any], *, limit: int | None, stamp: str,
                 timings: dict[str, float]) -> Manifest:
    """The manifest of two evaluated configs (``runs``: role -> ``runner.ConfigRun``)."""
    from evalgate.runner import versions

    return Manifest(created=stamp, model=runs["candidate"].config.model, limit=limit, versions=versions(),
                    thresholds=str(thresholds.path), timings=timings,
                    suites=[SuiteEntry(name=s.name, tasks=list(s.tasks), content_hash=s.content_hash) for s in suites],
                    baseline=side(runs["baseline"]), candidate=side(runs["candidate"]))


def evaluated_runs(runs: dict[str, Any], manifest: Manifest, *, gate_name: str | None = None,
                   speed: dict[str, Any] | None = None) -> Evaluated:
    """``Evaluated`` of two ``runner.ConfigRun``s; ``gate_name`` defaults to the candidate's config name."""
    cand = runs["candidate"].config
    return Evaluated(tasks={r: runs[r].tasks for r in ROLES}, effective={r: runs[r].effective for r in ROLES},
                     gate_name=gate_name or cand.name, expect=cand.expect, manifest=manifest, speed=speed)


def load_suites(suites_dir: Path, names: list[str] | None) -> list[Any]:
    """The suites ``names`` (all under ``suites_dir`` when None). Raises ConfigError when there are none."""
    from evalgate.suites import list_suites, load_suite

    suites = [load_suite(n, suites_dir) for n in names] if names else list_suites(suites_dir)
    if not suites:
        raise ConfigError("no suites found", path=suites_dir)
    return suites


def speed_profile(options: RunOptions, thresholds: Any, config_name: str, *, default_on: bool = False) -> Any:
    """The traffic profile to measure, or None: speed is measured when the thresholds file has a ``traffic``
    section (or ``configs.<name>.traffic``), the command line asks for it (``--speed``/``--concurrency``/
    ``--repeats``) or ``default_on`` (ablate), and never with ``--no-speed``.

    Raises:
        ConfigError: the profile is invalid, or asks for ``mode: serve`` (not available in this version).
    """
    from evalgate.engine import has_cuda
    from evalgate.speed import resolve_profile

    fields = thresholds.traffic_for(config_name)
    if options.no_speed or not (default_on or options.wants_speed or fields is not None):
        return None
    profile = resolve_profile(fields, cuda=has_cuda(), concurrency=options.concurrency, repeats=options.repeats)
    if profile.mode == "serve":
        raise ConfigError("traffic.mode 'serve' (vllm serve + vllm bench serve) is not available in this version; "
                          "use mode: offline", path=thresholds.path, field="traffic.mode")
    return profile


def check_profile(profile: Any, configs: dict[str, Any], limits: dict[str, dict[str, int]], thresholds: Any) -> None:
    """ConfigError (exit 2) when an engine of ``configs`` (role -> config) cannot run ``profile`` (too long for its
    max_model_len, or more concurrent requests than its max_num_seqs); ``limits``: role -> the engine's limits
    (``runner.check_engine_values``)."""
    from evalgate.speed import profile_problems

    for role, cfg in configs.items():
        for fld, msg in profile_problems(profile, limits.get(role, {})):
            raise ConfigError(f"{msg} of {role} config {cfg.name} ({cfg.path})", path=thresholds.path,
                              field=f"traffic.{fld}")


@dataclass
class EngineJob:
    """``evalgate run``: gate ``config`` against its baseline, both evaluated by engines (or the store).

    Attributes:
        config: config name or YAML path. configs_dir, suites_dir, thresholds_path: the project's folders and file.
        suite_names: suites to run (None: all). options: the run options. out: the run directory (None: the default
            ``runs/<config>-<UTC time>``; set by ``load``). announce: called with the run directory once it is known
            (the CLI writes error outputs there).
    """

    config: str
    configs_dir: Path
    suites_dir: Path
    thresholds_path: Path
    suite_names: list[str] | None
    options: RunOptions
    out: Path | None = None  # type: ignore[assignment]
    announce: Callable[[Path], None] = lambda out: None
    stamp: str = field(default_factory=stamp_now)

    def load(self) -> Any:
        """Configs, thresholds and suites, checked; the traffic profile against both engines' limits. Returns the
        thresholds. Raises ConfigError (exit 2) for bad input, before the baseline's engine starts."""
        from evalgate import config as config_mod
        from evalgate.engine import check_platform
        from evalgate.suites import check_datasets, list_suites
        from evalgate.thresholds import load_thresholds

        t0 = time.monotonic()
        if self.out and self.out.exists() and not self.out.is_dir():
            raise ConfigError("exists and is not a directory (the run directory)", path=self.out, field="--out")
        self.cand = config_mod.load_config(self.config, self.configs_dir)
        self.base = config_mod.load_baseline(self.cand, self.configs_dir)
        for cfg in (self.base, self.cand):
            check_platform(cfg.engine_args, cfg.path)
        thresholds = load_thresholds(self.thresholds_path)
        self.suites = load_suites(self.suites_dir, self.suite_names)
        every = list_suites(self.suites_dir)
        # Every task's data must be at hand before an engine starts; offline, lm-eval must not wait on the hub.
        os.environ.update(check_datasets(self.suites))
        thresholds.check_names([s.name for s in every], [t for s in every for t in s.tasks],
                               [*config_mod.list_configs(self.configs_dir), self.cand.name])
        self.out = self.out or Path("runs") / f"{self.cand.name.replace('/', '_')}-{self.stamp}"
        self.announce(self.out)
        self.timings = {"load": time.monotonic() - t0}
        self.profile = speed_profile(self.options, thresholds, self.cand.name)
        self._check_values(thresholds)
        return thresholds

    def _check_values(self, thresholds: Any) -> None:
        """vLLM validates the candidate's values before the baseline runs (a refused value costs seconds, not a
        baseline); with a traffic profile, both engines' limits are checked against it."""
        from evalgate import runner

        def check(role: str, cfg: Any) -> dict[str, int]:
            return runner.check_engine_values(cfg, self.out / "logs" / f"{role}-check.log", self.options.timeout)

        limits = {"candidate": check("candidate", self.cand)}
        if self.profile is not None:  # a profile the engines cannot run is refused before any engine starts
            limits["baseline"] = check("baseline", self.base)
            check_profile(self.profile, {"baseline": self.base, "candidate": self.cand}, limits, thresholds)

    def evaluate(self, thresholds: Any) -> Evaluated:
        """Baseline, then candidate (with the baseline as reference), each side's results written as it finishes;
        then the speed phase on both warm workers. The workers are killed on any error or interrupt."""
        runs: dict[str, Any] = {}
        workers: dict[str, Any] = {}
        speed = None
        try:
            for role, cfg in (("baseline", self.base), ("candidate", self.cand)):
                runs[role] = self._evaluate_side(role, cfg, runs.get("baseline"), workers)
            if self.profile is not None:
                t0 = time.monotonic()
                speed = measure(workers, self.profile)
                self.timings["speed"] = time.monotonic() - t0
        except BaseException:  # an error or Ctrl-C: stop the engines now (they run in sessions of their own)
            for w in workers.values():
                w.kill()
            raise
        for w in workers.values():
            w.close()
        manifest = run_manifest(runs, thresholds, self.suites, limit=self.options.limit, stamp=self.stamp,
                                timings=self.timings)
        return evaluated_runs(runs, manifest, speed=speed)

    def _evaluate_side(self, role: str, cfg: Any, reference: Any, workers: dict[str, Any]) -> Any:
        """One side's ``ConfigRun`` (its worker kept in ``workers`` when speed is measured), written to
        ``<role>.json`` at once."""
        from evalgate import runner
        from evalgate.model import evalgate_home
        from evalgate.progress import engine_progress
        from evalgate.store import ResultStore, tasks_to_json

        log_path = self.out / "logs" / f"{role}.log"
        log.info("%s '%s': %s (engine log: %s)", role, cfg.name, ", ".join(s.name for s in self.suites), log_path)
        t0 = time.monotonic()
        kwargs = dict(limit=self.options.limit, store=ResultStore(evalgate_home() / "store"), log_path=log_path,
                      timeout_s=self.options.timeout, reference=reference, logprob_items=self.options.logprob_items)
        with engine_progress(log_path, f"{role} {cfg.name}", [s.name for s in self.suites]):
            if self.profile is None:
                run = runner.evaluate_config(cfg, self.suites, **kwargs)
            else:  # the engine stays up for the speed phase, after both sides' suites
                workers[role], run = runner.start_config(cfg, self.suites, **kwargs)
        self.timings[f"{role}:total"] = time.monotonic() - t0
        self.timings.update({f"{role}:{k}": v for k, v in run.timings.items()})
        write_json_atomic(self.out / f"{role}.json", {"config": cfg.name, "effective": run.effective,
                                                     "spec_decode": run.spec_decode,
                                                     "evidence_sources": run.evidence_sources,
                                                     "tasks": tasks_to_json(run.tasks)})
        return run


def measure(workers: dict[str, Any], profile: Any) -> dict[str, Any]:
    """The speed block (``speedrun.measure_speed``), or ``{"status": "failed", "error", "profile"}`` when a
    measurement failed: the quality verdict is still written (the run then exits 3)."""
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


@dataclass
class VariantJob:
    """``evalgate ablate``: one variant config against a baseline already evaluated on a live worker.

    Attributes:
        variant: the variant's config. baseline: ``(worker, ConfigRun)`` of the baseline. thresholds, suites,
        options, profile (None: no speed), stamp: the ablation's. gate_name: whose thresholds apply. out: the
        variant's run directory; log_path: its engine log.
    """

    variant: Any
    baseline: tuple[Any, Any]
    thresholds: Any
    suites: list[Any]
    options: RunOptions
    profile: Any
    stamp: str
    gate_name: str
    out: Path
    log_path: Path

    def load(self) -> Any:
        """Nothing to load: the ablation loaded and checked everything; returns its thresholds."""
        return self.thresholds

    def evaluate(self, thresholds: Any) -> Evaluated:
        """The variant's suites (the baseline's run as reference), then its speed against the baseline's worker;
        the variant's worker is stopped either way. Raises ConfigError (vLLM refused a value), EngineError."""
        from evalgate import runner
        from evalgate.model import evalgate_home
        from evalgate.store import ResultStore

        base_worker, base_run = self.baseline
        worker, run = runner.start_config(self.variant, self.suites, limit=self.options.limit,
                                          store=ResultStore(evalgate_home() / "store"), log_path=self.log_path,
                                          timeout_s=self.options.timeout, reference=base_run,
                                          logprob_items=self.options.logprob_items)
        timings: dict[str, float] = {}
        try:
            speed = None
            if self.profile is not None:
                t0 = time.monotonic()
                speed = measure({"baseline": base_worker, "candidate": worker}, self.profile)
                timings["speed"] = time.monotonic() - t0
        except BaseException:
            worker.kill()
            raise
        worker.close()
        runs = {"baseline": base_run, "candidate": run}
        manifest = run_manifest(runs, thresholds, self.suites, limit=self.options.limit, stamp=self.stamp,
                                timings=timings)
        return evaluated_runs(runs, manifest, gate_name=self.gate_name, speed=speed)


@dataclass
class StoredJob:
    """``evalgate compare``: run B's candidate gated against run A's candidate, both read from their run directories
    (runs over different suite contents or items are not comparable: StoreError, exit 3)."""

    run_a: Path
    run_b: Path
    thresholds_path: Path
    out: Path

    def load(self) -> Any:
        """Both run directories (candidate results and manifest; run B's log-prob evidence dropped: it was measured
        against run B's own baseline) and the thresholds; refuses runs whose suites differ in content. Returns the
        thresholds."""
        from evalgate.runs import _side, _suite_hashes, _tasks, _without_evidence
        from evalgate.thresholds import load_thresholds

        (self.res_a, self.man_a), (self.res_b, self.man_b) = _side(self.run_a), _side(self.run_b)
        self.hashes = {k: _suite_hashes(m) for k, m in (("a", self.man_a), ("b", self.man_b))}
        for suite in sorted(self.hashes["a"].keys() & self.hashes["b"].keys()):
            ha, hb = self.hashes["a"][suite], self.hashes["b"][suite]
            if ha != hb:
                raise StoreError(f"runs are not comparable: suite '{suite}' differs between {self.run_a} and "
                                 f"{self.run_b} (content hash {ha[:12]} vs {hb[:12]})")
        self.tasks = {"baseline": _tasks(self.run_a, self.res_a),
                      "candidate": _without_evidence(_tasks(self.run_b, self.res_b))}
        return load_thresholds(self.thresholds_path)

    def evaluate(self, thresholds: Any) -> Evaluated:
        """Nothing is evaluated: the two candidates' stored items, and a manifest merging both runs' (``"a → b"``
        where they differ)."""
        from evalgate.runs import _merged

        eff = {"baseline": self.res_a.get("effective", {}), "candidate": self.res_b.get("effective", {})}
        cand_a, cand_b = self.man_a.get("candidate", {}), self.man_b.get("candidate", {})
        vers_a, vers_b = self.man_a.get("versions", {}), self.man_b.get("versions", {})
        manifest = _manifest_of({
            "created": stamp_now(), "model": _merged(self.man_a.get("model"), self.man_b.get("model")),
            "limit": _merged(self.man_a.get("limit"), self.man_b.get("limit")),
            "versions": {k: _merged(vers_a.get(k, "absent"), vers_b.get(k, "absent")) for k in sorted(vers_a | vers_b)},
            "thresholds": str(thresholds.path), "timings": {},
            "suites": [s for s in self.man_a.get("suites", []) if s["name"] in self.hashes["b"]],
            "compared_runs": {"baseline": str(self.run_a), "candidate": str(self.run_b),
                              "rule": "baseline side = run A's candidate, candidate side = run B's candidate"},
            "baseline": {"name": self.res_a.get("config", "A"), "requested": {}, **cand_a, "effective": eff["baseline"],
                         "run_dir": str(self.run_a)},
            "candidate": {"name": self.res_b.get("config", "B"), "requested": {}, **cand_b,
                          "effective": eff["candidate"], "run_dir": str(self.run_b)}}, self.run_b)
        # Run B's candidate is gated: its config name picks per-config margins, its expectation the lossless check.
        return Evaluated(tasks=self.tasks, effective=eff, gate_name=self.res_b.get("config"),
                         expect=cand_b.get("expect", "lossy"), manifest=manifest, pair=f"{self.run_a} vs {self.run_b}",
                         files={"baseline.json": self.res_a, "candidate.json": self.res_b})


def _manifest_of(data: dict[str, Any], source: Path) -> Manifest:
    """``Manifest`` of ``data`` built from the manifests under ``source``; StoreError (exit 3) when they are
    malformed (naming the first bad field)."""
    from pydantic import ValidationError

    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise StoreError(f"{source / 'manifest.json'}: malformed manifest: {'.'.join(map(str, err['loc']))}: "
                         f"{err['msg']}") from None
