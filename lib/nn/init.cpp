#include "bmtrain/nn/init.hpp"

#include <vector>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/nn/part_map.hpp"
#include "part_index.hpp"

namespace bmt::init {

namespace {

using namespace kernels;

// Fills part elements [first, first + n) with gen(key, whole index) in the parameter's dtype.
template <class Gen>
void fill_generated(const Tensor& out, std::int64_t first, const PartMap& map, std::uint64_t key, Gen gen) {
  if (out.numel() == 0) return;
  BMT_DISPATCH_FLOAT(out.dtype(), "init", T, {
    auto v = view1<T>(out, "init");
    Kokkos::parallel_for(
        "bmt::init", Kokkos::RangePolicy<ExecSpace>(space(), 0, v.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
          const std::int64_t whole = detail::whole_index(map, first + static_cast<std::int64_t>(i));
          v(i) = from_f32<T>(gen(key, static_cast<std::uint64_t>(whole)));
        });
  });
}

struct NormalGen {
  float mean, std;
  KOKKOS_INLINE_FUNCTION float operator()(std::uint64_t key, std::uint64_t i) const {
    return mean + std * random::normal(key, i);
  }
};

struct UniformGen {
  float low, high;
  KOKKOS_INLINE_FUNCTION float operator()(std::uint64_t key, std::uint64_t i) const {
    return low + (high - low) * random::uniform(key, i);
  }
};

}  // namespace

Fn zeros() { return constant(0.0f); }
Fn ones() { return constant(1.0f); }

Fn constant(float value) {
  return [value](const Tensor& out, std::int64_t, const PartMap&, std::uint64_t) { fill_(out, value); };
}

Fn normal(float mean, float std) {
  BMT_REQUIRE(std >= 0.0f, "init::normal: expected a non-negative std, found " << std);
  return [mean, std](const Tensor& out, std::int64_t first, const PartMap& map, std::uint64_t key) {
    fill_generated(out, first, map, key, NormalGen{mean, std});
  };
}

Fn uniform(float low, float high) {
  BMT_REQUIRE(low <= high, "init::uniform: expected low <= high, found [" << low << ", " << high << ")");
  return [low, high](const Tensor& out, std::int64_t first, const PartMap& map, std::uint64_t key) {
    fill_generated(out, first, map, key, UniformGen{low, high});
  };
}

Fn from_function(std::function<float(std::int64_t)> value) {
  return [value = std::move(value)](const Tensor& out, std::int64_t first, const PartMap& map, std::uint64_t) {
    std::vector<float> host(static_cast<std::size_t>(out.numel()));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = value(map.whole_index(first + static_cast<std::int64_t>(i)));
    copy_into(out, Tensor::from_floats(host, out.shape(), DType::f32));
  };
}

}  // namespace bmt::init
