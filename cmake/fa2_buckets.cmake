# The head-dim buckets, read from the tile tables themselves (the one source of truth):
# every "#define FA2_TILE_D<d>" of kernels/sm80/fwd_tiles.h is a bucket with mma.sync
# kernels; "#define FA2_SM90_TILE_D<d>" / "FA2_SM90_BWD_TILE_D<d>" of the kernels/sm90
# tables are the buckets with Hopper forward / backward kernels.
function(fa2_buckets_from header macro_prefix out_var)
  file(STRINGS ${header} lines REGEX "^#define ${macro_prefix}[0-9]+ ")
  set(buckets "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^#define ${macro_prefix}([0-9]+) .*" "\\1" d "${line}")
    list(APPEND buckets ${d})
  endforeach()
  if(NOT buckets)
    message(FATAL_ERROR "no ${macro_prefix}<d> rows in ${header}")
  endif()
  set(${out_var} ${buckets} PARENT_SCOPE)
endfunction()

fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm80/fwd_tiles.h FA2_TILE_D
                 FA2_HEAD_DIM_BUCKETS)
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm80/bwd_tiles.h FA2_BWD_TILE_D
                 fa2_bwd_buckets)
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm90/fwd_sm90_tiles.h FA2_SM90_TILE_D
                 FA2_SM90_HEAD_DIMS)
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm90/bwd_sm90_tiles.h
                 FA2_SM90_BWD_TILE_D FA2_SM90_BWD_HEAD_DIMS)
# The planner gives every forward bucket a backward row.
if(NOT FA2_HEAD_DIM_BUCKETS STREQUAL fa2_bwd_buckets)
  message(FATAL_ERROR "kernels/sm80/fwd_tiles.h buckets (${FA2_HEAD_DIM_BUCKETS}) differ "
                      "from kernels/sm80/bwd_tiles.h (${fa2_bwd_buckets})")
endif()
# Buckets with a compact (99 KiB) mma.sync tile, forward and backward.
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm80/fwd_tiles.h FA2_TILE_COMPACT_D
                 FA2_COMPACT_HEAD_DIMS)
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm80/bwd_tiles.h FA2_BWD_TILE_COMPACT_D
                 FA2_COMPACT_BWD_HEAD_DIMS)
# Buckets with the decode kernel: the X(d) entries of FA2_DECODE_HEAD_DIMS in
# kernels/decode/decode_tiles.h.
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/decode/decode_tiles.h fa2_decode_line
     REGEX "^#define FA2_DECODE_HEAD_DIMS\\(X\\)")
string(REGEX MATCHALL "X\\(([0-9]+)\\)" fa2_decode_items "${fa2_decode_line}")
set(FA2_DECODE_HEAD_DIMS "")
foreach(item IN LISTS fa2_decode_items)
  string(REGEX REPLACE "X\\(([0-9]+)\\)" "\\1" d "${item}")
  list(APPEND FA2_DECODE_HEAD_DIMS ${d})
endforeach()
if(NOT FA2_DECODE_HEAD_DIMS)
  message(FATAL_ERROR "no FA2_DECODE_HEAD_DIMS in kernels/decode/decode_tiles.h")
endif()
