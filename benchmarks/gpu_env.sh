# Sourced by the device session scripts (benchmarks/gpu_session*.sh), after the GPU install of ../shared/tools/gpu
# and the copy of the checkout to /tmp/repo: the offline site-packages on the path, results under $R (/tmp/r), and
# what the machine is (device.txt, nvidia-smi.txt).
export PYTHONPATH=/tmp/repo:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
export PATH=/tmp/site/bin:$PATH
cd /tmp/repo
R=/tmp/r; mkdir -p $R
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" > $R/device.txt 2>&1
nvidia-smi > $R/nvidia-smi.txt 2>&1
# Phase marks: `stamp NAME` appends "NAME <seconds since sourcing>" to $R/phases.txt.
t0=$(date +%s)
stamp() { echo "$1 $(( $(date +%s)-t0 )) s" >> $R/phases.txt; }
