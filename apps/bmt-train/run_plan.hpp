#pragma once
// What the trainer plans from the options, the model and the ranks before the first step: how the
// batch splits over ranks and micro-batches, the peak learning rate, the memory it will take, and
// where it resumes. A plain record: the trainer fills it during setup, the banner prints it.
#include <cstdint>
#include <string>
#include <vector>

#include <bmtrain/models/causal_lm.hpp>

#include "memory_estimate.hpp"

namespace bmt_train {

struct RunPlan {
  std::string model_name;         // the preset's, or what the model came from (--init-from, --resume)
  std::int64_t local_batch = 0;   // sequences a rank takes a step
  std::int64_t micro_batch = 0;   // sequences a rank takes a forward
  std::int64_t accumulation = 1;  // micro-batches a step
  float peak_lr = 0;
  double entropy_rate = -1;       // the data's lowest achievable loss, when known
  bmt::models::CausalLMOptions model_options;  // how the model runs: the flags', or --recompute auto's plan
  std::string recompute_plan;     // --recompute auto: what it chose and its figures
  MemoryEstimate memory;
  int host_threads = 0;           // the offloaded optimizer's update threads
  std::string resumed_from;       // empty: a fresh run
  std::vector<std::string> resume_notes;  // what differs from the checkpoint's run (trajectory_changes)
  std::int64_t start_step = 0;
};

}  // namespace bmt_train
