# Finds everything the library links against. One place, so that the build and the installed
# package config agree on what a bmtrain build needs.
# MPI's C++ component: bmtrain is C++ (calling MPI's C API), so a project that uses it needs
# nothing but C++ enabled, here and in the installed package.
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(Kokkos REQUIRED)
# JSON for safetensors headers and checkpoint metadata (header-only).
find_package(nlohmann_json 3.9 REQUIRED)

# Debian's Kokkos 3.4 exports a broken include directory; the installed config repairs it the same way.
include(${CMAKE_CURRENT_LIST_DIR}/BmtKokkosIncludes.cmake)

if(BMT_ENABLE_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # NCCL::NCCL (cmake/FindNCCL.cmake, installed with the package config, which finds it again).
  find_package(NCCL REQUIRED)
  if(NOT Kokkos_ENABLE_CUDA)
    message(FATAL_ERROR "BMT_ENABLE_CUDA=ON needs a Kokkos built with its CUDA backend; "
                        "the Kokkos found at ${Kokkos_DIR} has none")
  endif()
  # Hopper among the targets ("90", "90-real", "90a", ...): the attention's warpgroup-MMA kernels
  # need sm_90a code, which lib/ adds unless the targets already ask for it, and the tests then
  # expect those kernels to run on a Hopper device. ("native" and "all" are not looked into.)
  set(_bmt_archs ${CMAKE_CUDA_ARCHITECTURES})
  list(FILTER _bmt_archs INCLUDE REGEX "^90")
  set(BMT_CUDA_TARGETS_HOPPER FALSE)
  set(BMT_CUDA_TARGETS_SM90A FALSE)
  if(_bmt_archs)
    set(BMT_CUDA_TARGETS_HOPPER TRUE)
  endif()
  list(FILTER _bmt_archs INCLUDE REGEX "^90a")
  if(_bmt_archs)
    set(BMT_CUDA_TARGETS_SM90A TRUE)
  endif()
else()
  # The host GEMM calls cblas_sgemm (cblas.h): a BLAS with the CBLAS interface, as BLAS::BLAS.
  # BMT_BLAS_LIBRARIES names its libraries where the builder knows them (Spack's recipe passes its
  # provider's); otherwise FindBLAS looks for one (BLA_VENDOR picks among several).
  set(BMT_BLAS_LIBRARIES "" CACHE STRING "BLAS libraries with cblas_sgemm (empty: FindBLAS finds them)")
  if(BMT_BLAS_LIBRARIES)
    add_library(BLAS::BLAS INTERFACE IMPORTED)
    set_target_properties(BLAS::BLAS PROPERTIES INTERFACE_LINK_LIBRARIES "${BMT_BLAS_LIBRARIES}")
  else()
    find_package(BLAS REQUIRED)
  endif()
  find_path(CBLAS_INCLUDE_DIR cblas.h
            PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread blis flexiblas)
  if(NOT CBLAS_INCLUDE_DIR)
    message(FATAL_ERROR "The CPU build needs a CBLAS header: expected cblas.h (e.g. from libopenblas-dev, "
                        "or -DCBLAS_INCLUDE_DIR=<dir>), found none")
  endif()
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${CBLAS_INCLUDE_DIR})
  set(CMAKE_REQUIRED_LIBRARIES BLAS::BLAS)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles([[
    #include <cblas.h>
    int main() { float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1); return 0; }
  ]] BMT_BLAS_HAS_CBLAS)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_QUIET)
  if(NOT BMT_BLAS_HAS_CBLAS)
    get_target_property(_bmt_blas_libs BLAS::BLAS INTERFACE_LINK_LIBRARIES)
    message(FATAL_ERROR "The CPU build needs a BLAS with the CBLAS interface: expected cblas_sgemm from "
                        "cblas.h in ${CBLAS_INCLUDE_DIR} to link with '${_bmt_blas_libs}', found it does not")
  endif()
endif()
