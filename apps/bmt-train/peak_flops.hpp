#pragma once
// The dense tensor-core peak of the GPU a rank runs on, for MFU.
#include <bmtrain/bmtrain.hpp>

#include <optional>
#include <string>

namespace bmt_train {

// Dense bf16/f16 peak FLOP/s of a GPU whose name contains one of the table's entries; nullopt for
// other GPUs and for f32 (which does not run on the tensor cores the peak counts).
std::optional<double> peak_flops(const std::string& gpu_name, bmt::DType dtype);

// The same for the GPU this rank runs on; nullopt on a CPU build.
std::optional<double> peak_flops(bmt::DType dtype);

}  // namespace bmt_train
