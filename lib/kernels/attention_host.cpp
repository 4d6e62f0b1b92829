// Host side of the attention seam: no specialized kernels; the portable kernel runs everywhere.
#include "attention_seam.hpp"
#include "bmtrain/kernels/attention.hpp"

namespace bmt::kernels {

bool attention_uses_tensor_cores(const Tensor&, const Tensor&, const Tensor&) { return false; }

const char* attention_kernel_name(const Tensor&, const Tensor&, const Tensor&) { return "portable"; }

bool seam::tensor_core_attention_forward(const Tensor&, const Tensor&, const Tensor&, bool, float, const Tensor&,
                                   const Tensor&) {
  return false;
}

bool seam::tensor_core_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, bool, float, const Tensor&, const Tensor&, const Tensor&) {
  return false;
}

}  // namespace bmt::kernels
