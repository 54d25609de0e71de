"""The worker's own chat decisions, without an engine: which tokenizer's template it reads (the ``tokenizer`` engine
arg, as vLLM loads it), how it decides the text form of a hub model's own template (``resolve_content``, fail closed
when the tokenizer does not load), whether a template places an image when vLLM's API to ask is missing
(``chat_image_input``: "cannot tell", refused as exit 2), the image limit of a processor that states its own
(``images_per_prompt``), the adapter's refusal of a tokenizer without a template (exit 2 on ``chat.template``, not a
traceback), and the parent's reading of a ``chat.template:`` refusal (``procs.exit_error``). Stand-in tokenizers and
vLLM modules throughout; the real engine runs these paths in tests/system/test_vl_gate.py."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from evalgate.engine.protocol import CONFIG_ERROR_EXIT, CONFIG_ERROR_TAG
from evalgate.errors import ConfigError, EngineError
from evalgate.models.idefics3_tiny import CHAT_TEMPLATE as IDEFICS3
from evalgate.worker import main as worker

QUESTION = "What is 2 + 3?"
DROPS = "{% for m in messages %}[{{ m['role'] }}]\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
STRINGS = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


class _Loader:
    """A stand-in ``AutoTokenizer.from_pretrained``: records each name asked for; gives a tokenizer whose chat
    template is ``templates[name]``, or raises OSError for a name it does not know (a tokenizer that won't load)."""

    def __init__(self, templates: dict[str, str | None]) -> None:
        self.templates, self.asked = templates, []

    def __call__(self, name: str, trust_remote_code: bool = False) -> Any:
        self.asked.append((name, trust_remote_code))
        if name not in self.templates:
            raise OSError(f"{name} is not a local folder and is not a valid model identifier")
        return types.SimpleNamespace(chat_template=self.templates[name])


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> _Loader:
    import transformers

    load = _Loader({"org/vl-model": IDEFICS3, "org/vl-tokenizer": STRINGS, "org/no-template": None})
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", load)
    return load


def _chat(**over: Any) -> dict[str, Any]:
    """The worker spec of ``chat.template: model`` on a hub model (the parent could not read the template)."""
    return {"chat": True, "template": None, "system": None, "template_kwargs": {}, "fewshot_as_multiturn": False,
            "think_end": None, "content": None, **over}


# ------------------------------------------------------------------------------------------------ resolve_content

def test_resolve_content_decides_a_hub_templates_form_from_the_tokenizer_the_engine_loads(loader: _Loader) -> None:
    chat = _chat()
    assert worker.resolve_content("org/vl-model", {}, chat) is None
    assert chat["content"] == "parts"  # Idefics3's template renders a plain string as an empty turn
    assert loader.asked == [("org/vl-model", False)]
    # engine_args.tokenizer is the tokenizer vLLM loads, so its template decides (a string-friendly one here)
    chat = _chat()
    assert worker.resolve_content("org/vl-model", {"tokenizer": "org/vl-tokenizer", "trust_remote_code": True},
                                  chat) is None
    assert chat["content"] == "string" and loader.asked[-1] == ("org/vl-tokenizer", True)
    # a template that loses the text either way: the reason the worker prints on chat.template (exit 2)
    loader.templates["org/drops"] = DROPS
    chat = _chat()
    assert worker.resolve_content("org/drops", {}, chat) == (
        "the chat template of org/drops loses a message's text: it is in the rendered prompt neither when the "
        "message's content is a plain string nor when it is content parts, so every item would be scored without "
        "its question")
    # the parent's decision stands (a file template or a local checkpoint): no tokenizer is loaded
    before = len(loader.asked)
    chat = _chat(template=STRINGS, content="string")
    assert worker.resolve_content("org/vl-model", {}, chat) is None and chat["content"] == "string"
    assert worker.resolve_content("org/vl-model", {}, None) is None
    assert len(loader.asked) == before


def test_a_tokenizer_that_wont_load_leaves_the_form_undecided_and_the_adapter_fails_closed(loader: _Loader) -> None:
    """Fail closed: a tokenizer that does not load here never makes the worker assume plain strings; the form stays
    None and the adapter probes the engine tokenizer's template on first use (Idefics3's: content parts), and one
    that loses the text either way is a ChatTemplateFailure (exit 2 on chat.template), not an empty prompt."""
    pytest.importorskip("lm_eval")
    from evalgate.worker.lm_adapter import ChatTemplateFailure, make_lm

    chat = _chat()
    assert worker.resolve_content("org/unreachable", {}, chat) is None
    assert chat["content"] is None and loader.asked == [("org/unreachable", False)]
    lm = make_lm(_Engine(IDEFICS3), chat=chat)
    assert lm.apply_chat_template([{"role": "user", "content": QUESTION}]) == (
        f"<|begin_of_text|>User: {QUESTION}<end_of_utterance>\nAssistant:")
    assert lm.content == "parts"
    lm = make_lm(_Engine(DROPS), chat=_chat())
    with pytest.raises(ChatTemplateFailure) as e:
        lm.apply_chat_template([{"role": "user", "content": QUESTION}])
    assert str(e.value) == ("ValueError: the chat template renders a message's text neither from a plain string nor "
                            f"from content parts (its last message begins {QUESTION!r})")


# ------------------------------------------------------------------------------------------------ the adapter

class _Engine:
    """Only what ``apply_chat_template`` touches: the engine's tokenizer (transformers' renderer, ``template``)."""

    def __init__(self, template: str | None) -> None:
        from evalgate.inputs.config import Sampling

        self.sampling = Sampling(temperature=0.0, max_tokens=8, seed=0)
        self.tok = _RenderingTokenizer(template)

    def tokenizer(self) -> Any:
        return self.tok


class _RenderingTokenizer:
    def __init__(self, template: str | None) -> None:
        self.chat_template = template

    def apply_chat_template(self, messages: list[dict[str, Any]], chat_template: str | None = None,
                            tokenize: bool = False, add_generation_prompt: bool = True, **kwargs: Any) -> str:
        from transformers.utils.chat_template_utils import render_jinja_template

        text = chat_template or self.chat_template
        rendered, _ = render_jinja_template([messages], chat_template=text,
                                            add_generation_prompt=add_generation_prompt, **kwargs)
        return str(rendered[0])


def test_a_tokenizer_without_a_template_is_a_chat_template_failure_not_a_bare_value_error() -> None:
    """``chat.template: model`` on a tokenizer with no template of its own (a hub model the parent could not read):
    was a bare ValueError outside the adapter's try (exit 3, a traceback); now the ChatTemplateFailure the worker
    reports as exit 2 on chat.template."""
    pytest.importorskip("lm_eval")
    from evalgate.worker.lm_adapter import ChatTemplateFailure, make_lm

    lm = make_lm(_Engine(None), chat=_chat())
    with pytest.raises(ChatTemplateFailure) as e:
        lm.apply_chat_template([{"role": "user", "content": QUESTION}])
    assert str(e.value) == ("ValueError: chat.template: model, but the engine's tokenizer has no chat template (its "
                            f"last message begins {QUESTION!r})")


# ------------------------------------------------------------------------------------------------ chat_image_input

def _fake_vllm(monkeypatch: pytest.MonkeyPatch, loader_module: types.ModuleType) -> None:
    """``vllm.model_executor.model_loader`` replaced by ``loader_module`` (vLLM itself never imported)."""
    for name in ("vllm", "vllm.model_executor"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.model_executor.model_loader", loader_module)


def _model_loader(cls: Any | None) -> types.ModuleType:
    module = types.ModuleType("vllm.model_executor.model_loader")
    if cls is not None:
        module.get_model_cls = lambda model_config: cls  # type: ignore[attr-defined]
    return module


class _Idefics3Cls:
    @staticmethod
    def get_placeholder_str(modality: str, i: int) -> str | None:
        return "<image>" if modality == "image" else None


def test_chat_image_input_reads_the_template_of_the_engine_args_tokenizer(
        monkeypatch: pytest.MonkeyPatch, loader: _Loader) -> None:
    _fake_vllm(monkeypatch, _model_loader(_Idefics3Cls))
    # the model's own tokenizer would place the image (Idefics3's); the tokenizer vLLM loads is another, whose
    # template writes a parts list as it is: no place for an image. It was read from ``model`` (ignoring the arg).
    got = worker.chat_image_input(object(), "org/vl-model", {"tokenizer": "org/vl-tokenizer"}, _chat())
    assert loader.asked == [("org/vl-tokenizer", False)]
    assert got["places_images"] is False and got["placeholder"] == "<image>"
    assert got["why"].startswith("an image part ({\"type\": \"image\"}) in a user message adds 0 of the model's image "
                                 "placeholder '<image>'")
    got = worker.chat_image_input(object(), "org/vl-model", {}, _chat())
    assert got == {"places_images": True, "placeholder": "<image>", "why": "the template writes '<image>' for an "
                                                                         "image part"}
    got = worker.chat_image_input(object(), "org/vl-model", {"tokenizer": "org/no-template"}, _chat())
    assert got == {"places_images": None, "placeholder": "<image>",
                   "why": "the tokenizer of org/no-template has no chat template"}


@pytest.mark.parametrize("cls, why", [
    (None, "ImportError: cannot import name 'get_model_cls' from 'vllm.model_executor.model_loader'"),
    (type("NoPlaceholder", (), {}), "AttributeError: type object 'NoPlaceholder' has no attribute "
                                    "'get_placeholder_str'"),
])
def test_chat_image_input_without_vllms_api_to_ask_cannot_tell_and_is_refused_as_exit_2(
        monkeypatch: pytest.MonkeyPatch, loader: _Loader, cls: Any, why: str) -> None:
    from evalgate.evaluate.modality import check_chat_images
    from evalgate.inputs.config import load_config
    from evalgate.suites.discovery import SUITES_DIR, load_suite

    _fake_vllm(monkeypatch, _model_loader(cls))
    got = worker.chat_image_input(object(), "org/vl-model", {}, _chat())
    assert got["places_images"] is None and got["placeholder"] is None
    assert got["why"].startswith(why), got["why"]
    assert loader.asked == []  # decided before any tokenizer is loaded
    cfg = load_config("vl/chat", check_engine_args=False)
    suite = load_suite("docpages", SUITES_DIR)
    with pytest.raises(ConfigError) as e:
        check_chat_images(cfg, {"chat_images": got}, [suite])
    assert e.value.exit_code == 2
    assert str(e.value).startswith(f"{cfg.path}: chat.template: {cfg.model}'s own chat template cannot be shown to "
                                   f"place an image ({got['why']}), but suite docpages is an image suite")


# ------------------------------------------------------------------------------------------------ images_per_prompt

def test_images_per_prompt_asks_a_processor_that_states_its_allowed_limits() -> None:
    # vLLM's allowed_mm_limits already combines the processor's bound with the engine args': it wins over the arg
    info = types.SimpleNamespace(supported_mm_limits={"image": None}, allowed_mm_limits={"image": 3})
    assert worker.images_per_prompt(info, 5) == (3, "engine_args.limit_mm_per_prompt")
    # the processor's own bound is below the engine args': the model decides
    info = types.SimpleNamespace(supported_mm_limits={"image": 2}, allowed_mm_limits={"image": 2})
    assert worker.images_per_prompt(info, 999) == (2, "model")
    # allowed_mm_limits without an image entry (or not a mapping): the engine args' limit, as without it
    info = types.SimpleNamespace(supported_mm_limits={"image": None}, allowed_mm_limits={"video": 1})
    assert worker.images_per_prompt(info, 4) == (4, "engine_args.limit_mm_per_prompt")


# ------------------------------------------------------------------------------------------------ procs.exit_error

def test_exit_error_reads_a_chat_template_refusal_as_a_config_error_on_chat_template(tmp_path: Path) -> None:
    from evalgate.evaluate.procs import exit_error

    cfg = types.SimpleNamespace(path=tmp_path / "vl.yaml", name="vl")
    log = tmp_path / "worker.log"
    reason = "the chat template of org/drops loses a message's text"
    log.write_text(f"INFO loading\n{CONFIG_ERROR_TAG} chat.template: {reason}\n", encoding="utf-8")
    err = exit_error(CONFIG_ERROR_EXIT, cfg, log)
    assert isinstance(err, ConfigError) and err.exit_code == 2
    assert str(err) == f"{cfg.path}: chat.template: {reason}"
    # an engine-arg refusal keeps its own field; any other exit is an engine failure (exit 3)
    log.write_text(f"{CONFIG_ERROR_TAG} ValueError: dtype 'fp7' is not supported\n", encoding="utf-8")
    assert str(exit_error(CONFIG_ERROR_EXIT, cfg, log)) == (
        f"{cfg.path}: engine_args: vLLM rejected a value: ValueError: dtype 'fp7' is not supported")
    other = exit_error(1, cfg, log)
    assert isinstance(other, EngineError) and other.exit_code == 3


# ------------------------------------------------------------------------------------------------ reported form

def test_the_worker_reports_the_form_it_resolved_for_a_hub_template_only() -> None:
    lm = types.SimpleNamespace(content="parts")
    assert worker.resolved_content(_chat(content="parts"), types.SimpleNamespace(content=None)) == {"content": "parts"}
    assert worker.resolved_content(_chat(), lm) == {"content": "parts"}  # decided by the adapter on first use
    assert worker.resolved_content(_chat(), types.SimpleNamespace(content=None)) == {"content": None}
    # a file or local template (decided by the parent, in the key) and completion prompts: nothing added
    assert worker.resolved_content(_chat(template=STRINGS, content="string"), lm) == {}
    assert worker.resolved_content({"chat": False, "template": None, "think_end": "</think>"}, lm) == {}
    assert worker.resolved_content(None, lm) == {}
