// Host side of the memory-bound kernels' seam (memory_bound_seam.hpp): the portable Kokkos kernels
// are the host's kernels, so every call is declined, but for the sum of squares on a serial host
// (below).
#include "memory_bound_seam.hpp"

#include <type_traits>

#include "bmtrain/kernels/common.hpp"

namespace bmt::kernels::seam {

namespace {

template <class T>
void sum_squares_in_order(const void* const* data, const std::int64_t* end, int count, double* result) {
  double acc = 0.0;
  std::int64_t begin = 0;
  for (int t = 0; t < count; ++t) {
    const T* x = static_cast<const T*>(data[t]);
    const std::int64_t n = end[t] - begin;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = to_f32(x[i]);
      acc += v * v;
    }
    begin = end[t];
  }
  *result = acc;
}

}  // namespace

bool norm_forward(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&, const Tensor&) {
  return false;
}
bool norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&, bool, bool) {
  return false;
}
bool softmax_forward(const Tensor&, const Tensor&) { return false; }
bool softmax_backward(const Tensor&, const Tensor&, const Tensor&) { return false; }
bool cross_entropy_forward(const Tensor&, const Tensor&, std::int64_t, const Tensor&, const Tensor&, const Tensor&,
                           BadIndexRecord) {
  return false;
}
bool cross_entropy_backward(const Tensor&, const Tensor&, std::int64_t, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&) {
  return false;
}
bool binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { return false; }
bool affine(const Tensor&, const Tensor&, float, float) { return false; }
bool residual_add(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { return false; }
bool activation_forward(Activation, const Tensor&, const Tensor&) { return false; }
bool activation_backward(Activation, const Tensor&, const Tensor&, const Tensor&) { return false; }
bool swiglu_forward(const Tensor&, const Tensor&, const Tensor&) { return false; }
bool swiglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) { return false; }
bool fill(const Tensor&, float) { return false; }
bool column_sums(const Tensor&, const Tensor&, bool) { return false; }
// On a serial host the portable kernel adds the elements one after another, tensor after tensor,
// finding each element's tensor by a search; this loop adds them in that same order (the same sum,
// bit for bit) without the search. A parallel host keeps the portable kernel's threads.
bool sum_squares(DType dtype, const void* const* data, const std::int64_t* end, int count, double* result) {
  if constexpr (!std::is_same_v<Kokkos::DefaultExecutionSpace, Kokkos::Serial>) return false;
  switch (dtype) {
    case DType::f32: sum_squares_in_order<float>(data, end, count, result); return true;
    case DType::bf16: sum_squares_in_order<bf16_t>(data, end, count, result); return true;
    case DType::f16: sum_squares_in_order<f16_t>(data, end, count, result); return true;
    default: return false;
  }
}
bool copy(const Tensor&, const Tensor&, float, bool) { return false; }
bool embedding_forward(const Tensor&, const Tensor&, const Tensor&, BadIndexRecord) { return false; }
std::shared_ptr<const EmbeddingIndex::State> embedding_index(const Tensor&, std::int64_t) { return nullptr; }
bool embedding_backward(const Tensor&, const Tensor&, const Tensor&, const EmbeddingIndex::State*) { return false; }

}  // namespace bmt::kernels::seam
