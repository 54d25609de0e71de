"""A candidate that loads other weights with the same engine args (a re-quantized or re-trained checkpoint) is
gated, never NO-OP: the checkpoint's content fingerprint is part of the effective config the NO-OP check compares."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalgate.compare.stats import paired_comparison
from evalgate.evaluate.runner import with_requested_runtime
from evalgate.gate import Verdict, decide, effective_diff
from evalgate.inputs.config import EngineConfig, Sampling
from evalgate.inputs.thresholds import Thresholds
from evalgate.models.embedded import model_fingerprint

ENGINE = {"engine_args": {"dtype": "float32"}, "env": {"torch_num_threads": 2},
          "model": {"architectures": ["NemotronHForCausalLM"], "layer_kinds": ["mlp"]}}


def _cfg(model: str) -> EngineConfig:
    return EngineConfig(name="c", path=None, model=model, engine_args={"dtype": "float32"}, env={},
                        sampling=Sampling())


def _checkpoint(dest: Path, weights: bytes) -> Path:
    dest.mkdir()
    (dest / "config.json").write_text('{"architectures": ["NemotronHForCausalLM"]}')
    (dest / "model.safetensors").write_bytes(weights)
    return dest


def _same_items() -> list:
    scores = np.r_[np.ones(150), np.zeros(50)]
    return [("docparse", "docparse_fields", paired_comparison(scores, scores, alpha=0.05,
                                                              rng=np.random.default_rng(0), interval="auto"))]


def test_other_weights_under_the_same_engine_args_are_not_a_no_op(tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "a", b"weights a")
    b = _checkpoint(tmp_path / "b", b"weights b")
    fa, fb = model_fingerprint(str(a)), model_fingerprint(str(b))
    assert fa != fb
    base = with_requested_runtime(ENGINE, _cfg(str(a)), fa)
    cand = with_requested_runtime(ENGINE, _cfg(str(b)), fb)
    assert effective_diff(base, cand) == {"model.weights": (fa, fb)}
    assert base["model"]["architectures"] == ["NemotronHForCausalLM"]  # the read-back is kept beside it
    thr = Thresholds(alpha=0.05, default_margin=3.0)
    d = decide(_same_items(), thr.policy(None), baseline_effective=base, candidate_effective=cand)
    assert d.verdict is Verdict.PASS  # identical scores on 200 items: gated, and non-inferior


def test_the_same_checkpoint_named_two_ways_is_still_a_no_op(tmp_path: Path) -> None:
    a = _checkpoint(tmp_path / "a", b"weights a")
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    fa, fc = model_fingerprint(str(a)), model_fingerprint(str(copy))
    assert fa == fc  # content, not path
    base = with_requested_runtime(ENGINE, _cfg(str(a)), fa)
    cand = with_requested_runtime(ENGINE, _cfg(str(copy)), fc)
    assert effective_diff(base, cand) == {}
    d = decide(_same_items(), Thresholds(alpha=0.05, default_margin=3.0).policy(None), baseline_effective=base,
               candidate_effective=cand)
    assert d.verdict is Verdict.NO_OP


def test_a_config_run_records_the_weights_it_loaded_also_from_the_store(tmp_path: Path) -> None:
    """``runner._collect`` (fresh or stored suites alike) puts the loaded checkpoint's fingerprint in the effective
    config, so two configs that differ only in ``model`` differ there."""
    from evalgate.evaluate import runner
    from evalgate.results.store import ResultStore, tasks_to_json
    from evalgate.suites.discovery import Suite
    from runfixtures import task

    store = ResultStore(tmp_path / "store")
    suite = Suite(name="s", path=tmp_path / "suites" / "s", tasks=("s_t",), primary_metric={"s_t": "m"},
                  content_hash=hashlib.sha256(b"s").hexdigest())
    runs = {}
    for name, weights in (("a", b"weights a"), ("b", b"weights b")):
        cfg = _cfg(str(_checkpoint(tmp_path / name, weights)))
        plan = runner._plan(cfg, [suite], limit=3, store=store, reference=None, logprob_items=0)
        store.put(plan.keys["s"], {"suite": "s", "effective": ENGINE,
                                   "tasks": tasks_to_json({"s_t": task("s_t", "s", ["o"] * 3, [1.0] * 3)})})
        runs[name] = runner._collect(runner._plan(cfg, [suite], limit=3, store=store, reference=None,
                                                  logprob_items=0), store, tmp_path / "log")
        assert runs[name].cached == ["s"]  # served from the store, still stamped
        assert runs[name].effective["model"]["weights"] == model_fingerprint(str(tmp_path / name))
    assert effective_diff(runs["a"].effective, runs["b"].effective) == {
        "model.weights": (model_fingerprint(str(tmp_path / "a")), model_fingerprint(str(tmp_path / "b")))}


@pytest.mark.parametrize("weights", [None])
def test_without_a_fingerprint_the_read_back_is_left_as_it_was(weights: None) -> None:
    eff = with_requested_runtime(ENGINE, _cfg("m"), weights)
    assert eff["model"] == ENGINE["model"] and "weights" not in eff["model"]
