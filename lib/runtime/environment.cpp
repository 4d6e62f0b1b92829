#include "bmtrain/runtime/environment.hpp"

#include <cstdlib>
#include <exception>
#include <string>

#include "bmtrain/runtime/error.hpp"

namespace bmt {

std::optional<bool> environment_switch(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  const std::string v = value;
  BMT_REQUIRE(v == "1" || v == "0", name << ": expected 1 or 0 (or unset), found '" << v << "'");
  return v == "1";
}

EnvironmentOptions read_environment() {
  EnvironmentOptions o;
  if (const char* path = std::getenv("BMT_TIMELINE")) {
    o.timeline = path;
    BMT_REQUIRE(!o.timeline.empty(), "BMT_TIMELINE: expected a file path (or unset), found ''");
  }
  o.timeline_ops = environment_switch("BMT_TIMELINE_OPS").value_or(false);
  o.validate_indices = environment_switch("BMT_VALIDATE_INDICES");
  o.gemm_autotune = environment_switch("BMT_GEMM_AUTOTUNE").value_or(false);
  o.attention_no_wgmma = environment_switch("BMT_ATTENTION_NO_WGMMA").value_or(false);
  if (const char* size = std::getenv("BMT_TEST_NODE_SIZE")) {
    const std::string v = size;
    std::size_t used = 0;
    long n = 0;
    try {
      n = std::stol(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    BMT_REQUIRE(used == v.size() && n >= 1 && n <= 1 << 20,
                "BMT_TEST_NODE_SIZE: expected a number of ranks per node >= 1 (or unset), found '" << v << "'");
    o.test_node_size = static_cast<int>(n);
  }
  return o;
}

const EnvironmentOptions& environment() {
  // A call that throws leaves it unset: the next call reads, and throws, again.
  static const EnvironmentOptions options = read_environment();
  return options;
}

}  // namespace bmt
