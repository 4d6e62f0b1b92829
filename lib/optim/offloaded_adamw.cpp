#include "offloaded_adamw.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/optim/host_adamw.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/runtime/host_memory.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace bmt::optim::detail {

namespace {

// Parts of a storage start at multiples of this many elements (256 bytes of f32).
constexpr std::int64_t kPartAlign = 64;
constexpr std::size_t kHostAlign = 4096;  // a page: memory::pin locks whole pages

// The sum of f32 scalars on the device, in f64, as an f32 scalar.
Tensor sum_in_f64(const std::vector<Tensor>& scalars) {
  static_assert(sizeof(const float*) == sizeof(std::int64_t), "pointers travel as i64");
  std::vector<const float*> pointers;
  for (const Tensor& t : scalars) pointers.push_back(t.data_as<float>());
  const auto n = static_cast<std::int64_t>(pointers.size());
  const Tensor table = Tensor::from_host(pointers.data(), {n}, DType::i64);
  Tensor sum = Tensor::empty({}, DType::f32);
  const float* const* p = static_cast<const float* const*>(table.data());
  float* s = sum.data_as<float>();
  Kokkos::parallel_for(
      "bmt::offloaded_adamw_sum", Kokkos::RangePolicy<kernels::ExecSpace>(kernels::space(), 0, 1),
      KOKKOS_LAMBDA(std::int64_t) {
        double total = 0.0;
        for (std::int64_t i = 0; i < n; ++i) total += *p[i];
        s[0] = static_cast<float>(total);
      });
  return sum;
}

}  // namespace

void FreeHost::operator()(void* p) const {
  if (pinned) memory::unpin(p);
  std::free(p);
}

OffloadedAdamW::HostArray OffloadedAdamW::host_array(std::size_t size) {
  const std::size_t bytes = (size + kHostAlign - 1) / kHostAlign * kHostAlign;
  void* p = std::aligned_alloc(kHostAlign, std::max(bytes, kHostAlign));
  BMT_REQUIRE(p, "AdamW (offloaded): expected " << bytes << " bytes of host memory, found the allocation refused");
  return HostArray(p);
}

OffloadedAdamW::OffloadedAdamW(const std::vector<ShardedStorage*>& storages,
                               const std::vector<std::vector<Optimizer::Range>>& ranges, const AdamWOptions& options)
    : options_(options),
      pool_(options.host_threads > 0 ? options.host_threads : host_threads()),
      to_host_(Stream::Kind::communication, "optimizer to host"),
      updates_(Stream::Kind::communication, "optimizer host update"),
      to_device_(Stream::Kind::communication, "optimizer to device") {
  BMT_REQUIRE(options.host_threads >= 0, "AdamW: expected host_threads >= 0 (0: one per core), found "
                                             << options.host_threads);
  const std::size_t ms = dtype_size(options.moments);
  std::size_t elements = 0;
  for (auto* s : storages) elements += static_cast<std::size_t>(s->shard_size());
  // Master weights, two moments and the exchange buffer.
  require_host_memory(elements * host_bytes_per_element(options.moments), "AdamW (offloaded)");
  scale_host_ = std::make_unique<memory::PinnedBuffer>(sizeof(float));
  storages_.reserve(storages.size());
  for (std::size_t k = 0; k < storages.size(); ++k) {
    ShardedStorage& s = *storages[k];
    BMT_REQUIRE(s.shard_dtype() == s.dtype(), "AdamW (offloaded): expected storage '"
                                                  << s.name() << "' to hold its values in " << dtype_name(s.dtype())
                                                  << ", found them in " << dtype_name(s.shard_dtype())
                                                  << " (is another optimizer updating the same model?)");
    const std::int64_t n = s.shard_size();
    const auto un = static_cast<std::size_t>(n);
    Storage st;
    st.s = &s;
    st.ranges = ranges[k];
    st.n = n;
    st.master = host_array(un * sizeof(float));
    st.m = host_array(un * ms);
    st.v = host_array(un * ms);
    st.exchange = host_array(un * sizeof(float));
    // The values as they are now, in their dtype, staged in the moments' memory (m, then v: 2 x
    // un * ms bytes hold un values of at most 4 bytes, since ms >= 2) until prepare() widens them
    // into the master weights. The staging pages are touched by the pool first, so that the copy
    // does not fault them in one by one.
    const std::size_t es = dtype_size(s.dtype());
    const std::size_t in_m = std::min(un, un * ms / es);
    const std::size_t staged[2] = {in_m * es, (un - in_m) * es};  // bytes in m, in v
    pool_.run([&](int p) {
      for (int half = 0; half < 2; ++half) {
        const auto [b, e] = ThreadPool::part(static_cast<std::int64_t>(staged[half]), pool_.size(), p, kHostAlign);
        std::memset(static_cast<char*>((half == 0 ? st.m : st.v).get()) + b, 0, static_cast<std::size_t>(e - b));
      }
    });
    const char* values = static_cast<const char*>(s.shard().data());
    memory::copy_to_host(st.m.get(), values, staged[0]);
    memory::copy_to_host(st.v.get(), values + staged[0], staged[1]);
    host_bytes_ += un * host_bytes_per_element(options.moments);
    storages_.push_back(std::move(st));
  }
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    ShardedStorage& s = *storages_[k].s;
    s.set_gradient_listener([this, k](ShardedStorage&) { gradient_complete(k); });
  }
  preparer_ = std::thread([this] { prepare_all(); });
}

OffloadedAdamW::~OffloadedAdamW() {
  // Work queued on the streams may wait for a storage's preparation: it finishes first.
  if (is_initialized()) flush();  // the model keeps the last update's values
  stop_preparing_ = true;
  preparer_.join();
  for (auto& st : storages_) st.s->set_gradient_listener(nullptr);
}

std::size_t OffloadedAdamW::host_bytes_per_element(DType moments) {
  return 2 * sizeof(float) + 2 * dtype_size(moments);
}

void OffloadedAdamW::prepare_all() {
  try {
    for (std::size_t k = storages_.size(); k-- > 0;) {  // the order the backward copies gradients out in
      if (stop_preparing_) return;
      prepare(k);
      {
        std::lock_guard<std::mutex> lock(prepare_mutex_);
        storages_[k].prepared = true;
      }
      prepared_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(prepare_mutex_);
      prepare_error_ = std::current_exception();
    }
    prepared_.notify_all();
  }
}

void OffloadedAdamW::prepare(std::size_t k) {
  Storage& st = storages_[k];
  const DType dtype = st.s->dtype();
  const std::size_t es = dtype_size(dtype), ms = dtype_size(options_.moments);
  const auto un = static_cast<std::size_t>(st.n);
  const std::size_t in_m = std::min(un, un * ms / es);
  const char* staged_m = static_cast<const char*>(st.m.get());
  const char* staged_v = static_cast<const char*>(st.v.get());
  // Each thread first touches the parts it updates: the master weights widened from the staged
  // values, and the exchange buffer.
  pool_.run([&](int p) {
    const auto [b, e] = part(st, p);
    float* w = st.w();
    for (std::int64_t j = b; j < e; ++j) {
      const auto u = static_cast<std::size_t>(j);
      const char* at = u < in_m ? staged_m + u * es : staged_v + (u - in_m) * es;
      if (dtype == DType::f32) {
        std::memcpy(&w[j], at, sizeof(float));
      } else {
        std::uint16_t bits;
        std::memcpy(&bits, at, sizeof bits);
        w[j] = dtype == DType::bf16 ? bf16_t::to_float(bits) : f16_t::to_float(bits);
      }
    }
    std::memset(static_cast<float*>(st.exchange.get()) + b, 0, static_cast<std::size_t>(e - b) * sizeof(float));
  });
  // Every staged value is read: the moments start at zero.
  pool_.run([&](int p) {
    const auto [b, e] = part(st, p);
    const auto bytes = static_cast<std::size_t>(e - b) * ms;
    std::memset(static_cast<char*>(st.m.get()) + static_cast<std::size_t>(b) * ms, 0, bytes);
    std::memset(static_cast<char*>(st.v.get()) + static_cast<std::size_t>(b) * ms, 0, bytes);
  });
  BMT_REQUIRE(memory::pin(st.exchange.get(), st.exchange_bytes()),
              "AdamW (offloaded): expected " << st.exchange_bytes() << " bytes of host memory page-locked for '"
                                             << st.s->name() << "', found the system refusing");
  st.exchange.get_deleter().pinned = true;
}

void OffloadedAdamW::wait_prepared(std::size_t k) {
  std::unique_lock<std::mutex> lock(prepare_mutex_);
  prepared_.wait(lock, [&] { return storages_[k].prepared || prepare_error_; });
  if (!storages_[k].prepared) std::rethrow_exception(prepare_error_);
}

std::pair<std::int64_t, std::int64_t> OffloadedAdamW::part(const Storage& st, int p) const {
  return ThreadPool::part(st.n, pool_.size(), p, kPartAlign);
}

void OffloadedAdamW::gradient_complete(std::size_t k) {
  if (armed_) fetch(k, /*release=*/true);
}

void OffloadedAdamW::backward_ends(bool last_micro_batch) {
  armed_ = false;
  if (!last_micro_batch) return;
  // Storages outside blocks get their gradients until the backward's end.
  for (std::size_t k = 0; k < storages_.size(); ++k)
    if (storages_[k].fetched_version != storages_[k].s->gradient_version()) fetch(k, /*release=*/true);
  while (!in_flight_.empty()) {
    release(in_flight_.front());
    in_flight_.pop_front();
  }
}

void OffloadedAdamW::release(std::size_t k) {
  Storage& st = storages_[k];
  if (st.fetched_version != st.s->gradient_version()) return;  // written again since: keep it
  st.s->release_gradient(st.fetched);
  st.fetched_version = st.s->gradient_version();  // what the exchange buffer holds is still current
}

Tensor OffloadedAdamW::gradient_sum_squares(std::vector<Tensor>& tensors) {
  // Sums taken before the gradients went back, in f64 like global_sum_squares' own partial sums;
  // the gradients still on the device are summed by the caller.
  std::vector<Tensor> taken;
  for (Storage& st : storages_) {
    if (st.sum_squares.defined() && st.fetched_version == st.s->gradient_version())
      taken.push_back(st.sum_squares);
    else
      for (auto& part : st.s->norm_parts(st.s->grad_shard())) tensors.push_back(part);
  }
  return taken.empty() ? Tensor() : sum_in_f64(taken);
}

void OffloadedAdamW::fetch(std::size_t k, bool release_after) {
  wait_prepared(k);
  Storage& st = storages_[k];
  ShardedStorage& s = *st.s;
  if (st.write_back_pending) write_back(k);  // the exchange buffer holds values still to go out
  const Event ready = s.gradient_ready();
  to_host_.wait(ready);
  to_host_.wait(st.written);
  {
    timeline::Span span(to_host_, "to host", s.name());
    memory::copy_to_host_async(st.exchange.get(), s.grad_shard().data(), st.exchange_bytes(), to_host_);
  }
  st.fetched = to_host_.record();
  st.fetched_version = s.gradient_version();
  s.gradient_read(st.fetched);
  st.sum_squares = Tensor();
  if (!release_after) return;
  context().compute_stream().wait(ready);
  st.sum_squares = global_sum_squares(s.norm_parts(s.grad_shard()));
  in_flight_.push_back(k);
  while (in_flight_.size() > kGradientsInFlight) {
    release(in_flight_.front());
    in_flight_.pop_front();
  }
}

void OffloadedAdamW::write_back(std::size_t k) {
  Storage& st = storages_[k];
  ShardedStorage& s = *st.s;
  Stream& compute = context().compute_stream();
  to_device_.wait(st.updated);
  // Every read of the values queued so far (this step's gathers, with a delayed update) comes first.
  to_device_.wait(compute.record());
  {
    timeline::Span span(to_device_, "to device", s.name());
    char* values = static_cast<char*>(s.shard().data());
    const char* exchange = static_cast<const char*>(st.exchange.get());
    const std::size_t es = dtype_size(s.dtype());
    if (es == sizeof(float)) {  // the values lie where the gradient did
      memory::copy_from_host_async(values, exchange, st.exchange_bytes(), to_device_);
    } else {  // each part's values packed at the start of the part's gradient
      for (int p = 0; p < pool_.size(); ++p) {
        const auto [b, e] = part(st, p);
        if (e > b)
          memory::copy_from_host_async(values + static_cast<std::size_t>(b) * es,
                                       exchange + static_cast<std::size_t>(b) * sizeof(float),
                                       static_cast<std::size_t>(e - b) * es, to_device_);
      }
    }
  }
  st.written = to_device_.record();
  st.write_back_pending = false;
  s.values_written(st.written);
}

void OffloadedAdamW::update(std::size_t k, float grad_scale, float lr, float bias1, float bias2) {
  Storage& st = storages_[k];
  const DType dtype = st.s->dtype();
  const std::size_t es = dtype_size(dtype);
  char* exchange = static_cast<char*>(st.exchange.get());
  const float* g = static_cast<const float*>(st.exchange.get());
  float* w = st.w();
  char *m = static_cast<char*>(st.m.get()), *v = static_cast<char*>(st.v.get());
  const DType moments = options_.moments;
  const std::size_t ms = dtype_size(moments);
  pool_.run([&](int p) {
    const auto [b, e] = part(st, p);
    // The part's values go out packed from its first gradient on: element j at b * 4 + (j - b) * es,
    // at or before its own gradient, which has been read by then.
    auto out = [&](std::int64_t j) {
      return exchange + static_cast<std::size_t>(b) * sizeof(float) + static_cast<std::size_t>(j - b) * es;
    };
    std::int64_t i = b;
    if (grad_scale >= 0.0f) {  // negative: non-finite gradients, the step is skipped
      for (const auto& r : st.ranges) {
        const std::int64_t lo = std::max(i, r.begin), hi = std::min(e, r.end);
        if (lo >= hi) continue;
        if (lo > i) host_round(w + i, out(i), dtype, lo - i);
        const HostAdamWStep step{lr,    grad_scale, options_.beta1, options_.beta2, options_.eps,
                                 bias1, bias2,      r.weight_decay};
        const auto at = static_cast<std::size_t>(lo) * ms;
        host_adamw_update(g + lo, w + lo, m + at, v + at, moments, out(lo), dtype, hi - lo, step);
        i = hi;
      }
    }
    if (i < e) host_round(w + i, out(i), dtype, e - i);
  });
}

void OffloadedAdamW::step(float lr, const GradScale& scale, float bias1, float bias2) {
  Stream& compute = context().compute_stream();
  // Gradients not copied out during a backward (a step outside OptimManager's) are copied now, and
  // given back once copied: the step consumes them, as on the device.
  for (std::size_t k = 0; k < storages_.size(); ++k)
    if (storages_[k].fetched_version != storages_[k].s->gradient_version()) {
      fetch(k, /*release=*/false);
      release(k);
    }
  // A scale decided on the device comes to the host on the update stream, once the compute stream
  // has it: the updates read it there, and nothing waits on the host.
  const bool on_device = scale.device.defined();
  if (on_device) {
    updates_.wait(compute.record());
    memory::copy_to_host_async(scale_host_->data(), scale.device.data(), sizeof(float), updates_);
    scales_in_flight_.emplace_back(scale.device, updates_.record());
  }
  const float value = scale.value;
  for (std::size_t k = 0; k < storages_.size(); ++k) {
    Storage& st = storages_[k];
    updates_.wait(st.fetched);
    {
      timeline::Span span(updates_, "host update", st.s->name());
      updates_.launch_host([this, k, on_device, value, lr, bias1, bias2] {
        float grad_scale = value;
        if (on_device) std::memcpy(&grad_scale, scale_host_->data(), sizeof grad_scale);
        update(k, grad_scale, lr, bias1, bias2);
      });
    }
    st.updated = updates_.record();
    if (options_.delayed_update)
      st.write_back_pending = true;
    else
      write_back(k);
  }
  scales_in_flight_.erase(std::remove_if(scales_in_flight_.begin(), scales_in_flight_.end(),
                                         [](const auto& s) { return s.second.query(); }),
                          scales_in_flight_.end());
}

void OffloadedAdamW::flush() {
  for (std::size_t k = 0; k < storages_.size(); ++k)
    if (storages_[k].write_back_pending) write_back(k);
  to_host_.synchronize();
  updates_.synchronize();
  to_device_.synchronize();
  scales_in_flight_.clear();
}

std::vector<std::pair<std::string, Tensor>> OffloadedAdamW::state_of(std::size_t k) {
  wait_prepared(k);
  flush();
  const Storage& st = storages_[k];
  const Shape shape{st.n};
  return {{"master", Tensor::from_host(st.master.get(), shape, DType::f32)},
          {"exp_avg", Tensor::from_host(st.m.get(), shape, options_.moments)},
          {"exp_avg_sq", Tensor::from_host(st.v.get(), shape, options_.moments)}};
}

void OffloadedAdamW::load_state(std::size_t k, const std::string& name, const std::vector<float>& values) {
  wait_prepared(k);
  flush();
  Storage& st = storages_[k];
  BMT_REQUIRE(values.size() == static_cast<std::size_t>(st.n),
              "AdamW::load_state: expected " << st.n << " values for '" << st.s->name() << "', found " << values.size());
  const bool master = name == "master";
  void* target = master ? st.master.get() : name == "exp_avg" ? st.m.get() : name == "exp_avg_sq" ? st.v.get() : nullptr;
  BMT_REQUIRE(target, "AdamW::load_state: unknown state '" << name << "': expected master, exp_avg or exp_avg_sq");
  // Moments held in bf16 take f32 values rounded to nearest even, as the update stores them.
  host_round(values.data(), target, master ? DType::f32 : options_.moments, st.n);
  if (master) copy_into(st.s->shard(), Tensor::from_floats(values, {st.n}, DType::f32));
}

}  // namespace bmt::optim::detail
