#include "bmtrain/autograd/kept_outputs.hpp"

#include <algorithm>
#include <utility>

#include "bmtrain/runtime/error.hpp"

namespace bmt::autograd {

namespace {
thread_local KeptOutputs* t_active = nullptr;
}  // namespace

KeptOutputs::KeptOutputs(std::vector<std::string> ops) : ops_(std::move(ops)) {}

KeptOutputs* KeptOutputs::active(std::string_view op) { return t_active && t_active->keeps(op) ? t_active : nullptr; }

bool KeptOutputs::keeps(std::string_view op) const { return std::find(ops_.begin(), ops_.end(), op) != ops_.end(); }

void KeptOutputs::put(std::vector<Tensor> outputs) {
  BMT_REQUIRE(!replaying_, "KeptOutputs: expected to record, found the list replaying");
  for (Tensor& t : outputs) t = t.detach();  // values only: no graph kept alive
  calls_.push_back(std::move(outputs));
}

std::vector<Tensor> KeptOutputs::take(const char* op, const std::vector<Layout>& expected) {
  BMT_REQUIRE(replaying_, "KeptOutputs: expected to replay, found the list recording");
  BMT_REQUIRE(next_ < calls_.size(), op << ": the recompute calls it more often than the forward did (call "
                                        << next_ + 1 << ", " << calls_.size() << " kept)");
  const std::vector<Tensor>& kept = calls_[next_++];
  BMT_REQUIRE(kept.size() == expected.size(),
              op << ": expected " << expected.size() << " kept outputs, found " << kept.size());
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    BMT_REQUIRE(kept[i].shape() == expected[i].shape && kept[i].dtype() == expected[i].dtype,
                op << ": the recompute's output " << i << " is " << dtype_name(expected[i].dtype) << " "
                   << to_string(expected[i].shape) << ", the forward kept " << dtype_name(kept[i].dtype()) << " "
                   << to_string(kept[i].shape()) << " (is the block's forward the same both times?)");
    out.push_back(kept[i].detach());  // the caller's graph attaches to its own handle, not the kept one
  }
  return out;
}

std::size_t KeptOutputs::bytes() const {
  std::size_t total = 0;
  for (const auto& call : calls_)
    for (const Tensor& t : call) total += static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype());
  return total;
}

void KeptOutputs::check_all_taken() const {
  BMT_REQUIRE(next_ == calls_.size(), "KeptOutputs: the recompute took back "
                                          << next_ << " of the " << calls_.size()
                                          << " op calls the forward kept (is the block's forward the same both times?)");
}

KeptOutputsScope::KeptOutputsScope(KeptOutputs& kept, Mode mode) : kept_(kept), previous_(t_active) {
  if (mode == Mode::record) kept_.clear();
  kept_.replaying_ = mode == Mode::replay;
  kept_.next_ = 0;
  t_active = &kept_;
}

KeptOutputsScope::~KeptOutputsScope() { t_active = previous_; }

}  // namespace bmt::autograd
