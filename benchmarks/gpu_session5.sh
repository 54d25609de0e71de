#!/usr/bin/env bash
# Session 5 device jobs (started with setsid nohup after the GPU install; poll with benchmarks/gpu_poll.sh):
#  A. two retrain variants of the embedded hybrid (issue 15) beside tests/system/test_gpu.py in 4 lanes;
#  B. each variant's FP32 baselines (fp16-state candidate) and the long task with stochastic rounding;
#  C. the chosen checkpoint installed, then `evalgate ablate --config cline-recipe --kind cumulative` (issue 14).
set -uo pipefail
source /tmp/repo/benchmarks/gpu_env.sh
CORPUS=/tmp/repo/.whl-gpu/s5/corpus.txt
declare -A MIX=([A]="coding=12,longgen=4,longgen_rows=2-8,long_len=1408"
                [B]="coding=12,coding_kinds_every=3,longgen=4,longgen_rows=2-12,long_len=1920")
declare -A STEPS=([A]=${STEPS_A:-3000} [B]=${STEPS_B:-2000})  # fixed steps (no time budget): reproducible
pids=()
for V in ${VARIANTS:-A B}; do
  ( s=$(date +%s); python3 -m tools.hybrid.train train --out /tmp/ck$V --code-corpus $CORPUS --mix "${MIX[$V]}" \
      --steps ${STEPS[$V]} --workers 5 --eval-n 0 > $R/train$V.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $R/train$V.log ) &
  pids+=($!)
  sleep 1
done
i=0
sleep 60  # the tests' engine start-ups after the trainings' first steps
[ -n "${SKIP_TESTS:-}" ] || for k in "baseline_pins or async_scheduling" "mtp1_at_fp32 or serve_mode" "fp16-state-flashinfer or sr-only" "flashinfer-mamba or cline-recipe"; do
  i=$((i+1))
  ( s=$(date +%s); EVALGATE_HOME=/tmp/eghome python3 -m pytest -q -ra -p no:cacheprovider tests/system/test_gpu.py -k "$k" \
      --junitxml=$R/gpu-$i.xml > $R/gpu-$i.log 2>&1; echo "rc=$? $(( $(date +%s)-s )) s" >> $R/gpu-$i.log ) &
  sleep 2
done
wait "${pids[@]}"
stamp "trained"
for V in A B; do
  mkdir -p /tmp/cfg$V
  printf 'extends: baseline\ndescription: FP32 baseline, retrain variant %s\nmodel: /tmp/ck%s\nengine_args:\n  gpu_memory_utilization: 0.1\n' $V $V > /tmp/cfg$V/base$V.yaml
  printf 'extends: base%s\ndescription: FP16 SSM state\nexpect: lossy\nengine_args:\n  mamba_ssm_cache_dtype: float16\n' $V > /tmp/cfg$V/fp16$V.yaml
  printf 'extends: base%s\ndescription: FP16 SSM state + stochastic rounding\nexpect: lossy\nengine_args:\n  mamba_ssm_cache_dtype: float16\n  enable_mamba_cache_stochastic_rounding: true\n  mamba_backend: flashinfer\n' $V > /tmp/cfg$V/sr$V.yaml
  [ -f /tmp/ck$V/model.safetensors ] || continue
  ( EVALGATE_HOME=/tmp/eg-$V python3 -m evalgate run --config /tmp/cfg$V/fp16$V.yaml --suites docparse coding finance \
      --limit 100 --logprob-items 0 --out $R/eval$V > $R/eval$V.log 2>&1; echo "rc=$?" >> $R/eval$V.log ) &
  ( EVALGATE_HOME=/tmp/eg-$V python3 -m evalgate run --config /tmp/cfg$V/fp16$V.yaml --suites longgen --out $R/long$V-fp16 \
      > $R/long$V-fp16.log 2>&1; echo "rc=$?" >> $R/long$V-fp16.log
    EVALGATE_HOME=/tmp/eg-$V python3 -m evalgate run --config /tmp/cfg$V/sr$V.yaml --suites longgen --out $R/long$V-sr \
      > $R/long$V-sr.log 2>&1; echo "rc=$?" >> $R/long$V-sr.log ) &
  sleep 2
done
wait
stamp "evaluated"
python3 benchmarks/gpu_pick_checkpoint.py $(for V in ${VARIANTS:-A B}; do echo $V=$R/eval$V,$R/long$V-fp16; done) > $R/pick.txt 2>&1
P=$(tail -1 $R/pick.txt)
if [ -f /tmp/ck$P/model.safetensors ]; then cp /tmp/ck$P/* /tmp/repo/evalgate/hybrid/checkpoint/; fi
mkdir -p $R/ck; for V in A B; do [ -d /tmp/ck$V ] && cp -r /tmp/ck$V $R/ck/; done
stamp "picked $P"
# The ablation needs the GPU to itself (its speed phase); a fresh home: the retrained checkpoint is another model.
s=$(date +%s)
EVALGATE_HOME=/tmp/eg-abl python3 -m evalgate ablate --config cline-recipe --suites docparse coding finance --limit 20 \
  --concurrency ${ABL_CONC:-16,256} --kind cumulative --out $R/ablate-cum > $R/ablate-cum.log 2>&1
echo "rc=$? $(( $(date +%s)-s )) s" >> $R/ablate-cum.log
stamp "ablated"
echo done > $R/all-done.txt
