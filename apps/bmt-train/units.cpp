#include "units.hpp"

#include <iomanip>
#include <sstream>

namespace bmt_train {

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os.precision(3);
  os << bytes << ' ' << units[u];
  return os.str();
}

std::string count_text(double n) {
  std::ostringstream os;
  os.precision(3);
  if (n >= 1e9) os << n / 1e9 << "B";
  else if (n >= 1e6) os << n / 1e6 << "M";
  else if (n >= 1e3) os << n / 1e3 << "K";
  else os << n;
  return os.str();
}

std::string seconds_text(double seconds) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(seconds < 10.0 ? 2 : 1) << seconds << " s";
  return os.str();
}

}  // namespace bmt_train
