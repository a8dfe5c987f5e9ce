#!/usr/bin/env bash
# The forge with its pinned cache tools, and torch for the cell when it links torch.
#
# Everything goes into a venv of this job's own (.cuw/venv in the workspace), put first
# on PATH for the job's later steps: jobs never install into a shared interpreter (on a
# self-hosted runner, or a local run of this workflow, every job sees the same Python).
set -euo pipefail
venv="${GITHUB_WORKSPACE:-$PWD}/.cuw/venv"
python -m venv "$venv"
if [ -x "$venv/bin/python" ]; then bin="$venv/bin"; else bin="$venv/Scripts"; fi  # Windows: Scripts
py="$bin/python"
"$py" -m pip install --quiet --upgrade pip
"$py" -m pip install --quiet -e .
if [ -n "${TORCH:-}" ]; then
    # The grid row's exact release when it pins one (TORCH_PIN, grid.torch.<line>.patch): every job of
    # a grid installs the same torch; without a pin, the newest patch of the line.
    "$py" -m pip install --quiet "torch==${TORCH_PIN:-${TORCH}.*}" --index-url "https://download.pytorch.org/whl/cu${CUDA_LINE//./}"
fi
if [ -n "${GITHUB_PATH:-}" ]; then
    if command -v cygpath >/dev/null; then bin=$(cygpath -w "$bin"); venv=$(cygpath -w "$venv"); fi  # Git Bash
    echo "$bin" >> "$GITHUB_PATH"
    echo "VIRTUAL_ENV=$venv" >> "$GITHUB_ENV"
fi
echo "install-forge.sh: the forge is in $venv ($("$py" --version))"
