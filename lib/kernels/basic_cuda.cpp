// CUDA side of fill, cast/copy with scaling and in-place accumulation (basic.cpp) on contiguous
// tensors: grid-stride loops over packs of 16 bytes of the narrower dtype (8 elements when either
// side is bf16/f16, 4 for f32 to f32).
#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;

template <class T>
struct FillF {
  T* o;
  float value;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float v[M];
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] = value;
    store<M>(o + i, v);
  }
};

// dst = alpha * src, or dst += alpha * src; dst may be src (scale_).
template <class D, class S>
struct CopyF {
  D* dst;
  const S* src;
  float alpha;
  bool accumulate;
  template <int M>
  __device__ __forceinline__ void apply(std::int64_t i) const {
    float v[M];
    load<M>(src + i, v);
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] *= alpha;
    if (accumulate) {
      float d[M];
      load<M>(dst + i, d);
#pragma unroll
      for (int k = 0; k < M; ++k) v[k] = d[k] + v[k];
    }
    store<M>(dst + i, v);
  }
};

template <class D, class S>
void copy_typed(const Tensor& dst, const Tensor& src, float alpha, bool accumulate) {
  constexpr int N = static_cast<int>(16 / (sizeof(D) < sizeof(S) ? sizeof(D) : sizeof(S)));
  const CopyF<D, S> f{static_cast<D*>(dst.data()), static_cast<const S*>(src.data()), alpha, accumulate};
  const bool vector = aligned(f.dst, pack_align<N, D>()) && aligned(f.src, pack_align<N, S>());
  launch_apply<N>(dst.numel(), vector, f);
}

}  // namespace

bool fill(const Tensor& t, float value) {
  if (!available() || !t.is_contiguous()) return false;
  BMT_DISPATCH_FLOAT(t.dtype(), "fill_", T, {
    const FillF<T> f{static_cast<T*>(t.data()), value};
    launch_apply<vec_of<T>()>(t.numel(), aligned(f.o, 16), f);
  });
  return true;
}

bool copy(const Tensor& dst, const Tensor& src, float alpha, bool accumulate) {
  if (!available() || !dst.is_contiguous() || !src.is_contiguous() || dst.numel() != src.numel()) return false;
  BMT_DISPATCH_FLOAT(dst.dtype(), "copy_into", D, {
    BMT_DISPATCH_FLOAT(src.dtype(), "copy_into", S, { copy_typed<D, S>(dst, src, alpha, accumulate); });
  });
  return true;
}

}  // namespace bmt::kernels::seam
