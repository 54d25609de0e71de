"""Config-only models of real architectures, for vLLM's ``load_format: dummy`` (random weights: speed, never quality).

A *shape* is a Hugging Face directory with a ``config.json`` and the tokenizer files of the embedded hybrid
(``embedded:nemotron-h-tiny``), and no weights: vLLM builds the model from the config and fills every parameter with
random values (``load_format: dummy``), so an engine of realistic size, memory and kernel mix starts without a
download. What it generates is noise; a config on a shape must set ``load_format: dummy`` and may only be gated with
``--speed-only`` (``evalgate.inputs.speed_only``).

The shapes (``SHAPES``; each written by ``prepare_shape`` under ``$EVALGATE_HOME/models/<name>/`` on first use):

* ``embedded:nemotron-h-8b-shape``: the sizes of Nemotron-H-8B-Base-8K (public config): 52 layers, hidden 4096;
  Mamba 128 heads x 64, state 128, 8 groups; MLP 21,504 ReLU^2; attention 32 query / 8 KV heads x 128 (layers 7,
  18, 29, 40); vocab 131,072. Exactly the directory the probe ``make_dummy.py`` wrote for the H200 measurements of
  2026-12-03 (vLLM 0.26.0), so figures compare with those: its layer loop gives 25 Mamba-2 and 23 MLP layers
  (``M-M-M-M*M-M-...``), where the published pattern has 24 and 24 (one MLP layer's weights, ~1 %, fewer).
* ``embedded:nemotron-3-nano-30b-a3b-shape``: NVIDIA-Nemotron-3-Nano-30B-A3B's ``config.json`` as published
  (``hybrid_override_pattern`` ``MEMEM*EMEMEM*...`` = 23 Mamba-2, 23 MoE, 6 attention; hidden 2688; Mamba 64 heads x
  64, state 128, 8 groups; MoE 128 routed experts of 1,856, top-6, one shared expert of 3,712, sigmoid routing with
  ``routed_scaling_factor`` 2.5; attention 32 / 2 KV heads x 128; vocab 131,072), with the pattern written as
  transformers-5 ``layers_block_type`` names (``linear_attention``, ``moe``, ``full_attention``; transformers maps
  ``M``/``E``/``*``/``-`` to them). About 31.6 B parameters: 63 GB in BF16.
* ``embedded:nemotron-h-cpu-shape``: the embedded hybrid's own layers (10 layers, hidden 256) with the 8B shape's
  vocabulary of 131,072 and no MTP layer: on CPU it exercises what a large vocabulary does to the speed phase
  (generated ids beyond the tokenizer's 2,048).

There is no CPU-sized MoE shape: vLLM's CPU build (0.32.0) refuses NemotronH's MoE layers when the engine starts
(``NotImplementedError: is_act_and_mul=False is supported only for CUDA, XPU and ROCm``: its experts are ReLU^2,
not gated), after building the model from the config; the 30B-A3B shape runs on CUDA only.

Nothing here touches a model hub; the files depend only on ``RECIPE_VERSION`` and the packaged tokenizer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalgate.errors import ModelError

RECIPE_VERSION = 1  # bump when a shape's config.json changes: prepared copies are then rebuilt
_MARKER = "evalgate-model.json"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# transformers-5 layer names for Nemotron-H's hybrid_override_pattern characters.
_PATTERN_NAMES = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
# NVIDIA-Nemotron-3-Nano-30B-A3B's hybrid_override_pattern (its config.json): 23 M, 23 E, 6 *.
NANO3_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def _packaged_config() -> dict[str, Any]:
    from evalgate.models.hybrid import CHECKPOINT_DIR

    return json.loads((CHECKPOINT_DIR / "config.json").read_text(encoding="utf-8"))


def nemotron_h_8b_pattern() -> list[str]:
    """The 8B shape's 52 layer kinds: attention at layers 7, 18, 29 and 40, otherwise Mamba-2 and MLP alternating
    (a Mamba-2 layer after an attention or MLP layer, an MLP layer after a Mamba-2 layer): 25 Mamba-2, 4 attention,
    23 MLP (the probe ``make_dummy.py``'s loop, measured on the H200)."""
    pattern: list[str] = []
    for i in range(52):
        if i in (7, 18, 29, 40):
            pattern.append("full_attention")
        elif pattern and pattern[-1] == "linear_attention":
            pattern.append("mlp")
        else:
            pattern.append("linear_attention")
    return pattern


def _no_mtp(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**cfg, "num_nextn_predict_layers": 0, "mtp_layers_block_type": []}


def nemotron_h_8b() -> dict[str, Any]:
    """``config.json`` of ``embedded:nemotron-h-8b-shape`` (the packaged hybrid's config with the 8B sizes)."""
    return _no_mtp({**_packaged_config(), "vocab_size": 131072, "hidden_size": 4096,
                    "layers_block_type": nemotron_h_8b_pattern(), "num_attention_heads": 32,
                    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 21504, "mamba_num_heads": 128,
                    "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "expand": 2,
                    "max_position_embeddings": 8192, "dtype": "bfloat16"})


def nemotron_3_nano_30b_a3b() -> dict[str, Any]:
    """``config.json`` of ``embedded:nemotron-3-nano-30b-a3b-shape`` (values of the published model's config)."""
    return _no_mtp({**_packaged_config(), "vocab_size": 131072, "hidden_size": 2688,
                    "layers_block_type": [_PATTERN_NAMES[c] for c in NANO3_PATTERN], "num_attention_heads": 32,
                    "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 1856, "mamba_num_heads": 64,
                    "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "expand": 2, "conv_kernel": 4,
                    "chunk_size": 128, "mlp_hidden_act": "relu2", "n_routed_experts": 128, "n_shared_experts": 1,
                    "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
                    "moe_shared_expert_intermediate_size": 3712, "n_group": 1, "topk_group": 1,
                    "norm_topk_prob": True, "routed_scaling_factor": 2.5, "max_position_embeddings": 262144,
                    "dtype": "bfloat16"})


def nemotron_h_cpu() -> dict[str, Any]:
    """``config.json`` of ``embedded:nemotron-h-cpu-shape``: the packaged hybrid, vocab 131,072, no MTP layer."""
    return _no_mtp({**_packaged_config(), "vocab_size": 131072})


# alias -> (directory name under <home>/models, config.json builder)
SHAPES: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "embedded:nemotron-h-8b-shape": ("nemotron-h-8b-shape", nemotron_h_8b),
    "embedded:nemotron-3-nano-30b-a3b-shape": ("nemotron-3-nano-30b-a3b-shape", nemotron_3_nano_30b_a3b),
    "embedded:nemotron-h-cpu-shape": ("nemotron-h-cpu-shape", nemotron_h_cpu),
}


def layer_counts(cfg: dict[str, Any]) -> dict[str, int]:
    """How many layers of each kind ``cfg``'s ``layers_block_type`` has, e.g. ``{"linear_attention": 24, ...}``."""
    kinds = cfg["layers_block_type"]
    return {k: kinds.count(k) for k in sorted(set(kinds))}


def prepare_shape(alias: str, home: Path) -> Path:
    """Write shape ``alias``'s directory under ``home/models/`` once (idempotent): ``config.json``, the packaged
    tokenizer files and a marker naming the recipe version (an older recipe's copy is rebuilt).

    Args:
        alias: a key of ``SHAPES``. home: evalgate's home directory.
    Returns:
        The directory vLLM loads with ``load_format: dummy``.
    Raises:
        KeyError: ``alias`` is not a shape.
        ModelError: it cannot be written (unwritable home, missing packaged tokenizer); built in a temp dir and
            renamed into place, so a failure leaves nothing partial.
    """
    from evalgate.models.hybrid import CHECKPOINT_DIR

    dirname, build = SHAPES[alias]
    target = home / "models" / dirname
    want = {"source": f"evalgate.models.shapes:{dirname}", "recipe": RECIPE_VERSION}

    def current() -> bool:
        try:
            marker = json.loads((target / _MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return all(marker.get(k) == v for k, v in want.items())

    if current():
        return target
    work: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=target.parent))
        out = work / "shape"
        out.mkdir()
        text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
        (out / "config.json").write_text(text, encoding="utf-8")
        for name in _TOKENIZER_FILES:
            shutil.copyfile(CHECKPOINT_DIR / name, out / name)
        from evalgate.models.embedded import _fingerprint_dir

        (out / _MARKER).write_text(json.dumps({**want, "fingerprint": _fingerprint_dir(out)}, indent=2),
                                   encoding="utf-8")
        if target.exists():
            if current():  # another process finished first
                return target
            shutil.rmtree(target)
        try:
            os.replace(out, target)
        except OSError:
            if not current():
                raise
    except (OSError, ValueError) as exc:
        raise ModelError(f"{target}: writing the config-only model {alias} failed: {exc}") from exc
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return target
