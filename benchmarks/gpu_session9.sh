#!/usr/bin/env bash
# Device session 9, started by benchmarks/gpu_start.sh after the GPU install of ../shared/tools/gpu; poll with
# benchmarks/gpu_poll.sh. Issue 23's GPU half: tests/system/test_gpu.py alone on the GPU (the verdict-level facts: MTP 1/3
# lossless at greedy, SR on the Triton kernel refused by the real nvidia-smi, fp16-state applied and gated), then,
# while device time lasts, fp16-state at a size where PASS is reachable (docparse, 150 items per task: MDE floor
# 1.7 points < the 4-point margin).
set -uo pipefail
export EVALGATE_HOME=/tmp/eghome
source /tmp/repo/benchmarks/gpu_env.sh
bash /tmp/repo/benchmarks/gpu_tests_alone.sh
stamp "tests"
s=$(date +%s)
python3 -m evalgate run --config fp16-state --suites docparse --limit 150 --logprob-items 0 --no-speed \
  --out $R/fp16-state-docparse150 > $R/fp16-state-docparse150.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/fp16-state-docparse150.log
stamp "fp16-state-docparse150"
echo done > $R/all-done.txt
