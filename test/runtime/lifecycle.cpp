// The runtime before init_distributed and after finalize: a program of its own, because the test
// main keeps the runtime initialized for the whole run. Exits non-zero, naming the broken check.
#include <cstdio>
#include <string>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace {

int failures = 0;

template <class F>
void expect_error(const char* what, const std::string& needle, F&& call) {
  try {
    call();
  } catch (const bmt::Error& e) {
    if (std::string(e.what()).find(needle) == std::string::npos) {
      std::fprintf(stderr, "FAILED: %s: message '%s' does not mention '%s'\n", what, e.what(), needle.c_str());
      ++failures;
    }
    return;
  }
  std::fprintf(stderr, "FAILED: %s: expected bmt::Error, nothing was thrown\n", what);
  ++failures;
}

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  expect(!bmt::is_initialized(), "is_initialized() before init");
  expect_error("context() before init", "bmt::init_distributed() first", [] { bmt::context(); });
  expect_error("rank() before init", "not initialized", [] { bmt::rank(); });

  bmt::init_distributed(&argc, &argv);
  expect(bmt::is_initialized(), "is_initialized() after init");
  const int world = bmt::world_size();
  bmt::synchronize();
  bmt::finalize();

  expect(!bmt::is_initialized(), "is_initialized() after finalize");
  expect_error("context() after finalize", "bmt::init_distributed() first", [] { bmt::context(); });
  expect_error("world_size() after finalize", "not initialized", [] { bmt::world_size(); });
  bmt::finalize();  // a second finalize is harmless
  // The runtime started MPI and finalized it; MPI cannot start again in this process.
  expect_error("init_distributed() after finalize", "finalized", [&] { bmt::init_distributed(&argc, &argv); });

  if (failures == 0) std::printf("lifecycle checks passed (world size %d)\n", world);
  return failures == 0 ? 0 : 1;
}
