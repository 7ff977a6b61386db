#!/usr/bin/env bash
# Install recemb (editable) with the given extras, e.g. `bash scripts/install.sh dev`.
# torch is installed only when missing, pinned to the CPU build this machine class keeps on disk;
# users with their own torch keep it (the package itself asks only for torch>=2.1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
extras=${1:-}
if [ -n "$extras" ]; then
    "$PY" -m pip install -q -e ".[${extras}]"
else
    "$PY" -m pip install -q -e .
fi
