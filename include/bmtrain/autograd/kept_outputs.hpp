#pragma once
// Selective recompute: a checkpointed block's forward may keep the outputs of ops that are costly
// to run again and cheap to hold, and its recompute takes them back instead of running those ops
// again. Two ops take part: attention (a [B, T, C] output and an f32 logsumexp per query row; the
// kernel is the block's slowest per byte kept) and residual_add (a [B, T, C] output; taking it back
// also leaves undone, under OutputsOnDemandGuard, the GEMM whose output it adds, which nothing
// else reads). The recompute's graph, gradients and results are unchanged: the kept outputs are
// the values the op would compute again from the same inputs.
//
//   KeptOutputs kept({"attention"});
//   { KeptOutputsScope s(kept, KeptOutputsScope::Mode::record); body(x); }   // forward
//   { KeptOutputsScope s(kept, KeptOutputsScope::Mode::replay); body(x); }   // recompute
//   kept.check_all_taken();
//
// Each of those ops asks KeptOutputs::active(its name): while recording, a list that keeps it
// gets its outputs appended, while replaying they are taken back in the same order. The body must
// call those ops in the same order with the same shapes both times (a mismatch is an error), and
// nothing may change a kept output in place between the two.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::autograd {

class KeptOutputs {
 public:
  // A list that keeps the outputs of the ops named (attention, residual_add).
  explicit KeptOutputs(std::vector<std::string> ops = {});

  // The list recording or replaying on this thread when it keeps `op`'s outputs, else null.
  static KeptOutputs* active(std::string_view op);

  bool keeps(std::string_view op) const;
  bool keeps_any() const { return !ops_.empty(); }

  bool replaying() const { return replaying_; }
  // While recording: keeps one op call's outputs.
  void put(std::vector<Tensor> outputs);
  // While replaying: the next op call's outputs, checked against the shapes and dtypes the op
  // would produce (`op` names it in the error).
  struct Layout {
    Shape shape;
    DType dtype;
  };
  std::vector<Tensor> take(const char* op, const std::vector<Layout>& expected);

  // After a replay: every kept call was taken back (else the two runs of the body differed).
  void check_all_taken() const;

  std::size_t bytes() const;
  void clear() { calls_.clear(), next_ = 0; }

 private:
  friend class KeptOutputsScope;
  std::vector<std::string> ops_;
  std::vector<std::vector<Tensor>> calls_;
  std::size_t next_ = 0;
  bool replaying_ = false;
};

// Makes `kept` the active list of this thread while alive. Recording starts it afresh; replaying
// starts from its first call.
class KeptOutputsScope {
 public:
  enum class Mode { record, replay };
  KeptOutputsScope(KeptOutputs& kept, Mode mode);
  ~KeptOutputsScope();
  KeptOutputsScope(const KeptOutputsScope&) = delete;
  KeptOutputsScope& operator=(const KeptOutputsScope&) = delete;

 private:
  KeptOutputs& kept_;
  KeptOutputs* previous_;
};

}  // namespace bmt::autograd
