#!/usr/bin/env bash
# The H200 measurement of issue 11: every hybrid config at --limit 100 (all three suites) plus the A/A run, each
# run directory kept under $RUNS and the lot tarred into $OUT/gpu-runs.tgz (one file: `run` brings back at most 8).
#
# Run on the device from the checkout root, after the wheels are installed (../shared/tools/gpu/README.md):
#   export PYTHONPATH=$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages EVALGATE_HOME=/tmp/eghome \
#          PYTHONUNBUFFERED=1; bash benchmarks/gpu_matrix.sh [CONFIG ...]
# A device command may run 10 minutes: name a few configs per call (the default is all of them, in this order).
# `aa` goes first: it computes the FP32 baseline, which the store (under $EVALGATE_HOME, kept while the machine
# stays warm) then serves to every later config against the same baseline. A config is not started once
# $BUDGET_S seconds have passed (default 420), and a running one is interrupted at $CALL_S (default 550), so a call
# ends before the device's limit with its tarball written; a config that did not finish can be named again (the
# store and the generation journal resume it). Each run's exit code goes to RUN/exit_code.
# Then, here: python benchmarks/gpu_table.py RUNS_DIR > table.md (docs/measurements/h200-matrix.md).
set -uo pipefail
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(aa fp16-state fp16-state-sr sr-only flashinfer-mamba async-sched mtp1 mtp3 omp1
                                    cline-recipe)
limit=${LIMIT:-100}
runs=${RUNS:-/tmp/r}
budget=${BUDGET_S:-420}
call_s=${CALL_S:-550}   # every run is stopped by then (a device command is killed at 600 s)
out=${OUT:-/tmp/out}
mkdir -p "$runs" "$out"
start=$(date +%s)
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" \
  | tee "$runs/device.txt"
for c in "${configs[@]}"; do
  if [ $(( $(date +%s) - start )) -ge "$budget" ]; then
    echo "gpu_matrix: budget of ${budget} s spent; not started: $c" | tee -a "$runs/not-started.txt"
    continue
  fi
  dir="$runs/$c"
  rm -rf "$dir"
  t0=$(date +%s)
  left=$(( call_s - ($(date +%s) - start) ))
  # SIGINT at the call's end: evalgate stops cleanly (exit 130), finished suites stay in the store.
  timeout -s INT -k 20 "$left" python3 -m evalgate run --config "$c" --limit "$limit" --out "$dir" --timeout 3000
  rc=$?
  mkdir -p "$dir" && echo "$rc" > "$dir/exit_code"
  echo "gpu_matrix: $c exit $rc in $(( $(date +%s) - t0 )) s"
done
tar czf "$out/gpu-runs.tgz" -C "$(dirname "$runs")" "$(basename "$runs")"
ls -la "$out"
