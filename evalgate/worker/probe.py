"""An engine probe of a checkpoint (for tests and humans): greedy outputs of fixed prompts through evalgate's own
engine wrapper, with what the engine applied, its speculative-decoding counters and which parameters vLLM's loader
left unfilled. ``python -m evalgate.worker.probe CKPT [--run JSON ...]`` prints one JSON line: a list with one
result per ``--run``, engines started one after another in this process.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from evalgate.inputs.config import Sampling
from evalgate.worker.engine_args import prepare_process_env
from evalgate.worker.vllm_engine import VllmEngine

PROBE_PROMPTS = (
    "Extract the requested fields from each document as one line of JSON.\n\nDocument:\nAcme Tools Ltd\n"
    "Invoice # INV-4411\nDate: 2021-03-04\nTotal: $1,204.50\nFields: vendor, invoice_no, date, total\nJSON:",
    "Statement:\nOrbit Media, income statement (USD thousands)\nItem                    2020     2021\n"
    "Revenue                1,733    1,392\nQuestion: What was revenue in 2021, in thousands?\nAnswer:",
    "def fibonacci(n):\n    ",
    "The quick brown fox",
)
PROBE_ENGINE_ARGS = {"dtype": "bfloat16", "enforce_eager": True, "max_model_len": 1024, "seed": 0,
                     "kv_cache_memory_bytes": 256 * 1024**2, "enable_prefix_caching": False,
                     "mamba_ssm_cache_dtype": "float32"}


def probe(ckpt: Path, engine_args: dict[str, Any] | None = None, max_tokens: int = 32, logprobs: int = 1) -> dict:
    """Greedy generation of ``PROBE_PROMPTS`` in vLLM through evalgate's own engine wrapper.

    Args:
        ckpt: checkpoint folder (``build``'s output).
        engine_args: overrides of ``PROBE_ENGINE_ARGS`` (vLLM ``EngineArgs`` names).
        max_tokens: tokens generated per prompt (no stop strings; EOS may end one earlier).
        logprobs: top-k log-probs recorded at every output position (natural log).
    Returns:
        ``{"token_ids": [[int]] per prompt, "texts": [str], "top_logprobs": [[[[id, logprob]]]],
        "effective": VllmEngine.effective_config(), "spec_decode": VllmEngine.spec_decode_counters(),
        "unloaded_params": {model class: [parameter names the checkpoint did not fill]}}``. The last holds one
        entry per model vLLM loaded (``Qwen3NextForCausalLM``, and ``Qwen3NextMTP`` when MTP drafts): vLLM
        0.32 refuses a target model with unfilled parameters but not a drafter (measured: without
        ``mtp.fc.weight`` the MTP drafter starts and drafts from uninitialised memory), so the probe records it.
    Raises:
        Whatever vLLM raises when it cannot load or run the checkpoint.
    """

    prepare_process_env({})
    unloaded: dict[str, list[str]] = {}
    with _record_weight_coverage(unloaded):
        engine = VllmEngine(str(ckpt), {**PROBE_ENGINE_ARGS, **(engine_args or {})}, Sampling(max_tokens=max_tokens))
    gens = engine.generate(list(PROBE_PROMPTS), max_tokens=max_tokens, stop=[], logprobs=logprobs)
    return {"token_ids": [g.token_ids for g in gens], "texts": [g.text for g in gens],
            "top_logprobs": [g.top_logprobs for g in gens], "effective": engine.effective_config(),
            "spec_decode": engine.spec_decode_counters(), "unloaded_params": unloaded}


@contextlib.contextmanager
def _record_weight_coverage(out: dict[str, list[str]]):
    """While active, vLLM's Qwen3-Next models record which of their parameters ``load_weights`` left unfilled
    (the set vLLM's default loader checks for a target model). Needs the engine in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as ``prepare_process_env`` sets)."""
    from vllm.model_executor.models.qwen3_next import Qwen3NextForCausalLM
    from vllm.model_executor.models.qwen3_next_mtp import Qwen3NextMTP

    originals = {cls: cls.load_weights for cls in (Qwen3NextForCausalLM, Qwen3NextMTP)}

    def wrap(cls: type, original: Any) -> Any:
        def load_weights(self: Any, weights: Any) -> set[str]:
            params = {name for name, _ in self.named_parameters()}
            loaded = set(original(self, weights))
            out[cls.__name__] = sorted(params - loaded)
            return loaded
        return load_weights

    for cls, original in originals.items():
        cls.load_weights = wrap(cls, original)
    try:
        yield out
    finally:
        for cls, original in originals.items():
            cls.load_weights = original


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m evalgate.worker.probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt", type=Path)
    ap.add_argument("--run", action="append", default=[],
                    help='JSON: {"engine_args": {EngineArgs overrides}, "max_tokens": N, "ckpt": other checkpoint}; '
                         "repeatable (default: one run with PROBE_ENGINE_ARGS, 32 tokens)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results = []
    for spec in [json.loads(r) for r in args.run] or [{}]:
        results.append(probe(Path(spec.get("ckpt", args.ckpt)), spec.get("engine_args"), spec.get("max_tokens", 32)))
        gc.collect()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
