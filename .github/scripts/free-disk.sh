#!/usr/bin/env bash
# Frees a GitHub-hosted Linux runner's disk for a cell whose measured disk need, with its margin,
# exceeds the runner's free disk (the matrix's free_disk: cuw/partition/disk_need.py). It deletes
# the large preinstalled folders the forge never uses and prints the disk before and after.
# Only on the bare runner: a job in a build image (`container:`) cannot reach the host's folders.
set -euo pipefail
if [ "$(uname -s)" != Linux ] || [ -f /.dockerenv ]; then
  echo "free-disk.sh: not on a bare Linux runner; nothing freed" >&2
  exit 0
fi
# Android SDK, .NET, Haskell (ghc and ghcup), CodeQL's bundles, Boost: the folders the usual
# free-disk scripts remove first, together well over 14 GB on ubuntu-24.04 (a folder an image
# no longer has is skipped). The tool cache's Pythons stay: setup-python reads them.
folders=(
  /usr/local/lib/android
  /usr/share/dotnet
  /opt/ghc
  /usr/local/.ghcup
  /opt/hostedtoolcache/CodeQL
  /usr/local/share/boost
)
echo "before:"
df -h /
sudo rm -rf "${folders[@]}"
echo "after:"
df -h /
