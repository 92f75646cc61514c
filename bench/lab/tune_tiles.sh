#!/usr/bin/env bash
# Tile sweep on the GPU machine: per variant, a copy of the tree with one row of a tile
# table replaced (planner and kernels read the same row), built and timed with
# sdpa_compare.py. A variant names the row's macro and its new value:
#   bench/lab/tune_tiles.sh FA2_TILE_D256=256,64,32,4 FA2_BWD_TILE_D128=128,128,32,8,1,64,32,4
#   (tables: kernels/sm80/fwd_tiles.h FA2_TILE_D<d>, sm80/bwd_tiles.h FA2_BWD_TILE_D<d>,
#   sm90/fwd_sm90_tiles.h FA2_WGMMA_TILE_D<d>, sm90/bwd_sm90_tiles.h FA2_WGMMA_BWD_TILE_D<d>)
# A forward variant is timed forward only; a backward one (*BWD_TILE_*) forward and
# backward. FA2_TUNE_SEQLENS (default 8192). Log: $OUT/tune.log.
set -uo pipefail
out=${OUT:-.}
seqlens=${FA2_TUNE_SEQLENS:-8192}
for variant in "$@"; do
  var=${variant%%=*}
  tile=${variant#*=}
  d=${tile%%,*}
  dir=tune-${var}-${tile//,/_}
  extra=--no-backward
  [[ $var == *BWD_TILE_* ]] && extra=
  rm -rf "$dir" && mkdir -p "$dir"
  git archive HEAD CMakeLists.txt cmake include kernels src python | tar -x -C "$dir"
  table=$(grep -l "^#define $var " "$dir"/kernels/*/*.h)
  [ -n "$table" ] || { echo "$variant: no table row $var"; continue; }
  sed -i "s/^#define $var .*/#define $var ($tile)/" "$table"
  cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    -DFA2_BUILD_TESTS=OFF -DFA2_WARN_SPILLS=ON -DFA2_BUILD_BENCH=OFF > "$dir.cfg.log" 2>&1 &&
    cmake --build "$dir/build" -j16 --target fa2 > "$dir.build.log" 2>&1 ||
    { echo "$variant: build failed"; tail -5 "$dir.build.log"; continue; }
  echo "== $variant $(grep -c 'spill' "$dir.build.log") spill warnings"
  PYTHONUNBUFFERED=1 python3 bench/sdpa_compare.py --lib "$dir/build/libfa2.so" --dims "$d" \
    --seqlens "$seqlens" --dtypes bf16 $extra 2>&1 | tail -n +2
done | tee "$out/tune.log"
