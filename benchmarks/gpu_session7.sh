#!/usr/bin/env bash
# Next device session's jobs (issue 14's H200 remainder), started like gpu_session6.sh (setsid nohup after the GPU
# install of ../shared/tools/gpu and the copy of the checkout to /tmp/repo; poll with benchmarks/gpu_poll.sh):
#  1. the cumulative ablation's last row, the whole recipe, without redoing the other rows: `evalgate run --config
#     cline-recipe` at the ablation's suites, limit and concurrency sweep (the same config and profile, so the same
#     row; session 6 ran out of device time in its speed phase);
#  2. tests/system/test_gpu.py alone on the GPU (vLLM's start-up check wants 0.92 x total memory free), serve mode first;
#  (a third job, the recipe with CUDA graphs, was never reached: the machine was taken back during 2; it is the
#  second job of gpu_session8.sh now).
# Then the Triton kernel cache goes into /tmp/r (a fresh machine spends minutes compiling it; carry it next time).
set -uo pipefail
export EVALGATE_HOME=/tmp/eghome
source /tmp/repo/benchmarks/gpu_env.sh
s=$(date +%s)
python3 -m evalgate run --config cline-recipe --suites docparse coding finance --limit 20 --concurrency 1,16,256 \
  --out $R/cline-recipe > $R/cline-recipe.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/cline-recipe.log
stamp "cline-recipe"
bash /tmp/repo/benchmarks/gpu_tests_alone.sh
stamp "tests"
tar czf $R/triton-cache.tgz -C ~ .triton 2>/dev/null
echo done > $R/all-done.txt
