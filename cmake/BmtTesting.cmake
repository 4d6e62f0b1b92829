# Test registration. MPI tests run at several world sizes (3 catches sizes that do not divide
# evenly); as root and on small machines Open MPI needs --allow-run-as-root and --oversubscribe.
# Tests run in parallel (scripts/test.sh passes ctest -j): an MPI test declares its ranks as
# PROCESSORS, tests that write one file take a RESOURCE_LOCK, a test that needs another's output
# names it in FIXTURES_REQUIRED, and a long test carries a COST so that a first run, with no
# timings yet, starts it early.
# Open MPI's mpirun, once a rank has exited non-zero, sends the others SIGTERM and waits
# odls_base_sigkill_timeout (a second) before SIGKILL, even when they have already exited; many of
# the tests' jobs end in an error on purpose, so the tests set that wait to 0. What they check
# (the exit code, the error line, that no process is left, how long the job took) is unchanged,
# and none relies on mpirun's grace (a graceful stop is asked for with SIGUSR1, as in production).
# GoogleTest comes from the installed package, or is built from a source tree (machines without a
# googletest package: point BMT_GTEST_SOURCE_DIR, GTEST_SOURCE_DIR or the environment variable
# BMT_GTEST_SOURCE_DIR at it, e.g. Debian's /usr/src/googletest).
set(_bmt_gtest_src "$ENV{BMT_GTEST_SOURCE_DIR}")
if(GTEST_SOURCE_DIR)
  set(_bmt_gtest_src "${GTEST_SOURCE_DIR}")
endif()
set(BMT_GTEST_SOURCE_DIR "${_bmt_gtest_src}" CACHE PATH "GoogleTest source tree to build instead of find_package(GTest)")
if(BMT_GTEST_SOURCE_DIR)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${BMT_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  foreach(_lib gtest gtest_main gmock gmock_main)
    if(NOT TARGET GTest::${_lib})
      add_library(GTest::${_lib} ALIAS ${_lib})
    endif()
  endforeach()
else()
  find_package(GTest REQUIRED)
endif()

set(BMT_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _bmt_mpiexec_version ERROR_QUIET)
if(_bmt_mpiexec_version MATCHES "Open MPI|OpenRTE")
  list(APPEND BMT_MPIEXEC_PREFLAGS --oversubscribe --mca odls_base_sigkill_timeout 0)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _bmt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_bmt_uid STREQUAL "0")
    list(APPEND BMT_MPIEXEC_PREFLAGS --allow-run-as-root)
  endif()
endif()

# Every test is registered here, named <folder>_<name> after its folder under test/ (bench/ for the
# benchmarks' smoke tests), with _np<N> for a run under the MPI launcher at N ranks and _plain
# for a plain process beside those.
#
# bmt_add_test(NAME name {SOURCES ... [LIBS ...] | TARGET executable} [NP 1 2 3 4] [PLAIN]
#              [ARGS ...] [WRAPPER command ...] [ENVIRONMENT VAR=value ...] [LABELS ...] [TIMEOUT s]
#              [PROPERTIES prop value ...])
# SOURCES builds the executable `name` with the shared test main; TARGET runs one built
# elsewhere. Without NP the test is one plain process (world size 1, no launcher) named `name`;
# with NP one test per world size up to BMT_TEST_MAX_NP, and PLAIN adds name_plain. ARGS follow
# the program; WRAPPER goes before the whole command (a script that checks how the job ends);
# ENVIRONMENT and PROPERTIES go to set_tests_properties for every test registered.
function(bmt_add_test)
  cmake_parse_arguments(T "PLAIN" "NAME;TIMEOUT;TARGET" "SOURCES;NP;LABELS;LIBS;ARGS;WRAPPER;ENVIRONMENT;PROPERTIES" ${ARGN})
  if(T_SOURCES)
    add_executable(${T_NAME} ${T_SOURCES})
    target_link_libraries(${T_NAME} PRIVATE bmtrain bmt_test_main ${T_LIBS})
    if(BMT_TEST_PCH)  # test/CMakeLists.txt
      target_precompile_headers(${T_NAME} REUSE_FROM bmt_test_main)
    endif()
    set(T_TARGET ${T_NAME})
  elseif(NOT T_TARGET)
    message(FATAL_ERROR "bmt_add_test(${T_NAME}): expected SOURCES or TARGET, found neither")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(program $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
  if(NOT T_NP OR T_PLAIN)
    set(name ${T_NAME})
    if(T_NP)
      set(name ${T_NAME}_plain)
    endif()
    add_test(NAME ${name} COMMAND ${T_WRAPPER} ${program})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}" ENVIRONMENT "${T_ENVIRONMENT}"
                         ${T_PROPERTIES})
  endif()
  foreach(np IN LISTS T_NP)
    if(np GREATER BMT_TEST_MAX_NP)
      continue()
    endif()
    set(name ${T_NAME}_np${np})
    add_test(NAME ${name}
             COMMAND ${T_WRAPPER} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${BMT_MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_TARGET}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${np}
                         LABELS "mpi;${T_LABELS}" ENVIRONMENT "${T_ENVIRONMENT}" ${T_PROPERTIES})
  endforeach()
endfunction()
