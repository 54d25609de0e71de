"""Stored run directories: re-render a report, and read the two sides that ``evalgate compare`` gates.

A run directory holds ``manifest.json``, ``baseline.json``, ``candidate.json`` and ``verdict.json`` (see
``evalgate.results.store``). ``rerender`` reads ``verdict.json`` alone. ``evalgate compare`` (``jobs.StoredJob`` through
``pipeline.gate``) pairs **run A's candidate** (the baseline side) with **run B's candidate** (the candidate side),
item by item; these readers give it each run's candidate results, manifest and suite hashes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalgate import gate
from evalgate.engine.device import describe
from evalgate.errors import StoreError
from evalgate.inputs.chat import describe_difference
from evalgate.paths import check_writable_dir
from evalgate.report.outputs import write_outputs
from evalgate.report.verdict import VERSION, Verdict
from evalgate.results.document import validation_problem
from evalgate.results.manifest import Manifest
from evalgate.results.store import read_json, tasks_from_json


def rerender(run_dir: Path, out_dir: Path | None = None) -> tuple[Verdict, dict[str, Path]]:
    """Render ``report.html``, ``verdict.junit.xml`` and ``summary.md`` again from ``run_dir/verdict.json``.

    Args:
        run_dir: a run directory (from ``evalgate run`` or ``evalgate compare``).
        out_dir: where to write (default: ``run_dir``).
    Returns:
        The verdict (read back into ``verdict.Verdict``) and the written paths.
    Raises:
        StoreError (exit 3): ``verdict.json`` is missing, unreadable, not a verdict document or not a consistent one
            (``read_verdict``).
        ConfigError (exit 2): the output directory cannot be written (a regular file, under one, a name too long).
    """
    path = run_dir / "verdict.json"
    verdict = read_verdict(path)
    check_writable_dir(out_dir or run_dir, field="--out" if out_dir else "RUN_DIR", what="the report's directory")
    with rendering(path):
        return verdict, write_outputs(verdict, out_dir or run_dir)


@contextlib.contextmanager
def rendering(path: Path) -> Iterator[None]:
    """Rendering a stored verdict read from ``path``: a renderer failing on a value the model admits but evalgate
    never writes (a null where a number is always written, a negative interval end) is a StoreError (exit 3)
    naming the file, not an internal error. OSError (writing the outputs) passes through."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt stored document, whatever the renderer tripped on
        raise StoreError(f"{path}: not an evalgate verdict document: a field holds a value evalgate does not write "
                         f"({type(exc).__name__}: {exc})") from exc


def read_verdict(path: Path) -> Verdict:
    """``verdict.json`` at ``path`` as a :class:`verdict.Verdict`.

    Raises:
        StoreError: the file is missing or unreadable, lacks ``verdict``/``tasks``/``manifest``, a field has
            the wrong type, or the document contradicts itself (``check_verdict_document``); the message names the
            file and the dotted field.
    """
    doc = read_json(path, "verdict")
    if not isinstance(doc, dict) or not {"verdict", "tasks", "manifest"} <= doc.keys():
        raise StoreError(f"{path}: not an evalgate verdict document")
    try:
        verdict = Verdict.model_validate(doc)
    except ValidationError as exc:  # one line: the field path, what it must hold and what it held
        raise StoreError(f"{path}: not an evalgate verdict document: {validation_problem(exc)}") from None
    check_verdict_document(verdict, path)
    return verdict


# A task's statistics that must be finite numbers (or null) in a document evalgate wrote (points, p-values, levels).
_TASK_NUMBERS = ("baseline", "candidate", "delta", "ci_low", "ci_high", "ci_level", "lower_bound", "margin", "alpha",
                 "mcnemar_p", "stderr", "mde", "power", "loss_p", "loss_alpha", "se_power")
_TASK_COUNTS = ("n", "n_regressed", "n_improved", "identical_outputs", "items_needed", "discordant", "n_clusters")


def check_verdict_document(verdict: Verdict, path: Path) -> None:
    """Re-validate a stored verdict against its own tasks, so that a report never shows PASS for a document that
    is not one (a hand-edited, truncated-then-patched or foreign ``verdict.json``).

    Rules (the gate's own, ``evalgate.gate``):

    * ``version`` is the one this evalgate writes (``verdict.VERSION``); a document without one reads as it;
    * every task's verdict is PASS, BLOCK or INCONCLUSIVE (NO-OP is the run's alone, kept tasks included);
    * every task's counts (``n``, ``n_regressed``, ...) are >= 0, ``n`` >= 1, and its statistics (Δ, interval ends,
      lower bound, margin, MDE, p-values, the cross-check intervals and lossless figures) finite numbers or null;
    * at least one task, unless the document is a NO-OP or a speed-only run's (``manifest.speed_only``: no task,
      INCONCLUSIVE or BLOCK, never PASS); ``gated`` is false on every task of a NO-OP and true on
      every task otherwise, and a NO-OP lists no ``effective_diff`` (it means the effective configs are equal);
    * the overall verdict is at least as severe as ``gate.overall_of`` over the task verdicts (BLOCK >
      INCONCLUSIVE > PASS): equal to it, or BLOCK (the gate's overrides -- output health, spec-decode and speed
      floors, ``on_inconclusive: block`` -- only ever raise a verdict to BLOCK), the ``replay`` verdict counted as a
      task's (a replay INCONCLUSIVE makes a PASS run INCONCLUSIVE). A PASS or INCONCLUSIVE
      document has no task listing an evidence failure (one always BLOCKs);
    * every task of a PASS document is PASS by its own numbers: ``gate.shows_non_inferiority(lower_bound,
      margin, mde)``.

    Raises:
        StoreError (exit 3): ``"<path>: not a consistent evalgate verdict: <field>: <why>"``, one line; the field
            path written as ``document.validation_problem`` writes it, list positions in brackets (``tasks[0].n``).
    """
    def refuse(field: str, why: str) -> None:
        raise StoreError(f"{path}: not a consistent evalgate verdict: {field}: {why}")

    if verdict.version != VERSION:
        refuse("version", f"{verdict.version} is not a verdict document version this evalgate reads ({VERSION})")
    overall = verdict.verdict
    speed_only = bool(verdict.manifest.speed_only)
    if not verdict.tasks and overall != "NO-OP" and not (speed_only and overall in ("INCONCLUSIVE", "BLOCK")):
        refuse("tasks", f"none, under an overall {overall}: the gate never decides without evidence")
    for i, t in enumerate(verdict.tasks):
        where = f"tasks[{i}]"
        if t.verdict == "NO-OP":  # overall_of would read it as no objection: a PASS over it would stand
            refuse(f"{where}.verdict", "NO-OP is a run's verdict, never a task's (PASS, BLOCK or INCONCLUSIVE)")
        for name in _TASK_COUNTS:
            value = getattr(t, name)
            if value is not None and value < 0:
                refuse(f"{where}.{name}", f"{value} is negative")
        if t.n == 0:  # stats.paired_comparison refuses empty input: no task is decided without items
            refuse(f"{where}.n", "0 paired items: the gate never decides a task without evidence")
        numbers = [(name, getattr(t, name)) for name in _TASK_NUMBERS]
        if t.cross_check is not None:
            numbers += [(f"cross_check.{k}[{j}]", v) for k in ("bootstrap", "t", "newcombe")
                        for j, v in enumerate(getattr(t.cross_check, k))]
        if t.lossless is not None:
            numbers += [(f"lossless.{k}", getattr(t.lossless, k)) for k in ("share", "required_share", "kl_mean")]
        for name, value in numbers:
            if value is not None and not math.isfinite(value):
                refuse(f"{where}.{name}", f"{value} is not a finite number")
        if t.gated != (overall != "NO-OP"):
            refuse(f"{where}.gated", f"{t.gated} under an overall {overall} (tasks are gated unless the run is a NO-OP)")
    if overall == "NO-OP":
        if verdict.effective_diff:
            refuse("verdict", f"NO-OP, but effective_diff lists {len(verdict.effective_diff)} differing engine key(s) "
                              f"({verdict.effective_diff[0].key}, ...): NO-OP means the effective configs are equal")
        return
    verdicts = [gate.Verdict(t.verdict) for t in verdict.tasks]
    if verdict.replay is not None:  # the replay gate's verdict joins the tasks' (gate.replay.combine)
        if verdict.replay.verdict not in ("PASS", "BLOCK", "INCONCLUSIVE"):
            refuse("replay.verdict", f"{verdict.replay.verdict!r} is not PASS, BLOCK or INCONCLUSIVE")
        verdicts.append(gate.Verdict(verdict.replay.verdict))
    if not verdicts:  # a speed-only run's INCONCLUSIVE or BLOCK (refused above otherwise)
        return
    expected = gate.overall_of(verdicts).value
    if overall != "BLOCK" and overall != expected:
        worst = next((i for i, t in enumerate(verdict.tasks) if t.verdict == expected), None)
        what = "replay" if worst is None else f"tasks[{worst}] ({verdict.tasks[worst].suite}/{verdict.tasks[worst].task})"
        refuse("verdict", f"{overall}, but {what} is {expected}, so the gate's verdict is at least {expected}")
    if overall == "BLOCK":
        return
    for i, t in enumerate(verdict.tasks):
        if t.evidence is not None and t.evidence.failures:
            refuse(f"tasks[{i}].evidence.failures", f"{t.evidence.failures[0]!r} under an overall {overall} "
                                                   f"(an evidence failure always BLOCKs)")
        if t.verdict == "PASS" and not (t.margin is not None and t.lower_bound is not None and t.mde is not None
                                        and gate.shows_non_inferiority(t.lower_bound, t.margin, t.mde)):
            refuse(f"tasks[{i}]", f"PASS, but its own numbers do not show non-inferiority (lower bound "
                                 f"{t.lower_bound}, margin {t.margin}, MDE {t.mde}: PASS needs lower bound >= "
                                 f"-margin and MDE <= margin)")


def read_side(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(candidate.json, manifest.json) of a run directory.

    The manifest must be complete and well-typed (``manifest.Manifest.checked``): a manifest without ``suites``, or
    with a content hash that is not a string, would let ``evalgate compare`` skip the suite-content check and gate
    runs over different prompts.

    Raises:
        StoreError (exit 3): the directory is missing; ``manifest.json`` or ``candidate.json`` is missing, unreadable
            or malformed (naming the file and the field).
    """
    if not run_dir.is_dir():
        raise StoreError(f"{run_dir}: run directory not found")
    manifest = read_json(run_dir / "manifest.json", "manifest")
    if not isinstance(manifest, dict):
        raise StoreError(f"{run_dir / 'manifest.json'}: malformed run manifest: not a JSON object")
    for key, kind in (("baseline", dict), ("candidate", dict), ("versions", dict), ("suites", list)):
        if key in manifest and not isinstance(manifest[key], kind):
            raise StoreError(f"{run_dir / 'manifest.json'}: malformed run manifest: {key}: must be a "
                             f"{'mapping' if kind is dict else 'list'}, got {type(manifest[key]).__name__}")
    Manifest.checked(manifest, run_dir / "manifest.json")
    results = read_json(run_dir / "candidate.json", "candidate results")
    if isinstance(results, dict):
        path = run_dir / "candidate.json"
        if "config" in results and not isinstance(results["config"], str):
            raise StoreError(f"{path}: malformed candidate results: config: must be a config name, got "
                             f"{type(results['config']).__name__}")
        eff = results.get("effective", {})
        if not isinstance(eff, dict) or not isinstance(eff.get("engine_args", {}), dict):
            raise StoreError(f"{path}: malformed candidate results: effective: must be a mapping with an "
                             f"engine_args mapping")
    return results, manifest


def candidate_tasks(run_dir: Path, data: Any) -> dict[str, Any]:
    """The per-task results of a run's ``candidate.json``; StoreError naming the file when malformed."""
    path = run_dir / "candidate.json"
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
        raise StoreError(f"{path}: malformed candidate results: no 'tasks' mapping")
    return tasks_from_json(data["tasks"], path)


def suite_hashes(manifest: dict[str, Any]) -> dict[str, str]:
    """Suite name -> content hash of a manifest that passed ``read_side`` (``Manifest.checked``)."""
    return {s["name"]: s["content_hash"] for s in manifest["suites"]}


def check_comparable(tasks: dict[str, dict[str, Any]], manifests: dict[str, dict[str, Any]],
                     run_dirs: dict[str, Path]) -> None:
    """Refuse to pair two runs unless every task either run holds belongs to a suite that both manifests list, under
    the same content hash (the prompts, templates and scorers were the same files), and both candidates ran on the
    same recorded hardware (``candidate.device``: a difference between GPU models or CPU ISAs would be read as the
    switch's) with the same prompt protocol (``candidate.protocol``, ``chat.protocol``; a run without one was
    made with completion prompts).

    Args:
        tasks: ``a``/``b`` -> task name -> ``TaskResult`` (``candidate_tasks``).
        manifests: ``a``/``b`` -> the run's manifest (checked by ``read_side``). run_dirs: ``a``/``b`` -> directory.
    Raises:
        StoreError (exit 3): a task whose suite one manifest does not list (or lists without the task): its content
            cannot be checked; a suite whose content hash differs between the runs; a candidate whose hardware is
            not recorded (a run made before evalgate recorded it) or differs between the runs; candidates whose
            protocols differ (naming each differing key).
    """
    entries = {k: {s["name"]: s for s in m["suites"]} for k, m in manifests.items()}
    for side in ("a", "b"):
        for name, t in sorted(tasks[side].items()):
            for k in ("a", "b"):
                entry = entries[k].get(t.suite)
                if entry is None or name not in entry["tasks"]:
                    raise StoreError(f"{run_dirs[k] / 'manifest.json'}: suites: no entry for task '{name}' of suite "
                                     f"'{t.suite}', so its suite content cannot be checked: runs not comparable")
    for suite in sorted(entries["a"].keys() & entries["b"].keys()):
        ha, hb = entries["a"][suite]["content_hash"], entries["b"][suite]["content_hash"]
        if ha != hb:
            raise StoreError(f"runs are not comparable: suite '{suite}' differs between {run_dirs['a']} and "
                             f"{run_dirs['b']} (content hash {ha[:12]} vs {hb[:12]})")
    devices = {k: m["candidate"].get("device") for k, m in manifests.items()}
    for k in ("a", "b"):
        if not isinstance(devices[k], dict) or not devices[k] or "unknown" in (devices[k].get("gpus") or []):
            raise StoreError(f"{run_dirs[k] / 'manifest.json'}: candidate.device: the hardware the run used is not "
                             f"recorded (or nvidia-smi could not name its GPUs), so the two runs cannot be shown to "
                             f"share it: runs not comparable")
    if devices["a"] != devices["b"]:
        raise StoreError(f"runs are not comparable: {run_dirs['a']} ran on {describe(devices['a'])} and "
                         f"{run_dirs['b']} on {describe(devices['b'])} (candidate.device)")

    diff = describe_difference(manifests["a"]["candidate"].get("protocol"), manifests["b"]["candidate"].get("protocol"))
    if diff:
        raise StoreError(f"runs are not comparable: their candidates sent prompts differently (candidate.protocol: "
                         f"{diff}; {run_dirs['a']} vs {run_dirs['b']}): chat and completion prompts score differently")


def merged(a: Any, b: Any) -> Any:
    """``a`` when both sides agree, else ``"a → b"`` (for manifest fields such as versions and model)."""
    return a if a == b else f"{a} \u2192 {b}"


def without_evidence(tasks: dict[str, Any]) -> dict[str, Any]:
    """``tasks`` with each item's log-prob evidence removed: run B's was measured against run B's own baseline,
    not against run A's candidate, so it says nothing about this pair (identity and scores still do)."""
    import dataclasses

    return {name: dataclasses.replace(t, items=tuple(dataclasses.replace(i, divergence=None, decode=None)
                                                    for i in t.items)) for name, t in tasks.items()}
