#include "bmtrain/io/model_checkpoint.hpp"

#include <algorithm>
#include <set>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/nn/part_map.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "whole_tensor_runs.hpp"

namespace bmt {

namespace {

// A contiguous tensor's bytes on the host.
std::vector<char> host_bytes(const Tensor& t) {
  std::vector<char> host(t.nbytes());
  memory::copy_to_host(host.data(), t.data(), host.size());
  return host;
}

// This rank's values in the parameters' dtype (rounded where the storage holds them in f32).
std::vector<char> shard_bytes(const ShardedStorage& s) { return host_bytes(s.values()); }

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

void save(Module& model, const std::string& path, const std::map<std::string, std::string>& metadata) {
  const auto storages = sharded_storages(model);
  std::vector<io::TensorSpec> specs;
  for (auto* s : storages)
    for (const auto& e : s->entries()) specs.push_back({e.name, s->dtype(), whole_shape(e.parameter)});
  io::SafetensorsWriter writer(path, specs, metadata);
  for (auto* s : storages) {
    const auto host = shard_bytes(*s);
    const std::size_t es = dtype_size(s->dtype());
    for (const auto& e : s->entries())
      for (const auto& run : io::runs_to_write(*s, e))
        writer.write(e.name, run.whole_first, run.count, s->dtype(), host.data() + run.shard_offset * es);
  }
  writer.close();
}

LoadReport load(Module& model, const std::string& path, bool strict, io::Rounding rounding) {
  const auto storages = sharded_storages(model);
  io::SafetensorsReader reader(path);
  const auto& header = reader.header();
  LoadReport report;
  std::set<std::string> in_model;
  std::vector<std::string> wrong_shape;
  for (auto* s : storages)
    for (const auto& e : s->entries()) {
      in_model.insert(e.name);
      const auto* t = header.find(e.name);
      if (!t) {
        report.missing.push_back(e.name);
      } else if (t->shape != whole_shape(e.parameter)) {
        wrong_shape.push_back(e.name + " (file " + to_string(t->shape) + ", model " + to_string(whole_shape(e.parameter)) +
                              ")");
      }
    }
  for (const auto& t : header.tensors())
    if (!in_model.count(t.name)) report.unexpected.push_back(t.name);
  // The header is the same on every rank, so every rank reaches the same verdict.
  BMT_REQUIRE(wrong_shape.empty(), "load '" << path << "': expected the model's shapes, found " << list(wrong_shape));
  BMT_REQUIRE(!strict || (report.missing.empty() && report.unexpected.empty()),
              "load '" << path << "' (strict): expected exactly the model's parameters; missing from the file: ["
                       << list(report.missing) << "], not in the model: [" << list(report.unexpected) << "]");
  for (auto* s : storages) {
    auto host = shard_bytes(*s);
    const std::size_t es = dtype_size(s->dtype());
    for (const auto& e : s->entries())
      if (header.find(e.name))
        for (const auto& run : io::runs_to_read(*s, e))
          reader.read(e.name, run.whole_first, run.count, s->dtype(), host.data() + run.shard_offset * es, rounding);
    // Read in the parameters' dtype (rounded as asked), then widened where the values are held in f32.
    copy_into(s->shard(), Tensor::from_host(host.data(), {s->shard_size()}, s->dtype()));
  }
  return report;
}

namespace io {

// Each state tensor is written in its own dtype (bf16 moments as bf16) and read back as f32, which
// load_state stores in the optimizer's dtype: a resume that changes the moments' dtype converts them
// (bf16 -> f32 exactly, f32 -> bf16 rounded to nearest even).
void save_optimizer(const optim::Optimizer& optimizer, const std::string& path) {
  std::vector<TensorSpec> specs;
  for (auto* s : optimizer.storages())
    for (const auto& [state, t] : optimizer.state_of(*s))
      for (const auto& e : s->entries()) specs.push_back({e.name + "." + state, t.dtype(), whole_shape(e.parameter)});
  std::map<std::string, std::string> metadata{{"optimizer", optimizer.name()},
                                              {"step", std::to_string(optimizer.step_count())}};
  SafetensorsWriter writer(path, specs, metadata);
  for (auto* s : optimizer.storages())
    for (const auto& [state, t] : optimizer.state_of(*s)) {
      const auto bytes = host_bytes(contiguous(t));
      const std::size_t es = dtype_size(t.dtype());
      for (const auto& e : s->entries())
        for (const auto& run : runs_to_write(*s, e))
          writer.write(e.name + "." + state, run.whole_first, run.count, t.dtype(), bytes.data() + run.shard_offset * es);
    }
  writer.close();
}

void load_optimizer(optim::Optimizer& optimizer, const std::string& path) {
  SafetensorsReader reader(path);
  const auto& header = reader.header();
  for (auto* s : optimizer.storages())
    for (const auto& [state, t] : optimizer.state_of(*s)) {
      std::vector<float> values(static_cast<std::size_t>(s->shard_size()), 0.0f);
      for (const auto& e : s->entries()) {
        const std::string name = e.name + "." + state;
        const auto& entry = header.tensor(name);  // throws naming the missing tensor
        const Shape whole = whole_shape(e.parameter);
        BMT_REQUIRE(entry.shape == whole, "load_optimizer '" << path << "': expected " << name << " of shape "
                                                             << to_string(whole) << ", found " << to_string(entry.shape));
        for (const auto& run : runs_to_read(*s, e))
          reader.read<float>(name, run.whole_first, run.count, values.data() + run.shard_offset);
      }
      optimizer.load_state(*s, state, values);
    }
  if (const auto step = optimizer_step(header.metadata(), path)) optimizer.set_step_count(*step);
}

std::optional<std::int64_t> optimizer_step(const std::map<std::string, std::string>& metadata, const std::string& path) {
  const auto it = metadata.find("step");
  if (it == metadata.end()) return std::nullopt;
  constexpr std::int64_t max_step = std::int64_t{1} << 53;
  const std::string& text = it->second;
  std::int64_t step = 0;
  bool ok = !text.empty() && text.size() <= 16;
  for (char c : text) {
    ok = ok && c >= '0' && c <= '9';
    if (ok) step = step * 10 + (c - '0');
  }
  BMT_REQUIRE(ok && step <= max_step, "optimizer state '" << path << "': metadata 'step': expected a whole number of "
                                                          << "steps in [0, " << max_step << "], found '" << text << "'");
  return step;
}

}  // namespace io
}  // namespace bmt
