# The head-dim buckets, read from the tile tables themselves (the one source of truth):
# every "#define FA2_TILE_D<d>" of kernels/sm80/fwd_tiles.h is a bucket with mma.sync
# kernels; "#define FA2_WGMMA_TILE_D<d>" / "FA2_WGMMA_BWD_TILE_D<d>" of the kernels/sm90
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
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm90/fwd_sm90_tiles.h FA2_WGMMA_TILE_D
                 FA2_WGMMA_HEAD_DIMS)
fa2_buckets_from(${CMAKE_CURRENT_SOURCE_DIR}/kernels/sm90/bwd_sm90_tiles.h
                 FA2_WGMMA_BWD_TILE_D FA2_WGMMA_BWD_HEAD_DIMS)
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
# The decode kernel's pipeline depths: the X(n) entries of FA2_DECODE_STAGE_COUNTS.
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/decode/decode_tiles.h fa2_stages_line
     REGEX "^#define FA2_DECODE_STAGE_COUNTS\\(X\\)")
string(REGEX MATCHALL "X\\(([0-9]+)\\)" fa2_stage_items "${fa2_stages_line}")
string(REGEX REPLACE "X\\(([0-9]+)\\)" "\\1" FA2_DECODE_STAGE_COUNTS "${fa2_stage_items}")
if(NOT FA2_DECODE_STAGE_COUNTS)
  message(FATAL_ERROR "no FA2_DECODE_STAGE_COUNTS in kernels/decode/decode_tiles.h")
endif()

# kernels/common/built_buckets.h lists the full build's buckets for the planner: the
# same as the tile table's.
file(STRINGS ${CMAKE_CURRENT_SOURCE_DIR}/kernels/common/built_buckets.h fa2_all_line
     REGEX "^#define FA2_ALL_HEAD_DIM_BUCKETS\\(X\\)")
string(REGEX MATCHALL "X\\(([0-9]+)\\)" fa2_all_items "${fa2_all_line}")
string(REGEX REPLACE "X\\(([0-9]+)\\)" "\\1" fa2_all_buckets "${fa2_all_items}")
if(NOT fa2_all_buckets STREQUAL FA2_HEAD_DIM_BUCKETS)
  message(FATAL_ERROR "kernels/common/built_buckets.h lists buckets (${fa2_all_buckets}), "
                      "kernels/sm80/fwd_tiles.h has (${FA2_HEAD_DIM_BUCKETS})")
endif()

# FA2_HEAD_DIMS: an engine that needs only some head dims builds only their buckets
# (the kernels of every family for them, nothing else). A head dim runs in the bucket
# the full build gives it, or fa2_plan refuses it, so a build of some buckets runs only
# kernels the full build runs for the same head dims.
# kernels/common/built_buckets.h reads the generated fa2_built_buckets.h.
set(FA2_HEAD_DIMS "" CACHE STRING
    "Head-dim buckets to compile, e.g. \"64;128\" (empty: all of ${FA2_HEAD_DIM_BUCKETS})")
# FA2_DTYPES: likewise the element types (fp16, bf16); fa2_plan refuses the others.
set(FA2_DTYPES "" CACHE STRING "Element types to compile, fp16 and/or bf16 (empty: both)")
set(FA2_ALL_HEAD_DIM_BUCKETS ${FA2_HEAD_DIM_BUCKETS})
set(FA2_DTYPE_LIST fp16 bf16)
foreach(dt IN LISTS FA2_DTYPES)
  if(NOT dt IN_LIST FA2_DTYPE_LIST)
    message(FATAL_ERROR "FA2_DTYPES: ${dt} is not an element type (fp16, bf16)")
  endif()
endforeach()
if(FA2_DTYPES)
  set(FA2_DTYPE_LIST ${FA2_DTYPES})
endif()
if(FA2_HEAD_DIMS)
  foreach(d IN LISTS FA2_HEAD_DIMS)
    if(NOT d IN_LIST FA2_ALL_HEAD_DIM_BUCKETS)
      message(FATAL_ERROR "FA2_HEAD_DIMS: ${d} is not a head-dim bucket (the buckets: "
                          "${FA2_ALL_HEAD_DIM_BUCKETS})")
    endif()
  endforeach()
  foreach(list_name FA2_HEAD_DIM_BUCKETS FA2_WGMMA_HEAD_DIMS FA2_WGMMA_BWD_HEAD_DIMS
                    FA2_COMPACT_HEAD_DIMS FA2_COMPACT_BWD_HEAD_DIMS FA2_DECODE_HEAD_DIMS)
    set(kept "")
    foreach(d IN LISTS ${list_name})
      if(d IN_LIST FA2_HEAD_DIMS)
        list(APPEND kept ${d})
      endif()
    endforeach()
    set(${list_name} ${kept})
  endforeach()
endif()
if(FA2_HEAD_DIMS OR FA2_DTYPES)
  set(fa2_built_lines "/* Generated by CMake (FA2_HEAD_DIMS, FA2_DTYPES): what this build compiles. */\n")
  foreach(d IN LISTS FA2_ALL_HEAD_DIM_BUCKETS)
    if(d IN_LIST FA2_HEAD_DIM_BUCKETS)
      string(APPEND fa2_built_lines "#define FA2_BUILT_D${d}(...) __VA_ARGS__\n")
    else()
      string(APPEND fa2_built_lines "#define FA2_BUILT_D${d}(...)\n")
    endif()
  endforeach()
  foreach(dt fp16 bf16)
    string(TOUPPER ${dt} DT)
    if(dt IN_LIST FA2_DTYPE_LIST)
      string(APPEND fa2_built_lines "#define FA2_BUILT_${DT} 1\n")
    else()
      string(APPEND fa2_built_lines "#define FA2_BUILT_${DT} 0\n")
    endif()
  endforeach()
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/generated/fa2_built_buckets.h "${fa2_built_lines}")
  include_directories(${CMAKE_CURRENT_BINARY_DIR}/generated)
  add_compile_definitions(FA2_BUILT_BUCKETS)
endif()
# The test suite and the benches cover every bucket and type: a build of some is the
# library alone.
if((FA2_HEAD_DIMS OR FA2_DTYPES) AND (FA2_BUILD_TESTS OR FA2_BUILD_BENCH))
  message(STATUS "FA2_HEAD_DIMS=${FA2_HEAD_DIMS} FA2_DTYPES=${FA2_DTYPES}: the library only "
                 "(FA2_BUILD_TESTS and FA2_BUILD_BENCH need every head-dim bucket and type)")
  set(FA2_BUILD_TESTS OFF)
  set(FA2_BUILD_BENCH OFF)
endif()
