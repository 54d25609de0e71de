"""Image suites need a model that reads images: checked for every config of a command before any engine starts.

A suite whose tasks carry images (``Suite.modality == "image"``: a task sets lm-eval's ``doc_to_image``) sends each
item's page to vLLM as ``multi_modal_data``. A model vLLM takes no images for would fail on the first item, after
the baseline's engine had started, or run on without the image if its processor dropped it. So before any engine
starts, vLLM itself is asked about each config's model in the short check worker (``runner.check_engine_values``
with ``images=True``: the engine config resolved from the checkpoint's ``config.json``, no weights loaded; the
decision is ``worker.main.image_input``: vLLM's model registry and multimodal processor, never the model's name).
A model that does not read images, or of which it cannot be told, is exit 2: one line naming the config file, the
field that decides it (``model``, ``engine_args.limit_mm_per_prompt`` or ``engine_args.language_model_only``) and
the image suite.

A config that prompts through a chat template (a ``chat`` section) sends each image item's messages to the template
as content parts (``inputs.chat.image_content``, as lm-eval's ``vllm-vlm`` does), so the template must have a place
for an image: the same check worker renders a probe user message with an image part and counts the model's image
placeholder as vLLM names it (``worker.main.chat_image_input``). A template that places no image (or of which it
cannot be told) is exit 2 naming the config file and ``chat.template`` (``check_chat_images``). Runs without an
image suite start nothing here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalgate.errors import ConfigError
from evalgate.evaluate import runner
from evalgate.inputs.config import EngineConfig, installed_vllm_version, set_in
from evalgate.suites.files import Suite

__all__ = ["check_chat_images", "check_image_counts", "check_image_input", "check_mixed_groups",
           "image_suites"]


def image_suites(suites: list[Suite]) -> list[Suite]:
    """The suites of ``suites`` whose items carry images (``Suite.modality == "image"``), in order."""
    return [s for s in suites if s.modality == "image"]


def check_image_input(configs: list[tuple[str, EngineConfig]], suites: list[Suite], log_dir: Path,
                      timeout_s: float) -> dict[str, dict[str, Any]]:
    """Refuse, before any engine starts, a config whose model vLLM takes no images for when a suite carries them.

    Args:
        configs: ``(role, config)`` pairs, checked in order (e.g. candidate, then baseline); each check worker logs
            to ``log_dir / f"{role}-check.log"``.
        suites: the suites the command runs. timeout_s: the check worker's time limit, seconds.
    Returns:
        role -> what that config's check worker reported (``runner.check_engine_values``: the engine's limits plus
        ``image_input``), so a later engine-value check can reuse it; ``{}`` when no suite carries images (no worker
        is started).
    Raises:
        ConfigError (exit 2): a config's model does not read images, or it cannot be told (fail closed). One line,
            ``<config file>: <field>: <model> does not read images (<vLLM distribution and version>: <why>) ...``,
            naming the image suite and where its task says so. Then a chat-protocol config whose template has no
            place for an image (``check_chat_images``, from the same worker's report).
        EngineError (exit 3): the check worker itself could not run.
    """
    wanted = image_suites(suites)
    if not wanted:
        return {}
    for _, cfg in configs:  # depends on the suites only: refused before any check worker starts
        check_mixed_groups(cfg, wanted)
    out: dict[str, dict[str, Any]] = {}
    for role, cfg in configs:
        got = runner.check_engine_values(cfg, log_dir / f"{role}-check.log", timeout_s, images=True)
        out[role] = got
        info = got.get("image_input") or {"reads_images": None, "field": "model",
                                          "why": "the check worker reported nothing about images"}
        if info.get("reads_images") is not True:
            field = str(info.get("field") or "model")
            raise ConfigError(_refusal(cfg, info, field, wanted[0]), path=cfg.path, field=field)
        check_chat_images(cfg, got, wanted)
    return out


def check_chat_images(cfg: EngineConfig, checked: dict[str, Any], suites: list[Suite]) -> None:
    """Refuse a chat-protocol config whose chat template has no place for an image, when a suite carries images.

    An image item's messages reach the template as content parts (``inputs.chat.image_content``); the template must
    write the model's image placeholder for an image part, where vLLM's processor expands it for the item's image.
    The check worker rendered the probe (``worker.main.chat_image_input``); this judges its report.

    Args:
        cfg: the config. checked: what its check worker reported (``runner.check_engine_values`` with
            ``images=True``): ``chat_images`` is ``{"places_images": True | False | None, "placeholder", "why"}``.
        suites: the suites the command runs.
    Raises:
        ConfigError (exit 2): a chat-protocol config given an image suite whose template places no image, or of
            which it cannot be told (no report: fail closed); one line naming the config file, ``chat.template``
            (and the file of its chain that sets it, when another), what the probe showed and the image suite.
            First, a group of an image suite that mixes image and text tasks (:func:`check_mixed_groups`).
    """
    wanted = image_suites(suites)
    if not wanted or not cfg.chat.is_chat:
        return
    check_mixed_groups(cfg, wanted)
    info = checked.get("chat_images") or {"places_images": None,
                                          "why": "the check worker reported nothing about the chat template"}
    if info.get("places_images") is True:
        return
    suite = wanted[0]
    task = next(s for s in suite.specs if s.modality == "image")
    spec = cfg.chat
    which = f"template {spec.template_path}" if spec.template_path is not None else f"{cfg.model}'s own chat template"
    origin = set_in(cfg, "chat.template")
    where = "" if origin == cfg.path else f" (set in {origin})"
    what = "has no place for an image" if info.get("places_images") is False else "cannot be shown to place an image"
    raise ConfigError(f"{which}{where} {what} ({info.get('why')}), but suite {suite.name} is an image suite (task "
                      f"{task.name}: doc_to_image in {task.source}); use a template that renders an image content "
                      "part ({\"type\": \"image\"}) as the model's image placeholder, or leave the suite out of "
                      "--suites and the config's suites", path=cfg.path, field="chat.template")


def check_mixed_groups(cfg: EngineConfig, suites: list[Suite]) -> None:
    """Refuse, for a chat-protocol config, a group that holds both image and text tasks.

    The chat form is chosen per lm-eval evaluation: an image task's messages go as content parts with image parts,
    a text task's in the config's text form (``inputs.chat.content_form``). lm-eval builds a group's tasks in one
    evaluation, so their messages cannot be sent two ways; rather than send a text task's prompt with an image
    expectation (or an image task's without one), such a group is refused.

    Args:
        cfg: the config (nothing is refused for completion prompts, which have no messages).
        suites: the suites the command runs.
    Raises:
        ConfigError (exit 2): naming the group's YAML and its ``task`` list, an image task and a text task of it.
    """
    if not cfg.chat.is_chat:
        return
    for suite in suites:
        for group, source, image, text in suite.mixed_groups:
            raise ConfigError(f"group {group} of suite {suite.name} holds both image tasks ({image}) and text tasks "
                              f"({text}); lm-eval builds a group's prompts in one pass, so under a chat template "
                              f"({cfg.path}: chat.template) their messages cannot be sent as image content parts for "
                              "the one and as text for the other; put the image tasks and the text tasks in separate "
                              "groups or suite YAML files", path=source, field="task")


def check_image_counts(configs: list[tuple[str, EngineConfig]], checked: dict[str, dict[str, Any]],
                       preflight: dict[str, Any]) -> None:
    """Refuse, before any engine starts, an image task whose items carry more images than a config's model takes in
    one prompt (vLLM refuses such a request: "At most N image(s) may be provided in one prompt", after the engine
    has started).

    Args:
        configs: ``(role, config)`` pairs, as given to :func:`check_image_input`.
        checked: what :func:`check_image_input` returned (role -> the check worker's report; its ``image_input``
            has ``limit``, the most images one prompt may carry, and ``limit_field``, the config key that sets it:
            ``worker.main.images_per_prompt``). A role without a ``limit`` is not checked here (vLLM still refuses
            at request time).
        preflight: what ``preflight.check_suites`` returned; its ``images`` maps each image task to ``{"most",
            "item", "source"}`` (the most images an item of the run has, the first such item, the task's YAML).
    Raises:
        ConfigError (exit 2): one line naming the task's YAML and ``doc_to_image``, the task, the item and its
            image count, and the config file with the field that limits it (``engine_args.limit_mm_per_prompt``,
            or ``model`` when the model's own processor takes fewer).
    """
    for role, cfg in configs:
        info = (checked.get(role) or {}).get("image_input") or {}
        limit = info.get("limit")
        if not isinstance(limit, int):
            continue
        for task, seen in sorted((preflight.get("images") or {}).items()):
            most = int(seen.get("most") or 0)
            if most <= limit:
                continue
            field = str(info.get("limit_field") or "engine_args.limit_mm_per_prompt")
            if field == "model":
                whose = f"{cfg.model} takes at most {limit} per prompt in vLLM ({info.get('architecture', '?')}"
                fix = "gate it with a model that takes that many, or give each item fewer images"
            else:
                whose = f"limit_mm_per_prompt allows {limit} per prompt ({cfg.model}"
                fix = f"set engine_args.limit_mm_per_prompt to {{image: {most}}} or more, or give each item fewer images"
            raise ConfigError(f"task {task}: {seen.get('item')} has {most} images, but {set_in(cfg, field)}: {field}: "
                              f"{whose}, {installed_vllm_version()}); {fix}", path=seen.get("source"),
                              field="doc_to_image")


def _refusal(cfg: EngineConfig, info: dict[str, Any], field: str, suite: Suite) -> str:
    """The message of a refused config: what vLLM said, where the field is set, which suite needs images."""
    task = next(s for s in suite.specs if s.modality == "image")
    declared = "metadata.evalgate.modality: image" if _declared(task.config) else "doc_to_image"
    origin = set_in(cfg, field)
    where = "" if origin == cfg.path else f" (set in {origin})"
    what = (f"{cfg.model} does not read images" if info.get("reads_images") is False
            else f"cannot tell whether {cfg.model} reads images")
    return (f"{what} ({installed_vllm_version()}: {info.get('why')}){where}, but suite {suite.name} is an "
            f"image suite (task {task.name}: {declared} in {task.source}); gate it with a model that reads images, "
            f"or leave it out of --suites and the config's suites")


def _declared(cfg: dict[str, Any]) -> bool:
    meta = cfg.get("metadata")
    block = meta.get("evalgate") if isinstance(meta, dict) else None
    return isinstance(block, dict) and block.get("modality") == "image"
