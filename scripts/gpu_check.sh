#!/usr/bin/env bash
# Kept for old instructions: the GPU check is scripts/gpu_check.py (`make gpu-check`).
# Arguments pass through, e.g. `bash scripts/gpu_check.sh --dry-run`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PY:-python3}" scripts/gpu_check.py "$@"
