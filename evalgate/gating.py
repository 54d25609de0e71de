"""Two evaluated configs to one verdict document: paired comparison, the pure gate, evidence (``verdict.json``).

Shared by ``evalgate run`` (one candidate) and ``evalgate ablate`` (one document per switch).
"""

from __future__ import annotations

from typing import Any


def gate_runs(runs: dict[str, Any], thresholds: Any, suites: list[Any], *, limit: int | None, stamp: str,
              timings: dict[str, float], speed: dict[str, Any] | None = None,
              gate_name: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The verdict document and the run manifest for ``runs`` (``{"baseline": ConfigRun, "candidate": ConfigRun}``).

    Args:
        thresholds: the loaded thresholds; ``gate_name`` (default: the candidate's name) picks its
            ``configs.<name>`` entries.
        suites: the suites run (for the manifest).
        limit: items per task (None = all). stamp: the run's UTC time stamp. timings: seconds, by phase.
        speed: the speed block (``speedrun.measure_speed``), None when speed was not measured.
    Returns:
        ``(doc, manifest)``.
    """
    import time

    from evalgate.compare import compare_tasks
    from evalgate.gate import decide
    from evalgate.report import gate_document
    from evalgate.runner import versions

    cand = runs["candidate"].config
    name = gate_name or cand.name
    t2 = time.monotonic()
    comparisons = compare_tasks(runs["baseline"].tasks, runs["candidate"].tasks, thresholds, config=name)
    decision = decide([(c.suite, c.task, c.comparison) for c in comparisons], thresholds,
                      baseline_effective=runs["baseline"].effective, candidate_effective=runs["candidate"].effective,
                      config=name, expect=cand.expect,
                      outputs={c.task: c.agreement(thresholds.near_tie_logprob) for c in comparisons})
    timings["compare"] = time.monotonic() - t2
    manifest = {
        "created": stamp, "model": cand.model, "limit": limit, "versions": versions(),
        "thresholds": str(thresholds.path), "timings": timings,
        "suites": [{"name": s.name, "tasks": list(s.tasks), "content_hash": s.content_hash} for s in suites],
        **{role: {"name": r.config.name, "path": str(r.config.path), "expect": r.config.expect,
                  "requested": r.config.identity(), "effective": r.effective, "spec_decode": r.spec_decode,
                  "evidence_sources": r.evidence_sources, "cached_suites": r.cached, "generations": r.generations} for role, r in runs.items()},
    }
    doc = gate_document(decision, comparisons, manifest, spec_floors=thresholds.spec_floors_for(name),
                        near_tie=thresholds.near_tie_logprob, speed=speed, speed_floors=thresholds.speed_floors_for(name))
    return doc, manifest
