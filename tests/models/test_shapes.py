"""Config-only models of real architectures (evalgate/models/shapes.py): their configs against the published
shapes, counted here from the pattern strings, and how they are written under $EVALGATE_HOME."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalgate.models import embedded, shapes
from evalgate.models.hybrid import CHECKPOINT_DIR

# NVIDIA-Nemotron-3-Nano-30B-A3B's config.json (hybrid_override_pattern; M Mamba-2, E MoE, * attention).
NANO3 = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
# The 8B probe's layer string as transformers prints it for make_dummy.py's directory (measured on the H200).
PROBE_8B = "M-M-M-M*M-M-M-M-M-*M-M-M-M-M-*M-M-M-M-M-*M-M-M-M-M-M"
LETTER = {"linear_attention": "M", "moe": "E", "full_attention": "*", "mlp": "-"}


def _pattern(cfg: dict) -> str:
    return "".join(LETTER[k] for k in cfg["layers_block_type"])


def test_8b_shape_is_the_probes_directory() -> None:
    cfg = shapes.nemotron_h_8b()
    assert _pattern(cfg) == PROBE_8B and len(PROBE_8B) == 52
    assert (PROBE_8B.count("M"), PROBE_8B.count("*"), PROBE_8B.count("-")) == (25, 4, 23)
    assert [i for i, c in enumerate(PROBE_8B) if c == "*"] == [7, 18, 29, 40]
    assert {k: cfg[k] for k in ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                "intermediate_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                                "n_groups", "num_nextn_predict_layers")} == {
        "vocab_size": 131072, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 21504, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "ssm_state_size": 128, "n_groups": 8, "num_nextn_predict_layers": 0}
    assert cfg["mtp_layers_block_type"] == [] and cfg["architectures"] == ["NemotronHForCausalLM"]


def test_30b_a3b_shape_follows_the_published_config() -> None:
    cfg = shapes.nemotron_3_nano_30b_a3b()
    assert _pattern(cfg) == NANO3
    assert (NANO3.count("M"), NANO3.count("E"), NANO3.count("*")) == (23, 23, 6)
    assert shapes.layer_counts(cfg) == {"full_attention": 6, "linear_attention": 23, "moe": 23}
    assert {k: cfg[k] for k in ("hidden_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "moe_shared_expert_intermediate_size", "n_shared_experts", "mamba_num_heads",
                                "num_key_value_heads", "routed_scaling_factor", "vocab_size")} == {
        "hidden_size": 2688, "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
        "moe_shared_expert_intermediate_size": 3712, "n_shared_experts": 1, "mamba_num_heads": 64,
        "num_key_value_heads": 2, "routed_scaling_factor": 2.5, "vocab_size": 131072}


def test_30b_a3b_total_parameters_are_about_31_billion() -> None:
    """Counted here from the published sizes (embedding + head, Mamba-2, MoE, attention), as the model card's ~31.6 B."""
    c = shapes.nemotron_3_nano_30b_a3b()
    h, v = c["hidden_size"], c["vocab_size"]
    inner = c["mamba_num_heads"] * c["mamba_head_dim"]
    conv = inner + 2 * c["n_groups"] * c["ssm_state_size"]
    mamba = h * (inner + conv + c["mamba_num_heads"]) + inner * h
    moe = c["n_routed_experts"] * 2 * h * c["moe_intermediate_size"] + 2 * h * c["moe_shared_expert_intermediate_size"]
    attn = h * c["head_dim"] * (c["num_attention_heads"] * 2 + 2 * c["num_key_value_heads"])
    total = 2 * v * h + 23 * mamba + 23 * moe + 6 * attn
    assert 30e9 < total < 33e9


def test_transformers_reads_the_shapes_as_nemotron_h(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    for alias, want in (("embedded:nemotron-3-nano-30b-a3b-shape", NANO3), ("embedded:nemotron-h-8b-shape", PROBE_8B)):
        hf = transformers.AutoConfig.from_pretrained(str(shapes.prepare_shape(alias, tmp_path)))
        assert hf.hybrid_override_pattern == want and hf.vocab_size == 131072


def test_prepare_writes_config_and_tokenizer_once_and_rebuilds_an_old_recipe(tmp_path: Path) -> None:
    alias = "embedded:nemotron-h-cpu-shape"
    d = shapes.prepare_shape(alias, tmp_path)
    assert d == tmp_path / "models" / "nemotron-h-cpu-shape"
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "evalgate-model.json", "tokenizer.json",
                                                   "tokenizer_config.json"]
    assert (d / "tokenizer.json").read_bytes() == (CHECKPOINT_DIR / "tokenizer.json").read_bytes()
    cfg = json.loads((d / "config.json").read_text())
    packaged = json.loads((CHECKPOINT_DIR / "config.json").read_text())
    assert cfg["vocab_size"] == 131072 and packaged["vocab_size"] == 2048
    assert cfg["layers_block_type"] == packaged["layers_block_type"] and cfg["num_nextn_predict_layers"] == 0
    mtime = (d / "config.json").stat().st_mtime_ns
    assert shapes.prepare_shape(alias, tmp_path) == d and (d / "config.json").stat().st_mtime_ns == mtime
    marker = json.loads((d / "evalgate-model.json").read_text())
    assert marker["recipe"] == shapes.RECIPE_VERSION
    assert embedded.model_fingerprint(str(d)) == marker["fingerprint"]
    (d / "evalgate-model.json").write_text(json.dumps({**marker, "recipe": shapes.RECIPE_VERSION - 1}))
    (d / "config.json").write_text("{}")
    assert json.loads((shapes.prepare_shape(alias, tmp_path) / "config.json").read_text())["vocab_size"] == 131072


def test_every_shape_is_an_embedded_alias_resolved_under_the_home(tmp_path: Path) -> None:
    assert set(shapes.SHAPES) == set(embedded.SHAPE_ALIASES) <= set(embedded.EMBEDDED_ALIASES)
    for alias, (dirname, _) in shapes.SHAPES.items():
        assert embedded.resolve_model(alias, tmp_path) == str(tmp_path / "models" / dirname)


def test_a_shape_config_without_load_format_dummy_is_refused(tmp_path: Path) -> None:
    from evalgate.errors import ConfigError
    from evalgate.inputs.config import load_config

    (tmp_path / "s.yaml").write_text("model: embedded:nemotron-h-8b-shape\nengine_args: {dtype: bfloat16}\n")
    with pytest.raises(ConfigError) as info:
        load_config("s", tmp_path, check_engine_args=False)
    assert info.value.field == "engine_args.load_format" and info.value.path == tmp_path / "s.yaml"
    (tmp_path / "s.yaml").write_text("model: embedded:nemotron-h-8b-shape\nengine_args: {load_format: dummy}\n")
    assert load_config("s", tmp_path, check_engine_args=False).engine_args["load_format"] == "dummy"
