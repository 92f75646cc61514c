#!/usr/bin/env bash
# Forward tile sweep on the GPU machine: builds libfa2 once per tile variant (CMake
# -DFA2_TILE_D<d>=..., planner and kernels agree) and times each with sdpa_compare.py.
#   bench/tune_tiles.sh 128 "128,128,32,4" "128,128,64,8" ...   (d, then variants "d,Br,Bc,warps")
# Results: $OUT/tune_d<d>.log (or ./tune_d<d>.log without $OUT).
set -uo pipefail
d=$1; shift
out=${OUT:-.}
seqlens=${FA2_TUNE_SEQLENS:-1024,8192}
for tile in "$@"; do
  dir=build-tune-${tile//,/_}
  cmake -S . -B "$dir" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real -DFA2_BUILD_TESTS=OFF \
    -DFA2_BUILD_BENCH=OFF "-DFA2_TILE_D$d=$tile" > "$dir.cfg.log" 2>&1 &&
    cmake --build "$dir" -j16 --target fa2 > "$dir.build.log" 2>&1 ||
    { echo "tile $tile: build failed"; tail -5 "$dir.build.log"; continue; }
  grep -h "spill" "$dir.build.log" | sort -u | head -3
  echo "== d=$d tile $tile"
  PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py --lib "$dir/libfa2.so" --dims "$d" \
    --seqlens "$seqlens" --dtypes bf16 --no-backward 2>&1 | tail -n +2
done | tee "$out/tune_d$d.log"
