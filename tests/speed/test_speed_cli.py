"""The speed phase inside ``evalgate run``: refusals before any engine, a failed measurement, interleaving
(engine workers replaced by fakes with injected timings; the real engine runs in test_speed_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate import cli
from evalgate.errors import ExitCode
from evalgate.evaluate import runner
from evalgate.evaluate.runner import ConfigRun, SpeedError
from runfixtures import kill_fakes, task

THR = "alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\n"


class Fake:
    def __init__(self, role: str, values: list[float], fail: bool = False) -> None:
        self.role, self.values, self.fail, self.closed = role, list(values), fail, False
        self.info = {"event": "ready", "device": "fake CPU", "isa": [], "versions": {}}

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if self.fail and cmd["label"] != "warm-up":
            raise SpeedError(f"throughput measurement of {self.role} failed: RuntimeError: boom")
        v = 1.0 if cmd["label"] == "warm-up" else self.values.pop(0)
        return {"output_tok_s": v, "total_tok_s": 2 * v}

    def close(self) -> None:
        self.closed = True

    kill = close


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, traffic: str, *, limits: dict[str, int],
           fail: bool = False) -> dict[str, Fake]:
    (tmp_path / "t.yaml").write_text(THR + traffic, encoding="utf-8")
    started: dict[str, Fake] = {}
    monkeypatch.setattr(runner, "check_engine_values", lambda cfg, log, timeout: dict(limits))

    def start(cfg: Any, suites: Any, **kw: Any) -> tuple[Fake, ConfigRun]:
        role = "candidate" if kw.get("reference") is not None else "baseline"
        worker = Fake(role, [100.0, 104.0, 98.0] if role == "baseline" else [150.0, 160.0, 140.0],
                      fail=fail and role == "candidate")
        started[role] = worker
        n = 40
        t = {"t": task("t", "docparse", ["ok"] * n, [1.0] * n)}
        eff = {"engine_args": {"mamba_ssm_cache_dtype": "float32" if role == "baseline" else "float16"}}
        return worker, ConfigRun(config=cfg, tasks=t, effective=eff, journal=str(tmp_path / f"{role}.jsonl"))

    monkeypatch.setattr(runner, "start_config", start)
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(runner, "evaluate_config", lambda *a, **k: pytest.fail("speed on: workers must stay alive"))
    return started


def _run(tmp_path: Path, *extra: str) -> int:
    return cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(tmp_path / "run"), *extra])


def test_speed_block_from_interleaved_fake_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started = _setup(monkeypatch, tmp_path, "traffic: {input_len: 8, output_len: 8, concurrency: 4}\n",
                     limits={"max_model_len": 2048, "max_num_seqs": 256})
    assert _run(tmp_path) == ExitCode.PASS
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    row = doc["speed"]["levels"][0]
    assert row["baseline"]["output_tok_s"] == [100.0, 104.0, 98.0] and row["ratio"] == pytest.approx(1.5)
    assert row["verdict"] == "faster" and doc["speed"]["profile"]["concurrency"] == [4]
    assert all(w.closed for w in started.values())
    assert "Speed" in (tmp_path / "run" / "summary.md").read_text()


def test_a_failed_measurement_keeps_the_quality_verdict_and_exits_3(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    started = _setup(monkeypatch, tmp_path, "traffic: {input_len: 8, output_len: 8, concurrency: 4}\n",
                     limits={"max_model_len": 2048, "max_num_seqs": 256}, fail=True)
    assert _run(tmp_path) == ExitCode.RUNTIME
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert doc["verdict"] == "PASS" and doc["speed"]["status"] == "failed" and "boom" in doc["speed"]["error"]
    assert (tmp_path / "run" / "candidate.json").is_file()
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "ERROR" in summary and "speed measurement failed" in summary  # CI sees an error, never a PASS
    assert all(w.closed for w in started.values())


@pytest.mark.parametrize("traffic,limits,field,fragment", [
    ("traffic: {input_len: 1500, output_len: 600}\n", {"max_model_len": 2048, "max_num_seqs": 256},
     "traffic.input_len", "2100 tokens exceeds the engine's max_model_len 2048"),
    ("traffic: {concurrency: [16, 512]}\n", {"max_model_len": 2048, "max_num_seqs": 256}, "traffic.concurrency",
     "concurrency 512 exceeds the engine's max_num_seqs 256"),
    ("traffic: {mode: serve, prompts: suites}\n", {}, "traffic.prompts", "mode: serve measures vLLM's random dataset only"),
    # set under configs.<name>.traffic: the message names that field, not the top-level one
    ("configs: {fp16-state: {traffic: {mode: serve, prompts: suites}}}\n", {}, "configs.fp16-state.traffic.prompts",
     "mode: serve measures vLLM's random dataset only"),
    ("traffic: {mode: serve}\nconfigs: {fp16-state: {traffic: {prompts: suites}}}\n", {},
     "configs.fp16-state.traffic.prompts", "mode: serve measures vLLM's random dataset only"),
    ("traffic: {concurrency: 4}\nconfigs: {fp16-state: {traffic: {concurrency: [4, 512]}}}\n",
     {"max_model_len": 2048, "max_num_seqs": 256}, "configs.fp16-state.traffic.concurrency",
     "concurrency 512 exceeds the engine's max_num_seqs 256"),
])
def test_a_profile_the_engines_cannot_run_is_refused_before_any_engine(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], traffic: str,
        limits: dict[str, int], field: str, fragment: str) -> None:
    started = _setup(monkeypatch, tmp_path, traffic, limits=limits)
    assert _run(tmp_path) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"{tmp_path / 't.yaml'}: {field}: " in err and fragment in err
    assert not started


def test_a_command_line_level_the_engines_cannot_run_names_the_option(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--concurrency 512`` over max_num_seqs 256: the option is the field, not the thresholds file's traffic."""
    started = _setup(monkeypatch, tmp_path, "traffic: {concurrency: 4}\n", limits={"max_model_len": 2048,
                                                                                   "max_num_seqs": 256})
    assert _run(tmp_path, "--concurrency", "16,512") == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("evalgate: error: --concurrency: concurrency 512 exceeds the engine's max_num_seqs 256"), err
    assert not started


def test_command_line_speed_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    started = _setup(monkeypatch, tmp_path, "", limits={"max_model_len": 2048, "max_num_seqs": 256})
    assert _run(tmp_path, "--concurrency", "0,4") == ExitCode.USAGE
    assert "--concurrency" in capsys.readouterr().err
    assert _run(tmp_path, "--no-speed", "--repeats", "2") == ExitCode.USAGE
    assert _run(tmp_path, "--repeats", "0") == ExitCode.USAGE
    assert not started
