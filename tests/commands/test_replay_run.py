"""The replay gate inside ``evalgate run`` with fake engine workers (the real engine: tests/system/test_replay_engine.py):
both sides answer the replayed requests on their warm workers, the verdict joins the run's, the length check and a
log the tokenizer cannot render are refused before any engine starts, and answers that do not pair are exit 3."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalgate import cli
from evalgate.errors import ExitCode
from evalgate.evaluate import runner
from evalgate.evaluate.runner import ConfigRun
from runfixtures import kill_fakes, task

THR = "alpha: 0.05\ndefault: {margin: 10.0}\nbootstrap_resamples: 1000\non_inconclusive: warn\n"
N = 60  # all agreeing: L = 0.05 ** (1/60) = 0.951 >= the default floor 0.95


class Fake:
    def __init__(self, role: str, changed: int, short: bool) -> None:
        self.role, self.changed, self.short, self.closed, self.commands = role, changed, short, False, []
        self.info = {"event": "ready"}

    def measure(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.commands.append(cmd)
        lines = cmd["replay"]["lines"][:-1] if self.short else cmd["replay"]["lines"]
        outs = [{"line": n, "text": f"answer {n}", "token_ids": [n, 1], "finish_reason": "stop", "top_logprobs": None}
                for n in lines]
        if self.role == "candidate":
            for o in outs[:self.changed]:
                o["text"], o["token_ids"] = "other", [o["line"], 2]
        return {"outputs": outs}

    def close(self) -> None:
        self.closed = True

    kill = close


def _setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *, changed: int = 0, limits: dict[str, Any] | None = None,
           short: bool = False) -> dict[str, Any]:
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps({"prompt": f"p{i}", "max_tokens": 8}) + "\n" for i in range(N)), encoding="utf-8")
    (tmp_path / "t.yaml").write_text(THR + "replay: {from: requests.jsonl}\n", encoding="utf-8")
    state: dict[str, Any] = {"checks": [], "started": {}}

    def check(cfg: Any, log_path: Any, timeout: Any, replay: Any = None) -> dict[str, Any]:
        state["checks"].append(replay)
        return dict(limits or {"max_model_len": 2048, "max_num_seqs": 256, "replay_prompt_tokens": [3] * N})

    def start(cfg: Any, suites: Any, **kw: Any) -> tuple[Fake, ConfigRun]:
        role = "candidate" if kw.get("reference") is not None else "baseline"
        worker = state["started"][role] = Fake(role, changed, short and role == "candidate")
        t = {"t": task("t", "docparse", ["ok"] * 40, [1.0] * 40)}
        eff = {"engine_args": {"mamba_ssm_cache_dtype": "float32" if role == "baseline" else "float16"}}
        return worker, ConfigRun(config=cfg, tasks=t, effective=eff, journal=str(tmp_path / f"{role}.jsonl"))

    monkeypatch.setattr(runner, "check_engine_values", check)
    monkeypatch.setattr(runner, "start_config", start)
    monkeypatch.setattr(runner, "kill_workers", kill_fakes)
    monkeypatch.setattr(runner, "evaluate_config", lambda *a, **k: pytest.fail("replay on: workers must stay alive"))
    return state


def _run(tmp_path: Path) -> int:
    return cli.main(["run", "--config", "fp16-state", "--suites", "docparse", "--thresholds", str(tmp_path / "t.yaml"),
                     "--out", str(tmp_path / "run")])


def test_unchanged_answers_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = _setup(monkeypatch, tmp_path)
    assert _run(tmp_path) == ExitCode.PASS
    rp = json.loads((tmp_path / "run" / "verdict.json").read_text())["replay"]
    assert (rp["requests"], rp["identical"], rp["verdict"]) == (N, N, "PASS")
    assert rp["share_lower"] == pytest.approx(0.05 ** (1 / N)) and rp["floor"] == 0.95
    spec = state["checks"][0]
    assert spec["lines"] == list(range(1, N + 1)) and spec["budgets"] == [8] * N  # both checks count the same requests
    assert state["checks"] == [spec, spec]
    assert all(w.closed and w.commands[0]["replay"] == spec for w in state["started"].values())


def test_changed_answers_block(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _setup(monkeypatch, tmp_path, changed=20)  # 40 / 60 agree: U = 0.77 < 0.95
    assert _run(tmp_path) == ExitCode.BLOCK
    doc = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert doc["verdict"] == "BLOCK" and doc["reasons"][0].startswith("replay: BLOCK: outputs changed")
    assert [q["line"] for q in doc["replay"]["changed"]] == list(range(1, 21))


@pytest.mark.parametrize("limits, fragment", [
    ({"max_model_len": 10, "replay_prompt_tokens": [3] * (N - 1) + [3]}, "3 prompt tokens + 8 output tokens exceed "
                                                                         "max_model_len 10"),
    ({"max_model_len": 2048, "replay_error": "r.jsonl: line 1: messages: the engine's tokenizer has no chat template"},
     "has no chat template"),
])
def test_refused_before_any_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture,
                                   limits: dict[str, Any], fragment: str) -> None:
    state = _setup(monkeypatch, tmp_path, limits=limits)
    assert _run(tmp_path) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert fragment in err and not state["started"]
    if "max_model_len 10" in fragment:
        assert f"{tmp_path / 'requests.jsonl'}: line 1: prompt:" in err


def test_answers_that_do_not_pair_are_an_engine_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = _setup(monkeypatch, tmp_path, short=True)
    assert _run(tmp_path) == ExitCode.RUNTIME
    assert all(w.closed for w in state["started"].values())


def test_an_engine_that_dies_while_replaying_is_exit_3_and_not_restarted(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """The replay phase restarts no side (the speed phase does): the candidate's engine dies in its replay pass, the
    run is exit 3 after one replay pass per side, no third worker starts, and both sides' suite results are kept."""
    state = _setup(monkeypatch, tmp_path)
    starts: list[str] = []
    start = runner.start_config

    def counted(cfg: Any, suites: Any, **kw: Any) -> tuple[Fake, ConfigRun]:
        starts.append(str(kw.get("log_path")))
        worker, run = start(cfg, suites, **kw)
        if worker.role == "candidate":
            def died(cmd: dict[str, Any]) -> dict[str, Any]:
                worker.commands.append(cmd)
                raise runner.SpeedError("the candidate worker died (exit -9)")
            worker.measure = died  # type: ignore[method-assign]
        return worker, run

    monkeypatch.setattr(runner, "start_config", counted)
    assert _run(tmp_path) == ExitCode.RUNTIME
    assert len(starts) == 2 and not any("restart" in s for s in starts)  # no restart of either side
    assert [len(w.commands) for w in (state["started"]["baseline"], state["started"]["candidate"])] == [1, 1]
    assert all(w.closed for w in state["started"].values())  # killed
    for role in ("baseline", "candidate"):  # the quality results are kept
        assert json.loads((tmp_path / "run" / f"{role}.json").read_text())["tasks"]
