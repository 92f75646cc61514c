# ctest fa2_gpu_code_sets (cpu): configures libfa2 (head dim 128, Ninja) for several
# architecture lists and checks the GPU code each kernel unit is compiled for
# (docs/building.md, "How the kernels are split"): with -real/-virtual lists the
# mma.sync forward and fa2_combine come from one compute_80 PTX (sm_90 machine code
# included) and the 3-stage decode from one compute_90 PTX; with a real target below
# sm_90 in the 3-stage decode's set, or a list in another form, the units take their
# targets as they are. Then the units' grouping (FA2_KERNEL_UNITS): a unit per family
# holds every bucket, a unit per bucket one.
#   cmake -DSRC=<source dir> -DWORK=<scratch dir> -P check_gpu_code_sets.cmake
# Without ninja it prints "SKIP:" (the test's skip pattern) and checks nothing.
find_program(NINJA ninja)
if(NOT NINJA)
  message("SKIP: fa2_gpu_code_sets needs ninja")
  return()
endif()

# unit_flags(archs var [options...]): build.ninja of a fresh configure for `archs`
# (head dim 128 unless the options say otherwise).
function(unit_flags archs var)
  file(REMOVE_RECURSE ${WORK})
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${WORK} -G Ninja "-DCMAKE_CUDA_ARCHITECTURES=${archs}"
            -DFA2_HEAD_DIMS=128 -DFA2_BUILD_TESTS=OFF -DFA2_BUILD_BENCH=OFF ${ARGN}
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configure for '${archs}' failed: ${err}")
  endif()
  file(READ ${WORK}/build.ninja ninja)
  set(${var} "${ninja}" PARENT_SCOPE)
endfunction()

# expect(ninja archs unit text present): the FLAGS of kernel unit `unit` contain `text`
# (present 1) or not (0).
function(expect ninja archs unit text present)
  string(REGEX MATCH "build CMakeFiles/[a-z0-9_]+\\.dir/kernels/${unit}\\.cu\\.o:[^\n]*\n([^\n]*\n)*[ ]+FLAGS = [^\n]*" block "${ninja}")
  if(block STREQUAL "")
    message(FATAL_ERROR "'${archs}': no build statement for kernels/${unit}.cu")
  endif()
  string(REGEX MATCH "FLAGS = [^\n]*" flags "${block}")
  string(FIND "${flags}" "${text}" at)
  if(present AND at EQUAL -1)
    message(FATAL_ERROR "'${archs}': ${unit} lacks '${text}': ${flags}")
  elseif(NOT present AND NOT at EQUAL -1)
    message(FATAL_ERROR "'${archs}': ${unit} has '${text}': ${flags}")
  endif()
  message(STATUS "'${archs}': ${unit} ${present} '${text}'")
endfunction()

set(default "80-real;90a-real;80-virtual")
unit_flags("${default}" n)
expect("${n}" "${default}" fwd_d128 "arch=compute_80,code=[sm_90]" 1)
expect("${n}" "${default}" fwd_d128 "arch=compute_80,code=[compute_80]" 1)
expect("${n}" "${default}" fwd_d128 "compute_90a" 0)
expect("${n}" "${default}" combine "arch=compute_80,code=[sm_90]" 1)
expect("${n}" "${default}" decode_d128_s3 "arch=compute_90,code=[sm_90]" 1)
expect("${n}" "${default}" decode_d128_s3 "arch=compute_90,code=[compute_90]" 1)
expect("${n}" "${default}" decode_d128_s3 "compute_80" 0)
expect("${n}" "${default}" fwd_sm90_d128 "arch=compute_90a,code=[sm_90a]" 1)
expect("${n}" "${default}" bwd_d128 "arch=compute_80,code=[sm_80]" 1)
expect("${n}" "${default}" bwd_d128 "sm_90" 0)

# sm_80 alone: the 3-stage decode cannot come from compute_90 PTX
unit_flags("80-real" n)
expect("${n}" "80-real" decode_d128_s3 "arch=compute_80,code=[sm_80]" 1)
expect("${n}" "80-real" decode_d128_s3 "compute_90" 0)
expect("${n}" "80-real" fwd_d128 "arch=compute_80,code=[sm_80]" 1)

# A list in another form: every unit takes its targets as CMake writes them
unit_flags("80;90a" n)
expect("${n}" "80;90a" fwd_d128 "code=[sm_90]" 0)
expect("${n}" "80;90a" fwd_d128 "arch=compute_90a,code=[compute_90a,sm_90a]" 1)

# The grouping: head dims 64 and 128 in one unit per family, or a unit each
unit_flags("${default}" n "-DFA2_HEAD_DIMS=64\\;128" -DFA2_KERNEL_UNITS=family)
expect("${n}" "family" fwd_d64_d128 "arch=compute_80,code=[sm_90]" 1)
expect("${n}" "family" fwd_sm90_d64_d128 "arch=compute_90a,code=[sm_90a]" 1)
expect("${n}" "family" decode_d64_d128_s3 "arch=compute_90,code=[sm_90]" 1)
unit_flags("${default}" n "-DFA2_HEAD_DIMS=64\\;128" -DFA2_KERNEL_UNITS=bucket)
expect("${n}" "bucket" fwd_d64 "arch=compute_80,code=[sm_90]" 1)
expect("${n}" "bucket" fwd_d128 "arch=compute_80,code=[sm_90]" 1)
expect("${n}" "bucket" decode_d64_s3 "arch=compute_90,code=[sm_90]" 1)
string(FIND "${n}" "fwd_d64_d128" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "FA2_KERNEL_UNITS=bucket: a unit holds two buckets")
endif()
file(REMOVE_RECURSE ${WORK})
