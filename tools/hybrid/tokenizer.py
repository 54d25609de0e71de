"""The hybrid model's tokenizer: a small byte-level BPE trained with the ``tokenizers`` library.

Digits are split one per token (numbers are copied and compared digit by digit in the suites), text is
byte-level (any input encodes), ``<s>`` is prepended by the post-processor (the model is trained with it and
vLLM tokenizes prompts with ``add_special_tokens=True``). Saved as a Hugging Face fast tokenizer
(``tokenizer.json`` + ``tokenizer_config.json``) that transformers' ``AutoTokenizer`` and vLLM load.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIAL = (PAD, BOS, EOS)  # ids 0, 1, 2


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """A ``tokenizers.Tokenizer`` trained on ``texts`` (deterministic for the same texts in the same order)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL), min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))],
    )
    return tok


def save_hf_tokenizer(tok, out: Path) -> None:
    """Write ``tok`` as a Hugging Face fast tokenizer to ``out`` and check that it prepends ``<s>``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    assert [tok.token_to_id(s) for s in SPECIAL] == [0, 1, 2], "special tokens must be ids 0, 1, 2"
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                 model_max_length=4096, clean_up_tokenization_spaces=False)
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out))
    check = AutoTokenizer.from_pretrained(str(out))
    ids = check("Total: 1,234.50")["input_ids"]
    if ids[0] != 1 or check.decode(ids[1:]) != "Total: 1,234.50":
        raise RuntimeError(f"{out}: tokenizer does not round-trip with <s> first (ids {ids[:8]})")


def load_tokenizer(path: Path):
    """The raw ``tokenizers.Tokenizer`` (fast, no transformers needed) from a saved checkpoint folder."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path / "tokenizer.json"))
