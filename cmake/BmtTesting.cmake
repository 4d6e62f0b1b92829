# Test registration. MPI tests run at several world sizes (3 catches sizes that do not divide
# evenly); as root and on small machines Open MPI needs --allow-run-as-root and --oversubscribe.
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
  list(APPEND BMT_MPIEXEC_PREFLAGS --oversubscribe)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _bmt_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_bmt_uid STREQUAL "0")
    list(APPEND BMT_MPIEXEC_PREFLAGS --allow-run-as-root)
  endif()
endif()

# bmt_add_test(NAME name SOURCES ... [NP 1 2 3 4] [LABELS ...] [TIMEOUT s])
# Without NP the test runs as a plain single process (world size 1, no launcher).
function(bmt_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;NP;LABELS;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE bmtrain bmt_test_main ${T_LIBS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_NP)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
    set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
    return()
  endif()
  foreach(np IN LISTS T_NP)
    if(np GREATER BMT_TEST_MAX_NP)
      continue()
    endif()
    set(name ${T_NAME}_np${np})
    add_test(NAME ${name}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${BMT_MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} PROCESSORS ${np}
                         LABELS "mpi;${T_LABELS}")
  endforeach()
endfunction()
