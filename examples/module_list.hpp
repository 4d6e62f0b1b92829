#pragma once
// ModuleList: a list of sub-modules registered under their index ("0", "1", ...), as Python's
// torch.nn.ModuleList is, so that parameter names read "module_list.1.qkv.weight". Step 2 keeps its
// CheckpointBlocks in one and calls them in a loop; bmt::TransformerBlockList (step 3) registers its
// blocks the same way, so the two models have the same parameter names and, for the same seed, the
// same initial values.
#include <bmtrain/bmtrain.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace example {

template <class M>
class ModuleList : public bmt::Module {
 public:
  // Builds an M from `args` at the end of the list (modules are neither copied nor moved once built).
  template <class... A>
  M& append(A&&... args) {
    items_.push_back(std::make_unique<M>(std::forward<A>(args)...));
    register_module(std::to_string(items_.size() - 1), *items_.back());
    return *items_.back();
  }
  std::size_t size() const { return items_.size(); }
  M& operator[](std::size_t i) { return *items_.at(i); }

  // Range-for over the modules: for (auto& block : list) x = block(x, ...).
  struct Iterator {
    typename std::vector<std::unique_ptr<M>>::iterator it;
    M& operator*() const { return **it; }
    Iterator& operator++() { ++it; return *this; }
    bool operator!=(const Iterator& other) const { return it != other.it; }
  };
  Iterator begin() { return {items_.begin()}; }
  Iterator end() { return {items_.end()}; }

 private:
  std::vector<std::unique_ptr<M>> items_;
};

}  // namespace example
