# Install rules of the tensorgrad library (included by the top-level
# CMakeLists.txt when TENSORGRAD_INSTALL is on): the public headers, the
# static library, the CMake package tensorgradConfig.cmake (target
# tensorgrad::tensorgrad) and the pkg-config file tensorgrad.pc.
include(CMakePackageConfigHelpers)

set(TENSORGRAD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tensorgrad"
    CACHE STRING "Where tensorgradConfig.cmake is installed, under the prefix")
mark_as_advanced(TENSORGRAD_INSTALL_CMAKEDIR)

install(DIRECTORY include/tensorgrad
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT tensorgrad_Development
        FILES_MATCHING PATTERN "*.h")
set(TENSORGRAD_INSTALL_TARGETS tensorgrad)
if(TENSORGRAD_WITH_MPI)
  list(APPEND TENSORGRAD_INSTALL_TARGETS tensorgrad_mpi)  # tensorgrad::mpi, the component "mpi"
endif()
install(TARGETS ${TENSORGRAD_INSTALL_TARGETS}
        EXPORT tensorgradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tensorgrad_Development)
install(EXPORT tensorgradTargets
        NAMESPACE tensorgrad::
        FILE tensorgradTargets.cmake
        DESTINATION ${TENSORGRAD_INSTALL_CMAKEDIR}
        COMPONENT tensorgrad_Development)

# Where this build found the dependencies that Debian ships without a CMake
# package: the installed config looks there first, then in the usual places.
foreach(lib IN ITEMS OPENBLAS_LIB XSMM_LIB SLEEF_LIB)
  get_filename_component(TENSORGRAD_${lib}_DIR "${${lib}}" DIRECTORY)
endforeach()
set(TENSORGRAD_PCRE2_LIB_DIR "${PCRE2_LIBDIR}")  # pkg-config's libdir of libpcre2-8
configure_package_config_file(cmake/tensorgradConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/tensorgradConfig.cmake"
  INSTALL_DESTINATION ${TENSORGRAD_INSTALL_CMAKEDIR}
  NO_SET_AND_CHECK_MACRO)
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/tensorgradConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)   # 0.x: a new minor version may break the API
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/tensorgradConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/tensorgradConfigVersion.cmake"
  DESTINATION ${TENSORGRAD_INSTALL_CMAKEDIR}
  COMPONENT tensorgrad_Development)

# pkg-config: the prefix is found from the file's own place (${pcfiledir}),
# so `cmake --install build --prefix ANY` gives a working file. The library
# is static: its dependencies are in Requires.private and Libs.private, which
# `pkg-config --static` adds.
set(TENSORGRAD_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
set(TENSORGRAD_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "tensorgrad: tensorgrad.pc needs CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR "
                      "relative to the prefix (got '${CMAKE_INSTALL_LIBDIR}', '${CMAKE_INSTALL_INCLUDEDIR}')")
endif()
file(RELATIVE_PATH TENSORGRAD_PC_PREFIX_FROM_PCFILEDIR
     "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" TENSORGRAD_PC_PREFIX_FROM_PCFILEDIR "${TENSORGRAD_PC_PREFIX_FROM_PCFILEDIR}")
set(TENSORGRAD_PC_LIBS_PRIVATE "")
if(TENSORGRAD_WITH_ONNX)
  string(APPEND TENSORGRAD_PC_LIBS_PRIVATE " -lonnx_proto -lprotobuf")  # Debian's libonnx-dev has no .pc
endif()
string(APPEND TENSORGRAD_PC_LIBS_PRIVATE " -ldl -lrt -lm -pthread")
string(STRIP "${TENSORGRAD_PC_LIBS_PRIVATE}" TENSORGRAD_PC_LIBS_PRIVATE)
configure_file(cmake/tensorgrad.pc.in "${CMAKE_CURRENT_BINARY_DIR}/tensorgrad.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tensorgrad.pc"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT tensorgrad_Development)
if(TENSORGRAD_WITH_MPI)  # tensorgrad-mpi.pc: the communicator, and MPI (Open MPI's module)
  configure_file(cmake/tensorgrad-mpi.pc.in "${CMAKE_CURRENT_BINARY_DIR}/tensorgrad-mpi.pc" @ONLY)
  install(FILES "${CMAKE_CURRENT_BINARY_DIR}/tensorgrad-mpi.pc"
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
          COMPONENT tensorgrad_Development)
endif()
