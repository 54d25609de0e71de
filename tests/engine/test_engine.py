"""The engine layer at unit level (``evalgate.engine``; no engine starts): request keys and grouping, the
read-back of what the engine applied from a fake ``VllmConfig``, per-request speculative-decoding counts, and the
boundary: vLLM is imported only inside ``evalgate/engine/``, and never by the parent's modules."""

from __future__ import annotations

import ast
import enum
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalgate.engine import readback
from evalgate.inputs.config import Sampling
from evalgate.worker.lm_adapter import group_requests, request_key, request_params
from evalgate.worker.vllm_engine import _spec_counts

PKG = Path(__file__).resolve().parents[2] / "evalgate"


def test_request_key_is_the_sha256_of_prompt_stop_and_budget() -> None:
    want = hashlib.sha256(json.dumps(["Q: 2+2?", ["\n"], 16], ensure_ascii=False).encode()).hexdigest()
    assert request_key("Q: 2+2?", ["\n"], 16) == want
    assert request_key("Q: 2+2?", ["\n"], 17) != want


def test_request_params_cap_the_budget_and_listify_until() -> None:
    sampling = Sampling(max_tokens=64)
    assert request_params({"until": "\n\n", "max_gen_toks": 256}, sampling) == (["\n\n"], 64)
    assert request_params({"until": ["a", "b"], "max_gen_toks": 10}, sampling) == (["a", "b"], 10)
    assert request_params({}, sampling) == ([], 64)


def test_group_requests_sends_each_prompt_once_per_group_and_reuses_the_journal() -> None:
    lm = SimpleNamespace(records={request_key("old", ["\n"], 8): {"text": "kept"}}, reused=0)
    args = [("p1", {"until": ["\n"], "max_gen_toks": 8}), ("p1", {"until": ["\n"], "max_gen_toks": 8}),
            ("p2", {"until": ["\n"], "max_gen_toks": 4}), ("old", {"until": ["\n"], "max_gen_toks": 8})]
    requests = ["r0", "r1", "r2", "r3"]
    seen: list[tuple[str, str]] = []
    keys, todo = group_requests(lm, args, requests, Sampling(max_tokens=64), lambda r, t: seen.append((r, t)))
    assert keys == [request_key("p1", ["\n"], 8)] * 2 + [request_key("p2", ["\n"], 4), request_key("old", ["\n"], 8)]
    assert set(todo) == {(("\n",), 8), (("\n",), 4)}
    assert todo[(("\n",), 8)] == {request_key("p1", ["\n"], 8): ("p1", ["r0", "r1"])}  # one prompt, two waiting
    assert lm.reused == 1 and seen == [("r3", "kept")]  # the journaled one is answered before any engine call


class _Dtype(enum.Enum):
    FP16 = "float16"


class _TorchDtype:
    def __str__(self) -> str:
        return "torch.float32"


def _vc(has_inner_state: bool) -> SimpleNamespace:
    spec = SimpleNamespace(method="ngram", num_speculative_tokens=3, prompt_lookup_min=2, prompt_lookup_max=4)
    return SimpleNamespace(
        speculative_config=spec,
        model_config=SimpleNamespace(has_inner_state=has_inner_state, dtype=_TorchDtype(), max_model_len=2048,
                                     hf_config=SimpleNamespace(architectures=["X"], layer_types=["mamba", "attn"])),
        cache_config=SimpleNamespace(cache_dtype="auto", mamba_ssm_cache_dtype=_Dtype.FP16),
        mamba_config=SimpleNamespace(backend="triton"),
        scheduler_config=SimpleNamespace(async_scheduling=False))


def test_readback_reports_applied_values_under_vllms_names() -> None:
    got = readback.effective_config(_vc(True), {"mamba_backend": "triton", "no_such_arg": 1})
    args = got["engine_args"]
    assert args["kv_cache_dtype"] == "auto"  # EngineArgs' kv_cache_dtype is cache_config.cache_dtype
    assert args["mamba_backend"] == "triton" and args["mamba_ssm_cache_dtype"] == "float16"
    assert args["dtype"] == "float32" and args["async_scheduling"] is False
    assert args["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                                          "prompt_lookup_max": 4}
    assert args["no_such_arg"] == readback.UNRESOLVED
    assert got["model"] == {"architectures": ["X"], "layer_kinds": ["attn", "mamba"]}
    assert set(readback.WATCHED_KEYS) <= set(args)


def test_readback_marks_ssm_settings_inactive_without_ssm_layers() -> None:
    args = readback.effective_config(_vc(False), {})["engine_args"]
    assert args["mamba_ssm_cache_dtype"] == readback.NO_SSM and args["mamba_backend"] == readback.NO_SSM
    assert args["dtype"] == "float32"


def test_readback_reads_multimodal_args_from_the_models_multimodal_config() -> None:
    """vLLM keeps limit_mm_per_prompt and mm_processor_cache_gb in model_config.multimodal_config; model_config itself
    holds them only as init arguments, read as None whatever was applied (what the readback said before)."""
    mm_config = pytest.importorskip("vllm.config.multimodal", reason="needs vLLM")
    vc = _vc(False)
    vc.model_config.limit_mm_per_prompt = vc.model_config.mm_processor_cache_gb = None  # the init arguments
    vc.model_config.multimodal_config = mm_config.MultiModalConfig(limit_per_prompt={"image": 1},
                                                                   mm_processor_cache_gb=0)
    args = readback.effective_config(vc, {"limit_mm_per_prompt": {"image": 1}, "mm_processor_cache_gb": 0})
    assert args["engine_args"]["limit_mm_per_prompt"] == {"image": 1}
    assert args["engine_args"]["mm_processor_cache_gb"] == 0.0
    vc.model_config.multimodal_config = None  # a text-only model
    args = readback.effective_config(vc, {"limit_mm_per_prompt": {"image": 1}})
    assert args["engine_args"]["limit_mm_per_prompt"] == readback.UNRESOLVED


def test_spec_counts_from_the_acceptance_histogram() -> None:
    # histogram[j] = verify steps that accepted j drafts: 3 + 2 + 1 = 6 steps, 0*3 + 1*2 + 2*1 = 4 accepted
    got = _spec_counts(SimpleNamespace(histogram=[3, 2, 1], num_draft_tokens=12))
    assert got == {"spec_decode_num_drafts": 6, "spec_decode_num_draft_tokens": 12,
                   "spec_decode_num_accepted_tokens": 4}
    assert _spec_counts(None) is None


def _vllm_imports(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == "vllm" or n.startswith("vllm.") for n in names):
            lines.append(node.lineno)
    return lines


def test_vllm_is_imported_only_inside_the_engine_and_worker_packages() -> None:
    outside = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
               if p.relative_to(PKG).parts[0] not in ("engine", "worker") and _vllm_imports(p)}
    assert outside == set()
    inside = [str(p.relative_to(PKG)) for p in sorted(PKG.rglob("*.py"))
              if p.relative_to(PKG).parts[0] in ("engine", "worker") and _vllm_imports(p)]
    assert sorted(inside) == ["engine/argnames.py", "engine/serve.py", "worker/main.py", "worker/probe.py",
                              "worker/replay.py", "worker/replay_gate.py", "worker/throughput.py",
                              "worker/vllm_engine.py"]


def test_the_parent_modules_import_neither_vllm_nor_lm_eval() -> None:
    code = ("import sys, evalgate.cli, evalgate.commands.pipeline, evalgate.commands.jobs, evalgate.evaluate.runner, evalgate.engine; "
            "print(sorted(m for m in ('vllm', 'lm_eval', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent, env={"PYTHONPATH": str(PKG.parent), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"
