#pragma once
// Float vectors in a binary file, as the equivalence tests' 1-rank runs hand their results to the
// runs at other world sizes and layouts: each vector its length (u64), then its floats.
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <vector>

namespace bmt_test {

inline void write_vectors(std::ofstream& f, std::initializer_list<const std::vector<float>*> vectors) {
  for (const auto* v : vectors) {
    const std::uint64_t n = v->size();
    f.write(reinterpret_cast<const char*>(&n), sizeof n);
    f.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(n * sizeof(float)));
  }
}

// Reads what write_vectors wrote, in the same order; the stream's state says whether it could.
inline void read_vectors(std::ifstream& f, std::initializer_list<std::vector<float>*> vectors) {
  for (auto* v : vectors) {
    std::uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), sizeof n);
    v->resize(f ? n : 0);
    f.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(float)));
  }
}

}  // namespace bmt_test
