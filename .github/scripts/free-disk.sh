#!/usr/bin/env bash
# Frees a GitHub-hosted Linux runner's disk for a cell whose measured disk need, with its margin,
# exceeds the runner's free disk (the matrix's free_disk: cuw/partition/disk_need.py). It deletes
# the large preinstalled folders the forge never uses and prints the disk before and after.
# On the bare runner it deletes them. In a build image (`container:`) the host's folders are out of
# sight, so the job's container options mount each at /cuw-host<folder> (the matrix's
# free_disk_mounts) and the script empties them there; a container without those mounts frees nothing.
set -euo pipefail
# Android SDK, .NET, Haskell (ghc and ghcup), CodeQL's bundles, Boost: the folders the usual
# free-disk scripts remove first, together well over 14 GB on ubuntu-24.04 (a folder an image
# no longer has is skipped). The tool cache's Pythons stay: setup-python reads them.
# The same list as FREE_DISK_FOLDERS in cuw/partition/disk_need.py (a test holds them equal).
folders=(
  /usr/local/lib/android
  /usr/share/dotnet
  /opt/ghc
  /usr/local/.ghcup
  /opt/hostedtoolcache/CodeQL
  /usr/local/share/boost
)
host=/cuw-host
if [ "$(uname -s)" != Linux ]; then
  echo "free-disk.sh: not on a Linux runner; nothing freed" >&2
  exit 0
fi
if [ ! -f /.dockerenv ] && [ ! -f /run/.containerenv ]; then
  echo "before:"
  df -h /
  sudo rm -rf "${folders[@]}"
  echo "after:"
  df -h /
  exit 0
fi
mounted=()
for folder in "${folders[@]}"; do
  if mountpoint -q "$host$folder"; then mounted+=("$host$folder"); fi
done
if [ "${#mounted[@]}" -eq 0 ]; then
  echo "free-disk.sh: in a container without the runner's folders mounted at $host (the job's container options); nothing freed" >&2
  exit 0
fi
# The mount points stay (they cannot be removed from inside); what is in them is the runner's.
echo "before:"
df -h "${mounted[0]}"
for dir in "${mounted[@]}"; do
  find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
done
echo "after:"
df -h "${mounted[0]}"
