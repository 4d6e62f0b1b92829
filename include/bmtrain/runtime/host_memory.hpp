#pragma once
// How much host memory there is to hold what a rank keeps on the host (an offloaded optimizer's
// state), and a clear error when the ranks of a node would need more.
#include <cstddef>
#include <string>

namespace bmt {

// Bytes the system can hand out without swapping: /proc/meminfo's MemAvailable, or the free pages
// sysconf reports where that is missing.
std::size_t available_host_memory();

// Throws bmt::Error for `what` when the ranks of this node would together need more host memory
// than available_host_memory(): `bytes` for each of them (every rank of a node keeps the same).
void require_host_memory(std::size_t bytes, const std::string& what);

}  // namespace bmt
