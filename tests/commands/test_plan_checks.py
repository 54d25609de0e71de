"""`evalgate plan --assume-discordance` (and `evalgate score`, one side) refuses a config whose chat section `evalgate run` refuses before any engine
starts: exit 2 with run's own line (the same file, field and message), by the functions run calls
(``plan.check_chat_sections``, ``modality.check_mixed_groups``); a good config still plans."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import evalgate.commands.plan as plan_mod
import evalgate.evaluate.runner as runner
from evalgate.cli import main
from evalgate.errors import ConfigError, ExitCode
from evalgate.evaluate.modality import check_image_input
from evalgate.inputs.config import CONFIGS_DIR, load_config
from evalgate.suites.discovery import SUITES_DIR, load_suite

KEEPS = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
DROPS = "{% for m in messages %}<|{{ m.role }}|>{% endfor %}<|assistant|>"  # no message's text, in either form
RAISES = "{{ raise_exception('this template takes no messages') }}"


class _Reached(BaseException):
    """An engine (or vLLM's check worker) would have started: run must refuse these configs before."""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A suites folder of one 40-item text task (``EVALGATE_SUITES``, which plan reads), an empty EVALGATE_HOME,
    engines as tripwires; returns the folder for configs."""
    suite = tmp_path / "suites" / "s"
    suite.mkdir(parents=True)
    (suite / "a.yaml").write_text("task: a\ncustom_dataset: !function utils.load_data\ndataset_kwargs: {n: 40}\n"
                                  "test_split: test\ndoc_to_text: '{{q}}'\ndoc_to_target: '{{a}}'\n"
                                  "metric_list: [{metric: exact_match}]\n")
    (suite / "utils.py").write_text("def load_data(n, **_):\n"
                                    "    return {'test': [{'id': i, 'q': str(i), 'a': str(i)} for i in range(n)]}\n")
    monkeypatch.setenv("EVALGATE_SUITES", str(tmp_path / "suites"))
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))

    def trip(*a: Any, **k: Any) -> Any:
        raise _Reached("an engine or check worker started")

    for name in ("start_config", "evaluate_config", "check_engine_values", "_run_worker"):
        monkeypatch.setattr(runner, name, trip)
    configs = tmp_path / "configs"
    configs.mkdir()
    return configs


def _write(configs: Path, template: str, *, base_chat: str = "", cand_chat: str = "") -> None:
    (configs / "t.jinja").write_text(template)
    (configs / "baseline.yaml").write_text(f"model: embedded:nemotron-h-tiny\nchat:\n  template: t.jinja\n{base_chat}")
    (configs / "cand.yaml").write_text("extends: baseline\nexpect: lossy\nengine_args: {mamba_ssm_cache_dtype: "
                                       f"float16}}\n{cand_chat}")


def _errors(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def _plan(configs: Path, config: str = "cand") -> list[str]:
    return ["plan", "--config", config, "--configs-dir", str(configs), "--margin", "5", "--assume-discordance",
            "0.05"]


def _run(configs: Path, tmp: Path, config: str = "cand") -> list[str]:
    return ["run", "--config", config, "--configs-dir", str(configs), "--suites-dir", str(tmp / "suites"),
            "--out", str(tmp / "out"), "--no-speed"]


@pytest.mark.parametrize(("template", "base_chat", "cand_chat", "where", "field", "says"), [
    # neither a plain string nor content parts carry a message's text (chat.check_content)
    (DROPS, "", "", "baseline.yaml", "chat.template", "loses a message's text"),
    # a template that raises on one user message
    (RAISES, "", "", "baseline.yaml", "chat.template", "fails to render one user message: TemplateError: this "
                                                       "template takes no messages"),
    # a kwarg the template never reads
    (KEEPS, "  template_kwargs: {enable_thinking: false}\n", "", "baseline.yaml", "chat.template_kwargs.enable_thinking",
     "never reads 'enable_thinking'"),
    # the two sides send prompts differently (a system prompt on the candidate only)
    (KEEPS, "", "chat: {system: Be brief.}\n", "cand.yaml", "chat", "send prompts differently (system_sha256: "),
], ids=["loses-the-text", "raises", "unread-kwarg", "protocols-differ"])
def test_plan_refuses_what_run_refuses_before_any_engine(project: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str], template: str,
                                                         base_chat: str, cand_chat: str, where: str, field: str,
                                                         says: str) -> None:
    _write(project, template, base_chat=base_chat, cand_chat=cand_chat)
    assert main(_run(project, tmp_path)) == ExitCode.USAGE
    refused = _errors(capsys)
    assert refused.startswith(f"evalgate: error: {project / where}: {field}: ") and says in refused
    assert refused.count("\n") == 1, refused
    assert main(_plan(project)) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert captured.err == refused and captured.out == ""


def test_plan_checks_the_chat_section_of_a_config_without_a_baseline(project: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``plan --config baseline`` has no baseline to compare against (run refuses it for that); its own chat section
    is still checked, with the line run gives for the same file."""
    _write(project, DROPS)
    assert main(_run(project, tmp_path)) == ExitCode.USAGE
    refused = _errors(capsys)
    assert refused.startswith(f"evalgate: error: {project / 'baseline.yaml'}: chat.template: ")
    assert main(_plan(project, "baseline")) == ExitCode.USAGE
    assert _errors(capsys) == refused


def test_a_good_chat_config_still_plans(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(project, KEEPS, base_chat="  system: Be brief.\n")
    for config in ("cand", "baseline"):
        assert main(_plan(project, config)) == 0
        captured = capsys.readouterr()
        assert captured.err == ""
        # 40 items; MDE at 5 % discordance, 2.486 * 100 * sqrt(0.05 / 40) = 8.79 (alpha 0.05, power 0.8)
        assert "s/a" in captured.out and "8.79" in captured.out


def test_plan_refuses_a_mixed_image_group_under_a_chat_template(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A group of an image suite with image and text tasks, under a chat template: refused by plan with the line run
    gives (``check_image_input`` refuses it before any check worker starts)."""
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    suite = load_suite("docpages", SUITES_DIR)
    mixed = replace(suite, mixed_groups=(("g", suite.path / "g.yaml", "docpages_fields", "text_t"),))
    monkeypatch.setattr(plan_mod, "load_suites", lambda *a, **k: [mixed])
    monkeypatch.setattr(runner, "check_engine_values", lambda *a, **k: (_ for _ in ()).throw(_Reached("check")))
    cand = load_config("vl/chat-bf16", check_engine_args=False)
    with pytest.raises(ConfigError) as ei:  # what run's EngineJob.load raises for these suites
        check_image_input([("candidate", cand)], [mixed], tmp_path / "logs", 60)
    assert main(["plan", "--config", "vl/chat-bf16", "--configs-dir", str(CONFIGS_DIR), "--margin", "5",
                 "--assume-discordance", "0.05"]) == ExitCode.USAGE
    assert capsys.readouterr().err == f"evalgate: error: {ei.value}\n"
    assert "group g of suite docpages holds both image tasks (docpages_fields) and text tasks (text_t)" in str(ei.value)


def _score(configs: Path, tmp: Path) -> list[str]:
    return ["score", "--config", "baseline", "--configs-dir", str(configs), "--suites-dir", str(tmp / "suites"),
            "--out", str(tmp / "score")]


@pytest.mark.parametrize(("template", "base_chat", "field"), [
    (DROPS, "", "chat.template"),
    (KEEPS, "  template_kwargs: {enable_thinking: false}\n", "chat.template_kwargs.enable_thinking"),
], ids=["loses-the-text", "unread-kwarg"])
def test_score_refuses_a_chat_section_run_refuses(project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   template: str, base_chat: str, field: str) -> None:
    """``evalgate score`` of the baseline alone: the same one line run gives for its chat section, exit 2, before any
    engine (the engines are tripwires)."""
    _write(project, template, base_chat=base_chat)
    assert main(_run(project, tmp_path)) == ExitCode.USAGE
    refused = _errors(capsys)
    assert refused.startswith(f"evalgate: error: {project / 'baseline.yaml'}: {field}: ")
    assert main(_score(project, tmp_path)) == ExitCode.USAGE
    assert _errors(capsys) == refused
