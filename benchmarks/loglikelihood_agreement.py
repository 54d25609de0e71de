"""Does evalgate's vLLM adapter answer loglikelihood requests as lm-eval's own HF backend does?

Run (about a minute for the hybrid on 2 CPU cores; Gemma needs ``evalgate model prepare`` first)::

    python benchmarks/loglikelihood_agreement.py [--model embedded:nemotron-h-tiny] [--items 8] [--json OUT]

The same multiple-choice requests go to ``lm_eval.models.huggingface.HFLM`` (transformers, float32, the same local
checkpoint) and to evalgate's adapter (``engine.make_lm`` over ``VllmEngine``, float32, the baseline's engine args):
``loglikelihood`` for every (prompt, choice) pair, ``loglikelihood_rolling`` for a few texts. The items are
:func:`mc_requests`: docparse prompts (the suite's generator), each with its gold answer and the answers of two other
documents of the same kind as choices. Prints, as one JSON line: request counts, the largest absolute and relative
log-prob difference (overall, and over the likely choices, log-prob > -5), agreement of ``is_greedy`` and of each
item's argmax choice (``acc``), and seconds per side. For the hybrid it also compares evalgate's answers with
evalgate's plain-PyTorch model of it (the math vLLM implements): transformers' NemotronH differs from both by up to
~1 nat on very unlikely continuations (HFLM's numbers equal a direct transformers forward), so the hybrid's HF figure
measures transformers' implementation; Gemma 3 270M (``--model embedded:gemma-3-270m``) compares like with like.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mc_requests(n: int, seed: int = 1234) -> list[tuple[str, list[str], int]]:
    """``n`` deterministic (prompt, choices, gold index) items from the docparse suite's own generator."""
    spec = importlib.util.spec_from_file_location("evalgate_bench_docparse", ROOT / "suites" / "docparse" / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    items = mod.make_items(seed, 4 * n, "llbench")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        doc = items[i]
        others = [x["target"] for x in items if x["kind"] == doc["kind"] and x["target"] != doc["target"]][:2]
        choices = [doc["target"], *others]
        rng.shuffle(choices)
        out.append((mod.doc_to_text(doc), [" " + c for c in choices], choices.index(doc["target"])))
    return out


def _instances(items: list[tuple[str, list[str], int]], texts: list[str]) -> tuple[list, list]:
    from lm_eval.api.instance import Instance

    ll = [Instance("loglikelihood", {}, (p, c), i) for p, cs, _ in items for i, c in enumerate(cs)]
    rolling = [Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts]
    return ll, rolling


def _hybrid_reference(path: str, tokenizer, items, eg_ll) -> dict:
    """Largest |evalgate - reference| over the loglikelihood requests, the reference being evalgate's plain-PyTorch
    hybrid (``tools/hybrid/modeling.py``, float64 log-softmax) on lm-eval's tokenisation."""
    import torch

    from evalgate.worker.lm_adapter import encode_pair
    from tools.hybrid.modeling import load_checkpoint

    model = load_checkpoint(Path(path)).eval()
    worst, k = 0.0, 0
    for prompt, choices, _ in items:
        for c in choices:
            ctx, cont = encode_pair(tokenizer, prompt, c)
            ids = ctx + cont
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids]))[0][0].double(), dim=-1)
            ref = float(sum(logp[j - 1, ids[j]] for j in range(len(ctx), len(ids))))
            worst = max(worst, abs(ref - eg_ll[k][0]))
            k += 1
    return {"max_abs_logprob_diff_evalgate_vs_reference": worst}


def _agreement(items: list, hf_ll: list, hf_roll: list, eg_ll: list, eg_roll: list) -> dict:
    """HF vs evalgate on the same requests: log-prob differences (absolute, relative, on likely choices),
    is-greedy and argmax agreement, each side's accuracy, and the rolling log-likelihoods."""
    diffs = [abs(a[0] - b[0]) for a, b in zip(hf_ll, eg_ll)] + [abs(a - b) for a, b in zip(hf_roll, eg_roll)]
    rel = [abs(a[0] - b[0]) / max(abs(a[0]), 1e-9) for a, b in zip(hf_ll, eg_ll)]
    k, argmax_same, acc_hf, acc_eg = 0, 0, 0, 0
    for _, cs, gold in items:
        a = max(range(len(cs)), key=lambda i: hf_ll[k + i][0])
        b = max(range(len(cs)), key=lambda i: eg_ll[k + i][0])
        argmax_same += a == b
        acc_hf += a == gold
        acc_eg += b == gold
        k += len(cs)
    return {
        "requests": {"loglikelihood": len(hf_ll), "loglikelihood_rolling": len(hf_roll)},
        "max_abs_logprob_diff": max(diffs), "max_rel_logprob_diff": max(rel),
        "is_greedy_agreement": f"{sum(a[1] == b[1] for a, b in zip(hf_ll, eg_ll))}/{len(hf_ll)}",
        "argmax_agreement": f"{argmax_same}/{len(items)}", "acc": {"hf": acc_hf / len(items), "evalgate": acc_eg / len(items)},
        "logprob_range": [min(x[0] for x in eg_ll), max(x[0] for x in eg_ll)],
        "rolling": {"hf": hf_roll, "evalgate": eg_roll},
        "likely_choices_max_abs_diff": max(abs(a[0] - b[0]) for a, b in zip(hf_ll, eg_ll) if b[0] > -5.0),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="embedded:nemotron-h-tiny")
    p.add_argument("--items", type=int, default=8)
    p.add_argument("--json", default=None, help="also write the result there")
    args = p.parse_args(argv)
    from evalgate.inputs.config import Sampling
    from evalgate.models.embedded import resolve_model
    from evalgate.worker.engine_args import prepare_process_env
    from evalgate.worker.lm_adapter import make_lm
    from evalgate.worker.vllm_engine import VllmEngine

    path = resolve_model(args.model)
    items = mc_requests(args.items)
    texts = [items[0][0][:400], "Total due: 1,234.50 USD\nInvoice number: INV-0042", items[1][0]]
    prepare_process_env({})

    t0 = time.monotonic()
    from lm_eval.models.huggingface import HFLM

    hf = HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=4)
    ll, rolling = _instances(items, texts)
    hf_ll, hf_roll = hf.loglikelihood(ll, disable_tqdm=True), hf.loglikelihood_rolling(rolling, disable_tqdm=True)
    hf_s = time.monotonic() - t0
    del hf

    t1 = time.monotonic()
    engine = VllmEngine(path, {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048,
                               "kv_cache_memory_bytes": 1 << 30, "enable_prefix_caching": False, "seed": 0},
                        Sampling(temperature=0.0, max_tokens=16, seed=0))
    start_s = time.monotonic() - t1
    lm = make_lm(engine)
    ll, rolling = _instances(items, texts)
    t2 = time.monotonic()
    eg_ll, eg_roll = lm.loglikelihood(ll), lm.loglikelihood_rolling(rolling)
    eg_s = time.monotonic() - t2

    if args.model == "embedded:nemotron-h-tiny":  # the hybrid's own plain-PyTorch model (vLLM's math) as a third side
        result_ref = _hybrid_reference(path, engine.tokenizer(), items, eg_ll)
    else:
        result_ref = None
    result = {"model": args.model, **_agreement(items, hf_ll, hf_roll, eg_ll, eg_roll), "torch_reference": result_ref,
              "seconds": {"hf_total": round(hf_s, 1), "vllm_engine_start": round(start_s, 1),
                          "vllm_requests": round(eg_s, 1)},
              "cpu_flags_avx512": "avx512f" in Path("/proc/cpuinfo").read_text()}
    line = json.dumps(result)
    print(line)
    if args.json:
        Path(args.json).write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
