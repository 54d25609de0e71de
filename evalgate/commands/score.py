"""``evalgate score``: one config alone, through the same runner and result store as ``evalgate run``.

A score decides nothing (no baseline, no thresholds, no verdict): it says what one config scores on each task, with
a 95 % interval, and warns about tasks that sit at 0 % or 100 % (a suite that cannot move with a switch). It is the
loop for iterating on a suite of one's own: the results are filed in the store under the same key a later ``run``
uses for that config as its baseline side (same suites, ``--limit``, ``--logprob-items`` and machine), so the gate
that follows reuses them, and a ``score`` of a side already stored starts no engine.

The interval of a task's mean (``task_score``):

* 0/1 scores on independent items: the Wilson score interval (E. B. Wilson, JASA 22(158), 1927, 209-212;
  ``intervals.wilson_interval``, computed by scipy's ``binomtest(...).proportion_ci(method="wilson")``);
* any other metric, or items sharing a source document (the suite's ``doc_group``): a Student-t interval around the
  mean with the cluster-robust standard error, CR1, df = G - 1 for G clusters (E. Miller, arXiv:2411.00640, 2024,
  sec. 2.2; ``intervals.clustered_se`` / ``intervals.paired_t_interval``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evalgate.commands.pipeline import load_suites, stamp_now
from evalgate.compare.intervals import cluster_codes, clustered_se, paired_t_interval, wilson_interval
from evalgate.engine.platform import check_platform
from evalgate.evaluate import runner
from evalgate.evaluate.modality import check_image_counts, check_image_input
from evalgate.evaluate.preflight import check_suites
from evalgate.evaluate.progress import engine_progress
from evalgate.evaluate.runner import versions
from evalgate.inputs import config as config_mod
from evalgate.inputs.chat import check_protocol
from evalgate.inputs.options import RunOptions
from evalgate.inputs.speed_only import check_speed_only
from evalgate.models.embedded import check_home, evalgate_home
from evalgate.paths import check_writable_dir
from evalgate.results.records import TaskResult
from evalgate.results.store import ResultStore, write_json_atomic
from evalgate.suites.discovery import check_datasets

__all__ = ["INTERVAL_MEAN", "INTERVAL_WILSON", "SCORE_JSON", "SUMMARY_MD", "ScoreJob", "ScoreOutcome", "TaskScore",
           "render_markdown", "render_table", "run_score", "task_score"]

log = logging.getLogger("evalgate")
SCORE_JSON = "score.json"
SUMMARY_MD = "summary.md"
CONFIDENCE = 0.95
INTERVAL_WILSON = "Wilson score interval (Wilson 1927)"
INTERVAL_MEAN = "Student-t interval, cluster-robust standard error CR1 (Miller 2024)"


@dataclass(frozen=True)
class TaskScore:
    """One task's score for one config.

    Attributes:
        suite, task, metric: where it comes from and its primary metric.
        items: items scored. correct: items scoring 1 when every score is 0 or 1, else None.
        mean: mean primary metric, points (0-100); NaN for an empty task.
        low, high: the 95 % interval of the mean, points (NaN when it cannot be computed, e.g. one cluster).
        interval: which interval (``INTERVAL_WILSON`` or ``INTERVAL_MEAN``).
        clusters: source documents the items come from (the suite's ``doc_group``; an item without one is its own).
        warning: one line when the task sits at 0 % or 100 % (or has no items), else None.
    """

    suite: str
    task: str
    metric: str
    items: int
    correct: int | None
    mean: float
    low: float
    high: float
    interval: str
    clusters: int = 0
    warning: str | None = None


def task_score(result: TaskResult, *, confidence: float = CONFIDENCE) -> TaskScore:
    """The mean of ``result``'s primary metric (points) with its two-sided ``confidence`` interval and, for a task
    at 0 % or 100 %, a warning.

    0/1 scores whose items are all their own cluster get the Wilson score interval of ``correct / items``; otherwise
    the mean -/+ ``t_{(1+confidence)/2, G-1}`` times the cluster-robust standard error (CR1) over the G clusters
    (the module docstring gives the sources), clipped to [0, 100]; NaN bounds with fewer than 2 clusters.
    Raises ValueError for a confidence outside (0, 1).
    """
    import numpy as np


    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    alpha = (1.0 - confidence) / 2.0
    scores = np.array([i.score for i in result.items], dtype=np.float64)
    n = int(scores.size)
    binary = bool(n) and bool(np.all((scores == 0.0) | (scores == 1.0)))
    labels = [i.cluster for i in result.items]
    codes = cluster_codes(labels, n)
    independent = n == 0 or int(codes.max()) + 1 == n
    correct = int(scores.sum()) if binary else None
    nan = math.nan
    if n == 0:
        mean, low, high, interval = nan, nan, nan, INTERVAL_WILSON
    elif binary and independent:
        lo, hi = wilson_interval(int(scores.sum()), n, alpha=alpha)
        mean, low, high, interval = 100.0 * float(scores.mean()), 100.0 * lo, 100.0 * hi, INTERVAL_WILSON
    else:
        m = float(scores.mean())
        se = clustered_se(scores, codes)
        lo, hi = paired_t_interval(m, se, int(codes.max()), alpha=alpha)
        mean, low, high, interval = 100.0 * m, 100.0 * max(0.0, lo), 100.0 * min(1.0, hi), INTERVAL_MEAN
        if math.isnan(lo):
            low, high = nan, nan
    return TaskScore(suite=result.suite, task=result.task, metric=result.metric, items=n, correct=correct, mean=mean,
                     low=low, high=high, interval=interval, clusters=int(codes.max()) + 1 if n else 0, warning=_warning(result.task, n, correct, scores))


def _warning(task: str, n: int, correct: int | None, scores: Any) -> str | None:
    """The 0 % / 100 % warning of one task (None when its mean is in between)."""
    if n == 0:
        return f"{task}: no items: the gate cannot see anything on it"
    what = (f"{correct}/{n} correct" if correct is not None
            else f"{scores.mean() * 100:.1f} % mean over {n} items")
    if float(scores.max()) == 0.0:
        return f"{task}: {what}: the gate cannot see a loss on it"
    if float(scores.min()) == 1.0:
        return f"{task}: {what}: at the ceiling, the gate cannot see a gain on it (only a loss can move it)"
    return None


@dataclass
class ScoreJob:
    """``evalgate score``: evaluate one config on its suites, alone.

    Attributes:
        config: config name or YAML path (any config: a baseline or a candidate; its own baseline is not needed).
        configs_dir, suites_dir: the project's folders. suite_names: suites to run (None: all).
        options: the run options (``limit``, ``timeout``, ``logprob_items``; the speed options are not used).
        out: the run directory (None: ``runs/score-<config>-<UTC time>``; set by ``load``).
        announce: called with the run directory once it is known (the CLI writes error outputs there).
    """

    config: str
    configs_dir: Path
    suites_dir: Path
    suite_names: list[str] | None
    options: RunOptions
    out: Path | None = None  # type: ignore[assignment]
    announce: Callable[[Path], None] = lambda out: None
    stamp: str = field(default_factory=stamp_now)

    def load(self) -> None:
        """The config and suites, checked (each task by the suite pre-flight) and the run directory and evalgate's
        home checked writable, before any engine starts.

        Raises:
            ConfigError (exit 2): bad input (an unknown config, a chat section its template or tokenizer cannot
                honour (``chat.check_protocol``), a bad suite, an unwritable ``--out``, a ``load_format: dummy``
                config: random weights, an image suite on a model that reads no images).
            PreflightError (exit 3): the pre-flight crashed or timed out.
        """
        import os


        t0 = time.monotonic()
        if self.out:
            check_writable_dir(self.out, field="--out", what="the run directory")
        self.cfg = config_mod.load_config(self.config, self.configs_dir)
        check_platform(self.cfg.engine_args, self.cfg.path, self.cfg.env)
        check_protocol(self.cfg)  # run's own check of a chat section, one side
        # Scores of random weights (load_format: dummy) would be scores of noise: refused, named.
        check_speed_only([self.cfg], speed_only=False, suite_names=self.suite_names, command="score")
        self.suites = load_suites(self.suites_dir, self.suite_names, self.cfg)
        os.environ.update(check_datasets(self.suites))
        if not self.out:
            self.out = Path("runs") / f"score-{self.cfg.name.replace('/', '_')}-{self.stamp}"
            check_writable_dir(self.out, field="--out (default)", what="the run directory")
        check_home()
        # an image suite needs a model vLLM takes images for (asked of vLLM, no weights loaded; else exit 2)
        checked = check_image_input([("score", self.cfg)], self.suites, self.out / "logs", self.options.timeout)
        self.preflight = check_suites(self.suites, limit=self.options.limit, timeout=self.options.timeout)
        check_image_counts([("score", self.cfg)], checked, self.preflight)  # each item's images vs the model's limit
        self.announce(self.out)
        self.timings = {"load": time.monotonic() - t0, "preflight": self.preflight["seconds"]}

    def evaluate(self) -> Any:
        """The config's ``runner.ConfigRun`` (from the store where it holds the suites, else from an engine worker),
        as the baseline side of ``evalgate run`` would be computed (no reference). Raises EngineError (exit 3)."""
        log_path = self.out / "logs" / "score.log"
        log.info("score '%s': %s (engine log: %s)", self.cfg.name, ", ".join(s.name for s in self.suites), log_path)
        t0 = time.monotonic()
        with engine_progress(log_path, f"score {self.cfg.name}", [s.name for s in self.suites]):
            run = runner.evaluate_config(self.cfg, self.suites, limit=self.options.limit,
                                         store=ResultStore(evalgate_home() / "store"), log_path=log_path,
                                         timeout_s=self.options.timeout, reference=None,
                                         logprob_items=self.options.logprob_items)
        self.timings["total"] = time.monotonic() - t0
        self.timings.update(run.timings)
        return run


@dataclass
class ScoreOutcome:
    """What ``run_score`` produced: the ``score.json`` document, the per-task scores and the files written."""

    doc: dict[str, Any]
    scores: list[TaskScore]
    out: Path
    files: dict[str, Path]

    @property
    def warnings(self) -> list[str]:
        """The tasks' 0 % / 100 % warnings, in task order."""
        return [s.warning for s in self.scores if s.warning]


def run_score(job: ScoreJob) -> ScoreOutcome:
    """Load, evaluate and summarise one config; write ``score.json`` and ``summary.md`` into ``job.out``.

    ``score.json``: ``config``, ``model``, ``created``, ``limit``, ``logprob_items``, ``suites`` (name, tasks,
    content hash), ``cached_suites`` (served from the store), ``effective`` (the engine config as applied),
    ``confidence``, ``tasks`` (``TaskScore`` fields; NaN written as null), ``warnings`` and ``timings`` (seconds).

    Raises:
        ConfigError (exit 2), EngineError / PreflightError / StoreError (exit 3): as ``evalgate run``.
    """
    job.load()
    run = job.evaluate()
    order = [t for s in job.suites for t in s.tasks]
    scores = [task_score(run.tasks[t]) for t in order if t in run.tasks]
    for s in scores:
        if s.warning:
            log.warning("%s", s.warning)
    doc = {"config": job.cfg.name, "model": job.cfg.model, "created": job.stamp, "limit": job.options.limit,
           "logprob_items": job.options.logprob_items, "versions": versions(),
           "suites": [{"name": s.name, "tasks": list(s.tasks), "content_hash": s.content_hash} for s in job.suites],
           "cached_suites": list(run.cached), "effective": run.effective, "device": run.device,
           "confidence": CONFIDENCE, "tasks": [_json_safe(asdict(s)) for s in scores],
           "warnings": [s.warning for s in scores if s.warning], "timings": job.timings}
    out = job.out
    write_json_atomic(out / SCORE_JSON, doc)
    md = out / SUMMARY_MD
    md.write_text(render_markdown(doc, scores), encoding="utf-8")
    return ScoreOutcome(doc=doc, scores=scores, out=out, files={"json": out / SCORE_JSON, "markdown": md})


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    """NaN floats as None (JSON has no NaN)."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def _fmt(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.1f}"


def _rows(scores: list[TaskScore]) -> list[tuple[str, ...]]:
    rows = []
    for s in scores:
        items = f"{s.correct}/{s.items}" if s.correct is not None else str(s.items)
        ci = f"n/a ({s.clusters} document{'s' * (s.clusters != 1)})" if math.isnan(s.low) \
            else f"[{_fmt(s.low)}, {_fmt(s.high)}]"
        which = "Wilson" if s.interval == INTERVAL_WILSON else "t, clustered SE"
        rows.append((s.task, s.suite, s.metric, items, _fmt(s.mean), ci, which))
    return rows


_HEAD = ("task", "suite", "metric", "items", "mean", "95 % interval", "interval")


def render_table(config: str, scores: list[TaskScore]) -> str:
    """The terminal table: one row per task (task, suite, metric, items or correct/items, mean in points, the
    95 % interval in points and which interval), then one line naming the intervals' sources, then the warnings."""
    rows = [_HEAD, *_rows(scores)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    lines = [f"score of {config} (mean primary metric, points)"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append(f"intervals: 95 %; Wilson = {INTERVAL_WILSON}, for 0/1 scores; t, clustered SE = {INTERVAL_MEAN}")
    lines += [f"warning: {s.warning}" for s in scores if s.warning]
    return "\n".join(lines)


def render_markdown(doc: dict[str, Any], scores: list[TaskScore]) -> str:
    """``summary.md``: the config, the table, the intervals' sources and the warnings (Markdown; task names and
    warnings are the suite's own text, with ``|`` escaped so a row stays a row)."""
    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    cached = ", ".join(doc["cached_suites"]) or "none"
    lines = [f"# evalgate score: {cell(str(doc['config']))}", "",
             f"Limit: {doc['limit'] if doc['limit'] is not None else 'all items'}; suites from the store: "
             f"{cell(cached)}. No verdict: a score decides nothing.", "",
             "| " + " | ".join(_HEAD) + " |", "|" + "---|" * len(_HEAD)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in _rows(scores)]
    lines += ["", f"Intervals: 95 %. Wilson: {INTERVAL_WILSON}, for 0/1 scores. t, clustered SE: {INTERVAL_MEAN}, "
                  "for other metrics or items grouped by document."]
    if doc["warnings"]:
        lines += ["", "## Warnings", ""] + [f"- {cell(w)}" for w in doc["warnings"]]
    return "\n".join(lines) + "\n"
