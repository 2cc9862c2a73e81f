#!/usr/bin/env bash
# GPU check (issue 17): plan each run for this machine's one GPU, run it through the real
# launcher, print measured figures beside the predictions (benchmarks/gpu_check.py --help).
#
#   bash benchmarks/gpu_check.sh --prepare-wheels    # HERE, once: wheels for the lent H200 → .whl/
#   bash benchmarks/gpu_check.sh                     # on the GPU box, from the repo root
#   bash benchmarks/gpu_check.sh --cpu-dry           # same path on CPU (tiny model); in the tests
#
# The GPU box has torch but no pydantic and no torchao, and no network. --prepare-wheels runs
# `python -m blackwell_sm.job.wheels --target lent-h200 --torchao --out .whl` (the same download,
# cache and manifest as a job's code bundle); every other mode first runs the container's own
# bootstrap (entrypoints/bootstrap.py) on .whl/wheels/manifest.json, which installs offline, into
# a private folder, only what the image lacks. BSM_GPU_CHECK_WHEELS names another folder.
#
# Python: $PYTHON if set, else the repo's .venv/bin/python, else python3. The repo root goes on
# PYTHONPATH, so the package need not be installed.
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
wheels="${BSM_GPU_CHECK_WHEELS:-.whl}"
if [[ "${1:-}" == "--prepare-wheels" ]]; then
  # Extra arguments pass on: `--prepare-wheels --target this-machine` for --cpu-dry here.
  exec "$py" -m blackwell_sm.job.wheels --target lent-h200 --torchao --out "$wheels" "${@:2}"
fi
if [[ ! -f "$wheels/wheels/manifest.json" ]]; then
  echo "gpu_check: no $wheels/wheels/manifest.json; run 'bash benchmarks/gpu_check.sh" \
    "--prepare-wheels' where PyPI is reachable (and carry .whl to the GPU box)" >&2
  exit 2
fi
site="$(mktemp -d "${TMPDIR:-/tmp}/bsm-site.XXXXXX")"
exec "$py" entrypoints/bootstrap.py --root "$wheels" --site "$site" -- \
  "$py" benchmarks/gpu_check.py "$@"
