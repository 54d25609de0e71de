"""Stored run directories: re-render a report, and read the two sides that ``evalgate compare`` gates.

A run directory holds ``manifest.json``, ``baseline.json``, ``candidate.json`` and ``verdict.json`` (see
``evalgate.store``). ``rerender`` reads ``verdict.json`` alone. ``evalgate compare`` (``jobs.StoredJob`` through
``pipeline.gate``) pairs **run A's candidate** (the baseline side) with **run B's candidate** (the candidate side),
item by item; these readers give it each run's candidate results, manifest and suite hashes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalgate.errors import StoreError
from evalgate.outputs import write_outputs
from evalgate.store import read_json, tasks_from_json
from evalgate.verdict import ManifestShape, SpeedShape, Verdict


def rerender(run_dir: Path, out_dir: Path | None = None) -> tuple[Verdict, dict[str, Path]]:
    """Render ``report.html``, ``verdict.junit.xml`` and ``summary.md`` again from ``run_dir/verdict.json``.

    Args:
        run_dir: a run directory (from ``evalgate run`` or ``evalgate compare``).
        out_dir: where to write (default: ``run_dir``).
    Returns:
        The verdict (read back into ``verdict.Verdict``) and the written paths.
    Raises:
        StoreError: ``verdict.json`` is missing, unreadable or not a verdict document.
    """
    path = run_dir / "verdict.json"
    verdict = read_verdict(path)
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
        StoreError: the file is missing or unreadable, lacks ``verdict``/``tasks``/``manifest``, or a field has
            the wrong type (the message names the file and the dotted field).
    """
    doc = read_json(path, "verdict")
    if not isinstance(doc, dict) or not {"verdict", "tasks", "manifest"} <= doc.keys():
        raise StoreError(f"{path}: not an evalgate verdict document")
    parts: list[tuple[str, type, Any]] = [("", Verdict, doc), ("manifest.", ManifestShape, doc.get("manifest"))]
    if isinstance(doc.get("speed"), dict):
        parts.append(("speed.", SpeedShape, doc["speed"]))
    verdict = None
    for prefix, model, value in parts:
        try:
            checked = model.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = prefix + ".".join(str(part) for part in first["loc"])
            msg = re.sub(r" or instance of \w+$", "", first["msg"])  # not the model class names
            raise StoreError(f"{path}: not an evalgate verdict document: {field.rstrip('.')}: {msg}") from None
        verdict = verdict or checked
    return verdict


def read_side(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(candidate.json, manifest.json) of a run directory."""
    if not run_dir.is_dir():
        raise StoreError(f"{run_dir}: run directory not found")
    manifest = read_json(run_dir / "manifest.json", "manifest")
    if not isinstance(manifest, dict):
        raise StoreError(f"{run_dir / 'manifest.json'}: malformed manifest: not a JSON object")
    for key, kind in (("baseline", dict), ("candidate", dict), ("versions", dict), ("suites", list)):
        if key in manifest and not isinstance(manifest[key], kind):
            raise StoreError(f"{run_dir / 'manifest.json'}: malformed manifest: {key}: must be a "
                             f"{'mapping' if kind is dict else 'list'}, got {type(manifest[key]).__name__}")
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
    return {s["name"]: s["content_hash"] for s in manifest.get("suites") or []
            if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("content_hash"), str)}


def merged(a: Any, b: Any) -> Any:
    """``a`` when both sides agree, else ``"a → b"`` (for manifest fields such as versions and model)."""
    return a if a == b else f"{a} \u2192 {b}"


def without_evidence(tasks: dict[str, Any]) -> dict[str, Any]:
    """``tasks`` with each item's log-prob evidence removed: run B's was measured against run B's own baseline,
    not against run A's candidate, so it says nothing about this pair (identity and scores still do)."""
    import dataclasses

    return {name: dataclasses.replace(t, items=tuple(dataclasses.replace(i, divergence=None, decode=None)
                                                    for i in t.items)) for name, t in tasks.items()}
