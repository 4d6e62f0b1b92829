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
  find_package(BLAS REQUIRED)  # BLAS::BLAS
  find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread)
  if(NOT CBLAS_INCLUDE_DIR)
    message(FATAL_ERROR "The CPU build needs a CBLAS header (cblas.h, e.g. from libopenblas-dev); none found")
  endif()
endif()
