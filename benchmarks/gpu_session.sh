#!/usr/bin/env bash
# Started with setsid nohup after the GPU install of ../shared/tools/gpu (copy the checkout to /tmp/repo first);
# benchmarks/gpu_poll.sh waits and tars /tmp/r into $OUT.
# Session 4 device jobs, run in the background from a private copy of the checkout (/tmp/repo).
set -uo pipefail
export EVALGATE_HOME=/tmp/eghome
source /tmp/repo/benchmarks/gpu_env.sh
t0=$(date +%s)
i=0
for k in "baseline_pins" "async_scheduling" "mtp1_at_fp32" "cuda_only_config and fp16-state-flashinfer" "cuda_only_config and sr-only" "cuda_only_config and flashinfer-mamba" "cuda_only_config and cline-recipe"; do
  i=$((i+1))
  ( s=$(date +%s); python3 -m pytest -q -ra -p no:cacheprovider tests/system/test_gpu.py -k "$k" --junitxml=$R/gpu-$i.xml > $R/gpu-$i.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $R/gpu-$i.log ) &
  sleep 2
done
for c in fp16-state fp16-state-sr; do
  ( s=$(date +%s); python3 -m evalgate run --config $c --suites longgen --out $R/longgen-$c --timeout 3000 > $R/longgen-$c.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $R/longgen-$c.log ) &
  sleep 2
done
wait
echo "phase1 done in $(( $(date +%s)-t0 )) s" > $R/phase1.txt
# The ablation needs the GPU to itself (its speed phase): started only after phase 1.
s=$(date +%s)
python3 -m evalgate ablate --config cline-recipe --suites docparse coding finance --limit 20 --concurrency 1,16,256 \
  --kind alone --out $R/ablate-alone > $R/ablate-alone.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/ablate-alone.log
s=$(date +%s)
python3 -m evalgate ablate --config cline-recipe --suites docparse coding finance --limit 20 --concurrency 1,16,256 \
  --kind cumulative --out $R/ablate-cum > $R/ablate-cum.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/ablate-cum.log
echo done > $R/all-done.txt
