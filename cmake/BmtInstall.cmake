# cmake --install: the public headers, the library with an exported package config
# (find_package(bmtrain) -> bmtrain::bmtrain), and bmt-train (installed by apps/bmt-train).
#
#   <prefix>/include/bmtrain/...               public headers
#   <prefix>/lib/libbmtrain.{a,so}
#   <prefix>/lib/cmake/bmtrain/                bmtrainConfig.cmake, version, targets, helper modules
#   <prefix>/lib/pkgconfig/bmtrain.pc          for pkg-config (host builds; cmake/BmtPkgConfig.cmake)
#   <prefix>/share/doc/bmtrain/LICENSE         the license (Apache-2.0)
# The include directory of the exported target is lib/CMakeLists.txt's INSTALL_INTERFACE entry
# (GNUInstallDirs is included before lib/).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BMT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/bmtrain CACHE STRING
    "Where the bmtrain package config goes, relative to the install prefix")

# The exported target carries the language standard: downstream projects need C++17 for the headers.
target_compile_features(bmtrain PUBLIC cxx_std_17)

install(TARGETS bmtrain EXPORT bmtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/bmtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT bmtrainTargets NAMESPACE bmtrain:: DESTINATION ${BMT_INSTALL_CMAKEDIR})

# Facts about this build that the config needs to find the same dependencies again.
get_target_property(_bmt_type bmtrain TYPE)
if(_bmt_type STREQUAL "SHARED_LIBRARY")
  set(BMT_INSTALL_SHARED ON)
else()
  set(BMT_INSTALL_SHARED OFF)
endif()
# The MPI installation the build's mpicxx belongs to (<prefix>/bin/mpicxx -> <prefix>).
set(BMT_INSTALL_MPI_HOME "")
if(MPI_CXX_COMPILER AND IS_ABSOLUTE "${MPI_CXX_COMPILER}")
  get_filename_component(_bmt_mpi_bindir "${MPI_CXX_COMPILER}" DIRECTORY)
  get_filename_component(BMT_INSTALL_MPI_HOME "${_bmt_mpi_bindir}" DIRECTORY)
endif()
set(BMT_INSTALL_NCCL_ROOT "")
if(BMT_ENABLE_CUDA AND NCCL_INCLUDE_DIR)
  # <root>/include/nccl.h -> <root>; the library is then found under <root>/lib* or the system paths
  # (Debian's multiarch /usr/lib/x86_64-linux-gnu included).
  get_filename_component(BMT_INSTALL_NCCL_ROOT "${NCCL_INCLUDE_DIR}" DIRECTORY)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/bmtrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/bmtrainConfig.cmake
                              INSTALL_DESTINATION ${BMT_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bmtrainConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bmtrainConfig.cmake ${PROJECT_BINARY_DIR}/bmtrainConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/BmtKokkosIncludes.cmake ${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake
        DESTINATION ${BMT_INSTALL_CMAKEDIR})

install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

include(BmtPkgConfig)  # <prefix>/lib/pkgconfig/bmtrain.pc (host builds)
