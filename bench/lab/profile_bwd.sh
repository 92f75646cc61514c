#!/usr/bin/env bash
# Nsight Compute over one backward shape (bench/lab/profile_bwd.py): libfa2's kernels next
# to SDPA flash's and cuDNN's, kernel by kernel. Builds the library only. Clocks are
# left alone (--clock-control none). Output: $OUT/profile_<shape>.txt, and a duration
# table printed last.
#
#   device run:  FA2_PROF_SHAPES="64:1024:1 64:2048:1" bash bench/lab/profile_bwd.sh
#
# FA2_PROF_SHAPES: d:seqlen:causal words (default 64:1024:1); FA2_PROF_SECTIONS: ncu
# --section names (default SpeedOfLight Occupancy LaunchStats WarpStateStats
# SchedulerStats); FA2_PROF_METRICS: extra --metrics (comma-separated, regex: allowed);
# FA2_PROF_KERNELS: ncu -k filter; FA2_PROF_BACKENDS: fa2,flash,cudnn.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
BUILD=build-prof
mkdir -p "$OUT"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real -DFA2_BUILD_TESTS=OFF \
    -DFA2_BUILD_BENCH=OFF >"$OUT/profile_build.log" 2>&1 &&
    cmake --build "$BUILD" -j16 --target fa2 >>"$OUT/profile_build.log" 2>&1 ||
    { tail -30 "$OUT/profile_build.log"; exit 1; }
sections=()
for s in ${FA2_PROF_SECTIONS:-SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats}; do
    sections+=(--section "$s")
done
summary=()
for shape in ${FA2_PROF_SHAPES:-64:1024:1}; do
    IFS=: read -r d s c <<<"$shape"
    log="$OUT/profile_d${d}_s${s}_c${c}.txt"
    metrics=()
    [ -n "${FA2_PROF_METRICS:-}" ] && metrics=(--metrics "$FA2_PROF_METRICS")
    ncu --clock-control none -k "${FA2_PROF_KERNELS:-regex:dkdv|dq_|dot_do|flash_bwd|cudnn}" \
        "${sections[@]}" "${metrics[@]}" \
        python3 bench/lab/profile_bwd.py --lib "$BUILD/libfa2.so" --d "$d" --seqlen "$s" --causal "$c" \
        --backends "${FA2_PROF_BACKENDS:-fa2,flash,cudnn}" >"$log" 2>&1
    echo "ncu exit $? for $shape" >>"$log"
    summary+=("== d=$d seqlen=$s causal=$c")
    # kernel name line, then its Duration line
    summary+=("$(awk '/Context [0-9]+, Stream/ { name = substr($0, 3, 72) }
                      /^ +Duration / { printf "  %-72s %s %s\n", name, $3, $2 }' "$log")")
done
printf '%s\n' "${summary[@]}"
