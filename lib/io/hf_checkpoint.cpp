#include "bmtrain/io/hf_checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/nn/part_map.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "whole_tensor_runs.hpp"

namespace bmt::io {

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BMT_REQUIRE(in.good(), "cannot open '" << path << "'");
  std::ostringstream text;
  text << in.rdbuf();
  BMT_REQUIRE(!in.bad(), "reading '" << path << "' failed");
  return text.str();
}

// The safetensors files of a checkpoint directory, opened on every rank, and where each tensor is.
class HubFiles {
 public:
  struct Tensor {
    const SafetensorsReader* reader;
    const TensorEntry* entry;
    std::string file;
  };

  // Collective.
  explicit HubFiles(const std::string& dir) {
    const MPI_Comm comm = comm_or_world(MPI_COMM_NULL);
    // Rank 0 looks at the directory and reads the index; the others take its findings.
    std::string kind, index;
    run_on_root(comm, [&] {
      namespace fs = std::filesystem;
      if (fs::is_regular_file(dir + "/" + kIndexFile)) {
        kind = "index";
        index = read_text(dir + "/" + kIndexFile);
      } else if (fs::is_regular_file(dir + "/" + kSingleFile)) {
        kind = "single";
      } else {
        BMT_REQUIRE(false, "Hugging Face checkpoint '" << dir << "': expected " << kSingleFile << " or " << kIndexFile
                                                       << ", found neither");
      }
    });
    broadcast_text(comm, kind, 0);
    broadcast_text(comm, index, 0);
    std::map<std::string, std::string> file_of;  // tensor -> file, from the index
    std::set<std::string> files;
    if (kind == "index") {
      const std::string where = "Hugging Face checkpoint index '" + dir + "/" + kIndexFile + "'";
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(index);
      } catch (const nlohmann::json::exception& e) {
        BMT_REQUIRE(false, where << ": expected valid JSON, found " << e.what());
      }
      BMT_REQUIRE(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                  where << ": expected an object with a \"weight_map\" object, found " << j.dump().substr(0, 80));
      for (const auto& [name, file] : j["weight_map"].items()) {
        BMT_REQUIRE(file.is_string() && !file.get<std::string>().empty() &&
                        file.get<std::string>().find('/') == std::string::npos,
                    where << ": expected a file name in the directory for tensor '" << name << "', found " << file.dump());
        file_of[name] = file.get<std::string>();
        files.insert(file.get<std::string>());
      }
    } else {
      files.insert(kSingleFile);
    }
    // Every rank opens the same files in the same (sorted) order: each open is collective.
    for (const auto& file : files) readers_.emplace(file, std::make_unique<SafetensorsReader>(dir + "/" + file, comm));
    if (kind == "index") {
      for (const auto& [name, file] : file_of) {
        const SafetensorsReader& r = *readers_.at(file);
        const TensorEntry* e = r.header().find(name);
        BMT_REQUIRE(e, "Hugging Face checkpoint '" << dir << "': expected tensor '" << name << "' in " << file
                                                   << " (as " << kIndexFile << " says), found no such tensor there");
        tensors_[name] = {&r, e, file};
      }
    } else {
      const SafetensorsReader& r = *readers_.at(kSingleFile);
      for (const auto& e : r.header().tensors()) tensors_[e.name] = {&r, &e, kSingleFile};
    }
  }

  const Tensor* find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, Tensor> tensors_;
};

struct ModelParameter {
  ShardedStorage* storage;
  const ShardedStorage::Entry* entry;
};

std::map<std::string, ModelParameter> parameters_of(Module& model) {
  std::map<std::string, ModelParameter> out;
  for (auto* s : sharded_storages(model))
    for (const auto& e : s->entries()) out[e.name] = {s, &e};
  return out;
}

std::vector<std::int64_t> hub_shape(const ShardedStorage::Entry& e, bool transposed) {
  std::vector<std::int64_t> shape = whole_shape(e.parameter);
  if (transposed) std::reverse(shape.begin(), shape.end());
  return shape;
}

// The checkpoint's name of `hub`: itself, or without the layout's optional prefix when only that
// spelling is there.
std::string stored_name(const HubFiles& files, const HfLayout& layout, const std::string& hub) {
  const std::string& prefix = layout.optional_prefix;
  if (!prefix.empty() && !files.find(hub) && starts_with(hub, prefix) && files.find(hub.substr(prefix.size())))
    return hub.substr(prefix.size());
  return hub;
}

// Reads this rank's elements of parameter `e` (its local slice, runs of the whole tensor) into
// `shard` (the storage's host copy), in the storage's dtype. One read covers the whole rows the runs
// span (one strided read per stored row when the file holds the matrix transposed), so a tensor-
// parallel part costs no more reads than a plain shard, and never more memory than the whole tensor.
void read_slice(const HubFiles::Tensor& t, const std::string& name, const ShardedStorage& s,
                const ShardedStorage::Entry& e, bool transposed, char* shard) {
  const auto runs = runs_to_read(s, e);
  if (runs.empty()) return;
  const DType dtype = s.dtype();
  const std::size_t es = dtype_size(dtype);
  const std::uint64_t lo = runs.front().whole_first, hi = runs.back().whole_first + runs.back().count;
  if (!transposed) {
    if (runs.size() == 1) {
      t.reader->read(name, lo, hi - lo, dtype, shard + runs.front().shard_offset * es, Rounding::allow);
      return;
    }
    std::vector<char> block(static_cast<std::size_t>(hi - lo) * es);
    t.reader->read(name, lo, hi - lo, dtype, block.data(), Rounding::allow);
    for (const auto& run : runs)
      std::memcpy(shard + run.shard_offset * es, block.data() + (run.whole_first - lo) * es, run.count * es);
    return;
  }
  // The parameter is [rows, cols]; the file holds it as [cols, rows]. The runs lie in rows r0..r1:
  // read columns r0..r1 of every stored row.
  const Shape whole = whole_shape(e.parameter);
  const auto rows = static_cast<std::uint64_t>(whole[0]), cols = static_cast<std::uint64_t>(whole[1]);
  const std::uint64_t r0 = lo / cols, r1 = (hi - 1) / cols, width = r1 - r0 + 1;
  std::vector<char> block(static_cast<std::size_t>(cols * width) * es);
  for (std::uint64_t c = 0; c < cols; ++c)
    t.reader->read(name, c * rows + r0, width, dtype, block.data() + c * width * es, Rounding::allow);
  for (const auto& run : runs)
    for (std::uint64_t k = 0; k < run.count; ++k) {
      const std::uint64_t r = (run.whole_first + k) / cols, c = (run.whole_first + k) % cols;
      std::memcpy(shard + (run.shard_offset + k) * es, block.data() + (c * width + (r - r0)) * es, es);
    }
}

// Writes this rank's elements of parameter `e` (runs_to_write: the first replica's, and of a
// parameter the tp group replicates only tp rank 0's) from `shard` (the storage's host copy).
void write_slice(SafetensorsWriter& w, const std::string& hub, const ShardedStorage& s, const ShardedStorage::Entry& e,
                 bool transposed, const char* shard) {
  const auto runs = runs_to_write(s, e);
  if (runs.empty()) return;
  const DType dtype = s.dtype();
  const std::size_t es = dtype_size(dtype);
  if (!transposed) {
    for (const auto& run : runs) w.write(hub, run.whole_first, run.count, dtype, shard + run.shard_offset * es);
    return;
  }
  // Stored row c holds parameter column c. The runs ascend through the whole tensor, so this rank's
  // entries of each column ascend too: each column's maximal runs of consecutive rows are one write.
  const Shape whole = whole_shape(e.parameter);
  const auto rows = static_cast<std::uint64_t>(whole[0]), cols = static_cast<std::uint64_t>(whole[1]);
  struct Column {
    std::vector<std::uint64_t> rows;
    std::vector<char> values;
  };
  std::map<std::uint64_t, Column> columns;
  for (const auto& run : runs)
    for (std::uint64_t k = 0; k < run.count; ++k) {
      const std::uint64_t r = (run.whole_first + k) / cols, c = (run.whole_first + k) % cols;
      Column& col = columns[c];
      col.rows.push_back(r);
      const char* v = shard + (run.shard_offset + static_cast<std::int64_t>(k)) * static_cast<std::int64_t>(es);
      col.values.insert(col.values.end(), v, v + es);
    }
  for (const auto& [c, col] : columns)
    for (std::size_t i = 0; i < col.rows.size();) {
      std::size_t j = i + 1;
      while (j < col.rows.size() && col.rows[j] == col.rows[j - 1] + 1) ++j;
      w.write(hub, c * rows + col.rows[i], j - i, dtype, col.values.data() + i * es);
      i = j;
    }
}

// This rank's values in the parameters' dtype (rounded where the storage holds them in f32).
std::vector<char> shard_to_host(const ShardedStorage& s) {
  const Tensor values = s.values();
  std::vector<char> host(values.nbytes());
  memory::copy_to_host(host.data(), values.data(), host.size());
  return host;
}

}  // namespace

void load_hf_checkpoint(Module& model, const std::string& dir, const HfLayout& layout) {
  const HubFiles files(dir);
  const auto params = parameters_of(model);
  const std::string where = "Hugging Face checkpoint '" + dir + "'";
  // Everything below is checked on data every rank holds alike, so every rank reaches the same verdict.
  std::set<std::string> mapped_parameters, used;
  struct Read {
    ModelParameter param;
    const HubFiles::Tensor* tensor;
    std::string name;
    bool transposed;
  };
  std::vector<Read> reads;
  for (const auto& t : layout.tensors) {
    const auto p = params.find(t.parameter);
    BMT_REQUIRE(p != params.end(), where << ": expected the model to have parameter '" << t.parameter << "' for tensor '"
                                         << t.hub << "', found none");
    const std::string name = stored_name(files, layout, t.hub);
    const HubFiles::Tensor* h = files.find(name);
    BMT_REQUIRE(h, where << ": expected tensor '" << t.hub << "' (for " << t.parameter << " of a " << layout.model
                         << "), found no such tensor");
    const auto expected = hub_shape(*p->second.entry, t.transposed);
    BMT_REQUIRE(h->entry->shape == expected, where << ": tensor '" << name << "' in " << h->file << ": expected shape "
                                                   << shape_text(expected) << " (for " << t.parameter << "), found "
                                                   << shape_text(h->entry->shape));
    const std::string& code = h->entry->dtype;
    BMT_REQUIRE(code == "F32" || code == "BF16" || code == "F16", where << ": tensor '" << name << "' in " << h->file
                                                                         << ": expected dtype F32, BF16 or F16, found "
                                                                         << code);
    mapped_parameters.insert(t.parameter);
    used.insert(name);
    reads.push_back({p->second, h, name, t.transposed});
  }
  for (const auto& [name, p] : params)
    BMT_REQUIRE(mapped_parameters.count(name), where << ": expected a tensor for every model parameter, found none for '"
                                                     << name << "'");
  for (const auto& [name, t] : files.tensors())
    BMT_REQUIRE(used.count(name) || layout.ignored(name),
                where << ": tensor '" << name << "' in " << t.file << ": expected only the tensors of a "
                      << layout.model << ", found one it does not have");

  // Each rank reads its shards' elements; a failed read on one rank fails the load on all.
  std::map<ShardedStorage*, std::vector<char>> host;
  const std::string error = error_of([&] {
    for (const auto& r : reads) {
      auto& buffer = host[r.param.storage];
      if (buffer.empty()) buffer = shard_to_host(*r.param.storage);
      read_slice(*r.tensor, r.name, *r.param.storage, *r.param.entry, r.transposed, buffer.data());
    }
  });
  agree_on_errors(comm_or_world(MPI_COMM_NULL), error.empty() ? "" : where + ": " + error);
  // Read in the parameters' dtype, then widened where the values are held in f32.
  for (auto& [s, buffer] : host) copy_into(s->shard(), Tensor::from_host(buffer.data(), {s->shard_size()}, s->dtype()));
}

void save_hf_checkpoint(Module& model, const std::string& dir, const HfLayout& layout, nlohmann::json config,
                        const HfExportOptions& options) {
  const MPI_Comm comm = comm_or_world(MPI_COMM_NULL);
  const std::string where = "Hugging Face export '" + dir + "'";
  BMT_REQUIRE(options.max_shard_bytes > 0, where << ": expected a positive shard size, found 0");
  const auto params = parameters_of(model);
  std::set<std::string> mapped;
  struct Export {
    TensorSpec spec;
    ModelParameter param;
    bool transposed;
  };
  std::vector<Export> specs;
  for (const auto& t : layout.tensors) {
    const auto p = params.find(t.parameter);
    BMT_REQUIRE(p != params.end(), where << ": expected the model to have parameter '" << t.parameter << "' for tensor '"
                                         << t.hub << "', found none");
    BMT_REQUIRE(!t.transposed || p->second.entry->parameter.dim() == 2,
                where << ": expected a matrix to store transposed for '" << t.parameter << "', found shape "
                      << shape_text(whole_shape(p->second.entry->parameter)));
    specs.push_back({{t.hub, p->second.storage->dtype(), hub_shape(*p->second.entry, t.transposed)}, p->second,
                     t.transposed});
    mapped.insert(t.parameter);
  }
  for (const auto& [name, p] : params)
    BMT_REQUIRE(mapped.count(name), where << ": expected a tensor for every model parameter, found none for '" << name
                                          << "'");
  BMT_REQUIRE(!specs.empty(), where << ": expected parameters to export, found none");

  // Files of at most max_shard_bytes, filled in order; a larger tensor alone in its file.
  std::vector<std::vector<std::size_t>> groups;
  std::uint64_t group_bytes = 0, total_bytes = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i].spec;
    std::uint64_t bytes = dtype_size(spec.dtype);
    for (std::int64_t d : spec.shape) bytes *= static_cast<std::uint64_t>(d);
    if (groups.empty() || group_bytes + bytes > options.max_shard_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(i);
    group_bytes += bytes;
    total_bytes += bytes;
  }
  std::vector<std::string> names;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", g + 1, groups.size());
    names.push_back(groups.size() == 1 ? kSingleFile : name);
  }

  run_on_root(comm, [&] {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir, ec);
    BMT_REQUIRE(!ec && fs::is_directory(dir), where << ": cannot create the directory: " << ec.message());
    // config.json is written last, once every weight is: an export that fails part way (a full
    // disk) leaves a directory that from_pretrained refuses, not an earlier export's config over
    // weights cut short.
    fs::remove(dir + "/config.json", ec);
    BMT_REQUIRE(!ec, where << ": cannot remove the earlier export's 'config.json': " << ec.message());
    // An earlier export's weights that this one does not overwrite would be read in place of it.
    const std::set<std::string> written(names.begin(), names.end());
    for (const auto& f : fs::directory_iterator(dir)) {
      const std::string n = f.path().filename().string();
      const bool weights = n == kSingleFile || n == kIndexFile ||
                           (starts_with(n, "model-") && ends_with(n, ".safetensors") && n.find("-of-") != std::string::npos);
      if (weights && !written.count(n)) {
        fs::remove(f.path(), ec);
        BMT_REQUIRE(!ec, where << ": cannot remove the earlier export's '" << n << "': " << ec.message());
      }
    }
  });

  std::map<ShardedStorage*, std::vector<char>> host;
  for (const auto& x : specs)
    if (!host.count(x.param.storage)) host[x.param.storage] = shard_to_host(*x.param.storage);
  const std::map<std::string, std::string> metadata{{"format", "pt"}};  // what from_pretrained expects
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::vector<TensorSpec> file_specs;
    for (std::size_t i : groups[g]) file_specs.push_back(specs[i].spec);
    SafetensorsWriter writer(dir + "/" + names[g], file_specs, metadata, comm);
    for (std::size_t i : groups[g]) {
      const ModelParameter& p = specs[i].param;
      write_slice(writer, specs[i].spec.name, *p.storage, *p.entry, specs[i].transposed, host[p.storage].data());
    }
    writer.close();
  }

  set_torch_dtype(config, specs.front().spec.dtype);
  run_on_root(comm, [&] {
    if (groups.size() > 1) {
      nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", nlohmann::json::object()}};
      for (std::size_t g = 0; g < groups.size(); ++g)
        for (std::size_t i : groups[g]) index["weight_map"][specs[i].spec.name] = names[g];
      write_json_atomic(dir + "/" + kIndexFile, index);
    }
    write_json_atomic(dir + "/config.json", config);
  });
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: break;
  }
  BMT_REQUIRE(false, "torch_dtype_name: expected f32, bf16 or f16, found " << dtype_name(dtype));
}

DType parse_torch_dtype(const std::string& name, const std::string& where) {
  if (name == "float32") return DType::f32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  BMT_REQUIRE(false, where << ": expected torch_dtype float32, bfloat16 or float16, found '" << name << "'");
}

void set_torch_dtype(nlohmann::json& config, DType dtype) {
  config["torch_dtype"] = torch_dtype_name(dtype);
  if (config.contains("dtype")) config["dtype"] = torch_dtype_name(dtype);
}

}  // namespace bmt::io
