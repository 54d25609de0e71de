"""Config loading: inheritance, validation errors naming file and field, engine-arg names."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs.config import CONFIGS_DIR, list_configs, load_config

BASE = """
model: embedded:gemma-3-270m
engine_args: {dtype: float32, enforce_eager: true, seed: 0}
env: {A: "1"}
sampling: {temperature: 0.0, max_tokens: 64, seed: 0}
"""


def write(d: Path, name: str, text: str) -> Path:
    p = d / f"{name}.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def load(ref: str | Path, d: Path):
    return load_config(ref, d, check_engine_args=False)


def test_child_overrides_parent_key_by_key(tmp_path: Path) -> None:
    write(tmp_path, "baseline", BASE)
    write(tmp_path, "cand", "extends: baseline\nengine_args: {dtype: bfloat16}\nenv: {B: 2}\n")
    c = load("cand", tmp_path)
    assert c.engine_args == {"dtype": "bfloat16", "enforce_eager": True, "seed": 0}
    assert c.env == {"A": "1", "B": "2"}
    assert c.sampling.max_tokens == 64
    assert c.baseline == "baseline"
    assert [p.name for p in c.chain] == ["cand.yaml", "baseline.yaml"]


def test_null_removes_a_parent_key(tmp_path: Path) -> None:
    write(tmp_path, "baseline", BASE)
    write(tmp_path, "cand", "extends: baseline\nengine_args: {enforce_eager: null}\n")
    assert "enforce_eager" not in load("cand", tmp_path).engine_args


def test_grandchild_and_explicit_baseline(tmp_path: Path) -> None:
    write(tmp_path, "baseline", BASE)
    write(tmp_path, "mid", "extends: baseline\nengine_args: {speculative_config: {method: ngram, num_speculative_tokens: 1}}\n")
    write(tmp_path, "leaf", "extends: mid\nbaseline: baseline\nengine_args: {speculative_config: {method: ngram, num_speculative_tokens: 3}}\n")
    c = load("leaf", tmp_path)
    assert c.engine_args["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3}
    assert c.baseline == "baseline"


def test_extends_resolves_next_to_the_file_first(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    write(configs, "baseline", BASE)
    other = tmp_path / "elsewhere"
    write(other, "baseline", BASE.replace("float32", "float16"))
    p = write(other, "cand", "extends: baseline\n")
    assert load(str(p), configs).engine_args["dtype"] == "float16"


@pytest.mark.parametrize(
    ("files", "ref", "field", "fragment"),
    [
        ({"c": "extends: c\n"}, "c", "extends", "cycle"),
        ({"a": "extends: b\n", "b": "extends: a\n"}, "a", "extends", "cycle"),
        ({"c": "extends: nope\n"}, "c", "extends", "not found"),
        ({"c": BASE + "engine_arg: {}\n"}, "c", "engine_arg", "did you mean 'engine_args'"),
        ({"c": BASE.replace("max_tokens: 64", "max_tokens: -1")}, "c", "sampling.max_tokens", ">= 1"),
        ({"c": BASE.replace("max_tokens: 64", "max_tokens: lots")}, "c", "sampling.max_tokens", "integer"),
        ({"c": BASE.replace("temperature: 0.0", "temperature: true")}, "c", "sampling.temperature", "number"),
        ({"c": BASE.replace("temperature: 0.0", "tempreature: 0.0")}, "c", "sampling.tempreature", "temperature"),
        ({"c": BASE + "sampling: {seed: 1}\n"}, "c", "sampling", "duplicate key 'sampling'"),
        ({"c": "engine_args: {dtype: float32}\n"}, "c", "model", "required"),
        ({"c": BASE + "expect: maybe\n"}, "c", "expect", "lossless"),
        ({"c": "model: m\nengine_args: [1, 2]\n"}, "c", "engine_args", "mapping"),
        ({"c": "model: m\nenv: {X: [1]}\n"}, "c", "env.X", "string or number"),
    ],
)
def test_bad_configs_name_file_and_field(tmp_path: Path, files: dict[str, str], ref: str, field: str,
                                         fragment: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ConfigError) as ei:
        load(ref, tmp_path)
    msg = str(ei.value)
    assert ei.value.field == field
    assert fragment in msg
    assert ".yaml" in msg and "\n" not in msg
    assert ei.value.exit_code == ExitCode.USAGE


def test_yaml_syntax_error_gives_line(tmp_path: Path) -> None:
    write(tmp_path, "c", "model: m\nengine_args: {dtype: float32\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: YAML syntax error: line \d"):
        load("c", tmp_path)


def test_non_utf8_empty_and_directory(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"model: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load("bin", tmp_path)
    write(tmp_path, "empty", "")
    with pytest.raises(ConfigError, match="empty"):
        load("empty", tmp_path)
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match="directory"):
        load("dir", tmp_path)


def test_unknown_config_name_suggests(tmp_path: Path) -> None:
    write(tmp_path, "fp16-state", BASE)
    with pytest.raises(ConfigError, match="did you mean 'fp16-state'"):
        load("fp16-stat", tmp_path)


def test_shipped_configs_all_load_and_extend_baseline() -> None:
    names = list_configs(CONFIGS_DIR)
    for required in ("baseline", "fp16-state", "mtp1", "mtp3", "async-sched", "flashinfer-mamba", "omp1",
                     "cline-recipe", "fp16-state-sr", "fp16-state-flashinfer", "sr-only", "aa", "dense/baseline", "dense/bf16", "dense/ngram", "dense/fp16-state"):
        assert required in names
    # The seed's switches act on evalgate's own hybrid (Mamba2 + attention, MTP head); Gemma is the dense family.
    base = load_config("baseline", CONFIGS_DIR, check_engine_args=False)
    assert base.model == "embedded:nemotron-h-tiny"
    assert base.engine_args["dtype"] == "float32" and base.baseline is None
    assert base.engine_args["mamba_ssm_cache_dtype"] == "float32"
    fp16 = load_config("fp16-state", CONFIGS_DIR, check_engine_args=False)
    assert fp16.engine_args["mamba_ssm_cache_dtype"] == "float16" and fp16.baseline == "baseline"
    assert fp16.model == "embedded:nemotron-h-tiny"
    bf16 = load_config("dense/bf16", CONFIGS_DIR, check_engine_args=False)
    assert bf16.model == "embedded:gemma-3-270m" and bf16.engine_args["dtype"] == "bfloat16"
    assert bf16.chain[-1].name == "baseline.yaml" and bf16.chain[-1].parent.name == "dense"
    assert load_config("mtp3", CONFIGS_DIR, check_engine_args=False).engine_args["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": 3}
    assert load_config("omp1", CONFIGS_DIR, check_engine_args=False).env == {"OMP_NUM_THREADS": "1"}


def _differs(name: str) -> dict[str, object]:
    """Engine args (and env) in which config ``name`` differs from its baseline: {key: (baseline, candidate)}."""
    from evalgate.inputs.config import load_baseline

    cand = load_config(name, CONFIGS_DIR, check_engine_args=False)
    base = load_baseline(cand, CONFIGS_DIR, check_engine_args=False)
    a, b = {**base.engine_args, **base.env}, {**cand.engine_args, **cand.env}
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def test_hybrid_baseline_pins_every_switch_off_and_each_candidate_flips_only_its_own() -> None:
    base = load_config("baseline", CONFIGS_DIR, check_engine_args=False).engine_args
    assert base["async_scheduling"] is False and base["mamba_backend"] == "triton"
    assert base["mamba_ssm_cache_dtype"] == "float32" and "speculative_config" not in base
    assert _differs("async-sched") == {"async_scheduling": (False, True)}
    assert _differs("fp16-state") == {"mamba_ssm_cache_dtype": ("float32", "float16")}
    assert _differs("flashinfer-mamba") == {"mamba_backend": ("triton", "flashinfer")}
    assert _differs("aa") == {"seed": (0, 1)}
    assert set(_differs("mtp1")) == {"speculative_config"}
    assert _differs("sr-only") == {"enable_mamba_cache_stochastic_rounding": (None, True)}
    assert _differs("fp16-state-sr") == {"enable_mamba_cache_stochastic_rounding": (None, True),
                                         "mamba_backend": ("triton", "flashinfer"),
                                         "mamba_ssm_cache_dtype": ("float32", "float16")}
    for family in ("dense", "gdn", "vl"):
        assert load_config(f"{family}/baseline", CONFIGS_DIR, check_engine_args=False).engine_args[
            "async_scheduling"] is False


def test_stochastic_rounding_on_the_triton_kernel_is_refused_on_gpus_without_cvt_rs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on an H200 (sm_90, vLLM 0.26.0): SR on the Triton Mamba kernel dies in ptxas after the engine started.
    evalgate refuses it before any engine starts; the FlashInfer kernel (software rounding) and SM100 stay allowed."""
    import importlib.util

    from evalgate.engine import platform

    sr = {"enable_mamba_cache_stochastic_rounding": True, "mamba_ssm_cache_dtype": "float16"}
    monkeypatch.setattr(platform, "_has_cuda", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "flashinfer" else real_find_spec(name, *a))
    cases = ((((9, 0),), "sm_90"), (((8, 0),), "sm_80"), (((12, 0),), "sm_120"), (((9, 0), (8, 6)), "sm_86/sm_90"),
             (((10, 0),), None), (((10, 3),), None), (((9, 0), (10, 0)), None))  # mixed: CUDA may pick the SM100
    for caps, arch in cases:
        monkeypatch.setattr(platform, "_gpu_capabilities", lambda visible, c=caps: c)
        for backend in (None, "triton", "TRITON"):
            args = sr if backend is None else {**sr, "mamba_backend": backend}
            if arch:
                with pytest.raises(ConfigError) as ei:
                    platform.check_platform(args, "cum2.yaml")
                assert ei.value.field == "engine_args.enable_mamba_cache_stochastic_rounding"
                assert f"this GPU is {arch}," in str(ei.value) and str(ei.value).startswith("cum2.yaml: ")
                assert ei.value.message.endswith("set 'mamba_backend: flashinfer' (it rounds in software)")
            else:
                platform.check_platform(args, "cum2.yaml")
        platform.check_platform({**sr, "mamba_backend": "flashinfer"}, "x")  # software rounding: every capability
    monkeypatch.setattr(platform, "_gpu_capabilities", lambda visible: None)  # unreadable: left to the engine
    platform.check_platform(sr, "x")
    assert [platform.triton_rounds_stochastically((m, 0)) for m in (7, 8, 9, 10, 11, 12)] == [
        False, False, False, True, True, False]
    # The GPUs asked about are the config's own CUDA_VISIBLE_DEVICES when it sets one, else the process's.
    asked: list[str] = []
    monkeypatch.setattr(platform, "_gpu_capabilities", lambda visible: asked.append(visible))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    platform.check_platform(sr, "x", {"CUDA_VISIBLE_DEVICES": "5"})
    platform.check_platform(sr, "x", {})
    assert asked == ["5", "2"]


def test_cuda_is_a_gpu_device_node_not_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES alone never makes a CPU host count as CUDA; "" and "-1" hide every GPU, as for CUDA."""
    import glob

    from evalgate.engine import platform

    nodes: list[str] = []
    monkeypatch.setattr(glob, "glob", lambda pattern: list(nodes) if pattern == "/dev/nvidia[0-9]*" else [])
    for visible, with_node, without_node in ((None, True, False), ("0", True, False), ("", False, False),
                                            ("-1", False, False), (" -1 ", False, False), ("GPU-aaa", True, False)):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        nodes[:] = ["/dev/nvidia0"]
        assert platform._has_cuda() is with_node, visible
        nodes[:] = []
        assert platform._has_cuda() is without_node, visible


def test_gpu_capabilities_are_the_visible_gpus_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    """The platform check reads the capabilities of the GPUs ``device.visible_gpus`` lists (its nvidia-smi reading is
    tested in tests/engine/test_device.py); nothing without CUDA or when nvidia-smi cannot tell."""
    from evalgate.engine import device, platform

    gpus = (device.Gpu("0", "GPU-a", "NVIDIA H200", (9, 0)), device.Gpu("1", "GPU-b", "NVIDIA B200", (10, 0)))
    asked: list[str] = []
    monkeypatch.setattr(device, "visible_gpus", lambda visible: asked.append(visible) or gpus)
    monkeypatch.setattr(platform, "_has_cuda", lambda: True)
    assert platform._gpu_capabilities("0,1") == ((9, 0), (10, 0)) and asked == ["0,1"]
    monkeypatch.setattr(device, "visible_gpus", lambda visible: None)
    assert platform._gpu_capabilities("") is None
    monkeypatch.setattr(device, "visible_gpus", lambda visible: gpus)
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    assert platform._gpu_capabilities("") is None


def _vllm_engine_args() -> type:
    """vLLM's ``EngineArgs``; skips the calling test where vLLM does not import (only the tests that need vLLM's own
    names call this: the rest of this file runs without vLLM)."""
    return pytest.importorskip("vllm.engine.arg_utils", reason="needs vLLM for EngineArgs names").EngineArgs


def test_unknown_engine_arg_is_named_in_the_file_that_set_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The name check itself, against a stand-in list of vLLM names (no vLLM needed): the closest name is
    suggested, the file named is the layer that set the key (child or parent), ``model`` is refused as reserved."""
    from evalgate.engine import argnames

    names = frozenset({"dtype", "enforce_eager", "seed", "mamba_ssm_cache_dtype", "max_model_len"})
    monkeypatch.setattr(argnames, "engine_arg_names", lambda: names)
    write(tmp_path, "baseline", BASE)
    write(tmp_path, "cand", "extends: baseline\nengine_args: {mamba_ssm_cache_dtyp: float16}\n")
    with pytest.raises(ConfigError) as ei:
        load_config("cand", tmp_path)
    assert ei.value.field == "engine_args.mamba_ssm_cache_dtyp" and ei.value.exit_code == ExitCode.USAGE
    assert "did you mean 'mamba_ssm_cache_dtype'" in str(ei.value)
    assert Path(ei.value.path).name == "cand.yaml"
    write(tmp_path, "badbase", BASE.replace("enforce_eager: true, seed: 0", "enforce_eager: true, sede: 0"))  # the typo is the parent's
    write(tmp_path, "child", "extends: badbase\nengine_args: {dtype: float16}\n")
    with pytest.raises(ConfigError) as ei:
        load_config("child", tmp_path)
    assert ei.value.field == "engine_args.sede" and Path(ei.value.path).name == "badbase.yaml"
    assert "did you mean 'seed'" in str(ei.value)
    write(tmp_path, "withmodel", "extends: baseline\nengine_args: {model: other}\n")
    with pytest.raises(ConfigError, match="top-level 'model' key") as ei:
        load_config("withmodel", tmp_path)
    assert ei.value.field == "engine_args.model"
    assert load_config("cand", tmp_path, check_engine_args=False).engine_args["mamba_ssm_cache_dtyp"] == "float16"
    write(tmp_path, "good", "extends: baseline\nengine_args: {mamba_ssm_cache_dtype: float16}\n")
    assert load_config("good", tmp_path).engine_args["mamba_ssm_cache_dtype"] == "float16"


def test_engine_args_cannot_be_checked_without_vllm_is_a_config_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where vLLM does not import, checking engine-arg names fails closed (exit 2, field ``engine_args``): a config
    is never waved through unchecked."""
    import sys

    from evalgate.engine import argnames

    for name in ["vllm", *(m for m in sys.modules if m.startswith("vllm."))]:  # also where vLLM was imported before
        monkeypatch.setitem(sys.modules, name, None)  # import -> ImportError; find_spec("vllm") -> None
    argnames.engine_arg_names.cache_clear()
    try:
        write(tmp_path, "baseline", BASE)
        with pytest.raises(ConfigError, match="vLLM is not importable") as ei:
            load_config("baseline", tmp_path)
        assert ei.value.field == "engine_args" and ei.value.exit_code == ExitCode.USAGE
    finally:
        argnames.engine_arg_names.cache_clear()  # the next caller reads the real vLLM again


def test_unknown_engine_arg_suggests_the_closest_vllm_name(tmp_path: Path) -> None:
    _vllm_engine_args()
    write(tmp_path, "baseline", BASE)
    write(tmp_path, "cand", "extends: baseline\nengine_args: {mamba_ssm_cache_dtyp: float16}\n")
    with pytest.raises(ConfigError) as ei:
        load_config("cand", tmp_path)
    assert ei.value.field == "engine_args.mamba_ssm_cache_dtyp"
    assert "did you mean 'mamba_ssm_cache_dtype'" in str(ei.value)
    assert "cand.yaml" in str(ei.value)


def test_shipped_configs_use_real_engine_arg_names() -> None:
    _vllm_engine_args()
    for name in list_configs(CONFIGS_DIR):
        load_config(name, CONFIGS_DIR)  # raises on any name vLLM's EngineArgs lacks


def test_engine_arg_names_read_from_source_match_the_imported_dataclass() -> None:
    import dataclasses

    from evalgate.engine.argnames import _engine_arg_names_from_source
    from evalgate.inputs.config import engine_arg_names

    real = {f.name for f in dataclasses.fields(_vllm_engine_args())}
    assert _engine_arg_names_from_source() == real
    assert engine_arg_names() == real


def test_switches_the_platform_cannot_run_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without CUDA, FlashInfer's Mamba kernel and stochastic rounding fail before any engine starts."""
    from evalgate.engine import platform

    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    with pytest.raises(ConfigError) as ei:
        platform.check_platform({"mamba_backend": "flashinfer"}, "x.yaml")
    assert ei.value.field == "engine_args.mamba_backend" and "CPU" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        platform.check_platform({"enable_mamba_cache_stochastic_rounding": True, "mamba_ssm_cache_dtype": "float16"}, "x")
    assert ei.value.field == "engine_args.enable_mamba_cache_stochastic_rounding"
    platform.check_platform({"mamba_ssm_cache_dtype": "float16", "async_scheduling": True}, "x")  # not refused
    monkeypatch.setattr(platform, "_has_cuda", lambda: True)
    with pytest.raises(ConfigError, match="explicit 'mamba_ssm_cache_dtype: float16'"):
        platform.check_platform({"enable_mamba_cache_stochastic_rounding": True}, "x")


@pytest.mark.parametrize(("name", "origin"), [
    ("flashinfer-mamba", "flashinfer-mamba.yaml"), ("cline-recipe", "cline-recipe.yaml"),
    ("fp16-state-sr", "fp16-state-sr.yaml"), ("fp16-state-flashinfer", "fp16-state-flashinfer.yaml"),
    ("sr-only", "fp16-state-flashinfer.yaml"),  # sr-only: its baseline, checked first, is refused
])
def test_cuda_only_configs_are_refused_on_cpu_before_any_engine(
        name: str, origin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``evalgate run`` of a CUDA-only shipped config on a CPU host: exit 2 and one line naming the config file and
    the switch, before any engine starts. Needs vLLM: the run first checks the configs' engine-arg names, which
    (without vLLM) refuses every config for another reason and would let this test pass without the platform check.
    """
    from evalgate.cli import main
    from evalgate.engine import platform
    from evalgate.evaluate import runner

    _vllm_engine_args()
    monkeypatch.setattr(platform, "_has_cuda", lambda: False)
    monkeypatch.setattr(runner, "start_config", lambda *a, **k: pytest.fail("an engine was started"))
    assert main(["run", "--config", name, "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("evalgate: error: ")
    assert f"{origin}: engine_args.mamba_backend: the FlashInfer Mamba kernel needs a CUDA GPU" in err
    assert err.endswith("this platform is CPU (vLLM's CPU build)")
