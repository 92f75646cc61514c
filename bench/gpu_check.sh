#!/usr/bin/env bash
# The one script for the GPU machine: configure (Ninja, sm_90a only), build, full ctest,
# the demo, python -m libfa2, fa2_bench, and a short summary printed LAST. Run from the
# repo root. A GPU machine without a package registry needs cmocka's .deb files in
# .deps/ (on a machine with one: `mkdir -p .deps && cd .deps && apt-get download
# libcmocka0 libcmocka-dev`), carried along:
#
#   device run, carry [".deps"]:  bash bench/gpu_check.sh
#
# Logs (ctest-output.log: every test's output) and bench.csv go to $OUT (the device
# tool's folder that comes back; default ./gpu-out), packed at the end into
# $OUT/gpu-logs.tgz beside summary.txt. Environment:
#   FA2_BENCH_ARGS   extra fa2_bench arguments, e.g. "--seqlen 8192 --head-dim 128"
#   FA2_SKIP_BENCH=1 skip fa2_bench
#   FA2_CTEST_ARGS   extra ctest arguments, e.g. "-L gpu" or "-R forward"
#   FA2_SDPA=1       also run bench/sdpa_compare.py (PyTorch SDPA side by side);
#   FA2_SDPA_ARGS    its extra arguments, e.g. "--quick"
#   FA2_BASELINE=DIR also build the libfa2 sources in DIR (an older commit's
#                    `git archive REV CMakeLists.txt cmake include kernels src python` in
#                    an ignored folder, carried to the device; delete it after the run,
#                    it holds an older binding) and run bench/lab/ab_compare.py:
#                    this tree's library against that one in one process, forward and
#                    backward per shape (FA2_AB_ARGS: its extra arguments); ab.log, ab.csv
#   FA2_SKIP_AB=1    with FA2_BASELINE: build it (for the steps below that take it) but
#                    skip ab_compare
#   FA2_EXTRA_SRC    more source folders (copies of this tree with one change, made by
#                    the calling command), each built in the background after the main
#                    build into build-extra-<folder name>/libfa2.so for the caller's own
#                    steps after this script; their build log: extra-build.log
#   FA2_EXTRA_TESTS  with FA2_EXTRA_SRC: these test executables of this build run again
#                    against the first extra library (LD_LIBRARY_PATH before their
#                    RUNPATH), e.g. "test_scored_gpu test_varlen_gpu"; extra-tests.log
#   FA2_AB_NOISE=1   with FA2_BASELINE: also this tree's library against a copy of
#                    itself (the harness's own noise); ab-noise.log
#   FA2_VARLEN=1     also run bench/varlen_compare.py (packed and paged batches against
#                    PyTorch's varlen kernel and libfa2's dense one, paged decode steps;
#                    with FA2_BASELINE those A/B against the baseline); varlen.log;
#   FA2_VARLEN_ARGS  its extra arguments, e.g. "--pages 16,32,64"
#   FA2_DECODE=1     also run bench/decode_compare.py (decode steps against SDPA flash and
#                    cuDNN, and the copy bandwidth; with FA2_BASELINE also the baseline's
#                    step); decode.log
#   FA2_COMBINE=1    also run bench/combine_compare.py (fa2_combine on engine-like shapes;
#                    with FA2_BASELINE, A/B against the baseline); combine.log
#   FA2_VARIANTS=1   also run bench/variants_compare.py (each score variant's forward
#                    and backward against the plain plan's; with FA2_BASELINE also each
#                    call against the baseline's); variants.log
#   FA2_PROFILE=1    also run Nsight Compute over bench/lab/variants_profile.py (the plain,
#                    softcap and ALiBi forward kernels, d = 128, 8k causal): every
#                    metric of its sections as CSV, ncu-variants.csv
#   FA2_CONFORMANCE=DIR also run bench/conformance/run.py: flash-attn's own tests from the
#                    flash-attention checkout in DIR against this build's shims
#                    (FA2_CONFORMANCE_ARGS: its extra arguments, e.g. "--cases 60");
#                    conformance.log
#   FA2_HOST=1       also run the host-cost benchmarks: build/bench/fa2_host_overhead (the
#                    C calls against an empty launch) and bench/host_overhead.py (every
#                    Python entry point beside SDPA, and the seeds' training benchmark),
#                    bench/lab/host_pieces.py and backward_thread.py (the steps of a call,
#                    libfa2.backward inside autograd); host.log, host.csv.
#                    FA2_HOST_PACKAGE=DIR: bench/host_overhead.py also times the libfa2
#                    package in DIR (an older python/ folder, as for FA2_BASELINE) in the
#                    same rounds, column "before"
#   FA2_SANITIZER=1  also run `ctest -L sanitizer` (compute-sanitizer memcheck, racecheck,
#                    synccheck, initcheck over tests/test_sanitizer_subset.c; the main
#                    ctest step leaves that label out either way), log sanitizer.log
# Every step runs even if an earlier one failed; the exit status is non-zero if any
# step failed.
set -uo pipefail

OUT=${OUT:-$PWD/gpu-out}
BUILD=build-gpu
mkdir -p "$OUT"
# What $OUT holds already (e.g. the caller's own log of this script) is not packed
shopt -s nullglob
callers_files=()
for f in "$OUT"/*; do callers_files+=("${f##*/}"); done
shopt -u nullglob
failed=()
started=$(date +%s)

# run_step NAME LOG COMMAND...: runs COMMAND, its output to the terminal and LOG.
run_step() {
    local name=$1 log=$2
    shift 2
    echo
    echo "=== $name: $*"
    local t0
    t0=$(date +%s)
    "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $(( $(date +%s) - t0 )) s"
    [ "$rc" -eq 0 ] || failed+=("$name")
    return "$rc"
}

unpack_cmocka() {
    ls .deps/*.deb >/dev/null 2>&1 || { echo "no .deps/*.deb: apt-get download libcmocka0 libcmocka-dev into .deps/"; return 1; }
    mkdir -p /opt/cmocka
    for f in .deps/*.deb; do dpkg -x "$f" /opt/cmocka || return 1; done
    echo "cmocka unpacked into /opt/cmocka"
}

: >"$OUT/build.log"
run_step cmocka "$OUT/build.log" unpack_cmocka
configured=0
run_step configure "$OUT/build.log" cmake -S . -B "$BUILD" -G Ninja \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=/opt/cmocka/usr && configured=1
build_time="not built"
if [ "$configured" = 1 ]; then
    t0=$(date +%s)
    run_step build "$OUT/build.log" cmake --build "$BUILD" -j16 -- -k 0
    build_time="$(( $(date +%s) - t0 )) s (-j16, 90a-real)"
fi

# build_library SRC DIR: libfa2.so alone from the sources in SRC, into DIR.
build_library() {
    cmake -S "$1" -B "$2" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real \
        -DFA2_BUILD_TESTS=OFF -DFA2_BUILD_BENCH=OFF >/dev/null &&
        cmake --build "$2" -j12 --target fa2 >/dev/null
}

# The baseline and extra libraries build while the tests run (they leave most cores idle).
extra_pid=""
if [ -n "${FA2_EXTRA_SRC:-}" ]; then
    (rc=0
     for src in $FA2_EXTRA_SRC; do
        name=$(basename "$src")
        echo "=== extra library $name from $src"
        if build_library "$src" "build-extra-$name"; then
            echo "=== extra library $name: build-extra-$name/libfa2.so"
        else
            echo "=== extra library $name: FAILED"
            rc=1
        fi
     done
     exit $rc) >"$OUT/extra-build.log" 2>&1 &
    extra_pid=$!
fi
baseline_pid=""
if [ -n "${FA2_BASELINE:-}" ]; then
    : >"$OUT/ab.log"
    build_library "$FA2_BASELINE" build-baseline >"$OUT/baseline-build.log" 2>&1 &
    baseline_pid=$!
fi

: >"$OUT/ctest.log"
# shellcheck disable=SC2086  # FA2_CTEST_ARGS is a list of words
run_step ctest "$OUT/ctest.log" ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -LE sanitizer ${FA2_CTEST_ARGS:-}
# Every test's own output (passing ones included): ctest-output.log
cp "$BUILD/Testing/Temporary/LastTest.log" "$OUT/ctest-output.log" 2>/dev/null || true
# The extra and baseline libraries are done before anything is timed (a build would
# disturb it).
if [ -n "$extra_pid" ]; then
    wait "$extra_pid" || failed+=("extra-build")
fi
if [ -n "${FA2_EXTRA_TESTS:-}" ] && [ -n "${FA2_EXTRA_SRC:-}" ]; then
    : >"$OUT/extra-tests.log"
    src=${FA2_EXTRA_SRC%% *}
    lib_dir="$PWD/build-extra-$(basename "$src")"
    for t in $FA2_EXTRA_TESTS; do
        echo "=== $t against: $(LD_LIBRARY_PATH="$lib_dir" ldd "$BUILD/tests/$t" | grep libfa2)" \
            >>"$OUT/extra-tests.log"
        run_step "$t@$(basename "$src")" "$OUT/extra-tests.log" \
            env LD_LIBRARY_PATH="$lib_dir" "$BUILD/tests/$t"
    done
fi
if [ -n "$baseline_pid" ]; then
    wait "$baseline_pid"
    baseline_rc=$?
    run_step baseline-build "$OUT/ab.log" bash -c "cat '$OUT/baseline-build.log'; exit $baseline_rc"
fi

if [ "${FA2_SANITIZER:-0}" = 1 ]; then
    : >"$OUT/sanitizer.log"
    run_step sanitizer "$OUT/sanitizer.log" ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -V -L sanitizer
fi

: >"$OUT/demo.log"
run_step demo "$OUT/demo.log" "$BUILD/examples/fa2_demo"
run_step python-m-libfa2 "$OUT/demo.log" env FA2_LIBRARY="$PWD/$BUILD/libfa2.so" \
    PYTHONPATH="$PWD/python" python3 -m libfa2

if [ "${FA2_SKIP_BENCH:-0}" != 1 ]; then
    : >"$OUT/bench.log"
    rm -f "$OUT/bench.csv"
    # shellcheck disable=SC2086
    run_step bench "$OUT/bench.log" "$BUILD/bench/fa2_bench" --csv "$OUT/bench.csv" ${FA2_BENCH_ARGS:-}
fi

if [ -n "${FA2_BASELINE:-}" ] && [ "${FA2_SKIP_AB:-0}" != 1 ]; then
    # shellcheck disable=SC2086
    run_step ab "$OUT/ab.log" python3 bench/lab/ab_compare.py --lib "$BUILD/libfa2.so" \
        --base build-baseline/libfa2.so --base-binding "$FA2_BASELINE/python/libfa2" \
        --csv "$OUT/ab.csv" ${FA2_AB_ARGS:-}
    if [ "${FA2_AB_NOISE:-0}" = 1 ]; then
        : >"$OUT/ab-noise.log"
        cp "$BUILD/libfa2.so" build-baseline/libfa2-copy.so
        # shellcheck disable=SC2086
        run_step ab-noise "$OUT/ab-noise.log" python3 bench/lab/ab_compare.py --lib "$BUILD/libfa2.so" \
            --base build-baseline/libfa2-copy.so ${FA2_AB_ARGS:-}
    fi
fi

if [ "${FA2_SDPA:-0}" = 1 ]; then
    : >"$OUT/sdpa.log"
    # shellcheck disable=SC2086
    run_step sdpa "$OUT/sdpa.log" python3 bench/sdpa_compare.py --lib "$BUILD/libfa2.so" \
        --csv "$OUT/sdpa.csv" ${FA2_SDPA_ARGS:-}
fi

if [ "${FA2_HOST:-0}" = 1 ]; then
    run_step host-c "$OUT/host.log" "$BUILD/bench/fa2_host_overhead"
    run_step host-python "$OUT/host.log" env FA2_LIBRARY="$PWD/$BUILD/libfa2.so" \
        python3 bench/host_overhead.py --csv "$OUT/host.csv" \
        ${FA2_HOST_PACKAGE:+--baseline "$FA2_HOST_PACKAGE"}
    run_step host-pieces "$OUT/host.log" env FA2_LIBRARY="$PWD/$BUILD/libfa2.so" \
        python3 bench/lab/host_pieces.py
    run_step host-backward-thread "$OUT/host.log" env FA2_LIBRARY="$PWD/$BUILD/libfa2.so" \
        python3 bench/lab/backward_thread.py
fi

if [ "${FA2_DECODE:-0}" = 1 ]; then
    : >"$OUT/decode.log"
    run_step decode "$OUT/decode.log" python3 bench/decode_compare.py --lib "$BUILD/libfa2.so" \
        --csv "$OUT/decode.csv" $([ -n "${FA2_BASELINE:-}" ] && echo --base-lib build-baseline/libfa2.so)
fi

if [ "${FA2_VARLEN:-0}" = 1 ]; then
    : >"$OUT/varlen.log"
    # shellcheck disable=SC2046,SC2086  # with FA2_BASELINE: every row A/B against it
    run_step varlen "$OUT/varlen.log" python3 bench/varlen_compare.py --lib "$BUILD/libfa2.so" \
        --csv "$OUT/varlen.csv" $([ -n "${FA2_BASELINE:-}" ] && echo --base-lib build-baseline/libfa2.so) \
        ${FA2_VARLEN_ARGS:-}
fi

if [ "${FA2_COMBINE:-0}" = 1 ]; then
    : >"$OUT/combine.log"
    # shellcheck disable=SC2046  # with FA2_BASELINE: A/B against it
    run_step combine "$OUT/combine.log" python3 bench/combine_compare.py --lib "$BUILD/libfa2.so" \
        --csv "$OUT/combine.csv" $([ -n "${FA2_BASELINE:-}" ] && echo --base-lib build-baseline/libfa2.so)
fi

if [ "${FA2_PROFILE:-0}" = 1 ]; then
    : >"$OUT/profile.log"
    run_step profile "$OUT/profile.log" ncu --kernel-name regex:fwd_sm90 --launch-count 3 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
        --section InstructionStats --section LaunchStats --section Occupancy \
        --page raw --csv --log-file "$OUT/ncu-variants.csv" \
        python3 bench/lab/variants_profile.py --lib "$BUILD/libfa2.so"
    python3 bench/lab/variants_profile.py --summary "$OUT/ncu-variants.csv" >>"$OUT/profile.log" 2>&1
fi

if [ "${FA2_VARIANTS:-0}" = 1 ]; then
    : >"$OUT/variants.log"
    # shellcheck disable=SC2046  # with FA2_BASELINE: A/B against it
    run_step variants "$OUT/variants.log" python3 bench/variants_compare.py --lib "$BUILD/libfa2.so" \
        --csv "$OUT/variants.csv" $([ -n "${FA2_BASELINE:-}" ] && echo --base-lib build-baseline/libfa2.so)
fi

if [ -n "${FA2_CONFORMANCE:-}" ]; then
    : >"$OUT/conformance.log"
    # shellcheck disable=SC2086
    run_step conformance "$OUT/conformance.log" python3 bench/conformance/run.py \
        --flash-attn "$FA2_CONFORMANCE" --lib "$BUILD/libfa2.so" ${FA2_CONFORMANCE_ARGS:-}
fi

# ---- summary (last, so the device tool's output tail holds it) -----------------------
{
    echo
    echo "==================== gpu_check summary ===================="
    echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "gpu:    $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
    echo "nvcc:   $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo '?')"
    echo "tree:   $(bash bench/lab/tree_hash.sh 2>/dev/null || echo '?') (bench/lab/tree_hash.sh; git HEAD here: $(git rev-parse --short HEAD 2>/dev/null || echo 'none'), possibly stale)"
    echo "args:   FA2_CTEST_ARGS='${FA2_CTEST_ARGS:-}' FA2_BENCH_ARGS='${FA2_BENCH_ARGS:-}' FA2_SKIP_BENCH='${FA2_SKIP_BENCH:-0}' FA2_SDPA='${FA2_SDPA:-0}'"
    echo "build:  $build_time"
    # "100% tests passed, 0 tests failed out of 6" or (newer CMake) "100% tests passed out of 6"
    if grep -qE 'tests passed.* out of [0-9]+' "$OUT/ctest.log" 2>/dev/null; then
        total=$(grep -oE 'tests passed.* out of [0-9]+' "$OUT/ctest.log" | tail -1 | grep -oE '[0-9]+$')
        nfail=$(grep -oE '[0-9]+ tests? failed out of' "$OUT/ctest.log" | tail -1 | grep -oE '^[0-9]+')
        nfail=${nfail:-0}
        nskip=$(grep -c '\*\*\*Skipped' "$OUT/ctest.log")
        echo "ctest:  $((total - nfail - nskip)) passed, $nfail failed, $nskip skipped (of $total)"
        grep -E '\*\*\*(Failed|Skipped|Timeout|Exception)|Not Run' "$OUT/ctest.log" | sed 's/^/        /'
    else
        echo "ctest:  did not run to the end (see ctest.log)"
    fi
    echo "demo:   $(grep -E '^fa2_demo: ' "$OUT/demo.log" 2>/dev/null | tail -1 || true)"
    echo "python: $(grep -E '^check: ' "$OUT/demo.log" 2>/dev/null | tail -1 || echo 'python -m libfa2: no check line')"
    grep -E 'causal (on|off) .*TFLOP/s' "$OUT/demo.log" 2>/dev/null | sed 's/^ */        /'
    if [ -s "$OUT/bench.csv" ]; then
        grep -hE '^(spot|backward) check|^backward: ' "$OUT/bench.log" | sed 's/^/bench:  /'
        echo "bench:  key rows (head_dim 128, seqlen 8192; issue targets, non-causal: forward >= 175, backward >= 150 TFLOP/s)"
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                 $col["head_dim"] == 128 && $col["seqlen"] == 8192 {
                     printf "        %s d=128 N=8192 causal=%s: fa2 %s TFLOP/s (%s ms), baseline %s TFLOP/s, speed-up %sx\n",
                         $col["dtype"], $col["causal"], $col["fa2_tflops"], $col["fa2_ms"],
                         $col["base_tflops"], $col["speedup"]
                     if ("bwd_tflops" in col)
                         printf "        %s d=128 N=8192 causal=%s: backward %s TFLOP/s (%s ms, %s), fwd+bwd %s TFLOP/s, bwd workspace %.1f MB, deterministic=%s\n",
                             $col["dtype"], $col["causal"], $col["bwd_tflops"], $col["bwd_ms"],
                             $col["bwd_state"], $col["fwdbwd_tflops"],
                             $col["bwd_workspace_bytes"] / 1e6, $col["deterministic"] }' "$OUT/bench.csv"
    elif [ "${FA2_SKIP_BENCH:-0}" = 1 ]; then
        echo "bench:  skipped (FA2_SKIP_BENCH=1)"
    else
        echo "bench:  no results (see bench.log)"
    fi
    [ "${FA2_SDPA:-0}" = 1 ] && echo "sdpa:   see sdpa.log / sdpa.csv"
    # summary_lines LOG TITLE PATTERN: TITLE, then LOG's lines matching PATTERN indented
    # (nothing when LOG is empty or missing: the step did not run)
    summary_lines() {
        [ -s "$OUT/$1" ] || return 0
        echo "$2"
        grep -E "$3" "$OUT/$1" | sed 's/^/        /'
    }
    summary_lines ab.log "ab:     this tree over the baseline (speed ratio), one process:" \
        '^[0-9]+ shapes, '
    summary_lines ab-noise.log "noise:  this tree over a copy of itself:" '^[0-9]+ shapes, '
    summary_lines decode.log "decode: (TB/s of K+V read)" '^decode |graph replay|copy bandwidth'
    summary_lines varlen.log "varlen: (TFLOP/s)" '^(varlen|equal|paged|decode|mixed) '
    summary_lines combine.log "combine: (fa2_combine, fp32 parts to bf16)" '^combine '
    summary_lines variants.log "variants: (time over the plain plan's; with a baseline, speed over it)" \
        '^(variant|backward|forward) '
    summary_lines extra-tests.log "extra:  tests against the first extra library:" \
        '^=== test_|^\[  (PASSED|FAILED)  \]'
    summary_lines profile.log "profile: (ncu, forward kernels, 1 x 8k GQA 32:8 d128 causal)" '^profile '
    summary_lines conformance.log "conform: flash-attn's tests (passed failed refused per function):" \
        '^test_flash_attn|FAILED'
    if [ "${FA2_SANITIZER:-0}" = 1 ]; then
        grep -hE 'sanitizer_[a-z]+: exit|SKIP: compute-sanitizer' "$OUT/sanitizer.log" | sed -E 's/^([0-9]+: )?/sanit:  /'
    fi
    echo "total:  $(( $(date +%s) - started )) s"
    if [ ${#failed[@]} -eq 0 ]; then
        echo "RESULT: all steps ok"
    else
        echo "RESULT: FAILED steps: ${failed[*]}"
    fi
} 2>&1 | tee "$OUT/summary.txt"

# The device tool brings back only a few files a call: this run's logs and CSVs into one
# archive beside the summary (tar xzf gpu-logs.tgz to read them).
shopt -s nullglob
logs=()
for f in "$OUT"/*; do
    case " summary.txt gpu-logs.tgz ${callers_files[*]} " in
        *" ${f##*/} "*) ;;
        *) logs+=("${f##*/}") ;;
    esac
done
shopt -u nullglob
[ ${#logs[@]} -eq 0 ] || (cd "$OUT" && tar czf gpu-logs.tgz "${logs[@]}" && rm -f "${logs[@]}")

[ ${#failed[@]} -eq 0 ]
