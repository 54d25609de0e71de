"""Where a gate's two sides come from (``pipeline.Job``): each job's ``load`` reads and checks its inputs before
any engine starts, and its ``evaluate`` produces both sides for ``pipeline.gate`` to compare, decide and render.

* ``EngineJob`` (``evalgate run``): a candidate config and its baseline, both evaluated by engine workers (or served
  from the store), speed measured on the warm workers;
* ``VariantJob`` (``evalgate ablate``): one variant of a recipe against a baseline already evaluated on a live worker;
* ``StoredJob`` (``evalgate compare``): two stored run directories; nothing is evaluated.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgate.commands.pipeline import Evaluated, evaluated_runs, load_suites, run_manifest, stamp_now
from evalgate.commands.plan import limit_notice
from evalgate.commands.stored import (
    candidate_tasks,
    check_comparable,
    merged,
    read_side,
    suite_hashes,
    without_evidence,
)
from evalgate.compare.replay import ReplayOutput, ReplayRun
from evalgate.engine.device import check_same_hardware
from evalgate.engine.platform import check_platform
from evalgate.errors import ConfigError, StoreError
from evalgate.evaluate import runner
from evalgate.evaluate.modality import check_image_counts, check_image_input
from evalgate.evaluate.placement import Alternation, Placement, placement_record, summary_line
from evalgate.evaluate.placement import resolve as resolve_placement
from evalgate.evaluate.preflight import check_suites
from evalgate.evaluate.progress import engine_progress
from evalgate.evaluate.runner import SpeedError
from evalgate.inputs import config as config_mod
from evalgate.inputs.chat import check_protocols, check_same_protocol
from evalgate.inputs.config import EngineConfig
from evalgate.inputs.options import RunOptions
from evalgate.inputs.replay import check_lengths, load_replay
from evalgate.inputs.speed_only import check_speed_only
from evalgate.inputs.thresholds import Thresholds, load_thresholds
from evalgate.models.embedded import check_home, evalgate_home
from evalgate.paths import check_writable_dir
from evalgate.results.manifest import Manifest
from evalgate.results.store import ResultStore, tasks_to_json, write_json_atomic
from evalgate.speed.block import SpeedBlock
from evalgate.speed.measure import check_profile, check_speed_only_profile, measure_speed_safely, speed_profile
from evalgate.speed.serve import measure_configs
from evalgate.speed.speedup import TrafficProfile
from evalgate.suites.discovery import check_datasets, list_suites
from evalgate.suites.files import Suite

log = logging.getLogger("evalgate")


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

    def load(self) -> Thresholds:
        """Configs, thresholds and suites, checked (each task by the suite pre-flight, ``evalgate.evaluate.preflight``); the
        run directory and evalgate's home (and its store) checked writable; with an image suite, both sides' models
        asked of vLLM whether they read images (``evaluate.modality``); the traffic profile against both engines'
        limits. Returns the thresholds. Raises ConfigError (exit 2) for bad input (a model that reads no images given
        an image suite among it), PreflightError (exit 3) when the pre-flight crashed or timed out, before the
        baseline's engine starts."""
        t0 = time.monotonic()
        if self.out:  # a given --out first: the cheapest check, and the one CI's error outputs need
            check_writable_dir(self.out, field="--out", what="the run directory")
        self.cand = config_mod.load_config(self.config, self.configs_dir)
        self.base = config_mod.load_baseline(self.cand, self.configs_dir)
        for cfg in (self.base, self.cand):
            check_platform(cfg.engine_args, cfg.path, cfg.env)
        check_same_hardware(self.base, self.cand)
        check_protocols(self.base, self.cand)
        speed_only = self.options.speed_only
        check_speed_only((self.base, self.cand), speed_only=speed_only, suite_names=self.suite_names)
        self.placement = resolve_placement(self.base, self.cand, self.options.placement)  # said once engines start
        thresholds = load_thresholds(self.thresholds_path)
        self.suites = [] if speed_only else load_suites(self.suites_dir, self.suite_names, self.cand)
        every = list_suites(self.suites_dir)
        # Every task's data must be at hand before an engine starts; offline, lm-eval must not wait on the hub.
        os.environ.update(check_datasets(self.suites))
        thresholds.check_names([s.name for s in every], [t for s in every for t in s.tasks],
                               [*config_mod.list_configs(self.configs_dir), self.cand.name])
        if not self.out:
            self.out = Path("runs") / f"{self.cand.name.replace('/', '_')}-{self.stamp}"
            check_writable_dir(self.out, field="--out (default)", what="the run directory")
        check_home()  # the store is written after each side: a broken home must not cost the baseline's engine run
        # An image suite needs models vLLM takes images for: both sides asked of vLLM (no weights) before the
        # pre-flight; what the candidate's check reported is reused by _check_values. No image suite: nothing runs.
        self.checked = check_image_input([("candidate", self.cand), ("baseline", self.base)], self.suites,
                                         self.out / "logs", self.options.timeout)
        self.policy = thresholds.policy(self.cand.name)  # the candidate's thresholds, resolved once
        # cheap: before the pre-flight; --speed-only measures speed whatever the thresholds file says
        self.profile = speed_profile(self.options, self.policy, default_on=speed_only)
        if speed_only:
            check_speed_only_profile(self.profile, self.policy, self.options)
        # the replay gate's log read and checked (None: no replay section); random weights (--speed-only) give
        # no answers worth comparing: said, never silently dropped
        self.replay = None if speed_only else load_replay(thresholds)
        if speed_only and thresholds.replay is not None:
            log.warning("%s: replay: --speed-only runs no replay gate (quality is not measured)", self.thresholds_path)
        # Each task built by lm-eval, its items' requests built and item 0 scored: a suite error is exit 2 here.
        self.preflight = (check_suites(self.suites, limit=self.options.limit, timeout=self.options.timeout)
                          if self.suites else {"seconds": 0.0})
        # every item's images against what each side's model takes in one prompt (vLLM would refuse it mid-run)
        check_image_counts([("candidate", self.cand), ("baseline", self.base)], self.checked, self.preflight)
        self.announce(self.out)
        self.timings = {"load": time.monotonic() - t0, "preflight": self.preflight["seconds"]}
        self._check_values()
        self._notice_unpowered()  # last: only a run that will start its engines gets the notice
        return thresholds

    def _notice_unpowered(self) -> None:
        """One line on stderr, before any engine starts, when at ``--limit`` the run cannot PASS
        (``planner.limit_notice``); a notice, not a refusal: small limits are run on purpose."""
        if self.options.limit is None:
            return
        tasks = []
        for suite in self.suites:
            for spec in suite.specs:
                th = self.policy.task(suite.name, spec.name)
                tasks.append((spec.name, th.margin, th.alpha, spec.limit))
        notice = limit_notice(tasks, self.options.limit, self.policy.power)
        if notice:
            log.warning("%s", notice)

    def _check_values(self) -> None:
        """vLLM validates the candidate's values before the baseline runs (a refused value costs seconds, not a
        baseline); with a traffic profile, both engines' limits are checked against it."""
        replay = None if self.replay is None else self.replay.spec()

        def check(role: str, cfg: EngineConfig) -> dict[str, Any]:
            if replay is None and role in getattr(self, "checked", {}):  # checked with the image suites' question
                return self.checked[role]
            extra = {} if replay is None else {"replay": replay}  # the plain check's call stays as it was
            return runner.check_engine_values(cfg, self.out / "logs" / f"{role}-check.log", self.options.timeout,
                                              **extra)

        limits = {"candidate": check("candidate", self.cand)}
        if self.profile is not None or replay is not None:  # the engines' limits, before any engine starts
            limits["baseline"] = check("baseline", self.base)
        if replay is not None:  # every replayed request must fit both engines (counted by the model's tokenizer)

            for role, cfg in (("baseline", self.base), ("candidate", self.cand)):
                got = limits[role]
                if got.get("replay_error"):
                    raise ConfigError(got["replay_error"])
                if "replay_prompt_tokens" in got and got.get("max_model_len"):
                    check_lengths(self.replay, got["replay_prompt_tokens"], int(got["max_model_len"]), cfg.name)
        if self.profile is not None:  # a profile the engines cannot run is refused before any engine starts
            check_profile(self.profile, {"baseline": self.base, "candidate": self.cand}, limits, self.policy,
                          options=self.options)

    def evaluate(self, thresholds: Thresholds) -> Evaluated:
        """Baseline, then candidate (with the baseline as reference), each side's results written as it finishes;
        then the speed phase on both warm workers. With ``placement: alternate`` both start in sleep mode, the
        baseline sleeps before the candidate's worker starts and the speed phase wakes one side at a time
        (``placement.Alternation``: the one place that keeps the rule, and in the speed phase restarts, in either
        placement, a side whose engine died in a pass, or whose sleep or wake failed; the replay phase restarts none).
        The workers are killed on any error or interrupt (every process group signalled first, then all waited for:
        ``runner.kill_workers``). Two sides whose workers resolved a hub model's own chat template to different message
        forms are refused once both ran (ConfigError, exit 2, ``chat.template``; ``chat.check_same_protocol``), as
        ``compare`` refuses them."""
        runs: dict[str, Any] = {}
        workers: dict[str, Any] = {}
        speed = replay = None
        alternate = self.placement.mode == "alternate"
        log.info("placement: %s (%s)", self.placement.mode, self.placement.reason)
        self.alternation = alt = Alternation(self.placement.mode, restart=self._restart)
        self._runs = runs
        try:
            for role, cfg in (("baseline", self.base), ("candidate", self.cand)):
                alt.before_start(role)  # alternate: the baseline sleeps before the candidate's worker starts
                runs[role] = self._evaluate_side(role, cfg, runs.get("baseline"), workers)
                if role in workers:
                    alt.started(role, workers[role])
            # a hub model's own template: each worker resolved how it takes a message's text (content); sides that
            # differ are refused as compare refuses them, before the replay and speed phases (results are stored)
            check_same_protocol(self.base.name, runs["baseline"].protocol, runs["candidate"].protocol, self.cand.path,
                                resolved=True)
            if self.replay is not None:
                t0 = time.monotonic()
                alt.restart = None  # the replay phase restarts nothing: an engine that fails in it is exit 3
                try:
                    replay = self._replay({role: alt.proxy(role) for role in workers})
                finally:
                    alt.restart = self._restart  # a side that dies in the speed phase is restarted
                self.timings["replay"] = time.monotonic() - t0
                if self.profile is None or self.profile.mode == "serve":  # the workers were kept for the replay only
                    for w in [*alt.workers.values()]:
                        w.close()
            if self.profile is not None:
                t0 = time.monotonic()
                speed = self._measure({role: alt.proxy(role) for role in workers})
                self.timings["speed"] = time.monotonic() - t0
        except BaseException:  # an error or Ctrl-C: stop the engines now (they run in sessions of their own), every
            runner.kill_workers([*workers.values(), *alt.workers.values()])  # group signalled first, then waited for
            raise
        record = placement_record(self.placement, alt)
        for w in alt.workers.values():
            w.close()
        if (alternate and alt.stats) or record.get("restarts"):
            log.info("%s", summary_line(record))
        manifest = run_manifest(runs, thresholds, self.suites, limit=self.options.limit, stamp=self.stamp,
                                timings=self.timings, placement=record, speed_only=self.options.speed_only)
        sides = evaluated_runs(runs, manifest, speed=speed)
        sides.replay = replay
        return sides

    def _replay(self, workers: dict[str, Any]) -> ReplayRun:
        """Both sides' greedy answers to the replayed requests (``worker.replay_gate``), on their warm workers (each
        woken first under ``placement: alternate``). Raises SpeedError (exit 3): a worker failed or died (the replay
        phase restarts no side, unlike the speed phase: ``evaluate`` runs it without ``Alternation.restart``; both
        sides' suite results are stored and written by then)."""
        plan, spec = self.replay, self.replay.spec()
        outputs = {}
        for role in ("baseline", "candidate"):
            log.info("replay: %s answers %d recorded requests", role, len(plan.requests))
            got = workers[role].measure({"replay": spec, "label": f"replay {role}"})["outputs"]
            if [o.get("line") for o in got] != spec["lines"]:  # fail closed: answers must pair with the requests

                raise SpeedError(f"replay: the {role} engine answered {len(got)} requests, not the {len(spec['lines'])} "
                                 f"sent (lines {spec['lines'][:5]}...)")
            outputs[role] = tuple(ReplayOutput.from_json(o) for o in got)
        meta = {"path": str(plan.log.path), "sha256": plan.log.sha256, "requests": len(plan.log.requests),
                "replayed": len(plan.requests), "only": plan.section.only, "limit": plan.section.limit,
                "max_tokens": plan.section.max_tokens, "sampling": plan.section.sampling}
        return ReplayRun(requests=plan.requests, outputs=outputs, log=meta, redact=plan.section.redact)

    def _restart(self, role: str) -> runner.Worker:
        """A new worker for ``role`` after its engine died in the speed phase (either placement; the replay phase
        restarts no side): every suite result comes from the store (nothing is recomputed), its log
        ``logs/<role>.restart<n>.log``, started in sleep mode under ``alternate`` only (vLLM's CPU build has none)."""
        cfg = self.base if role == "baseline" else self.cand
        n = self.alternation.stats.get(role, {}).get("restarts", 0)
        worker, _ = runner.start_config(
            cfg, self.suites, limit=self.options.limit, store=ResultStore(evalgate_home() / "store"),
            log_path=self.out / "logs" / f"{role}.restart{n}.log", timeout_s=self.options.timeout,
            reference=self._runs.get("baseline") if role == "candidate" else None,
            logprob_items=self.options.logprob_items, sleep_mode=self.placement.mode == "alternate")
        return worker

    def _measure(self, workers: dict[str, Any]) -> SpeedBlock:
        """The speed block, measured or failed: offline on the two warm workers (``measure.measure_speed_safely``),
        or (``traffic.mode: serve``) ``vllm serve`` + ``vllm bench serve`` per config after the suites' engines
        stopped (``servespeed.measure_configs``)."""
        if self.profile.mode != "serve":
            return measure_speed_safely(workers, self.profile)

        return measure_configs(self.base, self.cand, self.profile, self.out / "logs", progress=log.info)

    def _evaluate_side(self, role: str, cfg: EngineConfig, reference: runner.ConfigRun | None,
                       workers: dict[str, Any]) -> runner.ConfigRun:
        """One side's ``ConfigRun`` (its worker kept in ``workers`` when speed is measured), written to
        ``<role>.json`` at once."""
        log_path = self.out / "logs" / f"{role}.log"
        log.info("%s '%s': %s (engine log: %s)", role, cfg.name,
                 ", ".join(s.name for s in self.suites) or "no suites (speed only)", log_path)
        t0 = time.monotonic()
        kwargs = dict(limit=self.options.limit, store=ResultStore(evalgate_home() / "store"), log_path=log_path,
                      timeout_s=self.options.timeout, reference=reference, logprob_items=self.options.logprob_items)
        label = role if cfg.name == role else f"{role} {cfg.name}"  # not "baseline baseline"
        with engine_progress(log_path, label, [s.name for s in self.suites]):
            keep = self.replay is not None or (self.profile is not None and self.profile.mode != "serve")
            if not keep:  # serve mode starts servers of its own
                run = runner.evaluate_config(cfg, self.suites, **kwargs)
            else:  # the engine stays up for the replay and the speed phase, after both sides' suites
                workers[role], run = runner.start_config(cfg, self.suites, **kwargs,
                                                         sleep_mode=self.placement.mode == "alternate")
        self.timings[f"{role}:total"] = time.monotonic() - t0
        self.timings.update({f"{role}:{k}": v for k, v in run.timings.items()})
        write_json_atomic(self.out / f"{role}.json", {"config": cfg.name, "effective": run.effective,
                                                     "spec_decode": run.spec_decode,
                                                     "evidence_sources": run.evidence_sources,
                                                     "tasks": tasks_to_json(run.tasks)})
        return run


@dataclass
class VariantJob:
    """``evalgate ablate``: one variant config against a baseline already evaluated on a live worker.

    Attributes:
        variant: the variant's config. baseline: ``(worker, ConfigRun)`` of the baseline. thresholds, suites,
        options, profile (None: no speed), stamp: the ablation's. gate_name: whose thresholds apply. out: the
        variant's run directory; log_path: its engine log. alternation, placement: the ablation's
        (``placement.Alternation`` holding the baseline's worker, and its ``Placement``); None: both resident.
    """

    variant: EngineConfig
    baseline: tuple[runner.Worker, runner.ConfigRun]
    thresholds: Thresholds
    suites: list[Suite]
    options: RunOptions
    profile: TrafficProfile | None
    stamp: str
    gate_name: str
    out: Path
    log_path: Path
    alternation: Alternation | None = None  # of the ablation (None: both resident)
    placement: Placement | None = None  # of the ablation (None: not recorded)

    def load(self) -> Thresholds:
        """Nothing to load: the ablation loaded and checked everything; returns its thresholds."""
        return self.thresholds

    def evaluate(self, thresholds: Thresholds) -> Evaluated:
        """The variant's suites (the baseline's run as reference), then its speed against the baseline's worker;
        the variant's worker is stopped either way. With ``alternation`` in ``alternate`` mode the baseline sleeps
        before the variant's worker starts and stays asleep between variants; each speed pass wakes its side only
        (``placement.Alternation``). Raises ConfigError (vLLM refused a value; the variant's worker resolved a hub
        chat template to another message form than the baseline's), EngineError."""
        base_worker, base_run = self.baseline
        alt = self.alternation
        if alt is None:  # a caller without an alternation: both resident, as before placement existed
            alt = Alternation("together")
            alt.started("baseline", base_worker)
        alternate = alt.mode == "alternate"
        store = ResultStore(evalgate_home() / "store")

        def start(log_path: Path) -> Any:
            worker, run = runner.start_config(self.variant, self.suites, limit=self.options.limit, store=store,
                                              log_path=log_path, timeout_s=self.options.timeout, reference=base_run,
                                              logprob_items=self.options.logprob_items, sleep_mode=alternate)
            return worker, run

        restart_baseline = alt.restart

        def restart(role: str) -> Any:  # the variant's own restarts (logs/<slug>.restart<n>.log); the baseline's are
            # the ablation's, its budget (placement.MAX_RESTARTS) shared by every variant
            if role == "baseline":
                return restart_baseline("baseline")  # type: ignore[misc]
            n = alt.stats.get("candidate", {}).get("restarts", 0)
            return start(self.log_path.with_suffix(f".restart{n}.log"))[0]

        alt.stats.pop("candidate", None)  # this variant's sleeps and wakes only (the baseline's are cumulative)
        alt.before_start("candidate")
        worker, run = start(self.log_path)
        alt.started("candidate", worker)
        if restart_baseline is not None:  # either placement: a side that dies in the speed phase is restarted
            alt.restart = restart
        timings: dict[str, float] = {}
        try:
            # as run: sides whose workers resolved a hub template's message form differently are never gated
            check_same_protocol(base_run.config.name, base_run.protocol, run.protocol, self.variant.path,
                                resolved=True)
            speed = None
            if self.profile is not None:
                t0 = time.monotonic()
                speed = measure_speed_safely({r: alt.proxy(r) for r in ("baseline", "candidate")}, self.profile)
                timings["speed"] = time.monotonic() - t0
        except BaseException:
            alt.workers.get("candidate", worker).kill()
            alt.stopped("candidate")
            raise
        finally:
            alt.restart = restart_baseline
        record = placement_record(self.placement, alt) if self.placement is not None else None
        if record is not None and (alternate or record.get("restarts")):
            log.info("%s", summary_line(record))
        alt.workers.get("candidate", worker).close()
        alt.stopped("candidate")
        runs = {"baseline": base_run, "candidate": run}
        manifest = run_manifest(runs, thresholds, self.suites, limit=self.options.limit, stamp=self.stamp,
                                timings=timings, placement=record, speed_only=self.options.speed_only)
        return evaluated_runs(runs, manifest, gate_name=self.gate_name, speed=speed)


@dataclass
class StoredJob:
    """``evalgate compare``: run B's candidate gated against run A's candidate, both read from their run directories
    (runs over different suite contents or items are not comparable: StoreError, exit 3)."""

    run_a: Path
    run_b: Path
    thresholds_path: Path
    out: Path

    def load(self) -> Thresholds:
        """Both run directories (candidate results and complete, well-typed manifests; run B's log-prob evidence
        dropped: it was measured against run B's own baseline), the thresholds and the output directory (writable);
        refuses runs whose tasks' suites are not listed in both manifests under the same content hash
        (``runs.check_comparable``). Returns the thresholds.

        Raises:
            StoreError (exit 3): a run directory is missing or malformed, a ``--speed-only`` run (no quality
                results), or the runs are not comparable.
            ConfigError (exit 2): bad thresholds, or an output directory that cannot be written.
        """
        (self.res_a, self.man_a), (self.res_b, self.man_b) = read_side(self.run_a), read_side(self.run_b)
        for run, man in ((self.run_a, self.man_a), (self.run_b, self.man_b)):
            if man.get("speed_only"):  # no task results: nothing of quality to gate
                raise StoreError(f"{run}: a --speed-only run (manifest.json speed_only) holds no quality results to "
                                 f"compare")
        self.hashes = {k: suite_hashes(m) for k, m in (("a", self.man_a), ("b", self.man_b))}
        tasks_a, tasks_b = candidate_tasks(self.run_a, self.res_a), candidate_tasks(self.run_b, self.res_b)
        check_comparable({"a": tasks_a, "b": tasks_b}, {"a": self.man_a, "b": self.man_b},
                         {"a": self.run_a, "b": self.run_b})
        self.tasks = {"baseline": tasks_a, "candidate": without_evidence(tasks_b)}
        thresholds = load_thresholds(self.thresholds_path)
        if thresholds.replay is not None:  # said, never silently dropped: stored runs keep no replay answers
            log.warning("%s: replay: compare gates the stored suites only; the replay gate runs in `evalgate run`",
                        self.thresholds_path)
        check_writable_dir(self.out, field="--out", what="the comparison's run directory")
        return thresholds

    def evaluate(self, thresholds: Thresholds) -> Evaluated:
        """Nothing is evaluated: the two candidates' stored items, and a manifest merging both runs' (``"a → b"``
        where they differ)."""
        eff = {"baseline": self.res_a.get("effective", {}), "candidate": self.res_b.get("effective", {})}
        cand_a, cand_b = self.man_a.get("candidate", {}), self.man_b.get("candidate", {})
        vers_a, vers_b = self.man_a.get("versions", {}), self.man_b.get("versions", {})
        manifest = Manifest.checked({
            "created": stamp_now(), "model": merged(self.man_a.get("model"), self.man_b.get("model")),
            "limit": merged(self.man_a.get("limit"), self.man_b.get("limit")),
            "versions": {k: merged(vers_a.get(k, "absent"), vers_b.get(k, "absent")) for k in sorted(vers_a | vers_b)},
            "thresholds": str(thresholds.path), "timings": {},
            "suites": [s for s in self.man_a.get("suites", []) if s["name"] in self.hashes["b"]],
            "compared_runs": {"baseline": str(self.run_a), "candidate": str(self.run_b),
                              "rule": "baseline side = run A's candidate, candidate side = run B's candidate"},
            "baseline": {"name": self.res_a.get("config", "A"), "requested": {}, **cand_a, "effective": eff["baseline"],
                         "run_dir": str(self.run_a)},
            "candidate": {"name": self.res_b.get("config", "B"), "requested": {}, **cand_b,
                          "effective": eff["candidate"], "run_dir": str(self.run_b)}}, self.run_b / "manifest.json")
        # Run B's candidate is gated: its config name picks per-config margins, its expectation the lossless check.
        return Evaluated(tasks=self.tasks, effective=eff, gate_name=self.res_b.get("config"),
                         expect=cand_b.get("expect", "lossy"), manifest=manifest, pair=f"{self.run_a} vs {self.run_b}",
                         files={"baseline.json": self.res_a, "candidate.json": self.res_b})

