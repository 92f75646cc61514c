# Reliability build options (docs/reliability.md). Included from the top-level
# CMakeLists.txt right after project(), before any target, so that FA2_SANITIZE
# reaches every C target (library host code, oracle, tests, bench) and nothing else.
#
#   FA2_SANITIZE=ON    AddressSanitizer + UndefinedBehaviorSanitizer on the C host code
#                      and the C tests. CUDA objects (kernels, launchers) are compiled
#                      as usual; the links (libfa2.so, tests) add the sanitizer runtime.
#   FA2_BUILD_FUZZ=ON  tests/fuzz: the libFuzzer harness fuzz_plan (needs clang as the
#                      C compiler: -DCMAKE_C_COMPILER=clang) and its ctest entry,
#                      label `fuzz`. Build just that target: it needs no CUDA code.
option(FA2_SANITIZE "Build the C host code and C tests with -fsanitize=address,undefined" OFF)
option(FA2_BUILD_FUZZ "Build the libFuzzer harness tests/fuzz (clang)" OFF)

if(FA2_SANITIZE)
  set(FA2_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
      -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${FA2_SANITIZE_FLAGS}>")
  # Host links only (libfa2.so, tests, bench): nvcc's device-link step must not see it.
  add_link_options("$<HOST_LINK:-fsanitize=address$<COMMA>undefined>")
  # Tests that load the sanitized libfa2.so into an unsanitized program (python3 via
  # ctypes) need the ASan runtime preloaded; the interpreter's own allocations are
  # not ours to leak-check. Applied once every test of this directory exists.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE FA2_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  function(fa2_sanitize_preload_tests)
    foreach(t IN ITEMS fa2_python_ffi fa2_python_call_cache fa2_python_gpu
                       fa2_flash_attn_interface_gpu)
      if(TEST ${t})
        set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
                     "LD_PRELOAD=${FA2_LIBASAN}" "ASAN_OPTIONS=detect_leaks=0")
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER CALL fa2_sanitize_preload_tests)
endif()

if(FA2_BUILD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FA2_BUILD_FUZZ needs clang as the C compiler "
                        "(-DCMAKE_C_COMPILER=clang); got ${CMAKE_C_COMPILER_ID}")
  endif()
  enable_testing()
  add_subdirectory(tests/fuzz)
endif()

# FA2_VALGRIND=ON: ctest entries valgrind_<test> (label valgrind) running each CPU test
# under valgrind memcheck with tests/valgrind.supp. Not with FA2_SANITIZE (ASan and
# valgrind do not mix).
option(FA2_VALGRIND "Add valgrind memcheck entries for the CPU tests (label valgrind)" OFF)
if(FA2_VALGRIND AND FA2_SANITIZE)
  message(FATAL_ERROR "FA2_VALGRIND and FA2_SANITIZE cannot be combined")
endif()
