# Install and export: the header, libfa2.so (SONAME libfa2.so.<major>), libfa2.a, a
# CMake package (find_package(fa2) -> fa2::fa2, fa2::fa2_static) and fa2.pc for
# pkg-config. Included from the root CMakeLists.txt after the fa2 and fa2_static
# targets exist. Everything installed is relocatable: `cmake --install build --prefix
# DIR` works for any DIR, whatever CMAKE_INSTALL_PREFIX was at configure time.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FA2_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/fa2" CACHE STRING
    "Where fa2Config.cmake goes, relative to the install prefix")
set(FA2_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
    "Where fa2.pc goes, relative to the install prefix")

# libfa2.a's kernel objects come from nvcc, whose host compiler is g++: they use the
# C++ runtime (static-local guards), which a C consumer's linker does not add itself.
# CUDA::cudart is in the interface already (root CMakeLists.txt).
if(UNIX AND NOT APPLE)
  target_link_libraries(fa2_static INTERFACE stdc++ m)
endif()

install(TARGETS fa2 fa2_static EXPORT fa2Targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/fa2.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT fa2Targets NAMESPACE fa2:: FILE fa2Targets.cmake
  DESTINATION ${FA2_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/fa2Config.cmake.in
  ${PROJECT_BINARY_DIR}/fa2Config.cmake
  INSTALL_DESTINATION ${FA2_INSTALL_CMAKEDIR})
# Before 1.0 a minor release may change the struct layouts (see docs/api.md, ABI
# policy), so find_package(fa2 0.1) accepts 0.1.x only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fa2ConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fa2Config.cmake
              ${PROJECT_BINARY_DIR}/fa2ConfigVersion.cmake
  DESTINATION ${FA2_INSTALL_CMAKEDIR})

# fa2.pc: prefix relative to the .pc file's own directory (${pcfiledir}), so the
# installed tree can move. Libs.private names the CUDA runtime, which only the static
# library needs (`pkg-config --static --libs fa2`).
if(IS_ABSOLUTE "${FA2_INSTALL_PKGCONFIGDIR}")
  set(FA2_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH FA2_PC_UP "/prefix/${FA2_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" FA2_PC_UP "${FA2_PC_UP}")
  set(FA2_PC_PREFIX "\${pcfiledir}/${FA2_PC_UP}")
endif()
foreach(v LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${v}}")
    set(FA2_PC_${v} "${CMAKE_INSTALL_${v}}")
  else()
    set(FA2_PC_${v} "\${prefix}/${CMAKE_INSTALL_${v}}")
  endif()
endforeach()
set(FA2_PC_CUDART_DIR "${CUDAToolkit_LIBRARY_DIR}")
list(GET CUDAToolkit_INCLUDE_DIRS 0 FA2_PC_CUDA_INCLUDE_DIR)
configure_file(${CMAKE_CURRENT_LIST_DIR}/fa2.pc.in ${PROJECT_BINARY_DIR}/fa2.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/fa2-static.pc.in ${PROJECT_BINARY_DIR}/fa2-static.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fa2.pc ${PROJECT_BINARY_DIR}/fa2-static.pc
        DESTINATION ${FA2_INSTALL_PKGCONFIGDIR})

# The Python binding (the package python/libfa2, pure ctypes) goes next to the library's
# data; it finds the installed libfa2 relative to itself.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/libfa2
  DESTINATION ${CMAKE_INSTALL_DATADIR}/fa2/python
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
