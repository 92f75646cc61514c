# The double-precision oracle and the CPU tiled algorithm, shared by tests, the demo
# and the bench.
set(fa2_oracle_dir ${PROJECT_SOURCE_DIR}/tests)
add_library(fa2_oracle STATIC ${fa2_oracle_dir}/oracle.c ${fa2_oracle_dir}/oracle_score.c
  ${fa2_oracle_dir}/tiled_cpu.c ${fa2_oracle_dir}/oracle_backward.c
  ${fa2_oracle_dir}/tiled_cpu_backward.c)
target_include_directories(fa2_oracle PUBLIC ${PROJECT_SOURCE_DIR}/tests
  ${PROJECT_SOURCE_DIR}/include)
# tiled_cpu.c follows the kernels' choices (kernels/common/params.h)
target_include_directories(fa2_oracle PRIVATE ${PROJECT_SOURCE_DIR}/kernels)
target_link_libraries(fa2_oracle PUBLIC m)

