// Host side of the memory-bound kernels' seam (memory_bound_seam.hpp): the portable Kokkos kernels
// are the host's kernels, so every call is declined.
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

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
bool sum_squares(DType, const void* const*, const std::int64_t*, int, double*) { return false; }
bool copy(const Tensor&, const Tensor&, float, bool) { return false; }
bool embedding_forward(const Tensor&, const Tensor&, const Tensor&, BadIndexRecord) { return false; }
std::shared_ptr<const EmbeddingIndex::State> embedding_index(const Tensor&, std::int64_t) { return nullptr; }
bool embedding_backward(const Tensor&, const Tensor&, const Tensor&, const EmbeddingIndex::State*) { return false; }

}  // namespace bmt::kernels::seam
