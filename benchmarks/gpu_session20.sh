#!/usr/bin/env bash
# Session 20-21 on the lent GPU (after the kit's INSTALL.sh): one wave vs a refilled, steady-window pass on the
# 8B-shaped A/A (benchmarks/pass_stability.py: both engines at gpu_memory_utilization 0.8 in placement: alternate, as evalgate runs the scale configs, c=256,
# 512/512, the two pass shapes interleaved pair by pair), then the CUDA test of the alternate placement on the
# current tree (nothing after 172c6b2 had run on CUDA).
# Run detached from the repo root: setsid nohup bash benchmarks/gpu_session20.sh > /tmp/r/session.log 2>&1 &
set -uo pipefail
mkdir -p /tmp/r
export EVALGATE_HOME=/tmp/eghome PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
git rev-parse HEAD > /tmp/r/commit.txt 2>/dev/null || true
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" \
  > /tmp/r/device.txt 2>&1
nvidia-smi > /tmp/r/nvidia-smi.txt 2>&1 || true
echo "# stability $(date -u +%T) $(cat /tmp/r/device.txt)" >> /tmp/r/summary.txt
s=$(date +%s)
python3 benchmarks/pass_stability.py --config scale/baseline --concurrency 256 --pairs ${PAIRS:-4} \
  --max-seconds ${MAX_SECONDS:-680} --json /tmp/r/stability.json > /tmp/r/stability.log 2>&1
echo "stability rc=$? $(( $(date +%s) - s )) s" >> /tmp/r/summary.txt
grep -E "engine ready|pair [0-9]|CV|stopped" /tmp/r/stability.log >> /tmp/r/summary.txt
echo "# tests $(date -u +%T)" >> /tmp/r/summary.txt
python3 -m pytest -q -p no:cacheprovider -m gpu tests/system/test_gpu.py -k "alternate_placement" \
  --junitxml=/tmp/r/gpu-tests.xml > /tmp/r/gpu-tests.log 2>&1
echo "tests rc=$? $(tail -n 1 /tmp/r/gpu-tests.log)" >> /tmp/r/summary.txt
touch /tmp/r/all-done.txt
