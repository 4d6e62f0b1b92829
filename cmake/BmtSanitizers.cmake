# Sanitizer and fuzzing builds; included before any target is defined, so the flags reach the
# library, the apps and every test alike.
#   -DBMT_SANITIZE=address,undefined   the whole build under AddressSanitizer + UBSan (preset cpu-asan);
#                                     a sanitizer finding ends the process with an error, failing its test
#   -DBMT_ENABLE_FUZZING=ON            clang only: coverage instrumentation for libFuzzer, and the
#                                     fuzz_<name> targets of test/fuzz (preset cpu-fuzz)
set(BMT_SANITIZE "" CACHE STRING "Sanitizers for the whole build, comma-separated (address,undefined)")
option(BMT_ENABLE_FUZZING "Build test/fuzz's targets with libFuzzer (clang only)" OFF)

if(BMT_SANITIZE)
  string(REPLACE ";" "," BMT_SANITIZE "${BMT_SANITIZE}")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${BMT_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${BMT_SANITIZE})

  # Run-time options for every test: ctest reads this file before running any test, and the
  # variables reach the test processes (and through mpirun every rank). Leak reports from
  # Open MPI's and Kokkos' own allocations are suppressed by test/sanitizers/lsan.supp; a leak in
  # bmtrain still fails its test.
  set(_bmt_supp ${PROJECT_SOURCE_DIR}/test/sanitizers/lsan.supp)
  file(WRITE ${PROJECT_BINARY_DIR}/bmt_sanitizer_environment.cmake
       # fast_unwind_on_malloc=0: Open MPI's components have no frame pointers and are unloaded
       # at MPI_Finalize, so only the slow unwinder reaches the libmpi frames the suppressions name.
       "set(ENV{ASAN_OPTIONS} \"detect_leaks=1:halt_on_error=1:fast_unwind_on_malloc=0\")\n"
       "set(ENV{LSAN_OPTIONS} \"suppressions=${_bmt_supp}:print_suppressions=0\")\n"
       "set(ENV{UBSAN_OPTIONS} \"print_stacktrace=1:halt_on_error=1\")\n")
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY TEST_INCLUDE_FILES
               ${PROJECT_BINARY_DIR}/bmt_sanitizer_environment.cmake)
endif()

if(BMT_ENABLE_FUZZING)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "BMT_ENABLE_FUZZING: expected the clang compiler (libFuzzer), found "
                        "${CMAKE_CXX_COMPILER_ID}; configure with -DCMAKE_CXX_COMPILER=clang++, or use the "
                        "preset cpu-fuzz")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
