#include "bmtrain/runtime/logging.hpp"

#include <mutex>

namespace bmt::detail {

void write_line(std::ostream& os, const std::string& line) {
  // Streams write lines from worker threads too; keep each line whole.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  os << line << '\n';
  os.flush();
}

}  // namespace bmt::detail
