#!/usr/bin/env bash
# Next device session's jobs, started by benchmarks/gpu_start.sh after the GPU install of ../shared/tools/gpu; poll
# with benchmarks/gpu_poll.sh. What sessions 6 and 7 left: session 7 measured the whole recipe's cumulative row, then
# lost the machine six minutes into the GPU tests. So, tests first this time:
#  1. tests/system/test_gpu.py alone on the GPU (vLLM's start-up check wants 0.92 x total memory free), serve mode first
#     (`traffic.mode: serve` has never run on CUDA);
#  2. the whole recipe with CUDA graphs: the shipped baseline pins enforce_eager: true, so every H200 speed-up so far
#     is an eager engine's. A copy of configs/ whose baseline sets enforce_eager: false, one suite at 5 items (the
#     speed phase is the point), the ablation's sweep, 5 repeats (3 left c=16 unresolved in session 7).
# Then the Triton kernel cache goes into /tmp/r (a fresh machine spends minutes compiling it).
set -uo pipefail
export EVALGATE_HOME=/tmp/eghome
source /tmp/repo/benchmarks/gpu_env.sh
bash /tmp/repo/benchmarks/gpu_tests_alone.sh
stamp "tests"
rm -rf /tmp/cfg-graphs && cp -r /tmp/repo/configs /tmp/cfg-graphs
sed -i 's/^  enforce_eager: true$/  enforce_eager: false/' /tmp/cfg-graphs/baseline.yaml
grep -n enforce_eager /tmp/cfg-graphs/baseline.yaml > $R/graphs-baseline.txt
s=$(date +%s)
python3 -m evalgate run --config cline-recipe --configs-dir /tmp/cfg-graphs --suites docparse --limit 5 \
  --logprob-items 0 --concurrency 1,16,256 --repeats 5 --out $R/cline-recipe-graphs > $R/cline-recipe-graphs.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/cline-recipe-graphs.log
stamp "cline-recipe-graphs"
tar czf $R/triton-cache.tgz -C ~ .triton 2>/dev/null
echo done > $R/all-done.txt
