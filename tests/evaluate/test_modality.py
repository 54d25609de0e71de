"""An image suite on a model that reads no images is refused before any engine starts: exit 2, one line naming the
config file, the field that decides it and the image suite (``evaluate.modality``).

vLLM's answer (``worker.main.image_input``, from the check worker) is stood in for here, so each case says exactly
what vLLM reported; the real check worker answers for the real embedded models in tests/system/test_vl_gate.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import evalgate.evaluate.runner as runner
from evalgate import cli
from evalgate.errors import ConfigError, ExitCode
from evalgate.evaluate.modality import check_image_input
from evalgate.inputs.config import CONFIGS_DIR, installed_vllm_version, load_config
from evalgate.suites.discovery import SUITES_DIR, load_suite

PAGES_YAML = SUITES_DIR / "docpages" / "docpages_fields.yaml"
TEXT_ONLY = {"reads_images": False, "architecture": "NemotronHForCausalLM", "field": "model",
             "why": "vLLM's model registry lists NemotronHForCausalLM as text-only (not multimodal)"}
READS = {"reads_images": True, "architecture": "Idefics3ForConditionalGeneration", "field": "model",
         "why": "Idefics3ForConditionalGeneration takes images in vLLM (up to 1 per prompt)"}


class _Reached(BaseException):
    """An engine would have started (a BaseException: the CLI's error boundary cannot swallow it)."""


@pytest.fixture
def vllm_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[dict[str, dict[str, Any]], list[tuple]]:
    """``answers``: model -> the ``image_input`` the check worker reports for it (and, under the key
    ``(model, "chat")``, the ``chat_images`` it reports for a chat-protocol config); ``calls``: (config name, log
    file name, images) per check. Engines are tripwires; EVALGATE_HOME is empty."""
    answers: dict[Any, dict[str, Any]] = {}
    calls: list[tuple] = []

    def check(cfg, log_path, timeout_s, replay=None, *, images=False):
        calls.append((cfg.name, log_path.name, images))
        chat = {"chat_images": answers[(cfg.model, "chat")]} if images and (cfg.model, "chat") in answers else {}
        return {"max_num_seqs": 256, "max_model_len": 2048, **({"image_input": answers[cfg.model]} if images else {}),
                **chat}

    def trip(*a: Any, **k: Any) -> Any:
        raise _Reached("an engine started")

    monkeypatch.setattr(runner, "check_engine_values", check)
    for name in ("start_config", "evaluate_config"):
        monkeypatch.setattr(runner, name, trip)
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))
    return answers, calls


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_run_without_an_image_suite_asks_nothing(vllm_says, tmp_path: Path) -> None:
    _, calls = vllm_says
    cfg = load_config("fp16-state")
    assert check_image_input([("candidate", cfg)], [load_suite("docparse", SUITES_DIR)], tmp_path, 60) == {}
    assert calls == []


def test_run_refuses_a_text_only_model_given_the_page_tier(vllm_says, tmp_path: Path, capsys) -> None:
    answers, calls = vllm_says
    answers["embedded:nemotron-h-tiny"] = TEXT_ONLY
    code = cli.main(["run", "--config", "fp16-state", "--suites", "docpages", "--out", str(tmp_path / "run")])
    line = _one_line(capsys)
    assert code == ExitCode.USAGE == 2
    assert line == (f"evalgate: error: {CONFIGS_DIR / 'fp16-state.yaml'}: model: embedded:nemotron-h-tiny does not "
                    f"read images ({installed_vllm_version()}: {TEXT_ONLY['why']}) (set in "
                    f"{CONFIGS_DIR / 'baseline.yaml'}), but suite docpages is an image suite (task docpages_fields: "
                    f"metadata.evalgate.modality: image in {PAGES_YAML}); gate it with a model that reads images, or "
                    "leave it out of --suites and the config's suites")
    assert calls == [("fp16-state", "candidate-check.log", True)]  # refused on the candidate: nothing else asked


def test_score_and_ablate_refuse_it_too(vllm_says, tmp_path: Path, capsys) -> None:
    answers, calls = vllm_says
    answers["embedded:nemotron-h-tiny"] = TEXT_ONLY
    code = cli.main(["score", "--config", "baseline", "--suites", "docpages", "--out", str(tmp_path / "score")])
    line = _one_line(capsys)
    assert code == 2 and line.startswith(f"evalgate: error: {CONFIGS_DIR / 'baseline.yaml'}: model: embedded:nemotron")
    assert "suite docpages is an image suite" in line and "(set in" not in line  # baseline.yaml sets model itself
    code = cli.main(["ablate", "--config", "fp16-state", "--suites", "docpages", "--no-speed", "--limit", "2",
                     "--out", str(tmp_path / "ablate")])
    line = _one_line(capsys)
    assert code == 2 and line.startswith(f"evalgate: error: {CONFIGS_DIR / 'fp16-state.yaml'}: model: ")
    assert [c[1] for c in calls] == ["score-check.log", "recipe-check.log"]


def _configs(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    for name, text in files.items():
        (d / f"{name}.yaml").write_text(text)
    return d


def test_the_field_is_the_one_that_turns_images_off(vllm_says, tmp_path: Path) -> None:
    answers, calls = vllm_says
    d = _configs(tmp_path, {"base": "model: org/vl\nengine_args: {limit_mm_per_prompt: {image: 0}}\n",
                            "cand": "extends: base\nengine_args: {dtype: bfloat16}\n"})
    answers["org/vl"] = {"reads_images": False, "architecture": "VLForConditionalGeneration",
                         "field": "engine_args.limit_mm_per_prompt",
                         "why": "limit_mm_per_prompt allows 0 images per prompt on VLForConditionalGeneration"}
    cand = load_config("cand", d, check_engine_args=False)
    with pytest.raises(ConfigError) as ei:
        check_image_input([("candidate", cand)], [load_suite("docpages", SUITES_DIR)], tmp_path / "logs", 60)
    assert (ei.value.path, ei.value.field, ei.value.exit_code) == (d / "cand.yaml", "engine_args.limit_mm_per_prompt", 2)
    assert ei.value.message.startswith("org/vl does not read images (") and f"(set in {d / 'base.yaml'})" in str(
        ei.value)


def test_a_model_vllm_cannot_answer_for_is_refused_and_both_sides_are_asked(vllm_says, tmp_path: Path) -> None:
    answers, calls = vllm_says
    d = _configs(tmp_path, {"base": "model: org/text\n", "cand": "model: org/vl\nbaseline: base\n"})
    answers["org/vl"] = READS
    answers["org/text"] = {"reads_images": None, "architecture": "?", "field": "model",
                           "why": "ValueError: no processor"}
    pages = [load_suite("docpages", SUITES_DIR)]
    cand, base = load_config("cand", d, check_engine_args=False), load_config("base", d, check_engine_args=False)
    with pytest.raises(ConfigError) as ei:  # the candidate reads images; its baseline cannot be told: fail closed
        check_image_input([("candidate", cand), ("baseline", base)], pages, tmp_path / "logs", 60)
    assert (ei.value.path, ei.value.field) == (d / "base.yaml", "model")
    assert ei.value.message.startswith("cannot tell whether org/text reads images (")
    assert "ValueError: no processor" in ei.value.message
    answers["org/text"] = READS
    got = check_image_input([("candidate", cand), ("baseline", base)], pages, tmp_path / "logs", 60)
    assert got == {role: {"max_num_seqs": 256, "max_model_len": 2048, "image_input": READS}
                   for role in ("candidate", "baseline")}
    answers["org/text"] = {"max": "a worker that says nothing of images"}
    with pytest.raises(ConfigError, match="cannot tell whether org/text reads images"):
        check_image_input([("baseline", base)], pages, tmp_path / "logs", 60)


def test_a_vl_run_asks_both_sides_once_then_starts_its_engines(vllm_says, tmp_path: Path) -> None:
    """``evalgate run --config vl/bf16``: the page tier by the config's ``suites``, both sides asked before the
    pre-flight, the candidate's answer reused for its engine-value check (no second check), then the baseline's
    engine would start."""
    answers, calls = vllm_says
    answers["embedded:idefics3-tiny"] = READS
    with pytest.raises(_Reached):
        cli.main(["run", "--config", "vl/bf16", "--limit", "2", "--no-speed", "--out", str(tmp_path / "run")])
    assert calls == [("vl/bf16", "candidate-check.log", True), ("vl/baseline", "baseline-check.log", True)]


def _chat_vl_configs(root: Path, template: str = "model") -> Path:
    """A chat-protocol pair on the VL fixture: ``base`` (chat set here, the page tier by the inherited ``suites``)
    and ``cand`` (BF16) extending it."""
    root.mkdir(parents=True)
    (root / "base.yaml").write_text(f"extends: {CONFIGS_DIR / 'vl' / 'baseline.yaml'}\nbaseline: null\n"
                                    f"chat: {{template: {template}}}\n")
    (root / "cand.yaml").write_text("extends: base\nexpect: lossy\nengine_args: {dtype: bfloat16}\n")
    return root


PLACES = {"places_images": True, "placeholder": "<image>", "why": "the template writes '<image>' for an image part"}
NO_PLACE = {"places_images": False, "placeholder": "<image>",
            "why": "an image part ({\"type\": \"image\"}) in a user message adds 0 of the model's image placeholder "
                   "'<image>' to the rendered prompt (exactly one is needed, where the image goes)"}


@pytest.mark.parametrize("command", ["run", "score", "ablate"])
def test_a_chat_template_with_no_place_for_an_image_is_refused_before_any_engine(
        vllm_says, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A chat-protocol config given an image suite whose template places no image (the check worker's probe): exit
    2, one line naming the config file, ``chat.template`` (and the file that sets it), what the probe showed and the
    image suite; only the first config's check worker ran, no engine."""
    answers, calls = vllm_says
    answers["embedded:idefics3-tiny"] = READS
    answers[("embedded:idefics3-tiny", "chat")] = NO_PLACE
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    d = _chat_vl_configs(tmp_path / "configs", str(tmp_path / "t.jinja"))
    argv = [command, "--config", str(d / "cand.yaml"), "--limit", "2", "--out", str(tmp_path / "out")]
    code = cli.main(argv + (["--no-speed"] if command == "run" else []))
    line = _one_line(capsys)
    assert code == ExitCode.USAGE == 2, line
    assert [c[2] for c in calls] == [True], calls
    assert line == (f"evalgate: error: {d / 'cand.yaml'}: chat.template: template {tmp_path / 't.jinja'} (set in "
                    f"{d / 'base.yaml'}) has no place for an image ({NO_PLACE['why']}), but suite docpages is an "
                    f"image suite (task docpages_fields: doc_to_image in {PAGES_YAML}); use a template that renders "
                    "an image content part ({\"type\": \"image\"}) as the model's image placeholder, or leave the "
                    "suite out of --suites and the config's suites")


def test_a_chat_template_that_places_the_image_goes_on_to_the_engines(vllm_says, tmp_path: Path) -> None:
    """The shipped chat pair (vl/chat-bf16 against vl/chat): both sides' templates place the image, so the run goes
    on to start the baseline's engine."""
    answers, calls = vllm_says
    answers["embedded:idefics3-tiny"] = READS
    answers[("embedded:idefics3-tiny", "chat")] = PLACES
    with pytest.raises(_Reached):
        cli.main(["run", "--config", "vl/chat-bf16", "--limit", "2", "--no-speed", "--out", str(tmp_path / "run")])
    assert calls == [("vl/chat-bf16", "candidate-check.log", True), ("vl/chat", "baseline-check.log", True)]


def test_chat_images_fail_closed_and_completion_or_text_runs_are_not_judged(tmp_path: Path) -> None:
    from evalgate.evaluate.modality import check_chat_images

    d = _chat_vl_configs(tmp_path / "configs")
    cand = load_config(d / "cand.yaml", d, check_engine_args=False)
    pages, text = load_suite("docpages", SUITES_DIR), load_suite("docparse", SUITES_DIR)
    check_chat_images(cand, {}, [text])  # text only: nothing to judge
    check_chat_images(load_config("vl/bf16", check_engine_args=False), {}, [pages])  # completion prompts
    check_chat_images(cand, {"chat_images": PLACES}, [text, pages])
    cannot = {"places_images": None, "placeholder": None, "why": "the tokenizer of org/vl has no chat template"}
    for report, says in (({}, "the check worker reported nothing about the chat template"),
                         ({"chat_images": cannot}, cannot["why"])):
        with pytest.raises(ConfigError) as ei:  # fail closed: never a pass
            check_chat_images(cand, report, [text, pages])
        assert (ei.value.path, ei.value.field, ei.value.exit_code) == (d / "cand.yaml", "chat.template", 2)
        assert ei.value.message.startswith(f"embedded:idefics3-tiny's own chat template (set in {d / 'base.yaml'}) "
                                           f"cannot be shown to place an image ({says}), but suite docpages is an "
                                           "image suite")


def test_a_mixed_group_is_refused_before_any_check_worker_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check_mixed_groups depends on the suites only: a chat config's mixed group is refused without a check worker."""
    from dataclasses import replace

    from evalgate.evaluate import runner
    from evalgate.inputs.config import load_config

    started: list[str] = []
    monkeypatch.setattr(runner, "check_engine_values", lambda *a, **k: started.append("check") or {})
    suite = load_suite("docpages", SUITES_DIR)
    mixed = replace(suite, mixed_groups=(("g", suite.path / "g.yaml", "docpages_fields", "text_t"),))
    cfg = load_config("vl/chat", check_engine_args=False)
    with pytest.raises(ConfigError, match="group g of suite docpages holds both image tasks"):
        check_image_input([("candidate", cfg)], [mixed], tmp_path / "logs", 60)
    assert started == []
