#pragma once
// What fuzz targets share: a check that stops the run the way a crash does (libFuzzer then saves
// the input), for a property that must hold whenever a parser accepts its input.
#include <cstdio>
#include <cstdlib>

#define BMT_FUZZ_CHECK(cond)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
