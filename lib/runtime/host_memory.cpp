#include "bmtrain/runtime/host_memory.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {

namespace {

std::string gib(double bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << bytes / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return out.str();
}

}  // namespace

std::size_t available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

void require_host_memory(std::size_t bytes, const std::string& what) {
  const int ranks = is_initialized() ? context().topology().local_size : 1;
  const double needed = static_cast<double>(bytes) * ranks;
  const double available = static_cast<double>(available_host_memory());
  BMT_REQUIRE(needed <= available, what << ": expected " << gib(needed) << " of host memory ("
                                        << gib(static_cast<double>(bytes)) << " for each of the " << ranks
                                        << " rank(s) on " << (is_initialized() ? context().topology().hostname : "this node")
                                        << "), found " << gib(available) << " available (MemAvailable)");
}

}  // namespace bmt
