#pragma once
// The environment variables the library reads, read once when the runtime starts (init_distributed,
// which agrees on their validity across ranks) into one set of options that the layers consult.
// docs/API.md has their table. A switch takes "1" (on) or "0" (off), or is left unset; anything else
// is an error naming the variable, its value and the values allowed.
#include <optional>
#include <string>

namespace bmt {

struct EnvironmentOptions {
  std::string timeline;                  // BMT_TIMELINE: record a trace into this path ("": no trace)
  bool timeline_ops = false;             // BMT_TIMELINE_OPS: a span per op as well
  std::optional<bool> validate_indices;  // BMT_VALIDATE_INDICES; unset: on for the host build only
  bool gemm_autotune = false;            // BMT_GEMM_AUTOTUNE: time cuBLASLt's candidates for large GEMMs
  bool attention_no_wgmma = false;       // BMT_ATTENTION_NO_WGMMA: the mma.sync attention kernels on Hopper too
  // BMT_TEST_NODE_SIZE, for tests only: the runtime takes consecutive groups of this many ranks as
  // one node each (ranks r and r' share a node when r / size == r' / size) instead of asking MPI
  // which share memory, so that one machine can stand in for several nodes. 0: unset.
  int test_node_size = 0;
};

// Parses the process environment now. Throws bmt::Error on a value outside the rule.
EnvironmentOptions read_environment();

// The options read when the runtime started; a program that uses a layer without starting the
// runtime reads them on its first call.
const EnvironmentOptions& environment();

// The rule for a switch: "1" is true, "0" false, unset is nullopt; anything else throws
// "NAME: expected 1 or 0 (or unset), found 'value'".
std::optional<bool> environment_switch(const char* name);

}  // namespace bmt
