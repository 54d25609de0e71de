"""Chat protocol and reasoning output: a config's ``chat:`` section, the protocol it makes, and the split of a
generation into its thought and its answer.

A config without ``chat:`` (or with ``chat.template: none``) sends raw completion prompts. With a template, every
prompt is rendered by lm-eval's chat path (``simple_evaluate(apply_chat_template=True, system_instruction=...,
fewshot_as_multiturn=...)``), which calls the adapter's ``apply_chat_template`` (``engine.lm_adapter``): the
engine's tokenizer's own ``apply_chat_template`` with the template and ``template_kwargs``. The protocol
(:func:`protocol`) is part of every store key, recorded in each manifest side, and two sides or two runs with
different protocols are never gated against each other (chat and completion prompts of one task score differently).

Reasoning: with ``think_end`` set, lm-eval's own ``postprocess_generated_text`` (lm_eval.models.utils, lm-eval
0.4.13: the text up to and including the *last* ``think_end`` is dropped, then the task's stop strings cut the
answer) gives the answer that is scored; :func:`split_thought` keeps the thought and says whether it was
truncated (opened but never closed: the token budget ran out, and the answer is scored as empty).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from evalgate.errors import ConfigError
from evalgate.inputs.schema import Schema, problem, rule

__all__ = ["COMPLETION", "Chat", "ChatSpec", "Thought", "check_jinja", "check_model_template", "check_protocols",
           "describe_difference", "local_model_dir", "model_template", "protocol", "resolve_chat", "split_thought",
           "think_start"]

COMPLETION = "none"  # chat.template for raw completion prompts (the default)
MODEL = "model"  # chat.template for the tokenizer's own template


def _mapping(value: Any) -> Any:
    if value is not None and not isinstance(value, dict):
        raise problem("must be a mapping of template variables, e.g. {enable_thinking: false}")
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str) or not k.isidentifier():
                raise problem("template variable names are identifiers like 'enable_thinking'", key=str(k))
    return value


class Chat(Schema):
    """``chat``: how prompts are sent: raw completion text (the default) or rendered by a chat template."""

    template: Annotated[str, Field(strict=True, pattern=r"\S"),
                        rule("must be 'model', 'none' or a template file path")] = COMPLETION
    """`none`: completion prompts; `model`: the tokenizer's own chat template; else a Jinja template file, relative
    to the config file that sets it."""
    system: Annotated[str, Field(strict=True), rule("must be a string")] | None = None
    """A system prompt (lm-eval's `system_instruction`); needs a chat template."""
    template_kwargs: Annotated[dict[str, Any], BeforeValidator(_mapping)] = Field(default_factory=dict)
    """Variables passed to the chat template, e.g. `{enable_thinking: false}`; needs a chat template."""
    fewshot_as_multiturn: Annotated[bool, Field(strict=True), rule("must be true or false")] = False
    """Few-shot examples as alternating user/assistant turns (lm-eval's `fewshot_as_multiturn`); needs a chat
    template."""
    think_end: Annotated[str, Field(strict=True), rule("must be a string such as '</think>'")] | None = None
    """End-of-thinking marker, e.g. `</think>`: the text up to and including its last occurrence is the thought,
    stripped before scoring and counted (thinking tokens vs answer tokens); an opened thought without it is
    `truncated_thought`, scored as an empty answer."""


class ChatSpec:
    """A config's resolved ``chat`` section: :class:`Chat` plus the template file's path and text.

    Attributes:
        chat: the validated section.
        template_path: the template file (absolute), or None for ``model`` / ``none``.
        template_text: the file's text, or None.
    """

    def __init__(self, chat: Chat, template_path: Path | None = None, template_text: str | None = None) -> None:
        self.chat, self.template_path, self.template_text = chat, template_path, template_text

    @property
    def is_chat(self) -> bool:
        """True unless the prompts are raw completion text."""
        return self.chat.template != COMPLETION

    def worker_spec(self, model_template: str | None = None) -> dict[str, Any] | None:
        """What the engine worker needs (JSON): None for completion without ``think_end``."""
        if not self.is_chat and self.chat.think_end is None:
            return None
        return {"chat": self.is_chat, "template": self.template_text if self.template_text is not None
                else model_template, "system": self.chat.system, "template_kwargs": self.chat.template_kwargs,
                "fewshot_as_multiturn": self.chat.fewshot_as_multiturn, "think_end": self.chat.think_end}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatSpec) and (self.chat, self.template_text) == (other.chat, other.template_text)

    def __hash__(self) -> int:
        return hash(self.template_text)


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def resolve_chat(data: Any, path: Path, origin: Path | None) -> ChatSpec:
    """The merged ``chat`` mapping of a config, validated; a template file read and parsed as Jinja.

    Args:
        data: the merged ``chat`` mapping (keys of :class:`Chat`).
        path: the config file named for a problem of the merged values.
        origin: the file that set ``chat.template`` (a relative template path is resolved next to it).
    Raises:
        ConfigError (exit 2): an unknown key, a wrong type, a template file that is missing or not valid Jinja,
            ``system`` / ``template_kwargs`` / ``fewshot_as_multiturn`` without a template, an empty ``think_end``.
    """
    from evalgate.inputs.schema import validate

    chat = validate(Chat, data, path, prefix="chat.")
    if chat.think_end is not None and not chat.think_end.strip():
        raise ConfigError("must be a non-empty end-of-thinking marker such as '</think>' (the tokenizer cannot "
                          "encode an empty string as text)", path=path, field="chat.think_end")
    if chat.template == COMPLETION:
        for key, off in (("system", None), ("template_kwargs", {}), ("fewshot_as_multiturn", False)):
            if getattr(chat, key) != off:
                raise ConfigError("needs a chat template (chat.template: model or a file); completion prompts "
                                  "have no roles", path=path, field=f"chat.{key}")
        return ChatSpec(chat)
    if chat.template == MODEL:
        return ChatSpec(chat)
    file = Path(chat.template).expanduser()
    if not file.is_absolute():
        file = (origin or path).parent / file
    where = origin or path
    if not file.is_file():
        raise ConfigError(f"template file not found: {file}", path=where, field="chat.template")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"template file {file} cannot be read as UTF-8 text ({type(exc).__name__})",
                          path=where, field="chat.template") from None
    check_jinja(text, file, where)
    return ChatSpec(chat, file.resolve(), text)


def check_jinja(text: str, file: Path, config: Path | None) -> None:
    """Parse ``text`` as transformers parses a chat template (a sandboxed Jinja environment with the
    ``loopcontrols`` extension).

    Raises:
        ConfigError: a Jinja syntax error, with its line, naming the template file.
    """
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except TemplateSyntaxError as exc:
        raise ConfigError(f"template {file} is not valid Jinja: line {exc.lineno}: {exc.message}", path=config,
                          field="chat.template") from None


def model_template(model_path: str) -> str | None:
    """The chat template a local checkpoint's tokenizer carries (``chat_template.jinja``, ``chat_template.json`` or
    ``tokenizer_config.json``'s ``chat_template``, as transformers reads them), None when it has none; a hub name
    (not a local directory) also gives None."""
    d = Path(model_path)
    if not d.is_dir():
        return None
    if (d / "chat_template.jinja").is_file():
        return (d / "chat_template.jinja").read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        f = d / name
        if f.is_file():
            try:
                value = json.loads(f.read_text(encoding="utf-8")).get("chat_template")
            except (ValueError, OSError, AttributeError):
                continue
            if isinstance(value, list):  # named templates: transformers uses "default"
                value = next((t.get("template") for t in value if isinstance(t, dict) and t.get("name") == "default"),
                             None)
            if isinstance(value, str) and value.strip():
                return value
    return None


def check_model_template(spec: ChatSpec, model_path: str | None, config: Path) -> str | None:
    """The tokenizer's own template when ``chat.template: model``; None otherwise.

    ``model_path``: a local checkpoint directory, or None / a hub name (not checkable here: the worker refuses a
    tokenizer without a template before any item runs).
    Raises:
        ConfigError (exit 2): ``chat.template: model`` on a local checkpoint whose tokenizer has no chat template.
    """
    if spec.chat.template != MODEL or model_path is None or not Path(model_path).is_dir():
        return None
    text = model_template(model_path)
    if text is None:
        raise ConfigError(f"the model's tokenizer ({model_path}) has no chat template; give a template file "
                          f"(chat.template: path/to/template.jinja)", path=config, field="chat.template")
    return text


def protocol(spec: ChatSpec, model_template_text: str | None = None) -> dict[str, Any]:
    """How prompts were sent, as recorded in the manifest and hashed into store keys.

    Returns:
        ``{"mode": "completion"}`` (plus ``think_end`` when set), or ``{"mode": "chat", "template": "model" | "file",
        "template_sha256": sha256 of the template text (None for a hub model's own template, unknown here),
        "template_kwargs": {...}, "system_sha256": sha256 of the system prompt or None, "fewshot_as_multiturn":
        bool, "think_end": str or None}``.
    """
    chat = spec.chat
    if not spec.is_chat:
        out: dict[str, Any] = {"mode": "completion"}
        if chat.think_end is not None:
            out["think_end"] = chat.think_end
        return out
    text = spec.template_text if spec.template_text is not None else model_template_text
    return {"mode": "chat", "template": "file" if spec.template_text is not None else MODEL,
            "template_sha256": _sha256(text), "template_kwargs": dict(chat.template_kwargs),
            "system_sha256": _sha256(chat.system), "fewshot_as_multiturn": chat.fewshot_as_multiturn,
            "think_end": chat.think_end}


def describe_difference(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str | None:
    """``None`` when protocols ``a`` and ``b`` are equal, else ``"<key>: <a> vs <b>"`` for each differing key (a
    missing protocol reads as completion: a run made before evalgate recorded one)."""
    a, b = a or {"mode": "completion"}, b or {"mode": "completion"}
    if a == b:
        return None
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]

    def show(v: Any) -> str:
        return (v[:12] if isinstance(v, str) and len(v) == 64 else json.dumps(v, sort_keys=True))

    return "; ".join(f"{k}: {show(a.get(k))} vs {show(b.get(k))}" for k in keys)


def think_start(think_end: str) -> str | None:
    """The opening marker that matches ``think_end`` (``</think>`` -> ``<think>``), None when it has no ``</``."""
    return think_end.replace("</", "<", 1) if think_end.startswith("</") else None


class Thought:
    """One generation split at its end-of-thinking marker.

    Attributes:
        thought: the text up to and including the last ``think_end`` (the whole output when truncated), or None
            when the output has no thought.
        answer: the text lm-eval scores (after the last ``think_end`` and the task's stop strings; "" when truncated).
        truncated: the thought was opened (``<think>`` in the output, or ending the prompt) but never closed.
    """

    def __init__(self, thought: str | None, answer: str, truncated: bool) -> None:
        self.thought, self.answer, self.truncated = thought, answer, truncated


def split_thought(prompt: str, output: str, think_end: str, stop: list[str]) -> Thought:
    """Split ``output`` (the raw generation for ``prompt``) at the last ``think_end``.

    The answer is lm-eval's ``postprocess_generated_text(output, stop, think_end)`` (lm_eval.models.utils: the text
    after the last ``think_end``, left-stripped, cut at the first stop string). Without ``think_end`` in the output,
    the thought is truncated when it was opened -- :func:`think_start` in the output, or the prompt (a template that
    opens the thought for the model) ending with it after whitespace -- and the answer is then empty; otherwise
    there is no thought and the answer is the output cut at the stop strings.
    """
    from lm_eval.models.utils import postprocess_generated_text

    if think_end in output:
        cut = output.rfind(think_end) + len(think_end)
        return Thought(output[:cut], postprocess_generated_text(output, stop, think_end), False)
    start = think_start(think_end)
    if start is not None and (start in output or prompt.rstrip().endswith(start)):
        return Thought(output, "", True)
    return Thought(None, postprocess_generated_text(output, stop, None), False)


def local_model_dir(model: str) -> str | None:
    """The local checkpoint directory a config's ``model`` names, without preparing anything: the packaged hybrid,
    an embedded model already converted, or a local path; None for a hub name or an embedded model not yet prepared
    (the worker then checks the tokenizer)."""
    from evalgate.models import embedded as models

    if model == models.HYBRID_MODEL:
        from evalgate.models.hybrid import CHECKPOINT_DIR

        return str(CHECKPOINT_DIR)
    try:  # a broken home or path is not this check's to report (check_home and the model check say it)
        if model == models.EMBEDDED_MODEL:
            d = models.embedded_model_dir()
            return str(d) if models.is_prepared(d) else None
        if model.startswith("embedded:"):
            return None
        return model if Path(model).expanduser().is_dir() else None
    except (OSError, ValueError):
        return None


def check_protocols(base: Any, cand: Any) -> dict[str, dict[str, Any]]:
    """Both sides' protocols, checked before any engine starts.

    Args:
        base, cand: the baseline's and the candidate's ``config.EngineConfig``.
    Returns:
        ``{"baseline": protocol, "candidate": protocol}`` (:func:`protocol`).
    Raises:
        ConfigError (exit 2): ``chat.template: model`` on a local tokenizer without a chat template; the two sides
            use different protocols (naming each differing key), which evalgate never gates against each other.
    """
    out = {}
    for role, cfg in (("baseline", base), ("candidate", cand)):
        own = cfg.chat.chat.template == MODEL  # only then is the model's tokenizer read
        out[role] = protocol(cfg.chat, check_model_template(cfg.chat, local_model_dir(cfg.model) if own else None,
                                                            cfg.path))
    diff = describe_difference(out["baseline"], out["candidate"])
    if diff:
        raise ConfigError(f"the baseline ({base.name}) and the candidate send prompts differently ({diff}): chat "
                          f"and completion prompts of one task score differently, so they are never gated against "
                          f"each other; give both the same chat section", path=cand.path, field="chat")
    return out
