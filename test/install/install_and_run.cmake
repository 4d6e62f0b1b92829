# Installs the build into a fresh prefix, builds test/install/downstream against that prefix only
# (a C++-only CMake project, and for host builds the same program through pkg-config and make),
# and runs each at 1 and 2 ranks (1 only when MAX_NP is 1): every run must pass its own checks
# against a float64 reference and print the same checksum. The installed targets must name no
# library by an absolute path. Run by ctest (see CMakeLists.txt here) as
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... [the -D options below] -P install_and_run.cmake
# Lists (the launcher's flags, CUDA architectures) arrive with '|' in place of ';'. A CUDA build
# also passes CUDA_COMPILER and CUDA_ARCHITECTURES for the downstream project.
foreach(var BUILD_DIR BINDIR LIBDIR INCLUDEDIR CMAKEDIR DOCDIR WORK_DIR SOURCE_DIR GENERATOR CXX_COMPILER
            BUILD_TYPE EXPECT_KOKKOS_DIR MPIEXEC NUMPROC_FLAG MAX_NP PKG_CONFIG MAKE MPI_CXX_COMPILER)
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
          ${CMAKEDIR}/BmtKokkosIncludes.cmake ${CMAKEDIR}/FindNCCL.cmake ${DOCDIR}/LICENSE)
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
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
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

# The installed targets name no library by an absolute path: dependencies go through imported
# targets (NCCL::NCCL, BLAS::BLAS, ...) that the config finds on the using machine.
file(READ ${prefix}/${CMAKEDIR}/bmtrainTargets.cmake targets)
string(REGEX MATCHALL "INTERFACE_LINK_LIBRARIES \"[^\"]*\"" link_lines "${targets}")
if(NOT link_lines)
  message(FATAL_ERROR "expected INTERFACE_LINK_LIBRARIES in bmtrainTargets.cmake, found none")
endif()
foreach(line IN LISTS link_lines)
  string(REGEX REPLACE "^INTERFACE_LINK_LIBRARIES \"(.*)\"$" "\\1" items "${line}")
  foreach(item IN LISTS items)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
    if(IS_ABSOLUTE "${item}")
      message(FATAL_ERROR "expected bmtrainTargets.cmake to link only imported targets and names, found ${item}")
    endif()
  endforeach()
endforeach()

# 1 and 2 ranks, or 1 only where the build registers single-rank tests (one GPU: NCCL needs a
# device per rank). Sets the caller's `checksums` to each run's checksum line.
set(rank_counts 1 2)
if(MAX_NP LESS 2)
  set(rank_counts 1)
endif()
function(run_at_ranks program what)
  set(sums)
  foreach(np IN LISTS rank_counts)
    run_step("${what} at ${np} ranks" ${MPIEXEC} ${NUMPROC_FLAG} ${np} ${preflags} ${program} ${postflags})
    message("${what}, np ${np}:\n${step_output}")
    if(NOT step_output MATCHES "downstream: world size ${np}, 0 mismatches")
      message(FATAL_ERROR "${what}: expected world size ${np} with 0 mismatches, found another report (see above)")
    endif()
    if(NOT step_output MATCHES "checksum [^\n]*")
      message(FATAL_ERROR "${what}: expected a checksum line at ${np} ranks, found none")
    endif()
    list(APPEND sums "${CMAKE_MATCH_0}")
  endforeach()
  list(REMOVE_DUPLICATES sums)
  list(LENGTH sums n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "${what}: expected the same checksum at ${rank_counts} ranks, found ${sums}")
  endif()
  set(checksums "${sums}" PARENT_SCOPE)
endfunction()

run_at_ranks(${downstream_build}/downstream "the CMake-built downstream")
set(cmake_checksum "${checksums}")

# The same program through pkg-config and make, compiled by the MPI C++ wrapper (host builds:
# a CUDA build installs no bmtrain.pc).
if(CUDA_COMPILER)
  message("install test passed: ${cmake_checksum} at ranks ${rank_counts} (CMake; no pkg-config for CUDA builds)")
  return()
endif()
foreach(tool PKG_CONFIG MAKE MPI_CXX_COMPILER)
  if(NOT ${tool} OR NOT EXISTS "${${tool}}")
    message(FATAL_ERROR "the pkg-config build needs ${tool}: expected a program, found '${${tool}}' "
                        "(Debian: scripts/install-deps.sh installs pkg-config and make)")
  endif()
endforeach()
set(pc_dir ${prefix}/${LIBDIR}/pkgconfig)
if(NOT EXISTS ${pc_dir}/bmtrain.pc)
  message(FATAL_ERROR "expected ${pc_dir}/bmtrain.pc after cmake --install, found none")
endif()
set(pc_env ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} OMPI_CXX=${CXX_COMPILER} MPICH_CXX=${CXX_COMPILER})
run_step("pkg-config --modversion bmtrain" ${pc_env} ${PKG_CONFIG} --modversion bmtrain)
message("bmtrain.pc: version ${step_output}")
set(pc_build ${WORK_DIR}/pkgconfig-build)
file(MAKE_DIRECTORY ${pc_build})
run_step("building the downstream program with make and pkg-config"
         ${pc_env} ${MAKE} -f ${SOURCE_DIR}/Makefile OUT=${pc_build} MPICXX=${MPI_CXX_COMPILER} PKG_CONFIG=${PKG_CONFIG})
message("${step_output}")
run_at_ranks(${pc_build}/downstream "the pkg-config-built downstream")
if(NOT checksums STREQUAL cmake_checksum)
  message(FATAL_ERROR "expected the pkg-config build to print the CMake build's '${cmake_checksum}', found '${checksums}'")
endif()
message("install test passed: ${cmake_checksum} at ranks ${rank_counts}, built with CMake and with pkg-config")
