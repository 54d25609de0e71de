"""configs/scale/moe/*-80g: the 30B-A3B shape fitted to an 80 GB GPU. Its arithmetic, counted here from the shape's
config.json: one engine at 0.88 holds the BF16 weights and 64 sequences of FP32 SSM state with room to spare, two
engines cannot both hold their weights, and the candidate differs from its baseline in the state's dtype only."""

from __future__ import annotations

from evalgate.commands.ablate import Switch, switches
from evalgate.inputs.config import CONFIGS_DIR, load_baseline, load_config
from evalgate.models import shapes

H100_BYTES = 81_559 * 2**20  # nvidia-smi's memory.total of the lent H100 80GB HBM3 (torch may see ~0.5 GiB less)
# What an engine's pool holds besides weights and KV/state (activations, CUDA graphs): on the 8B shape at 0.8 of that
# H100, 0.8 x 79.6 GiB - 14.99 GiB of weights - 45.66 GiB of KV cache = 3.0 GiB (session 26's baseline.log).
HEADROOM = 3 * 2**30


def _weight_bytes(cfg: dict) -> int:
    """BF16 bytes of NemotronH's large matrices (embeddings, Mamba-2 projections, MoE experts, attention)."""
    h, kinds = cfg["hidden_size"], cfg["layers_block_type"]
    d_inner = cfg["mamba_num_heads"] * cfg["mamba_head_dim"]
    bc = 2 * cfg["n_groups"] * cfg["ssm_state_size"]
    mamba = h * (2 * d_inner + bc + cfg["mamba_num_heads"]) + (d_inner + bc) * cfg["conv_kernel"] + d_inner * h
    moe = (cfg["n_routed_experts"] * 2 * h * cfg["moe_intermediate_size"]       # up + down, ReLU^2 (not gated)
           + 2 * h * cfg["moe_shared_expert_intermediate_size"] + h * cfg["n_routed_experts"])
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    attention = h * q + 2 * h * kv + q * h
    per_kind = {"linear_attention": mamba, "moe": moe, "full_attention": attention}
    embeddings = cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return 2 * (embeddings + sum(per_kind[k] for k in kinds))


def _fp32_state_bytes_per_sequence(cfg: dict) -> int:
    """The SSM state (heads x head_dim x state, FP32) of every Mamba-2 layer, plus its BF16 conv state."""
    layers = cfg["layers_block_type"].count("linear_attention")
    ssm = cfg["mamba_num_heads"] * cfg["mamba_head_dim"] * cfg["ssm_state_size"] * 4
    conv = (cfg["mamba_num_heads"] * cfg["mamba_head_dim"] + 2 * cfg["n_groups"] * cfg["ssm_state_size"]) \
        * (cfg["conv_kernel"] - 1) * 2
    return layers * (ssm + conv)


def test_one_80g_engine_holds_the_weights_and_its_sequences_and_two_cannot() -> None:
    cand = load_config(CONFIGS_DIR / "scale/moe/fp16-state-80g.yaml", check_engine_args=False)
    base = load_baseline(cand, check_engine_args=False)
    shape = shapes.nemotron_3_nano_30b_a3b()
    weights = _weight_bytes(shape)
    assert 31.0e9 < weights / 2 < 32.0e9            # the published ~31.6 B parameters
    for cfg in (base, cand):
        pool = cfg.engine_args["gpu_memory_utilization"] * H100_BYTES
        state = cfg.engine_args["max_num_seqs"] * _fp32_state_bytes_per_sequence(shape)
        assert weights + state + HEADROOM < pool, cfg.name
    assert 2 * weights > H100_BYTES                  # not twice: the sides must alternate
    assert (base.placement, cand.placement) == ("alternate", "alternate")
    # why the 80 GB configs exist: the H200-sized baseline fits neither its own 0.8 at 64 sequences nor its own
    # 256 sequences at 0.88 of this card
    big = load_config(CONFIGS_DIR / "scale/moe/baseline.yaml", check_engine_args=False)
    share, seqs = big.engine_args["gpu_memory_utilization"], big.engine_args["max_num_seqs"]
    assert (share, seqs) == (0.8, 256)
    per_seq = _fp32_state_bytes_per_sequence(shape)
    assert weights + 64 * per_seq + HEADROOM > share * H100_BYTES
    assert weights + seqs * per_seq + HEADROOM > base.engine_args["gpu_memory_utilization"] * H100_BYTES


def test_the_80g_candidate_changes_only_the_state_dtype() -> None:
    cand = load_config(CONFIGS_DIR / "scale/moe/fp16-state-80g.yaml", check_engine_args=False)
    base = load_baseline(cand, check_engine_args=False)
    assert base.name == "scale/moe/baseline-80g"
    assert switches(base, cand) == [Switch("engine_args", "mamba_ssm_cache_dtype", "float16")]
    assert base.engine_args["mamba_ssm_cache_dtype"] == "float32"
