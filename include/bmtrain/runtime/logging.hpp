#pragma once
// Rank-aware printing. print_rank prints on one rank (0 by default), warn on every rank that calls
// it, prefixed with the rank so interleaved output stays readable.
#include <iostream>
#include <sstream>
#include <string>

namespace bmt {

int rank();
bool is_initialized();

namespace detail {
void write_line(std::ostream& os, const std::string& line);
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

template <class... Args>
void print_rank(const Args&... args) {
  if (!is_initialized() || rank() == 0) detail::write_line(std::cout, detail::concat(args...));
}

template <class... Args>
void print_on(int r, const Args&... args) {
  if ((!is_initialized() && r == 0) || (is_initialized() && rank() == r))
    detail::write_line(std::cout, detail::concat(args...));
}

template <class... Args>
void warn(const Args&... args) {
  const std::string who = is_initialized() ? "[rank " + std::to_string(rank()) + "] " : "";
  detail::write_line(std::cerr, who + "warning: " + detail::concat(args...));
}

}  // namespace bmt
