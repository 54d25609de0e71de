#!/usr/bin/env bash
# The long-generation stress task (suites/longgen) on the embedded hybrid on a CUDA machine (the lent H200):
# FP16 SSM state, with and without stochastic rounding, against the FP32 baseline. Run from the repository root
# after the GPU install of ../tools/gpu/README.md (vLLM 0.26.0 under /tmp/site). Each run writes its run
# directory (verdict.json: evidence.by_position = quality, identity and decode KL by output-token bucket).
set -euo pipefail
export PYTHONPATH="$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages" EVALGATE_HOME=/tmp/eghome
for config in fp16-state fp16-state-sr; do
  python3 -m evalgate run --config "$config" --suites longgen --out "runs/gpu-longgen-$config" || true  # exit = verdict
  python3 - "runs/gpu-longgen-$config/verdict.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for t in doc["tasks"]:
    e = t["evidence"]
    print(t["task"], t["verdict"], f"baseline {t['baseline']:.1f} candidate {t['candidate']:.1f} delta {t['delta']:+.2f}",
          f"identical {100 * e['divergence']['identical_share']:.0f}%",
          f"decode KL mean {e['decode']['kl_mean']:.3g}" if e["decode"] else "")
    for r in e["by_position"]:
        print(f"  tokens {r['lo']}-{r['hi'] or ''}: reaching {r['reaching']}, quality delta {r['delta']}, "
              f"identical {r['identical_share']}, KL {r['kl_mean']} over {r['kl_positions']} positions")
PY
done
