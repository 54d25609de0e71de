"""``evalgate plan``: how many items each task needs for a margin, from a pilot run's discordance (or an assumed
one), against the items its suite holds. Prints; decides nothing (the statistics are ``compare.plan_tasks`` and
``power``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalgate.commands.pipeline import load_suites
from evalgate.compare.pairing import TaskPlan, plan_tasks
from evalgate.compare.power import items_floor, items_needed_at_discordance, mde_at_discordance, z_sum
from evalgate.engine.device import describe
from evalgate.errors import ConfigError, EvalgateError
from evalgate.evaluate.modality import check_mixed_groups, image_suites
from evalgate.inputs.chat import check_protocol, check_protocols
from evalgate.inputs.config import EngineConfig, _find, load_baseline, load_config
from evalgate.inputs.thresholds import ConfigPolicy, load_thresholds
from evalgate.results.store import read_json, tasks_from_json
from evalgate.suites.discovery import count_items, default_suites_dir, load_suite, task_notes
from evalgate.suites.files import Suite


def plan(config: str, margin: float | None, thresholds_path: Path, configs_dir: Path, from_dir: Path | None = None,
         assume_discordance: float | None = None) -> None:
    """Print the items each task needs so that MDE <= ``margin`` (points), from a pilot run's discordance
    (``from_dir``; default the newest ``runs/<config>-*``), against the items its suite holds: a task that needs more
    cannot be powered at that margin, and the line says which margin it can. With ``assume_discordance`` (a share
    in [0, 1]) there is no pilot: every task of the suites ``run`` gates the config on by default (its ``suites``,
    else every text suite), the items it needs for ``margin`` at that discordance
    (``power.items_needed_at_discordance``) against its suite's size, then its MDE at full size. ``margin`` None
    (no ``--margin``): each task's own margin from the thresholds file, as the gate applies it to ``config``; a line
    says which margin was used and where it came from.

    Raises:
        ConfigError: margin not in (0, 100], unknown config, a pilot of another config, a share outside [0, 1];
            with ``assume_discordance``, a config that does not load (its file and field named), whose ``suites``
            names an unknown suite, or whose chat section ``run`` refuses before any engine starts
            (:func:`check_chat_sections`, ``modality.check_mixed_groups``: the same message). A pilot's config is not
            loaded (its results were made; ``run`` checks the config again).
        StoreError: the pilot run is missing or malformed.
    """
    if margin is not None and (not margin > 0 or margin > 100):
        raise ConfigError(f"must be > 0 and <= 100 points, got {margin}", field="--margin")
    name = Path(config).stem if config.endswith((".yaml", ".yml")) else config
    policy = load_thresholds(thresholds_path).policy(name)
    if not from_dir:
        _find_config(config, configs_dir)  # a config that does not exist has no pilot to find
    if assume_discordance is not None:
        # no pilot: the config decides the suites and names the model, so a config that does not load is exit 2
        # (as for run/score/ablate), never planned around
        cfg = load_config(config, configs_dir, check_engine_args=False)
        sides = check_chat_sections(cfg, configs_dir)  # as run refuses them before any engine: exit 2, same line
        suites = load_suites(default_suites_dir(), None, cfg)
        for side in sides:
            check_mixed_groups(side, image_suites(suites))
        return _plan_assumed(assume_discordance, margin, policy, cfg.model, suites)
    _plan_from_pilot(config, name, margin, policy, configs_dir, from_dir or _latest_run(name))


def check_chat_sections(cfg: EngineConfig, configs_dir: Path) -> list[EngineConfig]:
    """Check how ``cfg`` and its baseline send their prompts, as ``evalgate run`` does before any engine starts and
    by the function it calls (``jobs.EngineJob.load``: ``chat.check_protocols``): each side's chat section against
    its template and tokenizer (a template that loses a message's text, raises, or ignores a kwarg; a dropped system
    prompt; an end-of-thinking marker the tokenizer cannot spell), then the two sides' protocols against each other.
    A config without a baseline (which ``run`` refuses for that) has its own side checked (``chat.check_protocol``).

    ``plan`` then runs ``modality.check_mixed_groups`` on each returned config, as ``run`` does; the checks ``run``
    asks of vLLM in its short check worker (whether a model reads images, whether its chat template has a place for
    one: ``modality.check_image_input``) and the suite pre-flight are not made here.

    Returns:
        The configs checked, the candidate first (run's order): ``[cfg, baseline]``, or ``[cfg]``.
    Raises:
        ConfigError (exit 2): as ``run`` raises it, the same message naming the same file and field.
    """
    if not cfg.baseline:
        check_protocol(cfg)
        return [cfg]
    base = load_baseline(cfg, configs_dir, check_engine_args=False)
    check_protocols(base, cfg)
    return [cfg, base]


def margin_line(margin: float | None, policy: ConfigPolicy, tasks: list[tuple[str, str]]) -> str:
    """The line that says which margin ``plan`` used and where it came from: ``--margin`` for every task, or each of
    ``tasks`` (``(suite, task)``)'s own from the thresholds file (``policy.task``), grouped by the key that set it,
    e.g. ``margin: each task's own, as the gate applies it (no --margin), from thresholds.yaml: 4 pts for
    docparse_fields, docparse_hard (configs.fp16-state.suites.docparse.margin); ...``."""
    if margin is not None:
        return f"margin: {margin:g} pts for every task (--margin)"
    groups: dict[tuple[str, float], list[str]] = {}
    for suite, task in tasks:
        th = policy.task(suite, task)
        groups.setdefault((th.source, th.margin), []).append(task)
    where = f", from {policy.path}" if policy.path is not None else ""
    parts = [f"{m:g} pts for {', '.join(names)} ({source}.margin)" for (source, m), names in groups.items()]
    return f"margin: each task's own, as the gate applies it (no --margin){where}: {'; '.join(parts)}"


def limit_notice(tasks: list[tuple[str, float, float, int | None]], limit: int, power: float) -> str | None:
    """The one-line notice for a ``--limit`` at which the run cannot PASS, or None when every task could.

    Whatever the outputs, a task of n items has ``MDE >= (z_{1-alpha} + z_power) * 100 / n`` points (the gate's SE
    floor, ``power.se_floor``), and PASS needs ``MDE <= margin`` on every task; so a task gated on fewer than
    ``power.items_floor(margin, alpha, power)`` items can never PASS, and neither can the run. A task's items are at
    most ``min(limit, its suite's own limit)``. Nothing is refused: small limits are run on purpose (to see a
    NO-OP, or a lossless config's BLOCK).

    Args:
        tasks: per task ``(name, margin in points, one-sided alpha, the suite YAML's limit or None)``.
        limit: the run's ``--limit`` (items per task, >= 1).
        power: the thresholds' power.

    Returns:
        e.g. ``"notice: at --limit 40 no task can PASS (its MDE is at least (z_(1-alpha) + z_power) * 100 / n: 6.22 pts
        or more here, above every task's margin of 4-6 pts), so the run can only end INCONCLUSIVE, BLOCK or NO-OP;
        every task could PASS from --limit 63"``; None when every task could PASS at ``limit``.

    Raises:
        ValueError: a margin < 0, levels out of range (``power.items_floor``).
    """
    blocked, needed, never = [], [], []
    for name, margin, alpha, suite_limit in tasks:
        floor = items_floor(margin, alpha, power)
        cap = limit if suite_limit is None else min(limit, suite_limit)
        if floor is None or cap < floor:
            blocked.append((name, margin, z_sum(alpha, power) * 100.0 / cap))
        if floor is None or (suite_limit is not None and suite_limit < floor):
            never.append(name)  # no --limit helps: a zero margin, or the suite's own limit is below the floor
        elif floor is not None:
            needed.append(floor)
    if not blocked:
        return None
    margins = sorted({m for _, m, _ in blocked})
    span = f"{margins[0]:g}" if len(margins) == 1 else f"{margins[0]:g}-{margins[-1]:g}"
    least = min(f for _, _, f in blocked)
    if len(blocked) == len(tasks):
        head = (f"no task can PASS (its MDE is at least (z_(1-alpha) + z_power) * 100 / n: {least:.2f} pts or more "
                f"here, above every task's margin of {span} pts), so the run can only end INCONCLUSIVE, BLOCK or NO-OP")
    else:
        head = (f"the run cannot PASS: {len(blocked)} of {len(tasks)} tasks cannot ({', '.join(n for n, _, _ in blocked)}: "
                f"MDE at least (z_(1-alpha) + z_power) * 100 / n: {least:.2f} pts or more here, above their margin of "
                f"{span} pts)")
    if never:
        tail = f"no --limit can make {', '.join(never)} PASS (its margin or its suite's own limit is too small)"
    else:
        tail = f"every task could PASS from --limit {max(needed)}"
    return f"notice: at --limit {limit} {head}; {tail}"


def _plan_from_pilot(config: str, name: str, margin: float | None, policy: ConfigPolicy, configs_dir: Path,
                     pilot: Path) -> None:
    """``plan`` from the pilot run directory ``pilot``."""
    sides = {role: read_json(pilot / f"{role}.json", f"{role} results") for role in ("baseline", "candidate")}
    gated = sides["candidate"].get("config") if isinstance(sides["candidate"], dict) else None
    by_path = config.endswith((".yaml", ".yml"))  # a path names the config by its file's stem only
    if isinstance(gated, str) and gated and name not in (gated, *([Path(gated).name] if by_path else [])):
        _find_config(config, configs_dir)
        raise ConfigError(f"pilot run {pilot} gated config '{gated}', not '{name}'; pass --config {gated} or a run "
                          f"of {name}", field="--config")
    tasks = {role: tasks_from_json(d.get("tasks", {}) if isinstance(d, dict) else {}, pilot / f"{role}.json")
             for role, d in sides.items()}
    available, unknown = _suite_sizes(tasks["baseline"])
    plans = plan_tasks(tasks["baseline"], tasks["candidate"], policy, margin=margin, available=available)
    print(f"pilot: {pilot} (config {name}); power {policy.power:g}")
    print(margin_line(margin, policy, [(t.suite, t.task) for t in plans]))
    _print_plans(plans)
    for task, why in unknown.items():
        print(f"{task}: suite size unknown ({why}); cannot check the items needed against it")
    _print_floors(plans)
    manifest_path = pilot / "manifest.json"
    manifest = read_json(manifest_path, "run manifest") if manifest_path.is_file() else None
    manifest = manifest if isinstance(manifest, dict) else {}
    print(f"\nat full size, MDE extrapolated from the pilot's discordance (power {policy.power:g}):")
    _print_full_size([(t.suite, t.task, t.available, t.min_margin) for t in plans],
                     manifest.get("model") or _config_model(config, configs_dir), policy)
    timings = manifest.get("timings")
    if isinstance(timings, dict):
        device = manifest.get("candidate", {}).get("device") if isinstance(manifest.get("candidate"), dict) else None
        _print_cost(pilot_cost(plans, timings), describe(device if isinstance(device, dict) else None))
    else:
        print(f"\ncost: the pilot has no manifest with timings ({manifest_path}); cannot state what a run costs")


@dataclass(frozen=True)
class SuiteCost:
    """What one suite cost one side in a pilot, and what it would cost at the planned and at full size.

    Attributes:
        role: ``"baseline"`` or ``"candidate"``.
        suite: the suite's name.
        items: the pilot's items of the suite (its tasks' n summed).
        generation_s: the pilot's seconds of generation, scoring and sandbox for the suite on that side (the worker's
            ``suite:<name>`` timing); None when the side took the suite from the store (nothing was measured).
        evidence_s: the pilot's seconds of evidence (``logprobs:<name>``: decode-time and teacher-forced); None with
            ``generation_s``.
        planned_items: items a run at each task's items needed would gate (capped at its suite's size; a task
            without a figure keeps the pilot's n).
        full_items: items of the whole suite (None when a task's suite size is unknown).
    """

    role: str
    suite: str
    items: int
    generation_s: float | None
    evidence_s: float | None
    planned_items: int
    full_items: int | None

    @property
    def seconds(self) -> float | None:
        """The pilot's seconds for the suite on that side (None when not measured)."""
        return None if self.generation_s is None else self.generation_s + (self.evidence_s or 0.0)

    @property
    def per_item(self) -> float | None:
        """Generation seconds per item in the pilot (None when not measured or no items)."""
        return None if self.generation_s is None or self.items == 0 else self.generation_s / self.items

    def projected(self, items: int | None) -> float | None:
        """Seconds for a run of ``items`` items, an upper bound: generation at the pilot's seconds per item (linear
        in items; vLLM batches a suite's requests, so more items usually cost less per item) plus the pilot's
        evidence seconds, held (teacher forcing covers the first ``--logprob-items`` items of each task,
        so it stops growing with items once the pilot reached them); None when either is unknown."""
        rate = self.per_item
        return None if rate is None or items is None else rate * items + (self.evidence_s or 0.0)


def pilot_cost(plans: Sequence[TaskPlan], timings: Mapping[str, Any]) -> list[SuiteCost]:
    """Per side and suite, what the pilot cost and at most what a planned or full-size run would cost
    (``SuiteCost.projected``: generation linear in items from the pilot's own seconds per item, evidence held; engine
    start excluded).

    Args:
        plans: ``compare.pairing.plan_tasks``'s plans (one per task; ``n``, ``items_needed``, ``available``).
        timings: the pilot's ``manifest.json`` ``timings`` (seconds): ``<role>:suite:<suite>`` and
            ``<role>:logprobs:<suite>`` as ``jobs.EngineJob`` records them; a suite a side took from the store has
            them at 0.0 (not measured), a run made before they were recorded lacks them.
    Returns:
        One :class:`SuiteCost` per (role, suite), baseline first, suites in ``plans``' order.
    """
    suites: dict[str, list[TaskPlan]] = {}
    for t in plans:
        suites.setdefault(t.suite, []).append(t)
    rows = []
    for role in ("baseline", "candidate"):
        for suite, tasks in suites.items():
            gen, ev = timings.get(f"{role}:suite:{suite}"), timings.get(f"{role}:logprobs:{suite}")
            measured = isinstance(gen, (int, float)) and gen > 0
            evidence = float(ev) if measured and isinstance(ev, (int, float)) else 0.0
            planned = sum(t.n if t.items_needed is None else
                          (t.items_needed if t.available is None else min(t.items_needed, t.available)) for t in tasks)
            full = None if any(t.available is None for t in tasks) else sum(int(t.available or 0) for t in tasks)
            rows.append(SuiteCost(role, suite, sum(t.n for t in tasks), float(gen) if measured else None,
                                  evidence if measured else None, planned, full))
    return rows


def _print_cost(rows: list[SuiteCost], device: str) -> None:
    """The cost table of ``pilot_cost`` and the totals, with the machine the pilot ran on."""
    print(f"\ncost: seconds per side and suite, measured in the pilot on {device}; a planned or full-size run is "
          "at most the pilot's generation seconds per item times its items, plus the pilot's evidence seconds: an "
          "upper bound, since vLLM batches a suite's requests and a larger run usually costs less per item (a "
          "larger pilot gives a tighter bound; engine starts not included; another host or load changes every "
          "figure)")
    print(f"{'side/suite':34} {'items':>6} {'s':>8} {'evidence s':>10} {'s/item':>7} {'planned items':>13} "
          f"{'planned s':>9} {'full items':>10} {'full s':>8}")

    def sec(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for r in rows:
        print(f"{r.role + '/' + r.suite:34} {r.items:>6} {sec(r.seconds):>8} {sec(r.evidence_s):>10} "
              f"{'-' if r.per_item is None else f'{r.per_item:.2f}':>7} {r.planned_items:>13} "
              f"{sec(r.projected(r.planned_items)):>9} {'?' if r.full_items is None else r.full_items:>10} "
              f"{sec(r.projected(r.full_items)):>8}")
    measured = [r for r in rows if r.seconds is not None]
    if len(measured) < len(rows):
        print("not measured in the pilot (taken from the store, or a run made before suite timings were recorded): "
              f"{', '.join(f'{r.role}/{r.suite}' for r in rows if r.seconds is None)}; the totals leave them out")
    if not measured:
        return
    for what, size in (("planned run", "planned_items"), ("full-size run", "full_items")):
        parts = [r.projected(getattr(r, size)) for r in measured]
        if any(p is None for p in parts):
            print(f"{what}: a suite's size is unknown; no total")
            continue
        print(f"{what}: at most about {sum(p for p in parts if p is not None) / 60:.1f} min of suite time, both sides "
              f"(the pilot's: {sum(r.seconds or 0.0 for r in measured) / 60:.1f} min)")


def _print_plans(plans: list[Any]) -> None:
    """The plan table, then one line per task that its suite cannot power at its planned margin."""
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
            _print_short(t.suite, t.task, t.items_needed, t.available, t.margin, t.min_margin,
                         floor=t.basis == "floor")


def _print_short(suite: str, task: str, needed: int, available: int, margin: float, min_margin: float | None, *,
                 floor: bool = False) -> None:
    """The line for a task whose suite holds fewer than the ``needed`` items for ``margin`` (points); ``min_margin``
    is the whole suite's MDE (the margin it can be powered for), ``floor`` marks a pilot in which no item changed."""
    least = "at least " if floor else ""
    basis = "if no item changes" if floor else "at this discordance"
    fix = (f"raise the margin to {math.ceil(min_margin * 10 - 1e-9) / 10:.1f} pts or more (the whole suite's "
           f"MDE {basis}) or add items") if min_margin is not None else "raise the margin or add items"
    print(f"{suite}/{task}: needs {least}{needed} items; suite has {available}: cannot be powered "
          f"at a {margin:g}-point margin; {fix}")


def _print_floors(plans: list[Any]) -> None:
    """What a floor (no item changed in the pilot) means, when any plan is one."""
    floors = [t for t in plans if t.basis == "floor"]
    if floors:
        print(f"\u2265N: no item changed in the pilot ({', '.join(t.task for t in floors)}), so there is no discordance to "
              "extrapolate from: N is a floor, not an estimate. No run of fewer items is powered for this margin "
              "(the SE is never below 100/N), and N suffice only if (almost) no item changes; a larger pilot "
              "that sees changes gives an estimate")


def _load_config(config: str, configs_dir: Path) -> Any:
    """The planned config (``inputs.config.EngineConfig``), None when it cannot be loaded."""
    try:
        return load_config(config, configs_dir, check_engine_args=False)
    except EvalgateError:
        return None


def _config_model(config: str, configs_dir: Path) -> str | None:
    """The model the planned config evaluates (None when the config cannot be loaded)."""
    cfg = _load_config(config, configs_dir)
    return None if cfg is None else cfg.model


def _plan_assumed(p: float, margin: float | None, policy: ConfigPolicy, model: str | None,
                  suites: list[Suite]) -> None:
    """``plan --assume-discordance P [--margin M]``: every task of ``suites``, the items it needs for ``margin``
    (points; None: the task's own) at an assumed discordance ``p`` against its suite's size, then its MDE at full
    size."""
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"must be a share in [0, 1], got {p}", field="--assume-discordance")
    rows, needs = [], []
    for suite in suites:
        sizes, _ = _suite_sizes({t: _Named(suite.name) for t in suite.tasks})
        for task in suite.tasks:
            n = sizes.get(task)
            th = policy.task(suite.name, task)
            m = th.margin if margin is None else margin
            full = mde_at_discordance(p, n, th.alpha, policy.power) if n else None
            rows.append((suite.name, task, n, full))
            needs.append((suite.name, task, th.alpha, items_needed_at_discordance(p, m, th.alpha, policy.power),
                          n, full, m))
    what, bound = (f"a {margin:g}-point margin", f"{margin:g}") if margin is not None else ("each task's margin",
                                                                                             "the margin")
    print(f"no pilot: items needed for {what} and MDE at full size, assuming {100 * p:g} % of "
          f"items change score between baseline and candidate (an assumption, not a measurement: a pilot run gives "
          f"the real figure, 'evalgate plan --from RUN_DIR'); MDE = (z_(1-alpha) + z_power) * max(100 * sqrt({p:g} / "
          f"n), 100 / n), items needed = the least n with MDE <= {bound}, power {policy.power:g}")
    print(margin_line(margin, policy, [(suite_name, task) for suite_name, task, *_ in needs]))
    print(f"{'suite/task':34} {'alpha':>6} {'items needed':>13} {'suite has':>9}")
    for suite_name, task, alpha, need, n, _, _ in needs:
        print(f"{suite_name + '/' + task:34} {alpha:>6.3g} {need:>13} {n if n else '?':>9}")
    for suite_name, task, _, need, n, full, m in needs:
        if need is not None and n and need > n:
            _print_short(suite_name, task, need, n, m, full)
    print(f"\nat full size, MDE at the assumed discordance (power {policy.power:g}):")
    _print_full_size(rows, model, policy)


class _Named:
    """The one attribute ``_suite_sizes`` reads of a task result: its suite."""

    def __init__(self, suite: str) -> None:
        self.suite = suite


def _print_full_size(rows: list[tuple[str, str, int | None, float | None]], model: str | None,
                     policy: ConfigPolicy) -> None:
    """One line per (suite, task, items at full size, MDE at full size): the FP32 baseline's accuracy that the task
    YAML records for ``model`` (``metadata.evalgate``; '-' when none), the items, the MDE and the gate's margin."""
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
        margin = policy.task(suite, task).margin
        print(f"{suite + '/' + task:34} {'-' if acc is None else f'{100 * acc:.1f}%':>8} {n if n else '?':>6} "
              f"{'-' if mde_full is None else f'{mde_full:.2f}':>6} {margin:>6g}  {notes.measured or '-'}")


def _suite_sizes(tasks: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Items each task's suite holds (``suites.count_items``, from the current ``suites/``): ``(sizes, unknown)``,
    ``unknown`` mapping a task to why its size could not be had (suite gone, data not generated locally)."""
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
    _find(ref, configs_dir, None, field="--config")


def _latest_run(config: str) -> Path:
    """The newest ``runs/<config>-<UTC time>`` directory holding both sides' results."""
    found = sorted(p for p in Path("runs").glob(f"{config.replace('/', '_')}-*")
                   if (p / "baseline.json").is_file() and (p / "candidate.json").is_file())
    if not found:
        raise ConfigError(f"no pilot run of '{config}' under runs/; run 'evalgate run --config {config} --limit 40' "
                          "or pass --from RUN_DIR (or --assume-discordance P to plan without one)", field="--from")
    return found[-1]
