# Sourced by the scale scripts run from a checkout (benchmarks/gpu_scale.sh, benchmarks/gpu_session22.sh), after
# the GPU install of ../shared/tools/gpu (its offline site-packages in /tmp/site): evalgate's store and the offline
# packages on the path, results under $R (/tmp/r), the model family and traffic profile (the 8B shape at 512 in /
# 512 out on CUDA; SCALE_CPU=1: the CPU-sized family at a tiny profile, to try a script where there is no GPU), the
# repository's thresholds with that profile pinned ($THRESHOLDS), and what the machine is (device.txt,
# nvidia-smi.txt, a header line in summary.txt naming the tree: write its commit to $R/commit.local before the run).
# Sets R, REPO, PY, FAMILY, TRAFFIC, HIGH, LOW, THRESHOLDS.
R=${R:-/tmp/r}
export EVALGATE_HOME=${EVALGATE_HOME:-/tmp/eghome}
export PYTHONUNBUFFERED=1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH=$REPO:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
PY=${PY:-python3}
mkdir -p "$R"
cd "$REPO" || exit 1
if [ "${SCALE_CPU:-0}" = 1 ]; then
  FAMILY=scale/cpu
  TRAFFIC="traffic: {input_len: 32, output_len: 16, num_prompts: 8}"
  HIGH=4; LOW=2
else
  FAMILY=scale
  TRAFFIC="traffic: {input_len: 512, output_len: 512}"
  HIGH=256; LOW=16
fi
THRESHOLDS=$R/thresholds-scale.yaml
{ cat "$REPO/thresholds.yaml"; echo "$TRAFFIC"; } > "$THRESHOLDS"
# The device's copy of .git can lag the working tree it ran (sessions 23-25: it named an older commit), so the tree
# is named by $R/commit.local when the caller wrote one there; commit.txt keeps what the copy's git says, as it says it.
git rev-parse HEAD > "$R/commit.txt" 2>/dev/null || true
TREE=$(cat "$R/commit.local" 2>/dev/null || echo "unknown (no commit.local)")
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__,
'cuda' if torch.cuda.is_available() else 'cpu', torch.cuda.get_device_name() if torch.cuda.is_available() else '')" \
  > "$R/device.txt" 2>&1
nvidia-smi > "$R/nvidia-smi.txt" 2>&1 || true
echo "# $(basename "$0") $(date -u +%FT%TZ) tree $TREE (the copy's git: $(git rev-parse --short HEAD 2>/dev/null))" \
  "$(tr '\n' ' ' < "$R/device.txt")" \
  >> "$R/summary.txt"
