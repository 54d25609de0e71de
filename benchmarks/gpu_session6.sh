#!/usr/bin/env bash
# Session 6 device jobs (started with setsid nohup after the GPU install of ../shared/tools/gpu and the copy of the
# checkout to /tmp/repo; poll with benchmarks/gpu_poll.sh). One job at a time, because the speed phase and vLLM's
# start-up memory check (0.92 x total free) both need the GPU to themselves:
#  1. `evalgate ablate --config cline-recipe --kind cumulative` on the shipped checkpoint (issue 14's README table);
#  2. tests/system/test_gpu.py's serve-mode test (`traffic.mode: serve` through `vllm serve` + `vllm bench serve`);
#  3. the rest of tests/system/test_gpu.py, in one pytest process (they share the FP32 baseline through the store).
set -uo pipefail
export EVALGATE_HOME=/tmp/eghome
source /tmp/repo/benchmarks/gpu_env.sh
s=$(date +%s)
python3 -m evalgate ablate --config cline-recipe --suites docparse coding finance --limit 20 --concurrency 1,16,256 \
  --kind cumulative --out $R/ablate-cum > $R/ablate-cum.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/ablate-cum.log
stamp "ablate-cum"
bash /tmp/repo/benchmarks/gpu_tests_alone.sh
stamp "tests"
echo done > $R/all-done.txt
