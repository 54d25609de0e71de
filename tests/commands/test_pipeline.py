"""The pipeline (``evalgate.commands.pipeline``): gate(job) runs load -> evaluate -> compare -> decide -> render in that order,
writes the run directory, and maps verdicts to exit codes; the run manifest model (``evalgate.evaluate.manifest``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.commands import pipeline
from evalgate.errors import StoreError
from evalgate.evaluate.manifest import Manifest
from evalgate.evaluate.runner import ConfigRun, SpeedError
from evalgate.inputs.config import EngineConfig, Sampling
from evalgate.inputs.thresholds import Thresholds
from evalgate.speed.block import SpeedBlock
from runfixtures import task


def _cfg(name: str, dtype: str) -> EngineConfig:
    return EngineConfig(name=name, path=Path(f"/c/{name}.yaml"), model="m", engine_args={"dtype": dtype}, env={},
                        sampling=Sampling())


def _runs(cand_scores: list[float]) -> dict[str, ConfigRun]:
    n = len(cand_scores)
    base = ConfigRun(config=_cfg("base", "float32"), tasks={"t": task("t", "s", ["ok"] * n, [1.0] * n)},
                     effective={"engine_args": {"dtype": "float32"}}, spec_decode={"spec_decode_num_drafts": 3.0},
                     cached=["s"], generations={"reused": 0, "generated": n},
                     device={"platform": "cpu", "cpu": "Test CPU", "isa": ["avx2"]})
    cand = ConfigRun(config=_cfg("cand", "bfloat16"), tasks={"t": task("t", "s", ["x"] * n, cand_scores)},
                     effective={"engine_args": {"dtype": "bfloat16"}})
    return {"baseline": base, "candidate": cand}


class _Suite:
    name, tasks, content_hash = "s", ("t",), "ab" * 32


class FakeJob:
    """A job whose sides are given; records the order of the steps it is asked for."""

    def __init__(self, out: Path, runs: dict[str, ConfigRun], thresholds: Thresholds,
                 speed: SpeedBlock | None = None) -> None:
        self.out, self.runs, self.thresholds, self.speed, self.calls = out, runs, thresholds, speed, []

    def load(self) -> Thresholds:
        self.calls.append("load")
        return self.thresholds

    def evaluate(self, thresholds: Thresholds) -> pipeline.Evaluated:
        self.calls.append("evaluate")
        assert thresholds is self.thresholds
        manifest = pipeline.run_manifest(self.runs, thresholds, [_Suite()], limit=40, stamp="20260101T000000Z",
                                         timings={"load": 0.5})
        return pipeline.evaluated_runs(self.runs, manifest, speed=self.speed)


THR = Thresholds(alpha=0.05, default_margin=10.0, bootstrap_resamples=1000)


def test_gate_writes_the_run_directory_and_the_verdict(tmp_path: Path) -> None:
    job = FakeJob(tmp_path / "run", _runs([1.0] * 40), THR)
    outcome = pipeline.gate(job)
    assert job.calls == ["load", "evaluate"]
    # 40 of 40 items right on both sides: delta 0, far inside a 10-point margin, configs differ -> PASS (exit 0)
    assert outcome.doc["verdict"] == "PASS" and outcome.exit_code == 0
    on_disk = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert on_disk["verdict"] == "PASS" and on_disk["tasks"][0]["delta"] == 0.0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest == on_disk["manifest"]
    for name in ("report.html", "verdict.junit.xml", "summary.md"):
        assert (tmp_path / "run" / name).is_file()
    assert outcome.speed_failed is None
    outcome.check_speed()  # no speed asked for: nothing to raise


def test_a_shown_loss_blocks_with_exit_1(tmp_path: Path) -> None:
    # 20 of 40 items lost: delta -50 points, beyond the 10-point margin and significant (McNemar p = 2 * 0.5**20)
    outcome = pipeline.gate(FakeJob(tmp_path / "run", _runs([0.0] * 20 + [1.0] * 20), THR))
    assert outcome.doc["verdict"] == "BLOCK" and outcome.exit_code == 1
    assert outcome.doc["tasks"][0]["delta"] == pytest.approx(-50.0)


def test_the_manifest_keeps_the_keys_of_the_untyped_dict(tmp_path: Path) -> None:
    runs = _runs([1.0] * 4)
    manifest = pipeline.run_manifest(runs, THR, [_Suite()], limit=4, stamp="20260101T000000Z", timings={"load": 1.5})
    data = manifest.as_json()
    assert list(data) == ["created", "model", "limit", "versions", "thresholds", "timings", "suites", "baseline",
                          "candidate"]
    assert list(data["baseline"]) == ["name", "path", "expect", "requested", "effective", "spec_decode",
                                      "evidence_sources", "cached_suites", "generations", "device", "protocol"]
    assert data["baseline"]["device"] == runs["baseline"].device
    assert data["baseline"]["protocol"] == {"mode": "completion"}  # no chat section: raw completion prompts
    assert data["baseline"]["requested"] == runs["baseline"].config.identity()
    assert data["baseline"]["spec_decode"] == {"spec_decode_num_drafts": 3.0}
    assert data["baseline"]["generations"] == {"reused": 0, "generated": 4}
    assert data["suites"] == [{"name": "s", "tasks": ["t"], "content_hash": "ab" * 32}]
    assert data["limit"] == 4 and data["timings"] == {"load": 1.5} and data["model"] == "m"
    # read back, the same document
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    assert Manifest.read(path).as_json() == data


def test_a_malformed_manifest_is_a_store_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"created": "x", "model": "m", "limit": None, "versions": {}, "thresholds": "t",
                                "timings": {}, "suites": [{"name": "s"}], "baseline": {"name": "a"},
                                "candidate": {"name": "b"}}))
    with pytest.raises(StoreError, match=r"manifest.json: malformed run manifest: suites\[0\]\.tasks: missing \(a required field\)$"):
        Manifest.read(path)


def test_a_failed_speed_measurement_keeps_the_verdict_then_raises(tmp_path: Path) -> None:
    speed = SpeedBlock(status="failed", error="boom", profile={})
    outcome = pipeline.gate(FakeJob(tmp_path / "run", _runs([1.0] * 40), THR, speed=speed))
    assert (tmp_path / "run" / "verdict.json").is_file() and outcome.speed_failed == "boom"
    with pytest.raises(SpeedError, match="quality verdict PASS .* but the speed measurement failed: boom"):
        outcome.check_speed()


class PairJob(FakeJob):
    def evaluate(self, thresholds: Thresholds) -> pipeline.Evaluated:
        sides = super().evaluate(thresholds)
        sides.pair = "A vs B"
        sides.files = {"baseline.json": {"side": "a"}}
        return sides


def test_two_stored_runs_over_different_items_are_not_comparable(tmp_path: Path) -> None:
    runs = _runs([1.0] * 4)
    runs["candidate"].tasks = {"t": task("t", "s", ["x"] * 3, [1.0] * 3)}  # one item fewer
    with pytest.raises(StoreError, match=r"runs are not comparable \(A vs B\)"):
        pipeline.gate(PairJob(tmp_path / "run", runs, THR))
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_a_stored_pair_writes_its_side_files(tmp_path: Path) -> None:
    pipeline.gate(PairJob(tmp_path / "run", _runs([1.0] * 40), THR))
    assert json.loads((tmp_path / "run" / "baseline.json").read_text()) == {"side": "a"}


@pytest.mark.parametrize(("verdict", "code"), [("PASS", 0), ("BLOCK", 1), ("NO-OP", 4), ("INCONCLUSIVE", 5)])
def test_exit_codes(verdict: str, code: int, tmp_path: Path) -> None:
    assert pipeline.Outcome({"verdict": verdict}, tmp_path, None).exit_code == code
