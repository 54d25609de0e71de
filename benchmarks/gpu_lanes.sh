#!/usr/bin/env bash
# Run several lanes of evalgate configs at once on one GPU (the embedded hybrid is tiny: the GPU is idle most of the
# time, engine starts dominate). Each argument is a lane: comma-separated configs run one after another; lanes run
# concurrently, with their engines sharing the GPU (each engine: 1 GiB KV cache, a few GiB in all, which vLLM's
# start-up check of gpu_memory_utilization 0.92 allows for three or four at a time). Run dirs go under $RUNS
# (default /tmp/r), each with exit_code; everything is tarred into $OUT/gpu-runs.tgz at the end.
#   LIMIT=100 bash benchmarks/gpu_lanes.sh aa fp16-state,fp16-state-sr mtp1,mtp3
# A config name may carry its own limit as NAME@LIMIT (e.g. aa@all for the whole suites).
set -uo pipefail
runs=${RUNS:-/tmp/r}; out=${OUT:-/tmp/out}; limit=${LIMIT:-100}; call_s=${CALL_S:-560}
mkdir -p "$runs" "$out"
start=$(date +%s)
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" \
  > "$runs/device.txt" 2>&1
lane() {
  local IFS=,
  for spec in $1; do
    local c=${spec%@*} l=$limit dir
    [[ $spec == *@* ]] && l=${spec#*@}
    dir="$runs/${c//\//_}${l:+-$l}"
    local left=$(( call_s - ($(date +%s) - start) ))
    if [ "$left" -lt 60 ]; then echo "lanes: no time left for $spec" | tee -a "$runs/not-started.txt"; continue; fi
    local lim=(--limit "$l"); [ "$l" = all ] && lim=()
    local t0=$(date +%s)
    timeout -s INT -k 20 "$left" python3 -m evalgate run --config "$c" "${lim[@]}" --out "$dir" --timeout 3000 \
      > "$runs/${c//\//_}-$l.log" 2>&1
    local rc=$?
    mkdir -p "$dir"; echo "$rc" > "$dir/exit_code"
    echo "lanes: $spec exit $rc in $(( $(date +%s) - t0 )) s"
  done
}
for l in "$@"; do lane "$l" & sleep 5; done
wait
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv > "$runs/gpu.txt" 2>&1
tar czf "$out/gpu-runs.tgz" -C "$(dirname "$runs")" "$(basename "$runs")"
