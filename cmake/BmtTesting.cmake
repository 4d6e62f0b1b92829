# Test registration. MPI tests run at several world sizes (3 catches sizes that do not divide
# evenly); as root and on small machines Open MPI needs --allow-run-as-root and --oversubscribe.
find_package(GTest REQUIRED)

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
