# Checks that a shared library exports only fa2_* symbols (the FA2_API functions) and,
# given STATIC, that the static archive defines exactly the same global symbols:
#   cmake -DLIB=path/libfa2.so [-DSTATIC=path/libfa2.a] [-DNM=nm] -P cmake/check_exports.cmake
# Run by ctest as fa2_exports (label cpu) and by .ci/run on the installed library.
if(NOT LIB)
  message(FATAL_ERROR "usage: cmake -DLIB=libfa2.so [-DSTATIC=libfa2.a] [-DNM=nm] -P check_exports.cmake")
endif()
if(NOT NM)
  set(NM nm)
endif()

# The names `nm <options> <file>` lists as defined, without @VERSION suffixes and without
# DW.ref.* (the C++ runtime's weak hidden personality reference: see CMakeLists.txt).
function(defined_symbols out_var options file)
  execute_process(COMMAND ${NM} ${options} --defined-only ${file}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${options} --defined-only ${file} failed (${rc}): ${err}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  set(names "")
  foreach(line IN LISTS lines)
    # "<address> <type> <name>"; archives also list "member.o:" headers and blank lines
    if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] (.+)$")
      string(REGEX REPLACE "@.*$" "" name "${CMAKE_MATCH_1}")
      if(NOT name MATCHES "^DW\\.ref\\.")
        list(APPEND names "${name}")
      endif()
    endif()
  endforeach()
  list(SORT names)
  set(${out_var} ${names} PARENT_SCOPE)
endfunction()

defined_symbols(exported -D ${LIB})
set(api ${exported})
list(FILTER api INCLUDE REGEX "^fa2_")
set(bad ${exported})
list(FILTER bad EXCLUDE REGEX "^fa2_")
list(LENGTH api n_api)
list(LENGTH bad n_bad)
if(n_bad GREATER 0)
  list(JOIN bad "\n  " shown)
  message(FATAL_ERROR "${LIB} exports ${n_bad} symbol(s) outside fa2_*:\n  ${shown}")
endif()
if(n_api EQUAL 0)
  message(FATAL_ERROR "${LIB} exports no fa2_* symbol at all")
endif()
list(JOIN api " " shown)
message(STATUS "${LIB}: ${n_api} exported symbols, all fa2_*: ${shown}")

if(STATIC)
  defined_symbols(defined -g ${STATIC})
  if(NOT defined STREQUAL api)
    list(JOIN defined "\n  " shown)
    message(FATAL_ERROR "${STATIC} defines other global symbols than ${LIB} exports:\n  ${shown}")
  endif()
  message(STATUS "${STATIC}: the same ${n_api} global symbols")
endif()
