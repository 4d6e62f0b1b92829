# Installs the build into a fresh prefix, builds test/install/downstream against that prefix only,
# and runs it at 1 and 2 ranks (1 only when MAX_NP is 1): both runs must pass their own checks against a float64 reference
# and print the same checksum. Run by ctest (see CMakeLists.txt here) as
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... [the -D options below] -P install_and_run.cmake
# Lists (the launcher's flags, CUDA architectures) arrive with '|' in place of ';'. A CUDA build
# also passes CUDA_COMPILER and CUDA_ARCHITECTURES for the downstream project.
foreach(var BUILD_DIR BINDIR LIBDIR INCLUDEDIR CMAKEDIR WORK_DIR SOURCE_DIR GENERATOR C_COMPILER CXX_COMPILER
            BUILD_TYPE EXPECT_KOKKOS_DIR MPIEXEC NUMPROC_FLAG MAX_NP)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_and_run.cmake: expected -D${var}=..., found none")
  endif()
endforeach()
string(REPLACE "|" ";" preflags "${PREFLAGS}")
string(REPLACE "|" ";" postflags "${POSTFLAGS}")
set(cuda_args)
if(CUDA_COMPILER)
  string(REPLACE "|" ";" cuda_archs "${CUDA_ARCHITECTURES}")
  # The build's CUDA flags too: with Kokkos 4.6 on CUDA 13 they force-include the header with the
  # runtime calls' old signatures, which every translation unit including Kokkos needs.
  set(cuda_args -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} "-DCMAKE_CUDA_ARCHITECTURES=${cuda_archs}"
                "-DCMAKE_CUDA_FLAGS=${CUDA_FLAGS}")
  if(CUDA_HOST_COMPILER)
    list(APPEND cuda_args "-DCMAKE_CUDA_HOST_COMPILER=${CUDA_HOST_COMPILER}")
  endif()
endif()
set(prefix ${WORK_DIR}/prefix)
set(downstream_build ${WORK_DIR}/downstream-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(step_output "${out}${err}" PARENT_SCOPE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${out}${err}")
  endif()
endfunction()

run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${BUILD_TYPE})
foreach(f ${INCLUDEDIR}/bmtrain/bmtrain.hpp ${INCLUDEDIR}/bmtrain/zero/checkpoint_block.hpp ${BINDIR}/bmt-train
          ${CMAKEDIR}/bmtrainConfig.cmake ${CMAKEDIR}/bmtrainConfigVersion.cmake ${CMAKEDIR}/bmtrainTargets.cmake
          ${CMAKEDIR}/BmtKokkosIncludes.cmake ${CMAKEDIR}/FindNCCL.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "expected ${prefix}/${f} after cmake --install, found none")
  endif()
endforeach()
file(GLOB libs ${prefix}/${LIBDIR}/libbmtrain.*)
if(NOT libs)
  message(FATAL_ERROR "expected ${prefix}/${LIBDIR}/libbmtrain.a or .so after cmake --install, found none")
endif()

# Only the install prefix is given: the downstream project must find bmtrain there and Kokkos
# through what the installed config remembers.
run_step("configuring the downstream project"
         ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${downstream_build} -G ${GENERATOR}
         -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${cuda_args})
message("${step_output}")
string(FIND "${step_output}" "downstream: bmtrain_DIR=${prefix}/${CMAKEDIR}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected bmtrain from ${prefix}/${CMAKEDIR}, found another (see above)")
endif()
string(FIND "${step_output}" "downstream: Kokkos_DIR=${EXPECT_KOKKOS_DIR}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "expected the build's Kokkos (${EXPECT_KOKKOS_DIR}) to be remembered, found another (see above)")
endif()
run_step("building the downstream project" ${CMAKE_COMMAND} --build ${downstream_build} --config ${BUILD_TYPE})

# 1 and 2 ranks, or 1 only where the build registers single-rank tests (one GPU: NCCL needs a
# device per rank).
set(rank_counts 1 2)
if(MAX_NP LESS 2)
  set(rank_counts 1)
endif()
set(checksums)
foreach(np IN LISTS rank_counts)
  run_step("downstream at ${np} ranks" ${MPIEXEC} ${NUMPROC_FLAG} ${np} ${preflags} ${downstream_build}/downstream
           ${postflags})
  message("np ${np}:\n${step_output}")
  if(NOT step_output MATCHES "downstream: world size ${np}, 0 mismatches")
    message(FATAL_ERROR "expected world size ${np} with 0 mismatches, found another report (see above)")
  endif()
  if(NOT step_output MATCHES "checksum [^\n]*")
    message(FATAL_ERROR "expected a checksum line at ${np} ranks, found none")
  endif()
  list(APPEND checksums "${CMAKE_MATCH_0}")
endforeach()
list(GET checksums 0 one)
if(MAX_NP LESS 2)
  message("install test passed: ${one} at 1 rank (the build registers tests at 1 rank only)")
  return()
endif()
list(GET checksums 1 two)
if(NOT one STREQUAL two)
  message(FATAL_ERROR "expected the same checksum at 1 and 2 ranks, found '${one}' and '${two}'")
endif()
message("install test passed: ${one} at 1 and 2 ranks")
