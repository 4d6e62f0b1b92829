#pragma once
// A timeline span around one op's forward or backward on the compute stream, recorded only at
// timeline::Detail::ops (the op's name is built only then) and when `work` says the node has
// something to do, so that a block's time can be split by op without a profiler.
#include <memory>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace bmt::autograd {

class OpSpan {
 public:
  OpSpan(const char* phase, const Node& node, bool work = true) {
    if (work && timeline::ops_enabled())
      span_ = std::make_unique<timeline::Span>(context().compute_stream(), phase, node.name());
  }

 private:
  std::unique_ptr<timeline::Span> span_;  // (a std::optional here draws a false -Wmaybe-uninitialized from g++ 12)
};

}  // namespace bmt::autograd
