"""The gate on a ``--speed-only`` run (no quality suite): INCONCLUSIVE with that reason, BLOCK from the speed
floors, never PASS; a stored speed-only verdict re-validates (``evalgate report``) and a PASS without tasks does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.gate import Verdict, judge_run
from evalgate.inputs.thresholds import load_thresholds
from evalgate.results.manifest import Manifest, Side
from evalgate.speed.block import SpeedBlock

MANIFEST = Manifest(speed_only=True, created="20260101T000000Z", model="m", limit=None, versions={},
                    thresholds="t.yaml", timings={}, suites=[], baseline=Side(name="baseline", expect="lossy"),
                    candidate=Side(name="c", expect="lossy", effective={}))


def _thresholds(tmp_path: Path, extra: str = "") -> object:
    (tmp_path / "t.yaml").write_text("alpha: 0.05\ndefault: {margin: 2.0}\n" + extra)
    return load_thresholds(tmp_path / "t.yaml")


def _speed(low: float, high: float) -> SpeedBlock:
    return SpeedBlock.model_validate({"status": "measured", "levels": [{"concurrency": 256, "ratio": (low + high) / 2,
                                                                        "ci_low": low, "ci_high": high}]})


def test_speed_only_is_inconclusive_with_its_reason_and_never_pass(tmp_path: Path) -> None:
    th = _thresholds(tmp_path)
    eff = {"baseline": {"engine_args": {"mamba_ssm_cache_dtype": "float32"}},
           "candidate": {"engine_args": {"mamba_ssm_cache_dtype": "float16"}}}
    for speed in (_speed(1.10, 1.30), _speed(0.97, 1.02), None, SpeedBlock(status="failed", error="x")):
        j = judge_run([], th.policy("scale/fp16-state"), MANIFEST, expect="lossy", effective=eff, speed=speed)
        assert j.decision.verdict is Verdict.INCONCLUSIVE and j.decision.tasks == ()
        assert j.decision.reasons[0].startswith("speed only: no quality suite ran (--speed-only)")
    same = {"baseline": {"x": 1}, "candidate": {"x": 1}}
    j = judge_run([], th.policy("scale/aa"), MANIFEST, expect="lossless", effective=same, speed=_speed(0.99, 1.01))
    assert j.decision.verdict is Verdict.INCONCLUSIVE and "an A/A run" in j.decision.reasons[0]


def test_speed_only_blocks_on_a_missed_speed_floor(tmp_path: Path) -> None:
    th = _thresholds(tmp_path, "speed: {min_speedup: 1.05}\n")
    eff = {"baseline": {"a": 1}, "candidate": {"a": 2}}
    j = judge_run([], th.policy("c"), MANIFEST, expect="lossy", effective=eff, speed=_speed(0.95, 1.04))
    assert j.decision.verdict is Verdict.BLOCK and j.decision.reasons[0].startswith("speed:")
    j = judge_run([], th.policy("c"), MANIFEST, expect="lossy", effective=eff, speed=_speed(1.06, 1.20))
    assert j.decision.verdict is Verdict.INCONCLUSIVE


def test_no_tasks_outside_a_speed_only_run_is_still_an_error(tmp_path: Path) -> None:
    th = _thresholds(tmp_path)
    with pytest.raises(ValueError, match="no evidence is never a pass"):
        judge_run([], th.policy("c"), MANIFEST.model_copy(update={"speed_only": None}), expect="lossy",
                  effective={"baseline": {"a": 1}, "candidate": {"a": 2}})


def test_a_stored_speed_only_verdict_revalidates_but_a_taskless_pass_does_not(tmp_path: Path) -> None:
    from evalgate.commands.stored import check_verdict_document
    from evalgate.errors import StoreError
    from evalgate.report.verdict import VERSION
    from evalgate.report.verdict import Verdict as Doc

    base = {"version": VERSION, "reasons": ["speed only: ..."], "tasks": [], "manifest": {"speed_only": True}}
    for verdict in ("INCONCLUSIVE", "BLOCK"):
        check_verdict_document(Doc.model_validate({**base, "verdict": verdict}), tmp_path / "verdict.json")
    with pytest.raises(StoreError, match="tasks: none, under an overall PASS"):
        check_verdict_document(Doc.model_validate({**base, "verdict": "PASS"}), tmp_path / "verdict.json")
    with pytest.raises(StoreError, match="tasks: none, under an overall INCONCLUSIVE"):
        check_verdict_document(Doc.model_validate({**base, "verdict": "INCONCLUSIVE", "manifest": {}}),
                               tmp_path / "verdict.json")
