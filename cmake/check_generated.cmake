# ctest fa2_wgmma_ops_generated: kernels/sm90/wgmma_ops.cuh is what kernels/sm90/gen_wgmma.py
# writes (run with -DPYTHON=... -DSRC=<project root> -DOUT=<scratch file>).
execute_process(COMMAND ${PYTHON} ${SRC}/kernels/sm90/gen_wgmma.py OUTPUT_FILE ${OUT}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kernels/sm90/gen_wgmma.py failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT} ${SRC}/kernels/sm90/wgmma_ops.cuh
                RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "kernels/sm90/wgmma_ops.cuh is stale: run "
                      "python3 kernels/sm90/gen_wgmma.py > kernels/sm90/wgmma_ops.cuh")
endif()
message(STATUS "kernels/sm90/wgmma_ops.cuh matches kernels/sm90/gen_wgmma.py")
