#include "peak_flops.hpp"

#ifdef BMT_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace bmt_train {

namespace {

struct GpuPeak {
  const char* name;  // a part of the device name
  double dense_16bit;  // FLOP/s, dense bf16/f16 on the tensor cores (the vendors' data sheets)
};

// H100/H200 SXM and A100: the GPUs bmt-train's MFU is quoted on.
constexpr GpuPeak kPeaks[] = {{"H100", 989e12}, {"H200", 989e12}, {"A100", 312e12}};

}  // namespace

std::optional<double> peak_flops(const std::string& gpu_name, bmt::DType dtype) {
  if (dtype == bmt::DType::f32) return std::nullopt;
  for (const auto& p : kPeaks)
    if (gpu_name.find(p.name) != std::string::npos) return p.dense_16bit;
  return std::nullopt;
}

std::optional<double> peak_flops(bmt::DType dtype) {
#ifdef BMT_ENABLE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, bmt::context().topology().device) != cudaSuccess) return std::nullopt;
  return peak_flops(prop.name, dtype);
#else
  (void)dtype;
  return std::nullopt;
#endif
}

}  // namespace bmt_train
