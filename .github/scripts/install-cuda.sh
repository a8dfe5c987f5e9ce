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
arch=$(uname -m); [ "$arch" = aarch64 ] && repo=sbsa || repo=x86_64
pkg="${line/./-}"
env_out() { [ -n "${GITHUB_ENV:-}" ] && echo "$1" >> "$GITHUB_ENV"; return 0; }
path_out() { [ -n "${GITHUB_PATH:-}" ] && echo "$1" >> "$GITHUB_PATH"; return 0; }
if command -v dnf >/dev/null; then
  # The host compiler of the line, paired on every run (also when the toolkit below is
  # already there): torch's headers cap g++ below 14 on CUDA 12.x lines, so 12.x builds
  # with gcc-toolset-13; the manylinux image's default toolset serves CUDA 13.
  case "$line" in
    12.*) dnf install -y -q gcc-toolset-13-gcc-c++
          path_out /opt/rh/gcc-toolset-13/root/usr/bin
          export PATH="/opt/rh/gcc-toolset-13/root/usr/bin:$PATH" ;;
  esac
fi
# Idempotent: a machine that already has the pinned release (a self-hosted runner, a
# second call, a local run of this workflow) keeps it; any other nvcc gets the install.
for home in "${CUDA_HOME:-}" "/usr/local/cuda-$line"; do
  if [ -n "$home" ] && [ -x "$home/bin/nvcc" ] && "$home/bin/nvcc" --version 2>/dev/null | grep -q "V$nvcc_ver\b"; then
    echo "install-cuda.sh: CUDA $full (nvcc V$nvcc_ver) is already installed at $home; nothing to do"
    env_out "CUDA_HOME=$home"
    path_out "$home/bin"
    exit 0
  fi
done
if command -v dnf >/dev/null; then
  # A manylinux build image (the workflow's container, cibuildwheel's before-all): RHEL
  # family, root, NVIDIA's rhel repository. The cuda-compiler meta package carries the
  # release number, so it takes the pin; cuda-driver-devel is the -lcuda stub.
  # shellcheck source=/dev/null  # the machine's release file, not one of the repository's
  rhel="rhel$(. /etc/os-release; echo "${VERSION_ID%%.*}")"
  curl -fsSLo "/etc/yum.repos.d/cuda-$rhel.repo" "https://developer.download.nvidia.com/compute/cuda/repos/$rhel/$repo/cuda-$rhel.repo"
  dnf install -y -q "cuda-compiler-$pkg-$full" "cuda-cudart-devel-$pkg" "cuda-driver-devel-$pkg" "cuda-cuobjdump-$pkg" \
    "cuda-nvrtc-devel-$pkg" "libcublas-devel-$pkg" "libcusparse-devel-$pkg"
  env_out "CUDA_HOME=/usr/local/cuda-$line"
  path_out "/usr/local/cuda-$line/bin"
  exit 0
fi
# shellcheck source=/dev/null  # the machine's release file, not one of the repository's
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
