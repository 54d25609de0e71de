"""A chat section checked against its template and the model's tokenizer before any engine starts (issue 26 item 6):
template kwargs the template never reads, a system prompt the template refuses or drops, an end-of-thinking marker
the tokenizer cannot give back. Each is exit 2 naming the config file and the field. Tiny templates and tokenizers
are written here; the embedded hybrid's packaged tokenizer is the local model with no chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.chat import check_protocols, template_variables
from evalgate.inputs.config import load_baseline, load_config

ROOT = Path(__file__).resolve().parents[2]
HYBRID = "embedded:nemotron-h-tiny"
PLAIN = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}Assistant:"
THINKING = ("{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
            "{% if enable_thinking is defined and enable_thinking %}<think>{% endif %}")
REFUSES_SYSTEM = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                  "{% endif %}{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
DROPS_SYSTEM = "{% for m in messages %}{% if m['role'] == 'user' %}User: {{ m['content'] }}\n{% endif %}{% endfor %}"


def _check(tmp_path: Path, template: str, chat: str, model: str = HYBRID) -> None:
    """Write ``template`` and a baseline/candidate pair sharing ``chat`` (a YAML flow mapping), then check them."""
    (tmp_path / "t.jinja").write_text(template, encoding="utf-8")
    (tmp_path / "base.yaml").write_text(f"model: {model}\nchat: {chat}\n", encoding="utf-8")
    (tmp_path / "c.yaml").write_text("extends: base\n", encoding="utf-8")
    cand = load_config(tmp_path / "c.yaml", check_engine_args=False)
    check_protocols(load_baseline(cand, check_engine_args=False), cand)


def _refused(tmp_path: Path, template: str, chat: str, model: str = HYBRID) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        _check(tmp_path, template, chat, model)
    assert e.value.exit_code == ExitCode.USAGE and "\n" not in str(e.value)
    assert str(e.value).startswith(str(tmp_path / "base.yaml"))  # the baseline is checked first
    return e.value


def test_template_variables_are_the_names_the_template_reads_from_its_context() -> None:
    assert template_variables(THINKING) == {"messages", "enable_thinking"}
    # a variable the template sets itself, and a loop variable, are not read from the context
    assert template_variables("{% set x = 1 %}{% for m in messages %}{{ x }}{{ m }}{% endfor %}") == {"messages"}
    shipped = (ROOT / "configs" / "chat" / "hybrid-chat.jinja").read_text()
    assert template_variables(shipped) == {"messages", "add_generation_prompt", "enable_thinking"}


def test_a_kwarg_the_template_reads_passes(tmp_path: Path) -> None:
    _check(tmp_path, THINKING, "{template: t.jinja, template_kwargs: {enable_thinking: true}}")


def test_a_kwarg_the_template_never_reads_is_refused_naming_it_and_the_ones_it_reads(tmp_path: Path) -> None:
    err = _refused(tmp_path, THINKING, "{template: t.jinja, template_kwargs: {enable_thinkng: true}}")
    assert err.field == "chat.template_kwargs.enable_thinkng"
    assert "never reads 'enable_thinkng'; it reads: enable_thinking, messages" in err.message


def test_a_system_prompt_the_template_renders_passes(tmp_path: Path) -> None:
    _check(tmp_path, PLAIN, "{template: t.jinja, system: Answer briefly.}")


def test_a_system_prompt_on_a_template_that_refuses_one_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, REFUSES_SYSTEM, "{template: t.jinja, system: Answer briefly.}")
    assert err.field == "chat.system"
    assert "refuses a system message (TemplateError: System role not supported)" in err.message


def test_a_system_prompt_on_a_template_that_drops_it_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, DROPS_SYSTEM, "{template: t.jinja, system: Answer briefly.}")
    assert err.field == "chat.system" and "drops the system message" in err.message


def test_a_template_that_does_not_compile_or_cannot_render_one_user_message_is_refused(tmp_path: Path) -> None:
    err = _refused(tmp_path, "{{ messages[0]['content'] | no_such_filter }}", "{template: t.jinja}")
    assert err.field == "chat.template" and "does not compile: TemplateAssertionError: No filter named" in err.message
    err = _refused(tmp_path, "{{ messages[0]['content'] + 1 }}", "{template: t.jinja}")
    assert err.field == "chat.template" and "fails to render one user message: TypeError" in err.message


def test_the_environments_globals_are_not_template_variables() -> None:
    assert template_variables(REFUSES_SYSTEM) == {"messages"}  # raise_exception is transformers' global


def test_the_hybrids_think_end_round_trips_through_its_byte_level_bpe(tmp_path: Path) -> None:
    # </think> is several ordinary tokens in the hybrid's 2,048-entry BPE: present (it decodes back)
    from transformers import AutoTokenizer

    from evalgate.inputs.chat import local_model_dir

    tok = AutoTokenizer.from_pretrained(local_model_dir(HYBRID))
    assert len(tok.encode("</think>", add_special_tokens=False)) > 1
    _check(tmp_path, THINKING, "{template: t.jinja, think_end: '</think>'}")


def _word_tokenizer(d: Path, special: list[str]) -> Path:
    """A word-level tokenizer (``<unk>`` for anything outside its vocabulary) saved as a local checkpoint's
    tokenizer, with ``special`` added as special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "the": 3, "answer": 4}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.add_special_tokens({"additional_special_tokens": special})
    d.mkdir()
    tok.save_pretrained(str(d))
    return d


def test_a_think_end_the_tokenizer_cannot_spell_is_refused(tmp_path: Path) -> None:
    model = _word_tokenizer(tmp_path / "m", [])
    err = _refused(tmp_path, THINKING, "{template: t.jinja, think_end: '</think>'}", model=str(model))
    assert err.field == "chat.think_end"
    assert "'</think>' is absent from the tokenizer" in err.message and "encodes it as [0] and decodes that as ''" in err.message  # [<unk>]; vLLM drops <unk> as special


def test_a_think_end_that_is_a_special_token_is_refused_as_dropped_from_output(tmp_path: Path) -> None:
    model = _word_tokenizer(tmp_path / "m", ["</think>"])
    err = _refused(tmp_path, THINKING, "{template: t.jinja, think_end: '</think>'}", model=str(model))
    assert err.field == "chat.think_end" and "it is a special token" in err.message


def test_a_think_end_that_is_an_ordinary_added_token_passes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    model = _word_tokenizer(tmp_path / "m", [])
    tok = AutoTokenizer.from_pretrained(str(model))
    tok.add_tokens(["</think>"])  # as Qwen3 carries it: an added token, not special, kept in decoded text
    tok.save_pretrained(str(model))
    _check(tmp_path, THINKING, "{template: t.jinja, think_end: '</think>'}", model=str(model))


def test_the_shipped_chat_configs_pass_the_checks() -> None:
    cand = load_config("chat/fp16-state", check_engine_args=False)
    protos = check_protocols(load_baseline(cand, check_engine_args=False), cand)
    assert protos["candidate"]["think_end"] == "</think>"
