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

Images: in an image suite (a task sets lm-eval's ``doc_to_image``) each message goes to the template as content
parts, as lm-eval's ``vllm-vlm`` model sends it (:func:`image_content`): the prompt's ``<image>`` placeholders become
``{"type": "image"}`` parts between its text parts, and the model's own template writes its image token where it puts
an image (Idefics3: ``<image>``; Qwen2-VL: ``<|vision_start|><|image_pad|><|vision_end|>``), which vLLM's processor
then expands for the item's ``multi_modal_data``. A template that has no place for an image part
(:func:`image_placement_problem`) is refused before any engine starts (``evaluate.modality``). The switch is per task:
a text task of an image suite keeps the config's text form.

Text messages: many VL templates (Idefics3's among them) read ``message['content']`` only as a list of parts; given a
plain string they render an empty turn (or iterate its characters), and every item would be scored on a prompt
without its question. So each config's template is probed once (:func:`content_form`): a message whose content is a
probe text, rendered as a plain string and as ``[{"type": "text", "text": probe}]``. A template that keeps the string
gets plain strings (the prompts and store keys of such configs are what they were); one that keeps only the parts
form gets every message as content parts (:func:`text_content`; text suites too, as lm-eval's ``vllm-vlm`` always
sends them), recorded in the protocol as ``content: parts``; one that keeps neither is exit 2 on ``chat.template``
(:func:`check_content`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from evalgate.errors import ConfigError
from evalgate.inputs.schema import Schema, problem, rule, validate
from evalgate.models import embedded as models
from evalgate.models import hybrid

__all__ = ["COMPLETION", "IMAGE_PLACEHOLDER", "PARTS", "STRING", "Chat", "ChatSpec", "Thought", "check_content",
           "check_jinja", "check_model_template", "check_protocol", "check_protocols", "check_same_protocol",
           "check_template_inputs", "check_think_end", "content_form", "describe_difference", "image_content",
           "image_placement_problem", "local_model_dir", "message_form", "model_template", "protocol",
           "resolve_chat", "split_thought", "template_messages", "template_variables", "text_content", "think_start"]

COMPLETION = "none"  # chat.template for raw completion prompts (the default)
MODEL = "model"  # chat.template for the tokenizer's own template
# Where an image goes in a task's prompt: lm-eval's ``DEFAULT_IMAGE_PLACEHOLDER`` (lm_eval/models/vllm_vlms.py).
IMAGE_PLACEHOLDER = "<image>"
# How a config's text messages reach its chat template (content_form): plain strings, or a list of content parts.
STRING, PARTS = "string", "parts"


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
    """A system prompt (lm-eval's `system_instruction`); needs a chat template that renders it (one that refuses or
    drops a system message is exit 2)."""
    template_kwargs: Annotated[dict[str, Any], BeforeValidator(_mapping)] = Field(default_factory=dict)
    """Variables passed to the chat template, e.g. `{enable_thinking: false}`; needs a chat template, and each must be
    a variable the template reads (else exit 2, listing the ones it reads)."""
    fewshot_as_multiturn: Annotated[bool, Field(strict=True), rule("must be true or false")] = False
    """Few-shot examples as alternating user/assistant turns (lm-eval's `fewshot_as_multiturn`); needs a chat
    template."""
    think_end: Annotated[str, Field(strict=True), rule("must be a string such as '</think>'")] | None = None
    """End-of-thinking marker, e.g. `</think>`: the text up to and including its last occurrence is the thought,
    stripped before scoring and counted (thinking tokens vs answer tokens); an opened thought without it is
    `truncated_thought`, scored as an empty answer. Must come back from the model's tokenizer (encode, then decode
    skipping special tokens), else exit 2."""


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
        """What the engine worker needs (JSON): None for completion without ``think_end``.

        Args:
            model_template: the model tokenizer's own template text when ``chat.template: model`` and it is
                readable here (a local checkpoint), else None.
        Returns:
            ``{"chat", "template", "system", "template_kwargs", "fewshot_as_multiturn", "think_end", "content"}``:
            ``content`` is :func:`content_form` of the template (``"string"`` / ``"parts"``), None when the template
            is not known here (a hub model's own: the worker decides before its engine starts) or keeps neither
            form (refused by :func:`check_content` before any worker starts).
        """
        if not self.is_chat and self.chat.think_end is None:
            return None
        text = self.template_text if self.template_text is not None else model_template
        content = content_form(text, self.chat.template_kwargs) if self.is_chat and text is not None else None
        return {"chat": self.is_chat, "template": text, "system": self.chat.system,
                "template_kwargs": self.chat.template_kwargs, "fewshot_as_multiturn": self.chat.fewshot_as_multiturn,
                "think_end": self.chat.think_end, "content": content}

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
        bool, "think_end": str or None}``, plus ``"content": "parts"`` when the template renders a plain-string
        message without its text but a content-parts one with it (:func:`content_form`: every message then goes as
        content parts, which changes every rendered prompt). A template that keeps plain strings has no ``content``
        key (absent reads as ``"string"``), so such configs' protocols and store keys are what they were before
        evalgate probed it.
    """
    chat = spec.chat
    if not spec.is_chat:
        out: dict[str, Any] = {"mode": "completion"}
        if chat.think_end is not None:
            out["think_end"] = chat.think_end
        return out
    text = spec.template_text if spec.template_text is not None else model_template_text
    out = {"mode": "chat", "template": "file" if spec.template_text is not None else MODEL,
           "template_sha256": _sha256(text), "template_kwargs": dict(chat.template_kwargs),
           "system_sha256": _sha256(chat.system), "fewshot_as_multiturn": chat.fewshot_as_multiturn,
           "think_end": chat.think_end}
    if text is not None and content_form(text, chat.template_kwargs) == PARTS:
        out["content"] = PARTS
    return out


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
    if model == models.HYBRID_MODEL:
        return str(hybrid.CHECKPOINT_DIR)
    if model == models.HYBRID_CHAT_MODEL:
        return str(hybrid.CHAT_CHECKPOINT_DIR)
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
        ConfigError (exit 2): ``chat.template: model`` on a local tokenizer without a chat template; a chat section
            the template or tokenizer cannot honour (:func:`check_template_inputs`, :func:`check_think_end`); the
            two sides use different protocols (naming each differing key), which evalgate never gates against each other.
    """
    out = {"baseline": check_protocol(base), "candidate": check_protocol(cand)}
    check_same_protocol(base.name, out["baseline"], out["candidate"], cand.path)
    return out


def check_protocol(cfg: Any) -> dict[str, Any]:
    """One config's protocol, its chat section checked against what it will meet before any engine starts: the
    side-by-side part of :func:`check_protocols` (``evalgate plan`` runs it on a config without a baseline).

    Args:
        cfg: a ``config.EngineConfig``.
    Returns:
        :func:`protocol` of its chat section (with the local tokenizer's own template when ``chat.template: model``).
    Raises:
        ConfigError (exit 2): ``chat.template: model`` on a local tokenizer without a chat template; a chat section
            the template or tokenizer cannot honour (:func:`check_template_inputs`, :func:`check_think_end`).
    """
    spec = cfg.chat
    # the model's tokenizer is read only for its own template or for think_end
    model_dir = local_model_dir(cfg.model) if spec.chat.template == MODEL or spec.chat.think_end else None
    own = check_model_template(spec, model_dir, cfg.path)
    check_template_inputs(spec, spec.template_text if spec.template_text is not None else own, cfg.path)
    check_think_end(spec, model_dir, cfg.path)
    return protocol(spec, own)


def check_same_protocol(baseline: str, base: dict[str, Any] | None, cand: dict[str, Any] | None, config: Path,
                        *, resolved: bool = False) -> None:
    """Refuse to gate two sides whose prompts are sent differently.

    Args:
        baseline: the baseline config's name. base, cand: the two sides' protocols (:func:`protocol`).
        config: the candidate's config file, named in the error.
        resolved: the protocols are the ones the engine workers recorded (``runner.ConfigRun.protocol``), after each
            resolved how a hub model's own template takes its messages (``content``): a difference is only known
            once both sides ran (their results stay in the store under the models' own templates; the suggested fix,
            a template file, puts its ``template_sha256`` in every store key, so that rerun computes both sides
            again).
    Raises:
        ConfigError (exit 2): naming each differing key (:func:`describe_difference`), on field ``chat`` (before any
            engine: the chat sections differ), or ``chat.template`` with ``resolved`` (the models' own templates).
    """
    diff = describe_difference(base, cand)
    if not diff:
        return
    if resolved:
        raise ConfigError(f"the baseline ({baseline}) and the candidate send prompts differently ({diff}): their "
                          f"models' own chat templates take a message's text in different forms (chat.template: "
                          f"model, read by each engine worker), so their prompts differ and are never gated against "
                          f"each other (evalgate compare refuses the same pair); give both the same template file "
                          f"(chat.template: path/to/template.jinja; that changes every store key, so both sides are computed again)",
                          path=config, field="chat.template")
    raise ConfigError(f"the baseline ({baseline}) and the candidate send prompts differently ({diff}): chat "
                      f"and completion prompts of one task score differently, so they are never gated against "
                      f"each other; give both the same chat section", path=config, field="chat")


# ------------------------------------------------------------------------------------------------ item 6: bad input
# A chat section is checked against what it will meet (the template's text, the model's tokenizer) before any engine
# starts: a kwarg the template never reads, a system prompt it refuses or drops, an end-of-thinking marker the
# tokenizer cannot give back, each exit 2 naming the field. lm-eval would otherwise run on silently (it retries a
# template that raises on a system message without one; an unread kwarg changes nothing; a marker that never
# appears in decoded output makes every item a truncated thought).

_PROBE_USER = "What is 2 + 2?"


def _environment() -> Any:
    """transformers' own chat-template environment (its filters, ``raise_exception``, ``strftime_now``)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template("").environment


def template_variables(text: str) -> set[str]:
    """The variables a chat template reads from its context (``jinja2.meta.find_undeclared_variables`` on the
    source parsed in transformers' chat-template environment): e.g. ``{"messages", "add_generation_prompt",
    "enable_thinking"}``. Variables the template sets itself (``{% set %}``, loop variables) and the environment's
    globals (``raise_exception``, ``namespace``, ...) are not among them.

    Raises:
        jinja2.TemplateError: the template does not compile (e.g. an unknown filter).
    """
    from jinja2 import meta

    env = _environment()
    return set(meta.find_undeclared_variables(env.parse(text))) - set(env.globals)


def _where(spec: ChatSpec) -> str:
    return f"template {spec.template_path}" if spec.template_path is not None else "the model's chat template"


def _render(text: str, messages: list[dict[str, str]], kwargs: dict[str, Any]) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([messages], chat_template=text, add_generation_prompt=True, **kwargs)
    return str(rendered[0])


def check_template_inputs(spec: ChatSpec, template_text: str | None, config: Path) -> None:
    """Check ``template_kwargs`` and ``system`` against the chat template that will render them.

    Args:
        spec: the resolved chat section.
        template_text: the template (the file's text, or the local tokenizer's own), None when not readable here (a
            hub model's template: not checked before the engine starts).
        config: the config file named in an error.
    Raises:
        ConfigError (exit 2): ``chat.template_kwargs.<name>``: a variable the template never reads (listing the
            ones it reads); ``chat.system``: rendering with the system message raises (a template that refuses a
            system role) or the system text does not appear in the rendering (a template that drops it);
            ``chat.template``: the template does not compile or fails to render one user message, or renders a
            message's text neither from a plain string nor from content parts (:func:`check_content`).
    The system message is rendered in the form the config's messages take (:func:`content_form`). Rendering is transformers' own ``render_jinja_template`` (the code ``apply_chat_template`` runs, with its
    ``raise_exception``), with ``add_generation_prompt=True`` and the kwargs, without the tokenizer's special
    tokens (an undefined ``bos_token`` renders empty).
    """
    if not spec.is_chat or template_text is None:
        return
    try:
        reads = template_variables(template_text)
    except Exception as exc:  # a template is user code: any error it raises is this input's fault
        raise ConfigError(f"{_where(spec)} does not compile: {type(exc).__name__}: {_one_line(exc)}", path=config,
                          field="chat.template") from None
    for name in spec.chat.template_kwargs:
        if name not in reads:
            raise ConfigError(f"{_where(spec)} never reads '{name}'; it reads: {', '.join(sorted(reads)) or 'nothing'}",
                              path=config, field=f"chat.template_kwargs.{name}")
    kwargs = dict(spec.chat.template_kwargs)
    user = {"role": "user", "content": _PROBE_USER}
    form = content_form(template_text, kwargs)
    if form is None:  # say why: the template raises on a plain-string message, or loses its text either way
        try:
            _render(template_text, [user], kwargs)
        except Exception as exc:  # a template is user code: any error it raises is this input's fault
            raise ConfigError(f"{_where(spec)} fails to render one user message: {type(exc).__name__}: "
                              f"{_one_line(exc)}", path=config, field="chat.template") from None
        check_content(spec, template_text, config)
    system = spec.chat.system
    if system is None:
        return
    messages = [{"role": "system", "content": system}, user]
    try:
        rendered = _render(template_text, text_content(messages) if form == PARTS else messages, kwargs)
    except Exception as exc:
        raise ConfigError(f"{_where(spec)} refuses a system message ({type(exc).__name__}: {_one_line(exc)}); "
                          f"lm-eval would silently retry without it: remove chat.system or use a template that "
                          f"takes one", path=config, field="chat.system") from None
    if system.strip() and system.strip() not in rendered:
        raise ConfigError(f"{_where(spec)} drops the system message (its text does not appear in the rendered "
                          f"prompt): remove chat.system or use a template that renders it", path=config,
                          field="chat.system")


# A distinctive text no template writes of its own: found in the rendering only when the message's text got there.
_PROBE_CONTENT = "evalgate-probe-4c1f: what is 17 + 25?"


def text_content(chat_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``chat_history`` with every plain-string content as one text part, ``[{"type": "text", "text": content}]``
    (none when the text is empty, as :func:`image_content` makes it), not split at any image placeholder: a text
    task's ``<image>`` is text.

    Args:
        chat_history: lm-eval's messages (not modified); a content that is already a list of parts is kept.
    Returns:
        A new list of messages (other keys kept), e.g. ``[{"role": "user", "content": "Q?"}]`` ->
        ``[{"role": "user", "content": [{"type": "text", "text": "Q?"}]}]``.
    """
    out = []
    for message in chat_history:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        out.append({**message, "content": content})
    return out


def content_form(template_text: str, template_kwargs: dict[str, Any] | None = None) -> str | None:
    """How a chat template must be given a text message for its text to reach the prompt.

    One user message whose content is a distinctive probe text is rendered (transformers' ``render_jinja_template``,
    ``add_generation_prompt=True``, the ``template_kwargs``) as a plain string, and as ``[{"type": "text", "text":
    probe}]``; a rendering that raises counts as losing the text. The answer is memoized per template text and
    kwargs, when JSON gives the kwargs back equal (else they are probed as given, every time) (the parent asks it for each side's protocol, store keys and worker spec; the worker again): each
    template is rendered once per process.

    Args:
        template_text: the chat template (Jinja source).
        template_kwargs: the config's ``chat.template_kwargs``.
    Returns:
        :data:`STRING` when the plain-string form keeps the text (text messages go as they are: today's prompts),
        :data:`PARTS` when only the content-parts form does (Idefics3's template: a string renders an empty turn),
        None when neither does.
    """
    kwargs = dict(template_kwargs or {})
    try:  # the probe is a pure function of the template and its kwargs: rendered once per process
        key = json.dumps(kwargs, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):  # a value JSON cannot spell exactly (a YAML date, a NaN): probed every time
        return _probe_form(template_text, kwargs)
    if json.loads(key) != kwargs:  # JSON spells it as other values (a tuple as a list, a key 1 as "1"): uncached,
        return _probe_form(template_text, kwargs)  # so the probe renders the very kwargs the prompts will get
    return _cached_form(template_text, key)


@functools.lru_cache(maxsize=64)
def _cached_form(template_text: str, kwargs_json: str) -> str | None:
    """:func:`_probe_form` memoized on the template and its kwargs as JSON (which gives back equal values: only
    JSON's own types get here)."""
    return _probe_form(template_text, json.loads(kwargs_json))


def _probe_form(template_text: str, kwargs: dict[str, Any]) -> str | None:
    """:func:`content_form`'s probe: the first form whose rendering keeps the probe text, None when neither does."""
    for form, content in ((STRING, _PROBE_CONTENT), (PARTS, [{"type": "text", "text": _PROBE_CONTENT}])):
        try:
            if _PROBE_CONTENT in _render(template_text, [{"role": "user", "content": content}], kwargs):
                return form
        except Exception:  # noqa: BLE001 - a template is user code: raising on this form is losing the text
            continue
    return None


def message_form(chat: dict[str, Any] | None, template_text: str) -> str:
    """How text messages go to ``template_text``, the template that will render them: the worker spec's resolved
    ``chat["content"]`` when set (the parent's decision, or the worker's for a hub model's own template), else
    :func:`content_form` of the template with ``chat["template_kwargs"]`` (a template given no ``chat`` section: the
    tokenizer's own, e.g. a recorded request under a completion config).

    Raises:
        ValueError: the template renders a message's text neither from a plain string nor from content parts.
    """
    form = (chat or {}).get("content")
    if form is None:
        form = content_form(template_text, (chat or {}).get("template_kwargs"))
    if form is None:
        raise ValueError("the chat template renders a message's text neither from a plain string nor from content "
                         "parts")
    return str(form)


def template_messages(chat_history: list[dict[str, Any]], form: str, *, images: bool = False,
                      placeholder: str = IMAGE_PLACEHOLDER) -> list[dict[str, Any]]:
    """What a chat template receives for ``chat_history``: the one step every renderer of messages takes (lm-eval's
    chat path, ``worker.lm_adapter``; a recorded request, ``worker.replay.render``).

    Args:
        chat_history: the messages (not modified).
        form: :func:`message_form` of the template (``"string"`` / ``"parts"``).
        images: an image task's messages: content parts with each ``placeholder`` an image part
            (:func:`image_content`), whatever ``form`` is.
    Returns:
        :func:`image_content` with ``images``; else :func:`text_content` for :data:`PARTS`; else the messages as
        they are (plain strings; a content already a list of parts is kept either way).
    """
    if images:
        return image_content(chat_history, placeholder)
    if form == PARTS:
        return text_content(chat_history)
    return [dict(m) for m in chat_history]


def check_content(spec: ChatSpec, template_text: str | None, config: Path) -> str | None:
    """The form a config's text messages take (:func:`content_form`), refusing a template that loses them.

    Args:
        spec: the resolved chat section.
        template_text: the template (the file's text, or the local tokenizer's own), None when not readable here.
        config: the config file named in an error.
    Returns:
        ``"string"`` or ``"parts"``; None for completion prompts or a template not readable here (a hub model's
        own: the worker decides before its engine starts).
    Raises:
        ConfigError (exit 2): ``chat.template``: the template renders a user message's text neither from a plain
            string nor from a content-parts list (every prompt would lose its question).
    """
    if not spec.is_chat or template_text is None:
        return None
    form = content_form(template_text, spec.chat.template_kwargs)
    if form is None:
        raise ConfigError(f"{_where(spec)} loses a message's text: a user message's text is in the rendered prompt "
                          f"neither when its content is a plain string nor when it is content parts ([{{\"type\": "
                          f"\"text\", \"text\": ...}}]), so every item would be scored without its question; use a "
                          f"template that writes message['content'] (the string, or its text parts)", path=config,
                          field="chat.template")
    return form


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200]


def check_think_end(spec: ChatSpec, model_dir: str | None, config: Path) -> None:
    """Check that ``think_end`` can appear in the model's decoded output.

    "Absent from the tokenizer" means: ``decode(encode(think_end, add_special_tokens=False),
    skip_special_tokens=True)`` does not give ``think_end`` back. The thought is cut on the decoded text, and vLLM
    decodes output with ``skip_special_tokens=True`` by default: a marker the tokenizer cannot spell (an unknown
    character mapped to ``<unk>``) or one that is a special token (dropped from the text) would never be found, and
    every item would read as a truncated thought. A marker of several ordinary tokens is fine (the embedded
    hybrid's byte-level BPE spells ``</think>`` in five).

    Args:
        spec: the resolved chat section.
        model_dir: the local checkpoint directory, or None (a hub model, or an embedded model not prepared yet:
            not checked here).
        config: the config file named in an error.
    Raises:
        ConfigError (exit 2): field ``chat.think_end``, naming what the tokenizer gives back.
    """
    marker = spec.chat.think_end
    if marker is None or model_dir is None:
        return
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception:  # noqa: BLE001 - not this check's to report: the engine's tokenizer load says it
        return
    ids = tok.encode(marker, add_special_tokens=False)
    back = tok.decode(ids, skip_special_tokens=True)
    if back == marker:
        return
    special = marker in set(getattr(tok, "all_special_tokens", []) or [])
    why = ("it is a special token, dropped from decoded output (vLLM decodes with skip_special_tokens=True)"
           if special else f"the tokenizer encodes it as {ids} and decodes that as {back!r}")
    raise ConfigError(f"end-of-thinking marker {marker!r} is absent from the tokenizer of {model_dir}: {why}; the "
                      f"thought could never be found in the output", path=config, field="chat.think_end")


# ------------------------------------------------------------------------------------ images in chat prompts
_PROBE_IMAGE_TEXT = "What does this page say?"


def image_content(chat_history: list[dict[str, Any]], placeholder: str = IMAGE_PLACEHOLDER) -> list[dict[str, Any]]:
    """``chat_history`` with every message's content as content parts, the way lm-eval's ``vllm-vlm`` model builds
    them for the chat template (lm_eval/models/vllm_vlms.py ``VLLM_VLM.apply_chat_template``, ``interleave=True``,
    lm-eval 0.4.13): the text is split at each ``placeholder``; each non-empty piece becomes
    ``{"type": "text", "text": piece}`` and each placeholder ``{"type": "image"}``, in order.

    Args:
        chat_history: lm-eval's messages, ``[{"role": str, "content": str}, ...]`` (not modified). A content that is
            already a list of parts is kept as it is.
        placeholder: the image placeholder of the task's prompt text.
    Returns:
        A new list of ``{"role", "content": [parts]}`` messages (other keys kept). E.g. ``[{"role": "user",
        "content": "<image>Read it."}]`` -> ``[{"role": "user", "content": [{"type": "image"}, {"type": "text",
        "text": "Read it."}]}]``; a message without a placeholder gets one text part (none when its text is empty).
    """
    out = []
    for message in chat_history:
        content = message.get("content")
        if isinstance(content, str):
            pieces = content.split(placeholder)
            parts: list[dict[str, Any]] = []
            for i, piece in enumerate(pieces):
                if piece:
                    parts.append({"type": "text", "text": piece})
                if i < len(pieces) - 1:
                    parts.append({"type": "image"})
            content = parts
        out.append({**message, "content": content})
    return out


def image_placement_problem(template_text: str, placeholder: str | None,
                            template_kwargs: dict[str, Any] | None = None) -> str | None:
    """Why a chat template cannot place an image in a prompt, or None when it can.

    The probe is one user message as :func:`image_content` makes it, ``[{"type": "image"}, {"type": "text", ...}]``,
    rendered (transformers' ``render_jinja_template``, ``add_generation_prompt=True``, ``template_kwargs``) with and
    without its image part: the template places the image when the image part adds exactly one ``placeholder`` (the
    model's image placeholder as vLLM names it: the model class's ``get_placeholder_str("image", 1)``, e.g.
    ``<image>``), which vLLM's processor then expands for the image.

    Args:
        template_text: the chat template (Jinja source).
        placeholder: the model's image placeholder; None when vLLM names none (then it cannot be told: a problem).
        template_kwargs: the config's ``chat.template_kwargs``.
    Returns:
        None, or one line saying what the rendering showed (it raised, or the placeholder count it gave).
    """
    if not placeholder:
        return "vLLM names no image placeholder for this model, so where the template puts an image cannot be told"
    kwargs = dict(template_kwargs or {})
    text = {"type": "text", "text": _PROBE_IMAGE_TEXT}
    try:
        with_image = _render(template_text, [{"role": "user", "content": [{"type": "image"}, text]}], kwargs)
        without = _render(template_text, [{"role": "user", "content": [text]}], kwargs)
    except Exception as exc:  # a template is user code: any error it raises is this input's fault
        return (f"it fails to render a user message of content parts (an image and a text): "
                f"{type(exc).__name__}: {_one_line(exc)}")
    added = with_image.count(placeholder) - without.count(placeholder)
    if added == 1:
        return None
    return (f"an image part ({{\"type\": \"image\"}}) in a user message adds {added} of the model's image "
            f"placeholder {placeholder!r} to the rendered prompt (exactly one is needed, where the image goes)")
