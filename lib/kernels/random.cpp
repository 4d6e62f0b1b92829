#include "bmtrain/kernels/random.hpp"

#include "bmtrain/runtime/context.hpp"

namespace bmt::random {

namespace {
std::uint64_t g_counter = 0;
}

std::uint64_t next_key() {
  const std::uint64_t base = key(is_initialized() ? seed() : 0, "random");
  return mix64(base ^ mix64(g_counter++));
}
std::uint64_t key_counter() { return g_counter; }
void set_key_counter(std::uint64_t counter) { g_counter = counter; }

}  // namespace bmt::random
