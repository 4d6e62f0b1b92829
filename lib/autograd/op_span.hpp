#pragma once
// A timeline span around one op's forward or backward on the compute stream, recorded only at
// timeline::Detail::ops (the op's name is built only then) and when `work` says the node has
// something to do, so that a block's time can be split by op without a profiler.
#include <optional>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace bmt::autograd {

class OpSpan {
 public:
  OpSpan(const char* phase, const Node& node, bool work = true) {
    if (work && timeline::ops_enabled()) span_.emplace(context().compute_stream(), phase, node.name());
  }

 private:
  std::optional<timeline::Span> span_;
};

}  // namespace bmt::autograd
