#!/usr/bin/env bash
# CI reliability steps (docs/reliability.md), run by .ci/run after the main build:
#   1. build-san:  FA2_SANITIZE=ON (ASan + UBSan on the C host code and C tests),
#                  kernels as compute_80 PTX only (no machine code, no Hopper units:
#                  the CPU tests never run a kernel, and the host code plans for every
#                  device either way), then `ctest -L cpu` there;
#   2. build-fuzz: clang/clang++, FA2_BUILD_FUZZ=ON, only the fuzz_plan and fuzz_mask
#                  targets (no CUDA code), then `ctest -L fuzz` (about 30 s of libFuzzer
#                  on fuzz_plan's seed corpus, 15 s on fuzz_mask);
#   3. valgrind memcheck over the CPU tests of the main build dir `build` (reconfigured
#      with FA2_VALGRIND=ON, which only adds ctest entries: nothing is rebuilt), then
#      `ctest -L valgrind`. FA2_CI_VALGRIND=0 skips it.
# Installs clang's runtime libraries (libclang-rt-14-dev) when libFuzzer is missing,
# and valgrind when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc)

step() {
    local name=$1 t0
    shift
    t0=$(date +%s)
    echo "+ [$name] $*"
    "$@"
    echo "[$name] ok in $(( $(date +%s) - t0 )) s"
}

# libFuzzer needs clang's runtime (Debian: libclang-rt-14-dev with clang 14); probed
# with clang (fuzz_plan, C) and clang++ (fuzz_mask, C++).
fuzz_probe=$(mktemp -d)
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
    >"$fuzz_probe/probe.c"
printf '#include <stddef.h>\n#include <stdint.h>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t *, size_t) { return 0; }\n' \
    >"$fuzz_probe/probe.cpp"
if ! clang -fsanitize=fuzzer,address,undefined "$fuzz_probe/probe.c" -o "$fuzz_probe/probe" 2>/dev/null ||
   ! clang++ -fsanitize=fuzzer,address,undefined "$fuzz_probe/probe.cpp" -o "$fuzz_probe/probe" 2>/dev/null; then
    echo "installing: libclang-rt-14-dev (libFuzzer runtime)"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends libclang-rt-14-dev
fi
rm -rf "$fuzz_probe"

started=$(date +%s)
step sanitize-configure cmake -S . -B build-san -DCMAKE_CUDA_ARCHITECTURES=80-virtual \
    -DFA2_SANITIZE=ON -DFA2_BUILD_BENCH=OFF
step sanitize-build cmake --build build-san -j "$jobs"
step sanitize-ctest ctest --test-dir build-san -L cpu --output-on-failure --no-tests=error

# A build-fuzz configured with another C++ compiler (before fuzz_mask): CMake would drop
# its cache on the change, and with it FA2_BUILD_FUZZ, so start it afresh.
if [ -f build-fuzz/CMakeCache.txt ] &&
    ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++$' build-fuzz/CMakeCache.txt; then
    rm -rf build-fuzz/CMakeCache.txt build-fuzz/CMakeFiles
fi
step fuzz-configure cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CUDA_ARCHITECTURES=90a-real -DFA2_BUILD_FUZZ=ON \
    -DFA2_BUILD_TESTS=OFF -DFA2_BUILD_BENCH=OFF
step fuzz-build cmake --build build-fuzz -j "$jobs" --target fuzz_plan fuzz_mask
step fuzz-ctest ctest --test-dir build-fuzz -L fuzz --output-on-failure --no-tests=error

if [ "${FA2_CI_VALGRIND:-1}" = 1 ] && [ -f build/CMakeCache.txt ]; then
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "installing: valgrind"
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq --no-install-recommends valgrind
    fi
    step valgrind-configure cmake -S . -B build -DFA2_VALGRIND=ON
    step valgrind-build cmake --build build -j "$jobs"
    step valgrind-ctest ctest --test-dir build -L valgrind --output-on-failure --no-tests=error -j "$jobs"
fi
echo "reliability steps: $(( $(date +%s) - started )) s"
