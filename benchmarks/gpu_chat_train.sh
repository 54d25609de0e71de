#!/usr/bin/env bash
# Issue 26, item 3 on the lent GPU (torch only, no vLLM): fine-tune the embedded hybrid into the chat checkpoint
# (evalgate/models/hybrid/README.md, "Chat fine-tune"). Carry .whl-gpu/train (pydantic, jinja2, pyyaml wheels the
# image may lack); run detached from the repo root:
#   setsid nohup bash benchmarks/gpu_chat_train.sh > /tmp/ct/run.log 2>&1 &
# The code corpus is this interpreter's standard library, as for the shipped checkpoint (built on the H200 too).
set -uo pipefail
mkdir -p /tmp/ct
pip install -q --no-deps --target /tmp/site-train .whl-gpu/train/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site-train PYTHONUNBUFFERED=1
python3 -c "import torch, jinja2, yaml, tokenizers, safetensors, transformers, pydantic; print('torch', torch.__version__, torch.cuda.get_device_name())" > /tmp/ct/device.txt 2>&1 || { cat /tmp/ct/device.txt; exit 1; }
git rev-parse HEAD > /tmp/ct/commit.txt 2>/dev/null || true
python3 -m tools.hybrid.train corpus --out /tmp/ct/corpus.txt > /tmp/ct/corpus.log 2>&1
s=$(date +%s)
python3 -m tools.hybrid.train train --init evalgate/models/hybrid/checkpoint --chat docparse=16,finance=32 \
  --steps ${STEPS:-400} --warmup 40 --lr 5e-4 --seed 0 --code-corpus /tmp/ct/corpus.txt --out /tmp/ct/checkpoint-chat \
  > /tmp/ct/train.log 2>&1
echo "train rc=$? $(( $(date +%s) - s )) s" > /tmp/ct/done.txt
