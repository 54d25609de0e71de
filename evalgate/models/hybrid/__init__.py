"""evalgate's own small Nemotron-H hybrid (Mamba2 + attention + MLP layers, one MTP layer).

It exists so that the seed's switches that act only on hybrid models with an MTP head (FP16 Mamba SSM state,
MTP speculative decoding, the Mamba decode kernel) are gated on real accuracy, on CPU. The trained weights
and tokenizer ship in ``checkpoint/`` (``embedded:nemotron-h-tiny``), its chat fine-tune in ``checkpoint-chat/``
(``embedded:nemotron-h-tiny-chat``); nobody needs to train.

* ``modeling``  - the model in plain PyTorch, in vLLM's ``NemotronHForCausalLM`` + ``NemotronHMTP`` layout
* ``tokenizer`` - the byte-level BPE (``tokenizers``), saved as a HF fast tokenizer that prepends ``<s>``
* ``data``      - training text: the suites' own generators on disjoint seeds, plus stdlib Python
* ``train``     - the recipe (``python -m tools.hybrid.train``), deterministic given its seed
* ``verify``    - vLLM vs torch numerical agreement on a checkpoint
* ``qwen3_next`` - ``embedded:qwen3-next-tiny``: a random-weight Qwen3-Next (GDN + attention, MTP head), built
  deterministically from a seed on first use (not committed)
"""

from pathlib import Path

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint"
# The same model fine-tuned on chat-formatted prompts (configs/chat/hybrid-chat.jinja, thinking on and off):
# ``embedded:nemotron-h-tiny-chat`` (README.md, "Chat fine-tune").
CHAT_CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint-chat"
