"""``worker.main.image_input``: whether vLLM takes images for a model, from vLLM's own model config (its registry's
verdict on the architecture, the multimodal processor's modalities, the image limit), never from the model's name.
Stand-in model configs here; the real vLLM decides for the real embedded models in tests/system/test_vl_gate.py."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from evalgate.worker.main import image_input


class _MM:
    def __init__(self, limit: int, language_model_only: bool = False) -> None:
        self.limit, self.language_model_only = limit, language_model_only

    def get_limit_per_prompt(self, modality: str) -> int:
        return self.limit if modality == "image" else 0


class _ModelConfig:
    def __init__(self, arch: str, multimodal: bool, mm: _MM | None = None) -> None:
        self.architectures, self.is_multimodal_model, self.multimodal_config = [arch], multimodal, mm


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A stand-in ``vllm.multimodal.MULTIMODAL_REGISTRY`` whose processors support ``modalities``."""
    state: dict[str, Any] = {"modalities": {"image": None}}

    class Registry:
        def get_processing_info(self, model_config: Any) -> Any:
            if state.get("raise"):
                raise state["raise"]
            return types.SimpleNamespace(supported_mm_limits=state["modalities"])

    module = types.ModuleType("vllm.multimodal")
    module.MULTIMODAL_REGISTRY = Registry()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.multimodal", module)
    return state


def test_a_text_architecture_reads_no_images_whatever_its_name() -> None:
    got = image_input(_ModelConfig("LlavaLookalikeVisionForCausalLM", multimodal=False))
    assert got == {"reads_images": False, "architecture": "LlavaLookalikeVisionForCausalLM", "field": "model",
                   "why": "vLLM's model registry lists LlavaLookalikeVisionForCausalLM as text-only (not multimodal)"}


def test_a_multimodal_architecture_reads_images_unless_the_config_turns_them_off(registry) -> None:
    ok = image_input(_ModelConfig("Idefics3ForConditionalGeneration", True, _MM(1)))
    assert (ok["reads_images"], ok["field"]) == (True, "model") and "up to 1 per prompt" in ok["why"]
    off = image_input(_ModelConfig("Idefics3ForConditionalGeneration", True, _MM(0)))
    assert (off["reads_images"], off["field"]) == (False, "engine_args.limit_mm_per_prompt")
    text = image_input(_ModelConfig("Idefics3ForConditionalGeneration", True, _MM(1, language_model_only=True)))
    assert (text["reads_images"], text["field"]) == (False, "engine_args.language_model_only")
    registry["modalities"] = {"audio": None}  # multimodal, but not for images (an audio model)
    audio = image_input(_ModelConfig("WhisperForConditionalGeneration", True, _MM(1)))
    assert audio["reads_images"] is False and audio["why"] == ("WhisperForConditionalGeneration takes audio in vLLM, "
                                                               "not images")


def test_what_cannot_be_told_is_none_with_the_reason(registry) -> None:
    registry["raise"] = ValueError("no processor registered\nfor X")
    got = image_input(_ModelConfig("XForConditionalGeneration", True, _MM(1)))
    assert got["reads_images"] is None and got["why"] == "ValueError: no processor registered for X"
    assert image_input(object())["reads_images"] is None  # a vLLM whose model config lacks the attribute


def test_the_most_images_a_prompt_takes_and_the_field_that_sets_it(registry) -> None:
    """As vLLM's processor enforces it (``validate_num_items``): the smaller of the engine args' limit and what the
    model's processor supports; the field is the one that binds."""
    got = image_input(_ModelConfig("VLForConditionalGeneration", True, _MM(2)))  # the processor: no bound of its own
    assert (got["limit"], got["limit_field"]) == (2, "engine_args.limit_mm_per_prompt")
    assert "up to 2 per prompt" in got["why"]
    registry["modalities"] = {"image": 1}  # a model that takes one image a prompt, whatever the engine args say
    got = image_input(_ModelConfig("Idefics3ForConditionalGeneration", True, _MM(999)))
    assert (got["limit"], got["limit_field"]) == (1, "model")
    got = image_input(_ModelConfig("Idefics3ForConditionalGeneration", True, _MM(1)))
    assert (got["limit"], got["limit_field"]) == (1, "engine_args.limit_mm_per_prompt")
