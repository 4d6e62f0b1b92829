// A CheckpointBlock's gather of its storage (ShardedStorage::gather_into) with FP8 linear layers'
// weights as e4m3 codes. Each rank sends a chunk of its shard's pieces of every parameter, a float8
// weight's at 1 byte an element and the rest in the parameters' dtype; the chunks are all-gathered
// into a staging buffer and each piece then moved to its parameter's place, so that every parameter
// is contiguous in the gathered buffer as the layers read it. A weight's scale is its whole
// tensor's: the shard group all-reduces the maxima of the ranks' pieces, so the codes do not depend
// on how the weight is divided (nor on the world size), and replicas, holding the same shards,
// compute the same ones.
#include "block_gather.hpp"

#include <algorithm>

#include "bmtrain/kernels/gather_packing.hpp"
#include "bmtrain/nn/parameter.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/tensor/allocator.hpp"

namespace bmt {

namespace {

// A piece starts aligned enough for any dtype's elements and for wide loads.
constexpr std::size_t kPieceAlignment = 16;

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

bool ShardedStorage::gathers_float8() const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [](const Entry& e) { return e.parameter.impl()->param->gather_float8; });
}

const ShardedStorage::GatherLayout& ShardedStorage::gather_layout() const {
  std::vector<bool> marks;
  for (const auto& e : entries_) marks.push_back(e.parameter.impl()->param->gather_float8);
  if (gather_layout_ && gather_layout_->float8 == marks) return *gather_layout_;
  auto l = std::make_unique<GatherLayout>();
  l->float8 = marks;
  const std::size_t dsize = dtype_size(dtype_);
  const bool any = std::find(marks.begin(), marks.end(), true) != marks.end();
  if (!any) {  // the flat buffer's own layout: what all_gather_into fills
    for (const auto& e : entries_) l->at.push_back(static_cast<std::size_t>(e.offset) * dsize);
    l->scale.assign(entries_.size(), -1);
    l->bytes = static_cast<std::size_t>(total_) * dsize;
    gather_layout_ = std::move(l);
    return *gather_layout_;
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    l->at.push_back(at);
    l->scale.push_back(marks[i] ? l->float8_count++ : -1);
    at = align_up(at + static_cast<std::size_t>(entries_[i].numel) * (marks[i] ? 1 : dsize), kAllocationAlignment);
  }
  l->scales_at = at;
  const std::size_t scale_bytes = GatherLayout::kScaleStride * static_cast<std::size_t>(l->float8_count);
  l->bytes = align_up(at + scale_bytes, kAllocationAlignment);
  l->pieces.resize(static_cast<std::size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    const std::int64_t begin = r * shard_size_, end = begin + shard_size_;
    std::size_t chunk = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      const std::int64_t lo = std::max(e.offset, begin), hi = std::min(e.offset + e.numel, end);
      if (hi <= lo) continue;
      l->pieces[static_cast<std::size_t>(r)].push_back({i, lo - e.offset, lo - begin, hi - lo, chunk});
      chunk = align_up(chunk + static_cast<std::size_t>(hi - lo) * (marks[i] ? 1 : dsize), kPieceAlignment);
    }
    l->chunk_bytes = std::max(l->chunk_bytes, chunk);
  }
  l->chunk_bytes = align_up(std::max<std::size_t>(l->chunk_bytes, 1), kAllocationAlignment);
  gather_layout_ = std::move(l);
  return *gather_layout_;
}

std::size_t ShardedStorage::gather_bytes() const { return gather_layout().bytes; }

std::size_t ShardedStorage::gather_staging_bytes() const {
  if (world_size_ == 1 || !gathers_float8()) return 0;
  return gather_layout().chunk_bytes * static_cast<std::size_t>(world_size_);
}

std::size_t ShardedStorage::gather_wire_bytes() const {
  if (!gathers_float8()) return static_cast<std::size_t>(shard_size_) * dtype_size(dtype_);
  return gather_layout().chunk_bytes;
}

void ShardedStorage::gather_into(const Tensor& full, const Tensor& staging, Communicator& comm, Stream& stream) {
  if (!gathers_float8()) {
    all_gather_into(full, comm, stream);
    return;
  }
  const GatherLayout& l = gather_layout();
  BMT_REQUIRE(full.defined() && full.nbytes() >= l.bytes,
              "ShardedStorage '" << name_ << "': expected a gather buffer of " << l.bytes << " bytes, found "
                                 << (full.defined() ? full.nbytes() : 0));
  const bool across = world_size_ > 1;
  const std::size_t wire_bytes = l.chunk_bytes * static_cast<std::size_t>(world_size_);
  BMT_REQUIRE(!across || (staging.defined() && staging.nbytes() >= wire_bytes),
              "ShardedStorage '" << name_ << "': expected a gather staging buffer of " << wire_bytes << " bytes, found "
                                 << (staging.defined() ? staging.nbytes() : 0));
  // One maximum for each parameter that could be gathered as float8, so that the marks changing
  // (set_fp8 after a gather) never outgrows a buffer earlier gathers may still be reading.
  if (!gather_amax_.defined())
    gather_amax_ = Tensor::empty({static_cast<std::int64_t>(entries_.size())}, DType::f32);
  run_deferred_update(stream);
  stream.wait(values_written_);
  timeline::Span span(stream, "gather", name_);

  char* base = static_cast<char*>(full.data());
  char* wire = across ? static_cast<char*>(staging.data()) : nullptr;
  const char* shard = static_cast<const char*>(shard_.data());
  const DType from = shard_.dtype(), to = dtype_;
  const std::size_t from_size = dtype_size(from), to_size = dtype_size(to);
  float* amax = gather_amax_.data_as<float>();
  const auto count = static_cast<std::int64_t>(l.float8_count);
  const std::vector<bool> float8 = l.float8;
  const std::vector<std::size_t> at = l.at;
  const std::vector<int> scale = l.scale;
  const std::vector<GatherLayout::Piece> mine = l.pieces[static_cast<std::size_t>(rank_)];
  char* my_chunk = across ? wire + l.chunk_bytes * static_cast<std::size_t>(rank_) : nullptr;
  const auto element_size = [float8, to_size](std::size_t entry) { return float8[entry] ? std::size_t{1} : to_size; };
  // Where a piece of this rank lands: its chunk across ranks, else its place in the buffer.
  const auto destination = [=](const GatherLayout::Piece& p) {
    return across ? my_chunk + p.chunk_at
                  : base + at[p.entry] + static_cast<std::size_t>(p.param_offset) * element_size(p.entry);
  };
  Stream* on = &stream;

  // This rank's piece of each float8 weight: its absolute maximum (0 where it has none).
  stream.launch([=] {
    kernels::zero_on(on->space(), amax, count);
    for (const auto& p : mine)
      if (float8[p.entry])
        kernels::abs_max_on(on->space(), shard + static_cast<std::size_t>(p.shard_offset) * from_size, from, p.count,
                            amax + scale[p.entry]);
  });
  if (across) comm.all_reduce(amax, amax, static_cast<std::size_t>(count), DType::f32, ReduceOp::max, stream);
  // Every rank's scales from the agreed maxima, and this rank's pieces cast.
  float* scale_inv = reinterpret_cast<float*>(base + l.scales_at);
  stream.launch([=] {
    kernels::e4m3_scale_inv_on(on->space(), amax, scale_inv, count, GatherLayout::kScaleStride / sizeof(float));
    for (const auto& p : mine) {
      const char* src = shard + static_cast<std::size_t>(p.shard_offset) * from_size;
      if (float8[p.entry])
        kernels::quantize_e4m3_on(on->space(), src, from, p.count, amax + scale[p.entry],
                                  reinterpret_cast<std::uint8_t*>(destination(p)));
      else
        kernels::convert_on(on->space(), src, from, destination(p), to, p.count);
    }
  });
  if (!across) return;
  comm.all_gather(my_chunk, wire, l.chunk_bytes, DType::u8, stream);
  const std::vector<std::vector<GatherLayout::Piece>> pieces = l.pieces;
  const std::size_t chunk_bytes = l.chunk_bytes;
  stream.launch([=] {
    for (std::size_t r = 0; r < pieces.size(); ++r)
      for (const auto& p : pieces[r]) {
        const std::size_t size = element_size(p.entry);
        kernels::copy_bytes_on(on->space(), wire + r * chunk_bytes + p.chunk_at,
                               base + at[p.entry] + static_cast<std::size_t>(p.param_offset) * size,
                               static_cast<std::size_t>(p.count) * size);
      }
  });
}

}  // namespace bmt
