#!/usr/bin/env bash
# tests/system/test_gpu.py with nothing else on the GPU (vLLM's start-up check wants 0.92 x total memory free): the
# serve-mode test first, then the rest in one pytest process (they share the FP32 baseline through the store).
# Called by the device session scripts; logs and JUnit files go to $R (benchmarks/gpu_env.sh).
set -uo pipefail
export EVALGATE_HOME=${EVALGATE_HOME:-/tmp/eghome}
source /tmp/repo/benchmarks/gpu_env.sh
for k in "serve_mode" "not serve_mode"; do
  n=$([ "$k" = serve_mode ] && echo serve || echo rest)
  s=$(date +%s)
  timeout 900 python3 -m pytest -q -ra -p no:cacheprovider tests/system/test_gpu.py -k "$k" --junitxml=$R/gpu-$n.xml \
    > $R/gpu-$n.log 2>&1
  echo "rc=$? $(( $(date +%s)-s )) s" >> $R/gpu-$n.log
done
