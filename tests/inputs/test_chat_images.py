"""Images in chat-protocol prompts (issue 26 item 5): an image suite's messages go to the chat template as content
parts, as lm-eval's ``vllm-vlm`` model sends them (``chat.image_content``), the model's own template writes its image
placeholder where it puts an image, and a template with no place for an image is found by a probe before any engine
starts (``chat.image_placement_problem``). Expected prompts are spelled out by hand from the templates' text, not
rendered by the code under test; the adapter runs the shipped page tier through lm-eval's chat path with a stand-in
engine (no vLLM), which tests/system/test_vl_gate.py repeats on the real CPU engine."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lm_eval")
from PIL import Image  # noqa: E402

from evalgate.inputs.chat import IMAGE_PLACEHOLDER, image_content, image_placement_problem  # noqa: E402
from evalgate.inputs.config import Sampling  # noqa: E402
from evalgate.models.idefics3_tiny import CHAT_TEMPLATE as IDEFICS3  # noqa: E402
from evalgate.results.store import GenerationJournal  # noqa: E402
from evalgate.suites.discovery import SUITES_DIR, load_suite  # noqa: E402
from evalgate.suites.taskcode import load_module  # noqa: E402
from evalgate.worker.lm_adapter import make_lm, request_key  # noqa: E402
from evalgate.worker.suite_eval import evaluate_suite  # noqa: E402
from evalgate.worker.vllm_engine import Generation  # noqa: E402
from tests.taskfixtures import HybridTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HYBRID_CHAT = (ROOT / "configs" / "chat" / "hybrid-chat.jinja").read_text()
# After Qwen/Qwen2-VL-7B-Instruct's chat template: string content as it is, content parts one by one, an image part as
# the model's vision markers (vLLM's Qwen2VLForConditionalGeneration.get_placeholder_str("image", 1)).
QWEN2_VL = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != "
    "'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] "
    "}}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in "
    "message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set "
    "image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
N = 4  # page-tier items run through the adapter here (one of each document kind)


# ------------------------------------------------------------------------------------------------ content parts

def test_image_content_splits_the_text_at_each_placeholder_as_lm_evals_vllm_vlm_does() -> None:
    assert IMAGE_PLACEHOLDER == "<image>"  # lm_eval.models.vllm_vlms.DEFAULT_IMAGE_PLACEHOLDER
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "<image>Read it.\nJSON:"},
               {"role": "assistant", "content": "{}"},
               {"role": "user", "content": "Left <image> right <image>"},
               {"role": "user", "content": ""}]
    before = [dict(m) for m in history]
    assert image_content(history) == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read it.\nJSON:"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "{}"}]},
        {"role": "user", "content": [{"type": "text", "text": "Left "}, {"type": "image"},
                                     {"type": "text", "text": " right "}, {"type": "image"}]},
        {"role": "user", "content": []},
    ]
    assert history == before  # not modified: lm-eval reuses its messages
    parts = [{"type": "image"}]
    assert image_content([{"role": "user", "content": parts}]) == [{"role": "user", "content": parts}]


def _render(template: str, messages: list[dict[str, Any]]) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([messages], chat_template=template, add_generation_prompt=True)
    return str(rendered[0])


def test_each_models_template_writes_its_own_image_placeholder_where_it_puts_the_image() -> None:
    msgs = image_content([{"role": "user", "content": "<image>Extract the fields.\nJSON:"}])
    # Idefics3: "User" then ":" with no space when the turn opens with an image, then the image as <image>
    assert _render(IDEFICS3, msgs) == ("<|begin_of_text|>User:<image>Extract the fields.\nJSON:<end_of_utterance>\n"
                                       "Assistant:")
    # a text-only turn is "User: " (a space), the same turn without its image
    text_only = image_content([{"role": "user", "content": "Extract the fields.\nJSON:"}])
    assert _render(IDEFICS3, text_only) == ("<|begin_of_text|>User: Extract the fields.\nJSON:<end_of_utterance>\n"
                                            "Assistant:")
    assert _render(QWEN2_VL, msgs) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                       f"{QWEN_IMAGE}Extract the fields.\nJSON:<|im_end|>\n<|im_start|>assistant\n")


def test_the_probe_accepts_templates_that_place_one_image_and_says_why_others_cannot() -> None:
    assert image_placement_problem(IDEFICS3, "<image>") is None
    assert image_placement_problem(QWEN2_VL, QWEN_IMAGE) is None
    # Qwen's template writes no <image>: the model's own placeholder is what counts
    assert "adds 0 of the model's image placeholder '<image>'" in image_placement_problem(QWEN2_VL, "<image>")
    # a template that writes each message's content as it is: the parts list, never an image placeholder
    why = image_placement_problem(HYBRID_CHAT, "<image>")
    assert why == ("an image part ({\"type\": \"image\"}) in a user message adds 0 of the model's image placeholder "
                   "'<image>' to the rendered prompt (exactly one is needed, where the image goes)")
    twice = "{% for m in messages %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<image><image>" \
            "{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endfor %}"
    assert "adds 2 of the model's image placeholder" in image_placement_problem(twice, "<image>")
    # a text-only template that refuses content parts (transformers' raise_exception)
    strict = "{% for m in messages %}{% if m['content'] is not string %}{{ raise_exception('Content must be a " \
             "string') }}{% endif %}{{ m['content'] }}{% endfor %}"
    assert image_placement_problem(strict, "<image>") == (
        "it fails to render a user message of content parts (an image and a text): TemplateError: Content must be a "
        "string")
    assert "names no image placeholder" in image_placement_problem(IDEFICS3, None)
    # template_kwargs reach the probe: Qwen's add_vision_id labels the picture and still places it once
    assert image_placement_problem(QWEN2_VL, QWEN_IMAGE, {"add_vision_id": True}) is None


# ------------------------------------------------------------------------------------------------ the adapter

def _png_sha(im: Image.Image) -> str:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return hashlib.sha256(buf.getvalue()).hexdigest()


_Tok = HybridTokenizer  # the embedded hybrid's tokenizer, no template of its own


class ImageEngine:
    """Answers each request with the first 8 hex digits of its image's PNG sha256, recording every prompt."""

    def __init__(self) -> None:
        self.sampling = Sampling(temperature=0.0, max_tokens=64, seed=0)
        self.prompts: list[Any] = []
        self.tok = _Tok()

    def tokenizer(self) -> Any:
        return self.tok

    def generate_stream(self, prompts: list[Any], *, max_tokens: int, stop: list[str], logprobs: int = 0) -> Any:
        self.prompts += prompts
        yield [(i, Generation(_png_sha(p["multi_modal_data"]["image"])[:8] if isinstance(p, dict) else "none", 1,
                              "stop", [1], [5])) for i, p in enumerate(prompts)]


def _chat(template: str) -> dict[str, Any]:
    return {"chat": True, "template": template, "system": None, "template_kwargs": {}, "fewshot_as_multiturn": False,
            "think_end": None}


def test_a_text_suite_keeps_string_messages_and_an_image_suite_sends_parts() -> None:
    lm = make_lm(ImageEngine(), chat=_chat(QWEN2_VL))
    msgs = [{"role": "user", "content": "<image>Q"}]
    assert lm.image_prompts is False  # a text suite: the messages as lm-eval gives them, prompts as before
    assert lm.apply_chat_template(msgs) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                            "<|im_start|>user\n<image>Q<|im_end|>\n<|im_start|>assistant\n")
    lm.image_prompts = True
    assert lm.apply_chat_template(msgs) == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                                            f"<|im_start|>user\n{QWEN_IMAGE}Q<|im_end|>\n<|im_start|>assistant\n")
    assert msgs == [{"role": "user", "content": "<image>Q"}]


def _run(journal: Path, template: str) -> tuple[Any, dict, ImageEngine]:
    s = load_suite("docpages", SUITES_DIR)
    spec = {"name": s.name, "dir": str(s.path.parent), "tasks": list(s.tasks), "metrics": s.primary_metric,
            "builtins": s.builtins, "entries": [list(e) for e in s.entries], "modality": s.modality}
    engine = ImageEngine()
    lm = make_lm(engine, GenerationJournal(journal), chat=_chat(template))
    tasks, keys = evaluate_suite(lm, spec, N, engine.sampling, _chat(template))
    return tasks["docpages_fields"], keys, engine


def test_the_page_tier_through_lm_evals_chat_path_places_each_page_by_the_template(tmp_path: Path) -> None:
    utils = load_module(SUITES_DIR / "docpages" / "utils.py")
    docs = list(utils.load_data(n_test=N)["test"])
    pages = [_png_sha(d["image"]) for d in docs]
    instruction = utils.docparse.INSTRUCTION
    task, keys, engine = _run(tmp_path / "j.jsonl", IDEFICS3)
    assert len(task.items) == len(engine.prompts) == N
    stop = ["\n\n", "\nDocument:", "\nFields:", "\nJSON:"]  # the YAML's until; max_gen_toks 96 under 64
    for item in task.items:
        doc = docs[item.item_id]
        expected = (f"<|begin_of_text|>User:<image>{instruction}\nFields: {', '.join(doc['fields'])}\nJSON:"
                    "<end_of_utterance>\nAssistant:")
        assert item.prompt == expected
        assert item.output == pages[item.item_id][:8]  # the engine was given this item's own page
        assert item.images[0]["sha256"] == pages[item.item_id]
        assert keys[("docpages_fields", item.item_id)] == request_key(expected, stop, 64, (pages[item.item_id],))
    sent = {p["prompt"]: None for p in engine.prompts}
    assert all(p.count("<image>") == 1 for p in sent)
    assert sorted(_png_sha(p["multi_modal_data"]["image"]) for p in engine.prompts) == sorted(pages)
    # a second run over the journal: the same item hashes and keys, every answer reused
    task2, keys2, engine2 = _run(tmp_path / "j.jsonl", IDEFICS3)
    assert [i.item_hash for i in task2.items] == [i.item_hash for i in task.items] and keys2 == keys
    assert engine2.prompts == []
    # another template is another prompt, so another key: nothing is reused across templates
    task3, keys3, engine3 = _run(tmp_path / "j.jsonl", QWEN2_VL)
    assert len(engine3.prompts) == N and set(keys3.values()).isdisjoint(keys.values())
    assert all(i.prompt.count(QWEN_IMAGE) == 1 and "<image>" not in i.prompt for i in task3.items)
