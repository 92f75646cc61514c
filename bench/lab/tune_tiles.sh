#!/usr/bin/env bash
# Tile sweep on the GPU machine: builds libfa2 once per variant through the CMake tile
# overrides (planner and kernels agree) and times it with sdpa_compare.py.
#   bench/lab/tune_tiles.sh FA2_TILE_D256=256,64,32,4 FA2_BWD_TILE_D128=128,128,32,8,1,64,32,4 ...
# A forward variant (FA2_TILE_*) is timed forward only; a backward one (FA2_BWD_TILE_*)
# forward and backward. FA2_TUNE_SEQLENS (default 8192). Log: $OUT/tune.log.
set -uo pipefail
out=${OUT:-.}
seqlens=${FA2_TUNE_SEQLENS:-8192}
for variant in "$@"; do
  var=${variant%%=*}
  tile=${variant#*=}
  d=${tile%%,*}
  dir=build-tune-${var}-${tile//,/_}
  extra=--no-backward
  [[ $var == *BWD_TILE_* ]] && extra=
  cmake -S . -B "$dir" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real -DFA2_BUILD_TESTS=OFF -DFA2_WARN_SPILLS=ON \
    -DFA2_BUILD_BENCH=OFF "-D$var=$tile" > "$dir.cfg.log" 2>&1 &&
    cmake --build "$dir" -j16 --target fa2 > "$dir.build.log" 2>&1 ||
    { echo "$variant: build failed"; tail -5 "$dir.build.log"; continue; }
  echo "== $variant $(grep -c 'spill' "$dir.build.log") spill warnings"
  PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py --lib "$dir/libfa2.so" --dims "$d" \
    --seqlens "$seqlens" --dtypes bf16 $extra 2>&1 | tail -n +2
done | tee "$out/tune.log"
