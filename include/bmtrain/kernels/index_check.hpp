#pragma once
// Out-of-range indices: token ids given to embedding, class targets given to cross_entropy.
//
// Kernels never touch memory out of bounds: a bad index yields a zero row (embedding) or a row
// left out of the loss (cross_entropy). Reporting it is a policy:
//   - the kernel records the first bad index it meets in a small device buffer (an atomic flag),
//   - with validation on, the op reads that buffer once, right after the kernel, and throws
//     bmt::Error naming the value, its position and the valid range.
// On the host build the read costs nothing (the compute stream runs inline), so validation is on by
// default. On the CUDA build the read would make the host wait for the compute stream at every
// call, so it is off by default; turn it on with set_index_validation(true), or with the environment
// variable BMT_VALIDATE_INDICES=1, when looking for bad data.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

bool index_validation();
void set_index_validation(bool on);

}  // namespace bmt

namespace bmt::kernels {

// Captured by value into kernels. `slot` is null when validation is off.
struct BadIndexRecord {
  std::int64_t* slot = nullptr;  // [found, position, value]

  KOKKOS_INLINE_FUNCTION void record(std::int64_t position, std::int64_t value) const {
    if (!slot) return;
    if (Kokkos::atomic_compare_exchange(&slot[0], std::int64_t(0), std::int64_t(1)) == 0) {
      slot[1] = position;
      slot[2] = value;
    }
  }
};

class IndexCheck {
 public:
  IndexCheck();  // a zeroed record when validation is on, none otherwise
  BadIndexRecord record() const;
  // With validation on: throws "<op>: expected <what> in [0, limit) ..., found <value> at position <p>"
  // if a kernel recorded a bad index. Reads the record once (a wait on the compute stream on GPUs).
  // first_position: where the kernel's position 0 is in the op's input (a chunk's first row).
  void throw_if_bad(const char* op, const char* what, std::int64_t limit, const char* allowed_extra = "",
                    std::int64_t first_position = 0) const;

 private:
  Tensor slot_;
};

}  // namespace bmt::kernels

// Runs the statement block with `I` bound to the element type of an index dtype (i32 or i64).
#define BMT_DISPATCH_INDEX(dtype, op, I, ...)                                                   \
  do {                                                                                          \
    switch (dtype) {                                                                            \
      case ::bmt::DType::i32: { using I = std::int32_t; __VA_ARGS__; break; }                    \
      case ::bmt::DType::i64: { using I = std::int64_t; __VA_ARGS__; break; }                    \
      default:                                                                                  \
        BMT_REQUIRE(false, op << ": expected indices of dtype i32 or i64, found " << ::bmt::dtype_name(dtype)); \
    }                                                                                           \
  } while (0)
