#!/usr/bin/env bash
# One command for a machine with a CUDA GPU (a lent device, a cloud VM, Colab's terminal):
#   1. the CUDA-marked tests, which are skipped everywhere else;
#   2. the whole unit-test suite on the GPU's torch build;
#   3. every chapter notebook executed on the GPU (outputs legitimately differ from the CPU
#      outputs committed for the site, so only cells marked NBVAL_CHECK_OUTPUT are compared).
# Run from the repository root after `make test`'s environment exists (or `make gpu-check`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA GPU visible to torch: this script is for GPU machines"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY
"$PY" -m pytest -m cuda tests -q
"$PY" -m pytest tests -q -m "not book"
"$PY" -m pytest --nbval-lax chapters -q
