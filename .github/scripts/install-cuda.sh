#!/usr/bin/env bash
# Installs the CUDA toolkit of one CUDA line on a GitHub Linux runner, pinned to
# the exact release below (NVIDIA's apt repository). Usage: install-cuda.sh 13.0
set -euo pipefail
line="${1:?usage: install-cuda.sh <cuda line, e.g. 13.0>}"
# The toolkit release is pinned, and with it the nvcc it ships (`nvcc --version` prints
# the compiler's own number: toolkit 13.0.2 carries nvcc V13.0.88, 12.8.1 carries V12.8.93).
case "$line" in
  12.8) full=12.8.1 nvcc_ver=12.8.93 ;;
  13.0) full=13.0.2 nvcc_ver=13.0.88 ;;
  *) echo "install-cuda.sh: no pinned release for CUDA $line" >&2; exit 2 ;;
esac
# Idempotent: a machine that already has the pinned release (a self-hosted runner, a
# second call, a local run of this workflow) keeps it; any other nvcc gets the install.
for home in "${CUDA_HOME:-}" "/usr/local/cuda-$line"; do
  if [ -n "$home" ] && [ -x "$home/bin/nvcc" ] && "$home/bin/nvcc" --version 2>/dev/null | grep -q "V$nvcc_ver\b"; then
    echo "install-cuda.sh: CUDA $full (nvcc V$nvcc_ver) is already installed at $home; nothing to do"
    if [ -n "${GITHUB_ENV:-}" ]; then
      echo "CUDA_HOME=$home" >> "$GITHUB_ENV"
      echo "$home/bin" >> "$GITHUB_PATH"
    fi
    exit 0
  fi
done
arch=$(uname -m); [ "$arch" = aarch64 ] && repo=sbsa || repo=x86_64
pkg="${line/./-}"
if command -v dnf >/dev/null; then
  # A manylinux container (cibuildwheel's before-all): RHEL family, root, no runner files.
  # The cuda-compiler meta package carries the release number, so it takes the pin.
  rhel="rhel$(. /etc/os-release; echo "${VERSION_ID%%.*}")"
  curl -fsSLo "/etc/yum.repos.d/cuda-$rhel.repo" "https://developer.download.nvidia.com/compute/cuda/repos/$rhel/$repo/cuda-$rhel.repo"
  dnf install -y -q "cuda-compiler-$pkg-$full" "cuda-cudart-devel-$pkg" "cuda-cuobjdump-$pkg" "cuda-nvrtc-devel-$pkg" \
    "libcublas-devel-$pkg" "libcusparse-devel-$pkg"
  exit 0
fi
. /etc/os-release
distro="ubuntu${VERSION_ID//./}"
keyring=cuda-keyring_1.1-1_all.deb
curl -fsSLo "/tmp/$keyring" "https://developer.download.nvidia.com/compute/cuda/repos/$distro/$repo/$keyring"
sudo dpkg -i "/tmp/$keyring"
sudo apt-get update -qq
# cuda-nvcc-* is versioned by the compiler (13.0.88-1); the cuda-compiler meta
# package carries the toolkit release (13.0.2-1), so the pin goes there.
ver="$(apt-cache madison "cuda-compiler-$pkg" | awk -v f="$full" '$3 ~ "^"f"-" {print $3; exit}')"
if [ -z "$ver" ]; then
  echo "install-cuda.sh: cuda-compiler-$pkg $full is not in NVIDIA's $distro repository" >&2; exit 2
fi
sudo apt-get install -y -qq "cuda-compiler-$pkg=$ver" "cuda-cudart-dev-$pkg" "cuda-cuobjdump-$pkg" "cuda-nvrtc-dev-$pkg" \
  "libcublas-dev-$pkg" "libcusparse-dev-$pkg"
echo "CUDA_HOME=/usr/local/cuda-$line" >> "$GITHUB_ENV"
echo "/usr/local/cuda-$line/bin" >> "$GITHUB_PATH"
