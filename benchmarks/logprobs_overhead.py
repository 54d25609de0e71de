"""What recording decode-time log-probs costs: generation time with ``logprobs=5`` vs none, in one engine.

Run (about 2 minutes on 2 CPU cores)::

    python benchmarks/logprobs_overhead.py [--model embedded:nemotron-h-tiny] [--prompts 32] [--max-tokens 128] [--reps 3]

One vLLM engine (the hybrid baseline's engine args), the same prompts (the docparse suite's few-shot prompts are
not needed: the cost is per generated token), greedy; the two settings alternate ``--reps`` times so load on the
machine hits both alike. Prints seconds per setting (median), the ratio with/without, and whether the generated
token ids are identical (they must be: raw log-probs are computed after sampling and do not change it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="embedded:nemotron-h-tiny")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    from evalgate.inputs.config import Sampling
    from evalgate.models.embedded import resolve_model
    from evalgate.worker.engine_args import prepare_process_env
    from evalgate.worker.vllm_engine import VllmEngine

    prepare_process_env({})
    engine = VllmEngine(resolve_model(args.model), {"dtype": "float32", "enforce_eager": True, "max_model_len": 2048,
                                                    "kv_cache_memory_bytes": 1 << 30, "enable_prefix_caching": False,
                                                    "seed": 0}, Sampling(temperature=0.0, max_tokens=args.max_tokens))
    prompts = [f"Invoice {1000 + i}\nVendor: Acme {i}\nTotal: {17 * i}.00\nExtract the fields as JSON:\n"
               for i in range(args.prompts)]
    times: dict[int, list[float]] = {0: [], 5: []}
    ids: dict[int, list[list[int]]] = {}
    engine.generate(prompts[:2], max_tokens=8, stop=[])  # warm-up
    for _ in range(args.reps):
        for k in (0, 5):
            t = time.perf_counter()
            gens = engine.generate(prompts, max_tokens=args.max_tokens, stop=[], logprobs=k)
            times[k].append(time.perf_counter() - t)
            ids[k] = [g.token_ids for g in gens]
    tokens = sum(len(x) for x in ids[0])
    off, on = statistics.median(times[0]), statistics.median(times[5])
    print(f"{args.model}: {args.prompts} prompts, {tokens} tokens; without log-probs {off:.2f} s, with top-5 "
          f"{on:.2f} s (median of {args.reps}); ratio {on / off:.3f}; same tokens: {ids[0] == ids[5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
