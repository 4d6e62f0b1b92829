// GEMM epilogues applied after the product, with the elementwise and reduction kernels: the host
// build's way, and the CUDA build's when cuBLASLt has no fused kernel for a problem.
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt::kernels {

void apply_gemm_epilogue(const GemmParams& p) {
  if (p.epilogue == Epilogue::none) return;
  const Shape shape{p.m, p.n};
  const Tensor c = Tensor::wrap(p.c, shape, p.dtype);
  const Tensor aux = Tensor::wrap(p.aux, shape, p.dtype);
  const std::size_t bytes = static_cast<std::size_t>(p.m * p.n) * dtype_size(p.dtype);
  if (p.epilogue == Epilogue::gelu_aux) {
    memory::copy(aux.data(), c.data(), bytes);
    const Tensor y = activation_forward(Activation::gelu, aux);
    memory::copy(c.data(), y.data(), bytes);
    return;
  }
  const Tensor d = activation_backward(Activation::gelu, aux, c);
  memory::copy(c.data(), d.data(), bytes);
  if (p.bias_grad) {
    const Tensor db = sum_dim(c, 0, false);
    memory::copy(p.bias_grad, db.data(), static_cast<std::size_t>(p.n) * dtype_size(p.dtype));
  }
}

}  // namespace bmt::kernels
