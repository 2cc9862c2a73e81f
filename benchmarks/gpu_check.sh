#!/usr/bin/env bash
# GPU check (one NVIDIA GPU, < 5 min): plan llama-3.2-1b for this GPU, run ~40 steps through the
# real launcher, print measured tokens/s, MFU and peak reserved memory beside the predictions.
#
#   bash benchmarks/gpu_check.sh                # on the GPU box, from the repo root
#   bash benchmarks/gpu_check.sh --cpu-dry      # same path on CPU (tiny model); what the tests run
#
# Python: $PYTHON if set, else the repo's .venv/bin/python, else python3 (a system torch with
# pydantic, click, PyYAML, rich and numpy installed). The repo root goes on PYTHONPATH, so the
# package need not be installed. Options: see `benchmarks/gpu_check.py --help`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -n "${PYTHON:-}" ]]; then
  py="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
  py=.venv/bin/python
else
  py=python3
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" benchmarks/gpu_check.py "$@"
