#!/usr/bin/env bash
# The forge with its pinned cache tools, and torch for the cell when it links torch.
set -euo pipefail
python -m pip install --upgrade pip
python -m pip install -e .
if [ -n "${TORCH:-}" ]; then
    python -m pip install "torch==${TORCH}.*" --index-url "https://download.pytorch.org/whl/cu${CUDA_LINE//./}"
fi
