#!/usr/bin/env bash
# Prints a short content hash of the source tree (names and contents of the files under
# the source folders, caches left out), to tell which tree a GPU run built: the device
# machine's copy carries the working tree but possibly stale git metadata, so its
# `git rev-parse HEAD` can name an older commit. Run it here on a commit to compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt cmake include src kernels tests bench examples python -type f \
    ! -path '*/__pycache__/*' ! -name '*.pyc' 2>/dev/null | LC_ALL=C sort |
    while IFS= read -r f; do printf '%s\n' "$f"; sha256sum < "$f"; done |
    sha256sum | cut -c1-12
