#!/usr/bin/env bash
# Packaging check, run by .ci/run after the tests: install a build directory to a
# temporary prefix, check that libfa2.so exports only fa2_* symbols, then configure,
# build and run the three consumers in examples/ against that prefix alone:
# consumer_c (find_package, fa2::fa2 and fa2::fa2_static), consumer_cxx (find_package, fa2::fa2_static),
# consumer_make (pkg-config, shared and static), and import python/libfa2 from the
# prefix; then consumer_subproject builds libfa2 itself through FetchContent, and
# `pip install .` builds the wheel (pyproject.toml) into a fresh venv. The consumers exit 0 without a GPU after planning and an error path.
#
#   .ci/check_install.sh [build-dir]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)

step() { echo; echo "== $*"; }

step "install $build -> temporary prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
(cd "$prefix" && find . -type f -o -type l | sort | sed 's/^\.\//  /')

lib=$(find "$prefix" -name libfa2.so -print -quit)
libdir=$(dirname "$lib")
step "exported symbols of the installed libfa2.so, global symbols of libfa2.a"
cmake -DLIB="$lib" -DSTATIC="$libdir/libfa2.a" -P cmake/check_exports.cmake
readelf -d "$lib" | grep SONAME

# consumer_c twice: fa2::fa2 (shared), then fa2::fa2_static from a C-only project.
for run in consumer_c:OFF consumer_c:ON consumer_cxx:ON; do
    c=${run%:*} static=${run#*:}
    step "examples/$c: find_package(fa2) with CMAKE_PREFIX_PATH=<prefix> (static=$static)"
    cmake -S "examples/$c" -B "$tmp/$c-$static" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
        -DFA2_CONSUMER_STATIC="$static" >"$tmp/$c.log" 2>&1 || { cat "$tmp/$c.log"; exit 1; }
    cmake --build "$tmp/$c-$static" >>"$tmp/$c.log" 2>&1 || { cat "$tmp/$c.log"; exit 1; }
    "$tmp/$c-$static/fa2_$c"
done

step "find_package(fa2) without a CUDA toolkit: fa2::fa2 still links"
mkdir -p "$tmp/nocuda"
printf '%s\n' 'cmake_minimum_required(VERSION 3.24)' 'project(fa2_nocuda LANGUAGES C)' \
    'find_package(fa2 REQUIRED)' 'add_executable(fa2_nocuda main.c)' \
    'target_link_libraries(fa2_nocuda PRIVATE fa2::fa2)' >"$tmp/nocuda/CMakeLists.txt"
printf '%s\n' '#include <stdio.h>' '#include <fa2.h>' \
    'int main(void) { printf("libfa2 %s without a toolkit\n", fa2_version_string());' \
    '                 return fa2_version() == FA2_VERSION_NUMBER ? 0 : 1; }' >"$tmp/nocuda/main.c"
cmake -S "$tmp/nocuda" -B "$tmp/nocuda/build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON >"$tmp/nocuda.log" 2>&1 || { cat "$tmp/nocuda.log"; exit 1; }
cmake --build "$tmp/nocuda/build" >>"$tmp/nocuda.log" 2>&1 || { cat "$tmp/nocuda.log"; exit 1; }
"$tmp/nocuda/build/fa2_nocuda"

step "examples/consumer_make: Makefile + pkg-config, PKG_CONFIG_PATH=<prefix>"
command -v pkg-config >/dev/null 2>&1 || { echo "pkg-config is missing" >&2; exit 1; }
cp -r examples/consumer_make "$tmp/consumer_make"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
echo "pkg-config --cflags --libs fa2: $(pkg-config --cflags --libs fa2)"
echo "pkg-config --libs fa2-static: $(pkg-config --libs fa2-static)"
make -s -C "$tmp/consumer_make" run run-static

step "python: the libfa2 package from the prefix finds the prefix's libfa2"
env -u FA2_LIBRARY python3 -B -c "
import sys; sys.path.insert(0, '$prefix/share/fa2/python')
import libfa2
lib = libfa2.library()
assert lib.path.startswith('$prefix'), lib.path
assert libfa2.__version__ == lib.version_string(), libfa2.__version__
print('libfa2', libfa2.__version__, 'loaded', lib.path)"

# As an engine would take it: sm_90a, the head dims and the element type the consumer
# plans (64 and 128, bf16) and no others (FA2_HEAD_DIMS, FA2_DTYPES).
step "examples/consumer_subproject: libfa2 through FetchContent in a CUDA project (sm_90a, d 64 and 128, bf16)"
cmake -S examples/consumer_subproject -B "$tmp/subproject" "${gen[@]}" -DFA2_SOURCE_DIR="$PWD" \
    -DFA2_CUDA_ARCHITECTURES=90a-real "-DFA2_HEAD_DIMS=64;128" -DFA2_DTYPES=bf16 \
    >"$tmp/subproject.log" 2>&1 || { cat "$tmp/subproject.log"; exit 1; }
grep -q "FA2_BUILD_TESTS:BOOL=OFF" "$tmp/subproject/CMakeCache.txt" || { echo "tests not off in a subproject" >&2; exit 1; }
cmake --build "$tmp/subproject" >>"$tmp/subproject.log" 2>&1 || { cat "$tmp/subproject.log"; exit 1; }
"$tmp/subproject/fa2_consumer_subproject"

# The wheel's kernels are what the packaging does not test: sm_90a and head dims 64 and
# 128 only (FA2_HEAD_DIMS), a build of a fraction of the full one.
step "pip install . into a fresh venv (sm_90a, head dims 64 and 128), then the binding's CPU tests on it"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q . -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a-real \
    -C "cmake.define.FA2_HEAD_DIMS=64;128" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
(cd "$tmp" && "$tmp/venv/bin/python" -c "import libfa2; print('libfa2', libfa2.__version__, '|', libfa2.build_info())")
FA2_TEST_INSTALLED_PACKAGE=1 "$tmp/venv/bin/python" tests/test_python_ffi.py
# python -m libfa2 on this CPU machine: the build, "GPU: none", a plan, exit 77
rc=0
(cd "$tmp" && "$tmp/venv/bin/python" -m libfa2) >"$tmp/main.log" 2>&1 || rc=$?
cat "$tmp/main.log"
[ "$rc" = 77 ] && grep -q "^GPU: none (no NVIDIA driver found" "$tmp/main.log" ||
    { echo "python -m libfa2: exit $rc, want 77 and 'GPU: none (no NVIDIA driver found' here" >&2; exit 1; }

echo
echo "packaging check: OK (install, exports, 4 consumers, python, pip wheel)"
