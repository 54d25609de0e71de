"""``evalgate ablate``: what each switch of a recipe buys and costs, alone and cumulatively.

The recipe's switches are its differences from its baseline: each top-level ``engine_args`` key and each ``env``
variable whose value differs, in the recipe file's order. Variants: every switch alone on the baseline, then the
cumulative recipe in that order (+first, +second, ...; the last is the whole recipe). A variant this platform refuses
(``engine.check_platform``: FlashInfer or stochastic rounding on CPU, stochastic rounding on the Triton kernel of a
Hopper GPU) is skipped and the table says why; its switch joins a later cumulative step as soon as it can run (so SR
joins the chain with FlashInfer), and a switch refused to the end is left out (on CPU the last row is "the recipe
minus what this platform cannot run"). A value vLLM rejects at engine start skips that row and the later cumulative
rows that keep it. Variants with the same requested config are evaluated once, and every
suite result comes from the store when an earlier run (``evalgate run`` of the same config, or a previous ablation)
computed it. Speed: the baseline's engine stays up for the whole ablation; each variant's engine is measured
against it in interleaved repeats, then stopped. With ``placement: alternate`` (``evalgate.evaluate.placement``) the baseline
sleeps before each variant's engine starts and between variants; a speed pass wakes its side only.

Nothing finished is lost: ``ablation.json`` and ``ablation.html`` are rewritten (atomically) after every variant and
when the ablation is left by an exception (Ctrl-C, a CI cancel, any error), the rows not yet run marked
``pending`` and ``meta.complete`` false; a rerun of the same command takes every finished suite result from the store.
The table goes to stdout once, at the end.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgate.commands import jobs, pipeline
from evalgate.commands.pipeline import load_suites
from evalgate.engine.device import check_same_hardware
from evalgate.engine.platform import check_platform
from evalgate.errors import ConfigError, EngineError, SuiteCodeError
from evalgate.evaluate import runner
from evalgate.evaluate.modality import check_image_counts, check_image_input
from evalgate.evaluate.placement import Alternation, placement_record
from evalgate.evaluate.placement import resolve as resolve_placement
from evalgate.evaluate.preflight import check_suites
from evalgate.gate.recommend import AblationRow, AblationSwitch, AblationTask, recommend, recommendation_lines
from evalgate.inputs import config as config_mod
from evalgate.inputs.chat import check_protocols
from evalgate.inputs.speed_only import check_speed_only
from evalgate.inputs.thresholds import load_thresholds
from evalgate.models.embedded import check_home, evalgate_home
from evalgate.paths import check_writable_dir
from evalgate.report.outputs import pts
from evalgate.report.plot import sweep_plot, tradeoff_plot
from evalgate.report.verdict import Verdict, as_verdict
from evalgate.report.wording import speed_mde_note
from evalgate.results.store import ResultStore, write_json_atomic
from evalgate.speed.block import SpeedBlock, SpeedLevel
from evalgate.speed.economics import EconomicsLevel, usd
from evalgate.speed.measure import check_profile, check_speed_only_profile, speed_profile, traffic_source
from evalgate.speed.precision import METHOD as PRECISION_METHOD
from evalgate.speed.precision import precision_note
from evalgate.speed.profile import TrafficProfile
from evalgate.speed.speedup import METHOD, capacity_note, repeats_note, repeats_words
from evalgate.suites.discovery import check_datasets

log = logging.getLogger("evalgate")


@dataclass(frozen=True)
class Switch:
    """One difference of the recipe from its baseline: ``section`` ``engine_args`` or ``env``, its key and value."""

    section: str
    key: str
    value: Any

    @property
    def label(self) -> str:
        return f"{self.key}={self.value!r}" if self.section == "engine_args" else f"env {self.key}={self.value}"


@dataclass(frozen=True)
class Variant:
    """A config of the ablation: ``kind`` ``alone`` or ``cumulative``, its switches, the config and why it is skipped
    (empty when it runs)."""

    kind: str
    switches: tuple[Switch, ...]
    config: Any
    skipped: str = ""

    @property
    def label(self) -> str:
        if self.kind == "alone":
            return self.switches[0].label
        return "+ " + " + ".join(s.key for s in self.switches)


def switches(base: Any, recipe: Any) -> list[Switch]:
    """The recipe's differences from ``base`` (``EngineConfig``s): engine args then env, in the recipe's order.

    A key the recipe removes (present in the baseline only) is a switch to ``None`` (vLLM's default). The order is
    the recipe's own files' (child first): the merged config lists an inherited key where its parent had it."""
    out = []
    for section in ("engine_args", "env"):
        mine, theirs = getattr(recipe, section), getattr(base, section)
        order = _file_order(recipe, section)
        for key in sorted(mine, key=lambda k: order.get(k, len(order))):
            if theirs.get(key, _ABSENT) != mine[key]:
                out.append(Switch(section, key, mine[key]))
        for key in theirs:
            if key not in mine:
                out.append(Switch(section, key, None))
    return out


def _file_order(cfg: Any, section: str) -> dict[str, int]:
    """Position of each ``section`` key as written in ``cfg``'s files (the child's first, then its parents')."""
    import yaml

    order: dict[str, int] = {}
    for path in cfg.chain or (cfg.path,):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        for key in (data.get(section) or {}) if isinstance(data, dict) else {}:
            order.setdefault(key, len(order))
    return order


_ABSENT = object()


def _apply(base: Any, chosen: tuple[Switch, ...], name: str, known: dict[str, Any], path: Any = None) -> Any:
    """``base`` with ``chosen`` switches applied; named after an existing config with the same requested identity
    (its name, ``expect`` and thresholds then apply), else ``name``."""
    engine_args, env = dict(base.engine_args), dict(base.env)
    for s in chosen:
        target = engine_args if s.section == "engine_args" else env
        if s.value is None:
            target.pop(s.key, None)
        else:
            target[s.key] = s.value
    cfg = dataclasses.replace(base, name=name, engine_args=engine_args, env=env, baseline=base.name,
                              path=path or base.path)
    for other in known.values():
        if other.identity() == cfg.identity() and other.baseline:
            return dataclasses.replace(cfg, name=other.name, path=other.path, expect=other.expect,
                                       description=other.description)
    return cfg


def plan_variants(base: Any, recipe: Any, known: dict[str, Any], refuse: Any) -> list[Variant]:
    """Every switch alone, then the cumulative chain (see the module docstring).

    A cumulative step the platform refuses (its own switch on top of the last step that ran) is skipped, with that
    switch's reason, and the switch is carried. A later step that runs takes in each carried switch that can then
    join, one at a time in the recipe's order (stochastic rounding on an H200 joins with the FlashInfer kernel, the
    next switch of cline-recipe); a later switch refused alone is tried with all the carried ones. A switch refused
    to the end is left out (the last row is then "the recipe minus what this platform cannot run").

    Args:
        known: configs by name (to name a variant after an existing config).
        refuse: ``refuse(cfg) -> str``: why this platform cannot run ``cfg`` ("" when it can).
    """
    found = switches(base, recipe)
    out: list[Variant] = []
    for s in found:
        cfg = _apply(base, (s,), f"{recipe.name}~{s.key}", known, recipe.path)
        out.append(Variant("alone", (s,), cfg, refuse(cfg)))
    chain: list[Switch] = []    # the switches of the last step that ran
    carried: list[Switch] = []  # refused so far: tried again with each later switch
    for i, s in enumerate(found):
        def step(trial: list[Switch], i: int = i) -> tuple[tuple[Switch, ...], Any]:
            ordered = tuple(sorted(trial, key=found.index))  # the recipe's order, whatever joined when
            return ordered, _apply(base, ordered, f"{recipe.name}~cum{i + 1}", known, recipe.path)

        trial, cfg = step([*chain, s])
        why = refuse(cfg)
        if why and carried:  # this switch may need a carried one (SR on Hopper needs FlashInfer): try them all
            with_all = step([*chain, *carried, s])
            if not refuse(with_all[1]):
                (trial, cfg), why = with_all, ""
        elif not why:  # it runs: each carried switch that can now join, joins (one at a time, in order)
            for c in list(carried):
                more = step([*trial, c])
                if not refuse(more[1]):
                    trial, cfg = more
        if why:
            carried.append(s)
            trial, cfg = step([*chain, *carried])  # the step as asked: the row's label
            why += f" (the cumulative chain goes on without {s.key} and retries it with each later switch)"
        else:
            chain = list(trial)
            carried = [c for c in carried if c not in trial]
        out.append(Variant("cumulative", trial, cfg, why))
    # The same requested config (e.g. the first switch alone and the first cumulative step) is evaluated once.
    first: dict[str, Any] = {}
    for i, v in enumerate(out):
        key = json.dumps(v.config.identity(), sort_keys=True, default=str)
        out[i] = dataclasses.replace(v, config=first.setdefault(key, v.config))
    return out


def ablation_rows(variants: list[Variant], docs: Mapping[str, Verdict | Mapping[str, Any]]) -> list[AblationRow]:
    """One row per variant (``recommend.AblationRow``, written to ``ablation.json`` by its ``as_json``): ``label``,
    ``kind``, ``config``, ``skipped``, ``switches`` and, for a variant with a verdict, ``verdict``, ``speed`` (the
    verdict's ``SpeedLevel``s; empty when speed was not measured or failed), ``speed_status`` and ``speed_error``
    (None when not measured), ``economics`` (the verdict's ``EconomicsLevel``s; empty without an ``economics``
    section) and the per-task Δ (points). ``docs``: config name -> its verdict (``Outcome.doc``, read through
    ``verdict.as_verdict``).

    Raises:
        pydantic.ValidationError: a document is not a verdict document.
    """
    rows = []
    for v in variants:
        doc = docs.get(v.config.name) if not v.skipped else None
        gated: dict[str, Any] = {}
        if doc is not None:
            verdict = as_verdict(doc)
            sp, cost = verdict.speed, verdict.economics
            gated = dict(verdict=verdict.verdict, speed=list(sp.levels) if sp is not None else [],
                         speed_status=None if sp is None else sp.status, speed_error=None if sp is None else sp.error,
                         economics=list(cost.levels) if cost is not None else [],
                         tasks=[AblationTask(suite=t.suite, task=t.task, delta=t.delta, ci_low=t.ci_low,
                                             ci_high=t.ci_high, verdict=t.verdict) for t in verdict.tasks])
        rows.append(AblationRow(label=v.label, kind=v.kind, config=v.config.name, skipped=v.skipped,
                                switches=[AblationSwitch(**dataclasses.asdict(s)) for s in v.switches], **gated))
    return rows


def render_table(rows: Sequence[AblationRow]) -> str:
    """The ablation as a plain-text table: switch, speed-up [interval] per concurrency (and the candidate's $ per
    million output tokens with an ``economics`` section), Δ [interval] per task, verdict (a skipped or not-run row:
    why, on one line); then, when some speed was measured, the recommendation per concurrency
    (``recommend.recommend``)."""
    lines = []
    width = max((len(r.label) for r in rows), default=0)  # whole labels: cumulative ones differ at their ends
    for r in rows:
        if r.skipped:
            lines.append(f"{r.kind:10} {r.label:{width}} skipped: {r.skipped}")
            continue
        if r.pending:
            lines.append(f"{r.kind:10} {r.label:{width}} not run: {r.not_run}")
            continue
        speed = "; ".join(_speed_cell(s, r.economics) for s in r.speed) or (
            f"speed {r.speed_status or 'not measured'}")
        deltas = ", ".join(f"{t.task} {pts(t.delta)} [{pts(t.ci_low)}, {pts(t.ci_high)}]" for t in r.tasks)
        lines.append(f"{r.kind:10} {r.label:{width}} {r.verdict or '?':12} {speed} | {deltas}")
    recs = recommendation_lines(recommend(rows))
    if recs:
        lines += ["", "recommendation (fastest PASS variant whose speed-up's lower bound is > 1):",
                  *[f"  {x}" for x in recs]]
    return "\n".join(lines)


def _cost_at(economics: Sequence[EconomicsLevel], c: int) -> float | None:
    """The candidate's $ per million output tokens at concurrency ``c`` from a row's ``economics`` levels."""
    lv = next((e for e in economics if e.concurrency == c), None)
    return None if lv is None else lv.candidate.usd_per_mtok


def _speed_cell(s: SpeedLevel, economics: Sequence[EconomicsLevel] = ()) -> str:
    lo, hi = s.ci_low, s.ci_high
    ci = f"[{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "[n/a]"
    prec = precision_note(s.precision)
    cost = _cost_at(economics, s.concurrency)
    held = capacity_note(s)
    return (f"c={s.concurrency} \u00d7{s.ratio:.2f} {ci}" + (f" ({prec})" if prec else "")
            + ("" if cost is None else f" {usd(cost)}/M") + (f" [{held}]" if held else ""))


def render_html(rows: Sequence[AblationRow], meta: dict[str, Any]) -> str:
    """``ablation.html``: the table (with the candidate's $ per million output tokens under each speed-up when the
    verdicts carry costs), the recommendation per concurrency (``recommend.recommend``), the trade-off plot (each
    variant's headline speed-up against each task's Δ) and, for a sweep, speed-up by concurrency per variant; unless
    ``meta["complete"]``, a line at the top saying how many rows are missing. Self-contained, no scripts,
    autoescaped."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    points, sweep = [], []
    for r in rows:
        head = r.speed[0] if r.speed else SpeedLevel()
        for t in r.tasks:
            points.append({"label": f"{r.label[:40]} / {t.task}", "ratio": head.ratio, "ratio_low": head.ci_low,
                           "ratio_high": head.ci_high, "delta": t.delta, "delta_low": t.ci_low,
                           "delta_high": t.ci_high, "verdict": r.verdict})
        sweep += [{"series": r.label[:40], "concurrency": s.concurrency, "ratio": s.ratio, "ci_low": s.ci_low,
                   "ci_high": s.ci_high} for s in r.speed]
    env = Environment(loader=PackageLoader("evalgate.report", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["pts"] = pts
    env.globals.update(repeats_note=repeats_note, precision_note=precision_note, repeats_words=repeats_words,
                       usd=usd, cost_at=_cost_at, capacity_note=capacity_note)
    levels = sorted({s.concurrency for r in rows for s in r.speed})
    profile = TrafficProfile.from_document(meta.get("profile") or {})  # ablation.json's meta records it as a dict
    return env.get_template("ablation.html.j2").render(
        rows=rows, meta=meta, profile=profile, recommendation=recommend(rows), tradeoff=tradeoff_plot(points, title="each switch: speed-up against each task's \u0394"),
        sweep=sweep_plot(sweep) if len(levels) > 1 else "", levels=levels,
        mde_note=speed_mde_note(SpeedBlock(levels=[s for r in rows for s in r.speed], profile=profile)))


def run_ablation(config: str, configs_dir: Path, suites_dir: Path, thresholds_path: Path, suite_names: list[str] | None,
                 options: Any, *, kind: str = "all", only: list[str] | None = None, out: Path | None = None,
                 announce: Callable[[Path], None] = lambda out: None) -> Path:
    """Ablate recipe ``config``: the baseline's engine once, each runnable variant gated against it
    (``pipeline.gate`` of a ``VariantJob``: one run directory per variant under ``variants/``), then
    ``ablation.json``, ``ablation.html`` and the table on stdout.

    ``ablation.json`` and ``ablation.html`` are also written after each variant (passed, failed or refused) and, with
    what is done, when the loop is left by any exception (the baseline's worker is killed, the exception re-raised):
    the rows not yet run are ``pending`` and ``meta.complete`` is false. The table is printed at the end only.

    An engine that dies in a variant's speed phase is restarted (``placement.Alternation``, either placement): the
    variant's own (``logs/<slug>.restart<n>.log``) at most ``placement.MAX_RESTARTS`` times per variant; the
    baseline's (``logs/baseline.restart<n>.log``) at most ``MAX_RESTARTS`` times over the whole ablation (one engine
    serves every variant): once they ran out, every later variant's speed part fails saying so (exit 3 at the end).

    Args:
        options: ``options.RunOptions``; speed is measured unless ``no_speed``. kind: ``all``, ``alone`` or
            ``cumulative`` rows. only: these switches' alone rows only. out: the output directory (default
            ``runs/ablate-<config>-<UTC time>``); ``announce`` is called with it once known.
    Returns:
        The output directory.
    Raises:
        ConfigError (exit 2): bad input, an unknown switch, nothing to ablate, a profile the baseline cannot run,
            an output directory or evalgate home that cannot be written, an image suite on a model that reads no
            images (``evaluate.modality``).
        EngineError (exit 3): the baseline failed, or some variant failed (the others are kept and tabled).
        Anything else a variant's gate raises (KeyboardInterrupt, ...): re-raised once the partial ``ablation.json``
            and ``ablation.html`` are written.
    """
    if out is not None:
        check_writable_dir(out, field="--out", what="the ablation's output directory")
    recipe, base, thresholds, suites, known = _load(config, configs_dir, suites_dir, thresholds_path, suite_names,
                                                    speed_only=options.speed_only)
    placement = resolve_placement(base, recipe, options.placement)  # before any engine starts: exit 2 here
    # As for a run: every task's data at hand, each task built by lm-eval and item 0 scored, before the baseline's
    # engine starts (a suite error is exit 2 here, not a worker traceback). --speed-only: no suites.
    os.environ.update(check_datasets(suites))
    preflight = check_suites(suites, limit=options.limit, timeout=options.timeout) if suites else {}
    variants = _select(plan_variants(base, recipe, known, _refusal), kind, only, recipe, base)
    if all(v.skipped for v in variants):  # nothing would be measured: say so before the baseline's engine starts
        raise ConfigError(f"no row of this ablation can run on this platform ({variants[0].skipped.split(' (')[0]}; "
                          f"{len(variants)} row(s) skipped)", path=recipe.path, field="--kind/--switches")
    stamp = pipeline.stamp_now()
    if out is None:
        out = Path("runs") / f"ablate-{recipe.name.replace('/', '_')}-{stamp}"
        check_writable_dir(out, field="--out (default)", what="the ablation's output directory")
    check_home()  # the store is written as the baseline runs: a broken home must not cost its engine run
    # an image suite needs models vLLM takes images for: the recipe's and the baseline's (every variant is one plus
    # some of the other's engine args), asked of vLLM before the baseline's engine starts (else exit 2)
    sides = [("recipe", recipe), ("baseline", base)]
    check_image_counts(sides, check_image_input(sides, suites, out / "logs", options.timeout), preflight)
    announce(out)
    policy = thresholds.policy(recipe.name)  # the recipe's thresholds, resolved once: its traffic profile
    profile = speed_profile(options, policy, default_on=True)
    if options.speed_only:
        check_speed_only_profile(profile, policy, options)
    if profile is not None and profile.mode == "serve":  # the variants are measured on the live offline workers
        path, dotted = traffic_source(policy, "mode", options)
        raise ConfigError("ablate measures speed offline on its live engines; traffic.mode: serve (and its latency "
                          "objectives) runs with evalgate run --config <variant>", path=path, field=dotted)
    if profile is not None:
        limits = {"baseline": runner.check_engine_values(base, out / "logs" / "baseline-check.log", options.timeout)}
        check_profile(profile, {"baseline": base}, limits, policy, options=options)
    alternate = placement.mode == "alternate"
    log.info("placement: %s (%s)", placement.mode, placement.reason)

    def start_baseline(log_name: str) -> Any:
        return runner.start_config(base, suites, limit=options.limit, store=ResultStore(evalgate_home() / "store"),
                                   log_path=out / "logs" / log_name, timeout_s=options.timeout,
                                   logprob_items=options.logprob_items, sleep_mode=alternate)

    def restart_baseline(role: str) -> Any:  # suites from the store: the new worker only serves speed passes
        return start_baseline(f"baseline.restart{alt.stats.get('baseline', {}).get('restarts', 0)}.log")[0]

    alt = Alternation(placement.mode, restart=restart_baseline)  # either placement: a dead side is restarted
    base_worker, base_run = start_baseline("baseline.log")
    alt.started("baseline", base_worker)
    info = dict(base_worker.info)
    meta = {"recipe": recipe.name, "baseline": base.name, "model": recipe.model, "limit": options.limit,
            "profile": None if profile is None else profile.as_dict(), "device": info.get("device", "?"),
            "isa": info.get("isa", []),
            "method": METHOD if profile is None or profile.precision is None else f"{METHOD}; {PRECISION_METHOD}",
            "versions": info.get("versions", {}), "created": stamp,
            "complete": False, "stopped": "", "placement": placement_record(placement)}
    docs: dict[str, Any] = {}
    failed: dict[str, str] = {}
    refused: dict[str, str] = {}
    pending = {v.config.name for v in variants if not v.skipped}  # configs not gated yet (each config once)
    try:
        for v in variants:
            if v.config.name in pending:
                _gate_variant(v, jobs.VariantJob(
                    variant=v.config, baseline=(base_worker, base_run), thresholds=thresholds, suites=suites,
                    options=options, profile=profile, stamp=stamp,
                    gate_name=v.config.name if v.config.name in known else recipe.name,
                    out=out / "variants" / _slug(v.config.name), log_path=out / "logs" / f"{_slug(v.config.name)}.log",
                    alternation=alt, placement=placement),
                    docs, failed, refused)
                pending.discard(v.config.name)
                meta["placement"] = placement_record(placement, alt)
                _save_progress(out, variants, docs, failed, refused, meta, pending)
    except BaseException as exc:
        runner.kill_workers([base_worker, *alt.workers.values()])  # every group signalled first, then waited for
        meta["stopped"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        _save_progress(out, variants, docs, failed, refused, meta, pending)
        raise
    meta["complete"] = True
    try:
        rows = _write_files(out, variants, docs, failed, refused, meta, pending)
    finally:
        alt.workers.get("baseline", base_worker).close()
    print(render_table(rows))
    print(f"report: {out / 'ablation.html'}")
    if failed:
        raise EngineError(f"{len(failed)} variant(s) failed (the others are in {out / 'ablation.html'}): "
                          + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return out


def _save_progress(out: Path, *state: Any) -> None:
    """``_write_files`` for a table that is not final: a failure (e.g. a full disk) is logged, not raised, so the
    ablation goes on (the rows stay in memory; the final write retries) and an exception on its way out is kept."""
    try:
        _write_files(out, *state)
    except Exception as exc:
        log.error("ablate: could not write the ablation so far to %s: %s", out, exc)


def _write_files(out: Path, variants: list[Variant], docs: dict[str, Any], failed: dict[str, str],
                 refused: dict[str, str], meta: dict[str, Any], pending: set[str]) -> list[AblationRow]:
    """Write ``ablation.json`` and ``ablation.html`` (each atomically: a temp file in ``out``, then ``os.replace``)
    from what is done so far; return the rows.

    A variant vLLM refused is skipped, a failed one's row says why; every row has ``pending`` (its config, in
    ``pending``, is not gated yet) and a pending row ``not_run``: "pending" while the ablation runs, else (once
    ``meta["stopped"]`` says why it stopped) that it stopped first. ``ablation.json`` also holds the
    ``recommendation`` per concurrency (``recommend.recommend``) over the rows done so far."""
    variants = [dataclasses.replace(v, skipped=v.skipped or refused.get(v.config.name, "")) for v in variants]
    rows = ablation_rows(variants, docs)
    for r in rows:
        if r.config in failed and not r.verdict:
            r.skipped = f"failed: {failed[r.config]}"
        r.pending = not r.skipped and r.config in pending
        if r.pending:
            r.not_run = "the ablation stopped before this row finished" if meta["stopped"] else "pending"

    write_json_atomic(out / "ablation.json", {"meta": meta, "rows": [r.as_json() for r in rows],
                                              "recommendation": [r.as_json() for r in recommend(rows)]})
    html, tmp = out / "ablation.html", out / ".ablation.html.tmp"
    tmp.write_text(render_html(rows, meta), encoding="utf-8")
    os.replace(tmp, html)
    return rows


def _slug(name: str) -> str:
    return name.replace("/", "_").replace("~", "-")


def _gate_variant(v: Variant, job: Any, docs: dict[str, Any], failed: dict[str, str], refused: dict[str, str]) -> None:
    """Gate one variant; its verdict document goes to ``docs``, a value vLLM refused to ``refused`` (skipped, as
    the platform check does), an engine or speed failure or a suite's code raising on its outputs
    (``SuiteCodeError``) to ``failed`` (the ablation goes on, then exits 3)."""
    name = v.config.name
    log.info("ablate: %s %s (config %s)", v.kind, v.label, name)
    try:
        outcome = pipeline.gate(job)
    except SuiteCodeError as exc:  # the variant's outputs broke a suite's code that the baseline's did not
        failed[name] = str(exc)
        return
    except ConfigError as exc:
        refused[name] = str(exc)
        return
    except EngineError as exc:
        failed[name] = str(exc)
        return
    docs[name] = outcome.doc
    if outcome.speed_failed is not None:
        failed[name] = f"speed measurement failed: {outcome.speed_failed}"


def _load(config: str, configs_dir: Path, suites_dir: Path, thresholds_path: Path,
          suite_names: list[str] | None, *, speed_only: bool = False) -> tuple[Any, Any, Any, list[Any], dict[str, Any]]:
    """``(recipe, baseline, thresholds, suites, every known config by name)``; ConfigError for bad input (also
    ``inputs.speed_only.check_speed_only``'s refusals). ``speed_only`` (``--speed-only``): no suites."""
    recipe = config_mod.load_config(config, configs_dir)
    base = config_mod.load_baseline(recipe, configs_dir)
    check_platform(base.engine_args, base.path, base.env)
    check_same_hardware(base, recipe)
    check_protocols(base, recipe)  # every variant inherits the recipe's chat section
    # Every variant is the baseline plus some of the recipe's switches: random weights in one are in both.
    check_speed_only((base, recipe), speed_only=speed_only, suite_names=suite_names, command="ablate")
    thresholds = load_thresholds(thresholds_path)
    if thresholds.replay is not None:  # said, never silently dropped: the replay gate runs in `evalgate run` only
        log.warning("%s: replay: the replay gate runs in `evalgate run` only; ablate does not replay the recorded "
                    "requests (run each variant with `evalgate run` for it)", thresholds_path)
    suites = [] if speed_only else load_suites(suites_dir, suite_names, recipe)
    known = {}
    for name in config_mod.list_configs(configs_dir):  # only to name variants: a broken unrelated config is skipped
        try:
            known[name] = config_mod.load_config(name, configs_dir, check_engine_args=False)
        except ConfigError as exc:
            log.warning("ablate: %s (not used to name variants)", exc)
    return recipe, base, thresholds, suites, known


def _refusal(cfg: Any) -> str:
    """Why this platform cannot run ``cfg`` (``engine.check_platform``'s reason), "" when it can."""
    try:
        check_platform(cfg.engine_args, cfg.path, cfg.env)
    except ConfigError as exc:
        return exc.message
    return ""


def _select(variants: list[Variant], kind: str, only: list[str] | None, recipe: Any, base: Any) -> list[Variant]:
    """The rows asked for: ``kind`` (all / alone / cumulative), and with ``only`` just those switches' alone rows
    (a cumulative row is a prefix of the whole chain, so it cannot be picked by switch). ConfigError for an unknown
    switch, ``only`` with ``kind`` cumulative, or nothing to ablate."""
    if only and kind == "cumulative":
        raise ConfigError("picks alone rows; the cumulative rows are the whole chain (leave --switches out or use "
                          "--kind alone)", field="--switches")
    if kind != "all":  # e.g. the alone rows in one command, the cumulative ones in another (the store is shared)
        variants = [v for v in variants if v.kind == kind]
    if only:
        names = {s.key for v in variants for s in v.switches}
        unknown = [k for k in only if k not in names]
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a switch of {recipe.name}; its switches: {', '.join(sorted(names))}",
                              field="--switches")
        variants = [v for v in variants if v.kind == "alone" and v.switches[0].key in only]
    if not variants:
        raise ConfigError(f"{recipe.name} does not differ from its baseline {base.name}: nothing to ablate",
                          path=recipe.path)
    return variants
