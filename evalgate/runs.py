"""Work on stored run directories: re-render a report, and gate any two runs against each other.

A run directory holds ``manifest.json``, ``baseline.json``, ``candidate.json`` and ``verdict.json`` (see
``evalgate.store``). ``rerender`` reads ``verdict.json`` alone. ``compare_runs`` pairs **run A's candidate**
(the baseline side) with **run B's candidate** (the candidate side), item by item, and applies the same
statistics and gate as ``evalgate run``; runs over different items or different suite contents are not
comparable and fail closed (``StoreError``, exit 3).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalgate.errors import StoreError
from evalgate.outputs import write_outputs
from evalgate.store import read_json, tasks_from_json, write_json_atomic
from evalgate.verdict import Verdict


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
    verdict = read_verdict(run_dir / "verdict.json")
    return verdict, write_outputs(verdict, out_dir or run_dir)


def read_verdict(path: Path) -> Verdict:
    """``verdict.json`` at ``path`` as a :class:`verdict.Verdict`.

    Raises:
        StoreError: the file is missing or unreadable, lacks ``verdict``/``tasks``/``manifest``, or a field has
            the wrong type (the message names the file and the dotted field).
    """
    doc = read_json(path, "verdict")
    if not isinstance(doc, dict) or not {"verdict", "tasks", "manifest"} <= doc.keys():
        raise StoreError(f"{path}: not an evalgate verdict document")
    try:
        return Verdict.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise StoreError(f"{path}: not an evalgate verdict document: {field}: {first['msg']}") from None


def _side(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(candidate.json, manifest.json) of a run directory."""
    if not run_dir.is_dir():
        raise StoreError(f"{run_dir}: run directory not found")
    manifest = read_json(run_dir / "manifest.json", "manifest")
    if not isinstance(manifest, dict):
        raise StoreError(f"{run_dir / 'manifest.json'}: malformed manifest: not a JSON object")
    return read_json(run_dir / "candidate.json", "candidate results"), manifest


def _tasks(run_dir: Path, data: Any) -> dict[str, Any]:
    """The per-task results of a run's ``candidate.json``; StoreError naming the file when malformed."""
    path = run_dir / "candidate.json"
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
        raise StoreError(f"{path}: malformed candidate results: no 'tasks' mapping")
    return tasks_from_json(data["tasks"], path)


def _suite_hashes(manifest: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["content_hash"] for s in manifest.get("suites") or []
            if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("content_hash"), str)}


def _merged(a: Any, b: Any) -> Any:
    """``a`` when both sides agree, else ``"a → b"`` (for manifest fields such as versions and model)."""
    return a if a == b else f"{a} \u2192 {b}"


def _without_evidence(tasks: dict[str, Any]) -> dict[str, Any]:
    """``tasks`` with each item's log-prob evidence removed: run B's was measured against run B's own baseline,
    not against run A's candidate, so it says nothing about this pair (identity and scores still do)."""
    import dataclasses

    return {name: dataclasses.replace(t, items=tuple(dataclasses.replace(i, divergence=None, decode=None)
                                                    for i in t.items)) for name, t in tasks.items()}


def _compare_manifest(run_a: Path, run_b: Path, man_a: dict[str, Any], man_b: dict[str, Any], res_a: dict[str, Any],
                      res_b: dict[str, Any], thresholds_path: Path, seconds: float) -> dict[str, Any]:
    """The manifest of a comparison: both runs' metadata merged (``a → b`` where they differ), run A's candidate as
    the baseline side, run B's as the candidate side."""
    hashes_b = _suite_hashes(man_b)
    eff_a, eff_b = res_a.get("effective", {}), res_b.get("effective", {})
    cand_a, cand_b = man_a.get("candidate", {}), man_b.get("candidate", {})
    vers_a, vers_b = man_a.get("versions", {}), man_b.get("versions", {})
    manifest = {
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
        "model": _merged(man_a.get("model"), man_b.get("model")),
        "limit": _merged(man_a.get("limit"), man_b.get("limit")),
        "versions": {k: _merged(vers_a.get(k, "absent"), vers_b.get(k, "absent")) for k in sorted(vers_a | vers_b)},
        "thresholds": str(thresholds_path),
        "timings": {"compare": seconds},
        "suites": [s for s in man_a.get("suites", []) if s["name"] in hashes_b],
        "compared_runs": {"baseline": str(run_a), "candidate": str(run_b),
                          "rule": "baseline side = run A's candidate, candidate side = run B's candidate"},
        "baseline": {"name": res_a.get("config", "A"), "requested": {}, **cand_a, "effective": eff_a,
                     "run_dir": str(run_a)},
        "candidate": {"name": res_b.get("config", "B"), "requested": {}, **cand_b, "effective": eff_b,
                      "run_dir": str(run_b)},
    }
    return manifest


def compare_runs(run_a: Path, run_b: Path, thresholds_path: Path, out_dir: Path) -> dict[str, Any]:
    """Gate run B's candidate against run A's candidate and write a run directory for the comparison.

    Args:
        run_a: run whose *candidate* results are the baseline side.
        run_b: run whose *candidate* results are the candidate side.
        thresholds_path: margins and alpha (the current ``thresholds.yaml`` by default in the CLI).
        out_dir: receives ``baseline.json``, ``candidate.json``, ``manifest.json``, ``verdict.json`` and the
            rendered outputs, so ``evalgate report`` works on it too.
    Returns:
        The verdict document (``Verdict.to_dict()``, as written to ``verdict.json``).
    Raises:
        StoreError: a run is missing or malformed, or the runs are not comparable (different tasks, items
            or suite contents).
    """
    from evalgate.compare import compare_tasks
    from evalgate.document import build_verdict
    from evalgate.gate import decide
    from evalgate.thresholds import load_thresholds

    t0 = time.monotonic()
    (res_a, man_a), (res_b, man_b) = _side(run_a), _side(run_b)
    hashes_a, hashes_b = _suite_hashes(man_a), _suite_hashes(man_b)
    for suite in sorted(hashes_a.keys() & hashes_b.keys()):
        if hashes_a[suite] != hashes_b[suite]:
            raise StoreError(f"runs are not comparable: suite '{suite}' differs between {run_a} and {run_b} "
                             f"(content hash {hashes_a[suite][:12]} vs {hashes_b[suite][:12]})")
    tasks_a, tasks_b = _tasks(run_a, res_a), _without_evidence(_tasks(run_b, res_b))
    thresholds = load_thresholds(thresholds_path)
    # Run B's candidate is gated: its config name picks per-config margins, its expectation the lossless check.
    cand_b_meta = man_b.get("candidate", {})
    config, expect = res_b.get("config"), cand_b_meta.get("expect", "lossy")
    try:
        comparisons = compare_tasks(tasks_a, tasks_b, thresholds, config=config)
    except StoreError as exc:
        raise StoreError(f"runs are not comparable ({run_a} vs {run_b}): {exc}") from exc
    eff_a, eff_b = res_a.get("effective", {}), res_b.get("effective", {})
    decision = decide([(c.suite, c.task, c.comparison) for c in comparisons], thresholds,
                      baseline_effective=eff_a, candidate_effective=eff_b, config=config, expect=expect,
                      outputs={c.task: c.agreement(thresholds.near_tie_logprob) for c in comparisons})
    manifest = _compare_manifest(run_a, run_b, man_a, man_b, res_a, res_b, thresholds.path, time.monotonic() - t0)
    verdict = build_verdict(decision, comparisons, manifest, spec_floors=thresholds.spec_floors_for(config),
                            near_tie=thresholds.near_tie_logprob)
    doc = verdict.to_dict()
    write_json_atomic(out_dir / "baseline.json", res_a)
    write_json_atomic(out_dir / "candidate.json", res_b)
    write_json_atomic(out_dir / "manifest.json", manifest)
    write_json_atomic(out_dir / "verdict.json", doc)
    write_outputs(verdict, out_dir)
    return doc
