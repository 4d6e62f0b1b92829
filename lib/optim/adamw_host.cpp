// Host side of the AdamW seam (adamw_fused.hpp): the per-range Kokkos kernel in adamw.cpp is the
// host's update, so the multi-tensor call is declined.
#include "adamw_fused.hpp"

namespace bmt::optim::fused {

bool adamw_step(DType, const std::vector<AdamWRange>&, const AdamWScalars&) { return false; }

}  // namespace bmt::optim::fused
