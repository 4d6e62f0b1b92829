// Host side of the AdamW seam (adamw_seam.hpp): the per-range Kokkos kernel in adamw.cpp is the
// host's update, so the multi-tensor call is declined.
#include "adamw_seam.hpp"

namespace bmt::kernels::seam {

bool adamw_step(DType, const std::vector<AdamWRange>&, const AdamWScalars&, Stream&) { return false; }

}  // namespace bmt::kernels::seam
