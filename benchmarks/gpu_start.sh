#!/usr/bin/env bash
# Device side, last install call: copy this checkout (not the wheels) to /tmp/repo, which outlives the call, and start
# one session script there in the background (setsid nohup), so that it survives the call that started it. Poll with
# benchmarks/gpu_poll.sh. Usage, on the device: bash benchmarks/gpu_start.sh benchmarks/gpu_session8.sh
# Before it, in the same call (../shared/tools/gpu/README.md): cp -r /tmp/whl/g* .whl-gpu/ && bash .whl-gpu/INSTALL.sh;
# and for the GPU tests, pytest from wheels the CPU machine fetched into .whl-gpu/pt (carried with the call):
#   pip download --no-deps --only-binary=:all: -d .whl-gpu/pt pytest pluggy iniconfig pygments
#   pip install -q --no-deps --target /tmp/site .whl-gpu/pt/*.whl
set -u
script=${1:?usage: gpu_start.sh SESSION_SCRIPT}
rm -rf /tmp/repo && mkdir -p /tmp/repo /tmp/r
tar cf - --exclude=./.whl-gpu --exclude=./.venv . | tar xf - -C /tmp/repo
setsid nohup bash "/tmp/repo/$script" > /tmp/r/session.log 2>&1 < /dev/null &
sleep 2
echo "started $script"
PYTHONPATH=/tmp/site python3 -c "import pytest; print('pytest', pytest.__version__)" 2>&1 | tail -1
