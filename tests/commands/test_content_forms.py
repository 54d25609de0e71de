"""Two hub models whose own chat templates the engine workers resolved to different message forms (one plain
strings, one content parts: ``runner.ConfigRun.protocol["content"]``) are never gated against each other: ``run``
refuses the pair once both forms are known (exit 2, ``chat.template``, both sides' results written), as ``compare``
refuses two such runs (``stored.check_comparable``, exit 3). The parent cannot read a hub template, so before any
engine their protocols are equal; the engines are stood in for here (``runner.evaluate_config``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import evalgate.evaluate.runner as runner
from evalgate.cli import main
from evalgate.commands.stored import check_comparable
from evalgate.errors import ExitCode, StoreError
from evalgate.inputs.chat import protocol
from runfixtures import task
from taskfixtures import json_task


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forms: dict[str, str]) -> list[str]:
    """``evalgate run`` of base (hub model org/a) and cand (hub model org/b), both ``chat.template: model``, whose
    fake engines resolve the message forms ``forms`` (config name -> form); returns the command line."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "base.yaml").write_text("model: org/a\nengine_args: {dtype: float32}\nchat: {template: model}\n")
    (configs / "cand.yaml").write_text("extends: base\nmodel: org/b\nexpect: lossy\n")
    suite = tmp_path / "suites" / "s1"
    suite.mkdir(parents=True)
    (suite / "t.yaml").write_text(json_task("s1_task", "data.jsonl", "generate_until",
                                            "doc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n", ("exact_match",)))
    (suite / "data.jsonl").write_text('{"q": "1+1=", "a": "2"}\n{"q": "2+2=", "a": "4"}\n')
    (tmp_path / "thresholds.yaml").write_text("alpha: 0.05\ndefault: {margin: 2.0}\n")
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))

    def evaluate_config(cfg: Any, suites: Any, **kw: Any) -> runner.ConfigRun:
        scores = [1.0, 0.0]
        return runner.ConfigRun(config=cfg, tasks={"s1_task": task("s1_task", "s1", ["2", "5"], scores)},
                                effective={"engine_args": {"model": cfg.model}},
                                protocol={**protocol(cfg.chat), "content": forms[cfg.name]})

    monkeypatch.setattr(runner, "check_engine_values", lambda *a, **k: {})
    monkeypatch.setattr(runner, "evaluate_config", evaluate_config)
    return ["run", "--config", "cand", "--configs-dir", str(configs), "--suites-dir", str(tmp_path / "suites"),
            "--thresholds", str(tmp_path / "thresholds.yaml"), "--out", str(tmp_path / "run"), "--no-speed"]


def test_run_refuses_two_hub_templates_resolved_to_different_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = _project(tmp_path, monkeypatch, {"base": "string", "cand": "parts"})
    assert main(argv) == ExitCode.USAGE
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("evalgate: error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"evalgate: error: {tmp_path / 'configs' / 'cand.yaml'}: chat.template: the baseline "
                                '(base) and the candidate send prompts differently (content: "string" vs "parts"): ')
    run = tmp_path / "run"
    assert not (run / "verdict.json").exists()  # never gated, never a pass
    for role, model in (("baseline", "org/a"), ("candidate", "org/b")):  # each side's finished work is kept
        assert json.loads((run / f"{role}.json").read_text())["effective"] == {"engine_args": {"model": model}}


def test_run_gates_two_hub_templates_resolved_to_the_same_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = _project(tmp_path, monkeypatch, {"base": "parts", "cand": "parts"})
    # two items per side, equal scores: the MDE is far above the 2-point margin, so the task is INCONCLUSIVE,
    # counted as BLOCK (on_inconclusive: block, the default): exit 1, a verdict, not a refusal
    assert main(argv) == ExitCode.BLOCK
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())
    assert (verdict["verdict"], [t["verdict"] for t in verdict["tasks"]]) == ("BLOCK", ["INCONCLUSIVE"])
    assert verdict["manifest"]["candidate"]["protocol"]["content"] == "parts"


def test_compare_refuses_the_same_pair() -> None:
    """The rule ``run`` now applies is ``compare``'s: candidates whose recorded forms differ are not comparable."""
    chat = {"mode": "chat", "template": "model", "template_sha256": None}

    def manifest(form: str) -> dict[str, Any]:
        return {"suites": [{"name": "s", "tasks": ["t"], "content_hash": "h"}],
                "candidate": {"name": "c", "device": {"platform": "cpu", "isa": ["avx2"]},
                              "protocol": {**chat, "content": form}}}

    dirs = {"a": Path("/runs/a"), "b": Path("/runs/b")}
    check_comparable({"a": {}, "b": {}}, {"a": manifest("parts"), "b": manifest("parts")}, dirs)
    with pytest.raises(StoreError) as e:
        check_comparable({"a": {}, "b": {}}, {"a": manifest("string"), "b": manifest("parts")}, dirs)
    assert 'candidate.protocol: content: "string" vs "parts"' in str(e.value)


def test_an_ablation_variant_resolved_to_another_form_is_refused_and_its_worker_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ablate``'s variant against the baseline's live worker: the same refusal (the ablation records the variant
    as refused and goes on); the variant's worker is stopped, the baseline's left running for the next variant."""
    from evalgate.commands.jobs import VariantJob
    from evalgate.errors import ConfigError
    from evalgate.inputs.chat import Chat, ChatSpec
    from evalgate.inputs.config import EngineConfig, Sampling
    from evalgate.inputs.options import RunOptions
    from evalgate.inputs.thresholds import Thresholds

    class Worker:
        def __init__(self) -> None:
            self.stopped = False

        def close(self) -> None:
            self.stopped = True

        kill = close

    def hub(name: str, model: str) -> EngineConfig:
        return EngineConfig(name=name, path=tmp_path / f"{name}.yaml", model=model, engine_args={}, env={},
                            sampling=Sampling(), chat=ChatSpec(Chat(template="model")))

    base, variant = hub("base", "org/a"), hub("v", "org/b")
    base_run = runner.ConfigRun(config=base, tasks={}, effective={},
                                protocol={**protocol(base.chat), "content": "string"})
    variant_worker = Worker()
    monkeypatch.setattr(runner, "start_config", lambda cfg, suites, **kw: (variant_worker, runner.ConfigRun(
        config=cfg, tasks={}, effective={}, protocol={**protocol(cfg.chat), "content": "parts"})))
    base_worker = Worker()
    job = VariantJob(variant=variant, baseline=(base_worker, base_run),  # type: ignore[arg-type]
                     thresholds=Thresholds(alpha=0.05, default_margin=2.0), suites=[], options=RunOptions(), profile=None, stamp="20260101T000000Z", gate_name="v", out=tmp_path / "v",
                     log_path=tmp_path / "v.log")
    with pytest.raises(ConfigError) as ei:
        job.evaluate(job.thresholds)
    assert (ei.value.path, ei.value.field) == (tmp_path / "v.yaml", "chat.template")
    assert 'content: "string" vs "parts"' in ei.value.message
    assert variant_worker.stopped and not base_worker.stopped
