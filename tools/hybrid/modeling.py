"""A minimal Nemotron-H (Mamba2 / attention / MLP hybrid) with one MTP layer, in plain PyTorch.

The module tree reproduces the checkpoint layout vLLM's ``NemotronHForCausalLM`` and ``NemotronHMTP``
load (``vllm/model_executor/models/nemotron_h.py`` and ``nemotron_h_mtp.py``), so ``state_dict()`` is the
checkpoint::

    backbone.embeddings.weight
    backbone.layers.{i}.norm.weight
    backbone.layers.{i}.mixer.{in_proj,out_proj}.weight, conv1d.{weight,bias}, dt_bias, A_log, D, norm.weight  (M)
    backbone.layers.{i}.mixer.{q,k,v,o}_proj.weight                                                (*)
    backbone.layers.{i}.mixer.{up,down}_proj.weight                                                 (-)
    backbone.norm_f.weight
    lm_head.weight
    mtp.layers.0.{enorm,hnorm,norm,final_layernorm}.weight, eh_proj.weight, mixer.{q,k,v,o}_proj.weight

and the math is vLLM's: pre-norm residual blocks (``x + mixer(norm(x))``, RMSNorm with a plain weight),
attention without positional encoding (Nemotron-H has none; the Mamba layers carry position), ReLU^2 MLPs,
and Mamba2 as in ``MambaMixer2``: ``in_proj -> [z | x B C | dt]``, causal depthwise conv + SiLU on ``x B C``,
``dt = softplus(dt + dt_bias)``, ``A = -exp(A_log)``, the SSD scan with ``D`` skip, the gated RMSNorm
(``y * silu(z)``, normalised per group of ``d_inner / n_groups`` channels) and ``out_proj``.

The MTP layer (DeepSeek-V3 style) at position ``t`` fuses ``enorm(emb(x[t+1]))`` with ``hnorm(h[t])`` (``h`` =
the trunk's final, ``norm_f``-ed hidden state, which is what vLLM hands its drafter), projects with ``eh_proj``,
runs one attention block, adds the residual, applies ``final_layernorm`` and predicts ``x[t+2]`` through the
shared ``lm_head``.

Training uses the chunked SSD form (the "minimal SSD" of the Mamba2 paper); ``ssd_reference`` is the plain
recurrence it is tested against.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_KIND = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}


@dataclass(frozen=True)
class HybridConfig:
    """Shape of the model. ``pattern``: one char per trunk layer (M = Mamba2, * = attention, - = MLP)."""

    vocab_size: int = 2048
    hidden_size: int = 256
    pattern: str = "M-M*M-M*M-"
    mtp_pattern: str = "*"
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    mamba_num_heads: int = 8
    mamba_head_dim: int = 64
    ssm_state_size: int = 64
    n_groups: int = 1
    conv_kernel: int = 4
    layer_norm_epsilon: float = 1e-5
    chunk_size: int = 64  # SSD chunk length used in training (vLLM's chunk_size is a kernel detail)
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    max_position_embeddings: int = 4096
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def d_inner(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    def hf_config_dict(self, dtype: str = "bfloat16") -> dict[str, Any]:
        """The ``config.json`` vLLM and transformers read (transformers' ``NemotronHConfig`` field names)."""
        for ch in self.pattern + self.mtp_pattern:
            if ch not in _KIND:
                raise ValueError(f"pattern char {ch!r} not supported (M, *, -)")
        if set(self.mtp_pattern) != {"*"}:
            raise ValueError("vLLM's NemotronH MTP accepts attention ('*') / MoE ('E') MTP layers; use '*'")
        return {
            "architectures": ["NemotronHForCausalLM"],
            "model_type": "nemotron_h",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "layers_block_type": [_KIND[c] for c in self.pattern],
            "num_nextn_predict_layers": 1,
            "mtp_layers_block_type": [_KIND[c] for c in self.mtp_pattern],
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "attention_bias": False,
            "intermediate_size": self.intermediate_size,
            "mlp_hidden_act": "relu2",
            "mlp_bias": False,
            "mamba_num_heads": self.mamba_num_heads,
            "mamba_head_dim": self.mamba_head_dim,
            "ssm_state_size": self.ssm_state_size,
            "n_groups": self.n_groups,
            "conv_kernel": self.conv_kernel,
            "expand": self.d_inner // self.hidden_size,
            "mamba_hidden_act": "silu",
            "use_conv_bias": True,
            "use_bias": False,
            "chunk_size": 128,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "residual_in_fp32": False,
            "tie_word_embeddings": False,
            "max_position_embeddings": self.max_position_embeddings,
            "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "mamba_ssm_cache_dtype": "float32",
            "use_cache": True,
            "dtype": dtype,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HybridConfig":
        return cls(**d)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


class GatedRMSNorm(nn.Module):
    """vLLM's ``Mixer2RMSNormGated``: ``weight * rmsnorm_per_group(x * silu(z))``."""

    def __init__(self, dim: int, n_groups: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group = dim // n_groups
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x = x.float() * F.silu(z.float())
        shape = x.shape
        xg = x.view(*shape[:-1], shape[-1] // self.group, self.group)
        xg = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xg.view(shape).to(dt)


def _segsum(x: torch.Tensor) -> torch.Tensor:
    """Stable segment sums: out[..., i, j] = sum(x[..., j+1:i+1]) for i >= j, -inf above the diagonal."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    s = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=0)
    return s.masked_fill(~mask, -torch.inf)


def ssd_chunked(x: torch.Tensor, a: torch.Tensor, B: torch.Tensor, C: torch.Tensor, chunk: int) -> torch.Tensor:
    """Chunked SSD scan from a zero state.

    Args:
        x: (b, l, h, p) inputs already multiplied by dt.  a: (b, l, h) = A * dt (<= 0).
        B, C: (b, l, h, n) (groups already broadcast to heads).  ``l`` a multiple of ``chunk``.
    Returns:
        y: (b, l, h, p) with y[t] = C[t] . state[t], state[t] = exp(a[t]) state[t-1] + B[t] x[t]^T.
    """
    b, l, h, p = x.shape
    c = l // chunk
    x = x.reshape(b, c, chunk, h, p)
    B = B.reshape(b, c, chunk, h, -1)
    C = C.reshape(b, c, chunk, h, -1)
    a = a.reshape(b, c, chunk, h).permute(0, 3, 1, 2)  # b h c l
    a_cum = torch.cumsum(a, dim=-1)
    L = torch.exp(_segsum(a))  # b h c l s
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, x)
    decay_states = torch.exp(a_cum[..., -1:] - a_cum)  # b h c l
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, x)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(_segsum(F.pad(a_cum[..., -1], (1, 0))))  # b h (c+1) (c+1)
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, new_states, torch.exp(a_cum))
    return (y_diag + y_off).reshape(b, l, h, p)


def ssd_reference(x: torch.Tensor, a: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The plain recurrence ``ssd_chunked`` computes (slow; for tests)."""
    b, l, h, p = x.shape
    state = x.new_zeros(b, h, p, B.shape[-1])
    ys = []
    for t in range(l):
        state = torch.exp(a[:, t])[..., None, None] * state + x[:, t, :, :, None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    return torch.stack(ys, dim=1)


class Mamba2Mixer(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d_in, gn, nh = cfg.d_inner, cfg.n_groups * cfg.ssm_state_size, cfg.mamba_num_heads
        self.conv_dim = d_in + 2 * gn
        self.in_proj = nn.Linear(cfg.hidden_size, 2 * d_in + 2 * gn + nh, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, cfg.conv_kernel, groups=self.conv_dim,
                                padding=cfg.conv_kernel - 1, bias=True)
        self.dt_bias = nn.Parameter(torch.zeros(nh))
        self.A_log = nn.Parameter(torch.zeros(nh))
        self.D = nn.Parameter(torch.ones(nh))
        self.norm = GatedRMSNorm(d_in, cfg.n_groups, cfg.layer_norm_epsilon)
        self.out_proj = nn.Linear(d_in, cfg.hidden_size, bias=False)

    def forward(self, u: torch.Tensor, *, reference: bool = False) -> torch.Tensor:
        cfg = self.cfg
        b, l, _ = u.shape
        d_in, gn, nh, hp = cfg.d_inner, cfg.n_groups * cfg.ssm_state_size, cfg.mamba_num_heads, cfg.mamba_head_dim
        z, xbc, dt = torch.split(self.in_proj(u), [d_in, self.conv_dim, nh], dim=-1)
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :l].transpose(1, 2))
        x, B, C = torch.split(xbc, [d_in, gn, gn], dim=-1)
        dt = F.softplus((dt + self.dt_bias).float())  # (b, l, nh)
        A = -torch.exp(self.A_log.float())
        rep = nh // cfg.n_groups
        Bh = B.float().view(b, l, cfg.n_groups, -1).repeat_interleave(rep, dim=2)
        Ch = C.float().view(b, l, cfg.n_groups, -1).repeat_interleave(rep, dim=2)
        xh = x.float().view(b, l, nh, hp)
        xdt, a = xh * dt[..., None], A * dt
        if reference:
            y = ssd_reference(xdt, a, Bh, Ch)
        else:
            pad = (-l) % cfg.chunk_size
            if pad:
                xdt, a = F.pad(xdt, (0, 0, 0, 0, 0, pad)), F.pad(a, (0, 0, 0, pad))
                Bh, Ch = F.pad(Bh, (0, 0, 0, 0, 0, pad)), F.pad(Ch, (0, 0, 0, 0, 0, pad))
            y = ssd_chunked(xdt, a, Bh, Ch, cfg.chunk_size)[:, :l]
        y = y + xh * self.D.float()[:, None]
        y = y.reshape(b, l, d_in).to(u.dtype)
        return self.out_proj(self.norm(y, z))


class Attention(nn.Module):
    """Causal multi-head attention with grouped KV heads and no positional encoding (as Nemotron-H)."""

    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, **_: Any) -> torch.Tensor:
        b, l, _ = x.shape
        q = self.q_proj(x).view(b, l, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, l, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, l, self.nkv, self.hd).transpose(1, 2)
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, l, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, **_: Any) -> torch.Tensor:
        return self.down_proj(F.relu(self.up_proj(x)).square())


class Block(nn.Module):
    def __init__(self, cfg: HybridConfig, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.norm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self.mixer = {"M": Mamba2Mixer, "*": Attention, "-": MLP}[kind](cfg)

    def forward(self, x: torch.Tensor, *, reference: bool = False) -> torch.Tensor:
        h = self.norm(x)
        return x + (self.mixer(h, reference=reference) if self.kind == "M" else self.mixer(h))


class Backbone(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, k) for k in cfg.pattern)
        self.norm_f = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)


class MTPLayer(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.enorm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)
        self.mixer = Attention(cfg)
        self.final_layernorm = RMSNorm(cfg.hidden_size, cfg.layer_norm_epsilon)

    def forward(self, emb_next: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        fused = self.eh_proj(torch.cat([self.enorm(emb_next), self.hnorm(h)], dim=-1))
        return self.final_layernorm(fused + self.mixer(self.norm(fused)))


class MTP(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([MTPLayer(cfg)])


class NemotronHTiny(nn.Module):
    def __init__(self, cfg: HybridConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = MTP(cfg)

    def init_weights(self, generator: torch.Generator) -> None:
        """Deterministic init (on CPU, from ``generator``): N(0, 0.02) linears and embeddings, residual
        output projections scaled by 1/sqrt(2 * layers), Mamba2's dt / A / D init."""
        cfg = self.cfg
        n_layers = len(cfg.pattern) + len(cfg.mtp_pattern)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith(("norm.weight", "enorm.weight", "hnorm.weight", "norm_f.weight",
                                  "final_layernorm.weight")) or name.endswith(".D"):
                    p.fill_(1.0)
                elif name.endswith("dt_bias"):
                    dt = torch.exp(torch.rand(p.shape, generator=generator) * (math.log(0.1) - math.log(0.001))
                                   + math.log(0.001)).clamp(min=1e-4)
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
                elif name.endswith("A_log"):
                    p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0, generator=generator)))
                elif name.endswith("conv1d.weight"):
                    bound = 1.0 / math.sqrt(cfg.conv_kernel)
                    p.copy_(torch.empty(p.shape).uniform_(-bound, bound, generator=generator))
                elif name.endswith("conv1d.bias"):
                    p.zero_()
                else:
                    std = 0.02
                    if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                        std = 0.02 / math.sqrt(2 * n_layers)
                    p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=generator))

    def trunk(self, ids: torch.Tensor, *, reference: bool = False) -> torch.Tensor:
        """Final (norm_f-ed) hidden states, (b, l, hidden)."""
        x = self.backbone.embeddings(ids)
        for layer in self.backbone.layers:
            x = layer(x, reference=reference)
        return self.backbone.norm_f(x)

    def forward(self, ids: torch.Tensor, *, reference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (b, l, V) for x[t+1], MTP logits (b, l-1, V) for x[t+2] at positions 0..l-2)."""
        h = self.trunk(ids, reference=reference)
        logits = self.lm_head(h)
        mtp_h = self.mtp.layers[0](self.backbone.embeddings(ids[:, 1:]), h[:, :-1])
        return logits, self.lm_head(mtp_h)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save_checkpoint(model: NemotronHTiny, out: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Write ``config.json`` and ``model.safetensors`` (the layout vLLM loads) to ``out``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = model.cfg.hf_config_dict(dtype=str(dtype).removeprefix("torch."))
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "evalgate_hybrid.json").write_text(json.dumps(model.cfg.to_json(), indent=2) + "\n")


def load_checkpoint(path: Path, dtype: torch.dtype = torch.float32) -> NemotronHTiny:
    """The torch model from a checkpoint written by ``save_checkpoint``."""
    from safetensors.torch import load_file

    cfg = HybridConfig.from_json(json.loads((path / "evalgate_hybrid.json").read_text()))
    model = NemotronHTiny(cfg)
    model.load_state_dict({k: v.to(dtype) for k, v in load_file(str(path / "model.safetensors")).items()})
    return model.to(dtype)
