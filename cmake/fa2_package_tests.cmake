# Packaging and FFI tests, registered with ctest from the root (no cmocka needed):
#   fa2_exports        (cpu) libfa2.so exports only fa2_* symbols, libfa2.a defines the same
#   fa2_python_ffi     (cpu) the ctypes binding's error paths, no GPU needed
#   fa2_python_call_cache (cpu) the call cache on CPU tensors, launches recorded; skips
#                            (exit 77) without torch
#   fa2_python_gpu     (gpu) the binding vs torch SDPA, forward and gradients; skips
#                            (exit 77) without torch or a CUDA device
#   fa2_flash_attn_interface_gpu (gpu) flash-attn's documented call forms against a
#                            float32 reference; skips like fa2_python_gpu
#   fa2_api_docs       (cpu) docs/api.md names every function, field and status of fa2.h
#   fa2_wgmma_ops_generated (cpu) kernels/sm90/wgmma_ops.cuh is kernels/sm90/gen_wgmma.py's output
#   fa2_gpu_code_sets  (cpu) the GPU code each kernel unit is compiled for, for several
#                            architecture lists, and the units' grouping
#                            (FA2_KERNEL_UNITS) (configures only; needs ninja)
# The Python tests run the system python3 on the build's libfa2.so (FA2_LIBRARY).
add_test(NAME fa2_exports
  COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:fa2> -DSTATIC=$<TARGET_FILE:fa2_static>
          -DNM=${CMAKE_NM}
          -P ${CMAKE_CURRENT_LIST_DIR}/check_exports.cmake)
set_tests_properties(fa2_exports PROPERTIES LABELS cpu)
add_test(NAME fa2_gpu_code_sets
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR}
          -DWORK=${CMAKE_CURRENT_BINARY_DIR}/gpu_code_sets
          -P ${CMAKE_CURRENT_LIST_DIR}/check_gpu_code_sets.cmake)
set_tests_properties(fa2_gpu_code_sets PROPERTIES LABELS cpu SKIP_REGULAR_EXPRESSION "SKIP:")

find_program(FA2_PYTHON3 NAMES python3 DOC "Python 3 for the ctypes binding's tests")
if(FA2_PYTHON3)
  foreach(t IN ITEMS python_ffi python_call_cache python_gpu flash_attn_interface_gpu api_docs)
    add_test(NAME fa2_${t} COMMAND ${FA2_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/test_${t}.py)
    set_tests_properties(fa2_${t} PROPERTIES
      ENVIRONMENT "FA2_LIBRARY=$<TARGET_FILE:fa2>;PYTHONDONTWRITEBYTECODE=1"
      SKIP_RETURN_CODE 77)
  endforeach()
  set_tests_properties(fa2_python_ffi fa2_python_call_cache fa2_api_docs PROPERTIES LABELS cpu)
  set_tests_properties(fa2_flash_attn_interface_gpu PROPERTIES LABELS gpu)
  add_test(NAME fa2_wgmma_ops_generated
    COMMAND ${CMAKE_COMMAND} -DPYTHON=${FA2_PYTHON3} -DSRC=${PROJECT_SOURCE_DIR}
            -DOUT=${CMAKE_CURRENT_BINARY_DIR}/wgmma_ops.generated.cuh
            -P ${CMAKE_CURRENT_LIST_DIR}/check_generated.cmake)
  set_tests_properties(fa2_wgmma_ops_generated PROPERTIES LABELS cpu)
  set_tests_properties(fa2_python_gpu PROPERTIES LABELS gpu)
else()
  message(STATUS "python3 not found: the fa2_python_* tests are not registered")
endif()
