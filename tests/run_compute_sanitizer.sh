#!/usr/bin/env bash
# ctest entry sanitizer_<tool>: runs BINARY under `compute-sanitizer --tool TOOL
# --error-exitcode 1`. Exit 77 (skipped) without compute-sanitizer or without a CUDA
# device (BINARY --probe exits 77 then). Usage: run_compute_sanitizer.sh TOOL BINARY
set -u
tool=$1
bin=$2
cs=$(command -v compute-sanitizer || true)
for d in "${FA2_CUDA_BIN:-}" /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [ -z "$cs" ] && [ -n "$d" ] && [ -x "$d/compute-sanitizer" ] && cs=$d/compute-sanitizer
done
if [ -z "$cs" ]; then
    echo "SKIP: compute-sanitizer not found (PATH, \$FA2_CUDA_BIN, /usr/local/cuda/bin)"
    exit 77
fi
"$bin" --probe
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
extra=()
case "$tool" in
memcheck) extra=(--leak-check full) ;;
esac
echo "+ $cs --tool $tool --error-exitcode 1 ${extra[*]} $bin"
start=$(date +%s)
"$cs" --tool "$tool" --error-exitcode 1 "${extra[@]}" "$bin"
rc=$?
echo "sanitizer_$tool: exit $rc in $(( $(date +%s) - start )) s ($([ "$rc" -eq 0 ] && echo '0 errors' || echo 'ERRORS, see above'))"
exit "$rc"
