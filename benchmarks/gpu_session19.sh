#!/usr/bin/env bash
# Session 19 on the lent GPU (after the kit's INSTALL.sh): the 8B-shaped A/A to its precision target (issue 25, 6a),
# then the CUDA tests of the alternate placement and the fp16-state gate on the current tree.
# Run detached from the repo root: setsid nohup bash benchmarks/gpu_session19.sh > /tmp/r/session.log 2>&1 &
set -uo pipefail
mkdir -p /tmp/r
export EVALGATE_HOME=/tmp/eghome PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
git rev-parse HEAD > /tmp/r/commit.txt 2>/dev/null || true
STEPS="aa moe-fp16-state" LEVELS_MOE=${LEVELS_MOE:-256} AA_REPEATS=${AA_REPEATS:-8} MAX_REPEATS=${MAX_REPEATS:-12} MAX_SECONDS=${MAX_SECONDS:-420} \
  bash benchmarks/gpu_scale.sh
echo "# tests $(date -u +%T)" >> /tmp/r/summary.txt
python3 -m pytest -q -p no:cacheprovider -m gpu tests/system/test_gpu.py \
  -k "alternate_placement or fp16_state_applies_and_is_gated" --junitxml=/tmp/r/gpu-tests.xml \
  > /tmp/r/gpu-tests.log 2>&1
echo "tests rc=$? $(tail -n 1 /tmp/r/gpu-tests.log)" >> /tmp/r/summary.txt
touch /tmp/r/all-done.txt
