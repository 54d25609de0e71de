"""Synthetic stored runs and verdict documents for the report, outputs and CLI tests (no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalgate.compare.pairing import compare_tasks
from evalgate.gate import Decision, decide, judge
from evalgate.inputs.thresholds import Thresholds
from evalgate.report.document import build_verdict
from evalgate.results.manifest import Manifest
from evalgate.results.records import ItemResult, TaskResult
from evalgate.results.store import tasks_to_json, write_json_atomic

EVIL_IMG = "<img src=x onerror=\"document.title='pwned'\">"
EVIL_SCRIPT = "<script>document.title='pwned'</script>"
SUITE_HASH = "ab" * 32
DEVICE = {"platform": "cpu", "cpu": "Test CPU", "isa": ["avx2"]}  # what runner records (engine.device)


def task(name: str, suite: str, outputs: list[str], scores: list[float]) -> TaskResult:
    """A task whose item i has hash ``h<name><i>``, a fixed prompt and target, and the given output and score."""
    items = tuple(ItemResult(task=name, item_id=i, item_hash=f"h{name}{i}", prompt=f"prompt {i} <b>bold?</b>",
                             target="42", output=o, score=s, metrics={"m": s})
                  for i, (o, s) in enumerate(zip(outputs, scores)))
    return TaskResult(task=name, suite=suite, metric="m", items=items)


def side(name: str, dtype: str) -> dict[str, Any]:
    """A manifest entry for one side."""
    return {"name": name, "path": f"{name}.yaml", "expect": "lossy",
            "requested": {"engine_args": {"dtype": dtype}, "sampling": {"temperature": 0.0, "seed": 0}},
            "effective": {"engine_args": {"dtype": dtype}}, "cached_suites": ["s"]}


def manifest(base: dict[str, Any], cand: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    return {"created": "20260101T000000Z", "model": "m", "limit": None, "versions": {"vllm": "x"},
            "thresholds": "thresholds.yaml", "timings": {"compare": 0.1, "candidate:suite:s": 2.5},
            "suites": [{"name": "s", "tasks": tasks, "content_hash": SUITE_HASH}], "baseline": base, "candidate": cand}


def verdict_of(decision: Decision, comps: list[Any], manifest: dict[str, Any], *, spec_floors: Any = None,
               **options: Any) -> Any:
    """The ``Verdict`` the pipeline builds from ``decision`` (``gate.decide``'s): ``gate.judge`` (the overrides, with
    ``spec_floors``, ``speed`` and ``speed_floors`` from ``options``) then ``document.build_verdict``; ``manifest``
    (a ``manifest.json`` object) is validated once into a ``Manifest``, as a stored run's is."""
    typed = Manifest.model_validate(manifest)
    judgement = judge(decision, comps, typed, spec_floors=spec_floors, speed=options.get("speed"),
                      speed_floors=options.get("speed_floors"))
    return build_verdict(judgement, comps, typed, **options)


def gate_document(decision: Decision, comps: list[Any], manifest: dict[str, Any], **options: Any) -> dict[str, Any]:
    """``verdict_of(...).to_dict()``: the document written as ``verdict.json``."""
    return verdict_of(decision, comps, manifest, **options).to_dict()


def document(base: dict[str, TaskResult], cand: dict[str, TaskResult], *, same_config: bool = False,
             margin: float = 2.0) -> dict[str, Any]:
    """The verdict document for two sides (bootstrap with 1000 resamples)."""
    thr = Thresholds(alpha=0.05, default_margin=margin, bootstrap_resamples=1000)
    comps = compare_tasks(base, cand, thr.policy(None))
    b, c = side("baseline", "float32"), side("cand", "float32" if same_config else "bfloat16")
    decision = decide([(x.suite, x.task, x.comparison) for x in comps], thr.policy(None),
                      baseline_effective=b["effective"], candidate_effective=c["effective"])
    return gate_document(decision, comps, manifest(b, c, sorted(base)))


def equal_sides_document(*, cand_args: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """The verdict document of one task ``t`` (40 items) both sides score 1.0 on (margin 10: PASS), the candidate a
    bfloat16 config (plus ``cand_args`` in its requested engine args); ``options`` go to ``gate_document`` (e.g.
    ``speed=``, ``speed_floors=``, ``economics=``)."""
    n = 40
    sides = {"t": task("t", "s", ["ok"] * n, [1.0] * n)}
    thr = Thresholds(alpha=0.05, default_margin=10.0, bootstrap_resamples=1000)
    comps = compare_tasks(sides, sides, thr.policy(None))
    b, c = side("baseline", "float32"), side("cand", "bfloat16")
    c["requested"]["engine_args"].update(cand_args or {})
    decision = decide([(x.suite, x.task, x.comparison) for x in comps], thr.policy(None), baseline_effective=b["effective"],
                      candidate_effective=c["effective"])
    return gate_document(decision, comps, manifest(b, c, ["t"]), **options)


def blocking_document() -> dict[str, Any]:
    """Task ``t`` (40 items) regresses on items 0-9 (item 0's output is a script) and improves on item 10: a
    shown loss beyond the margin, BLOCK. Task ``u`` passes with one output changed at the same score."""
    n, k = 40, 10
    cand_t = [EVIL_IMG + EVIL_SCRIPT] + [f"bad {i}" for i in range(1, k)] + ["ok"] * (n - k)
    base = {"t": task("t", "s", ["ok"] * n, [1.0] * k + [0.0] + [1.0] * (n - k - 1)),
            "u": task("u", "s", ["same"] * n, [1.0] * n)}
    cand = {"t": task("t", "s", cand_t, [0.0] * k + [1.0] * (n - k)),
            "u": task("u", "s", ["same but different"] + ["same"] * (n - 1), [1.0] * n)}
    doc = document(base, cand, margin=10.0)
    assert [t["verdict"] for t in doc["tasks"]] == ["BLOCK", "PASS"], doc["reasons"]
    return doc


def write_run(run_dir: Path, name: str, dtype: str, tasks: dict[str, TaskResult]) -> Path:
    """A stored run directory whose candidate side is ``tasks`` (the baseline side mirrors it); its manifest lists
    each task under its own suite, every suite with content hash ``SUITE_HASH``, both sides on ``DEVICE``, as
    ``evalgate run`` writes it."""
    entry = {**side(name, dtype), "device": dict(DEVICE)}
    data = {"config": name, "effective": entry["effective"], "spec_decode": {}, "tasks": tasks_to_json(tasks)}
    write_json_atomic(run_dir / "candidate.json", data)
    write_json_atomic(run_dir / "baseline.json", data)
    m = manifest({**side("baseline", "float32"), "device": dict(DEVICE)}, entry, sorted(tasks))
    m["suites"] = [{"name": s, "tasks": sorted(t for t, r in tasks.items() if r.suite == s), "content_hash": SUITE_HASH}
                   for s in sorted({r.suite for r in tasks.values()})]
    write_json_atomic(run_dir / "manifest.json", m)
    return run_dir


def same_json(new: object, old: object, where: str = "") -> None:
    """Assert ``new`` equals the stored document ``old`` key for key and in key order, with the same JSON types;
    floats to 1e-12 relative (scipy's quantiles and Wilson's interval inside Newcombe's may differ from an older
    computation in the last bits). ``where`` names the path in the assertion message."""
    if isinstance(old, float) and isinstance(new, float):
        assert new == pytest.approx(old, rel=1e-12, abs=1e-12), where
    elif isinstance(old, dict):
        assert isinstance(new, dict) and list(new) == list(old), where
        for k in old:
            same_json(new[k], old[k], f"{where}.{k}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(new) == len(old), where
        for i, (a, b) in enumerate(zip(new, old)):
            same_json(a, b, f"{where}.{i}")
    else:
        assert type(new) is type(old) and new == old, where


def kill_fakes(workers: Any) -> list[int]:
    """Stand-in for ``runner.kill_workers`` where the workers are test fakes (no process group): each distinct
    worker's own ``kill()``, once."""
    for w in {id(w): w for w in workers}.values():
        w.kill()
    return []
