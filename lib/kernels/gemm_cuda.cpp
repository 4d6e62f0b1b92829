// CUDA side of the GEMM seam: cuBLASLt with f32 compute for f32, bf16 and f16 operands.
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so B is cuBLASLt's first
// operand and A its second, each with its own transpose flag; no data moves. One handle and one
// workspace serve every call; the matmul descriptor, layouts and the chosen algorithm are cached per
// problem (shape, layout, dtype, pointer alignment, epilogue), so a training step's repeated shapes
// pay for the heuristic query once. Calls are queued on the compute stream. The bias, the GELU and
// its backward are cuBLASLt epilogues (BIAS; GELU, GELU_BIAS and their AUX forms, which also write
// the pre-activation; DGELU). Where cuBLASLt has no GELU or DGELU kernel for a problem (it declines
// some widths and alignments), the GEMM runs without it and the GELU or its derivative follows as
// an elementwise pass over the rounded product.
//
// FP8 products (gemm_float8) are cuBLASLt's FP8 matmul: e4m3/e5m2 operands with the reduced
// dimension contiguous in both (in cuBLASLt's column-major terms its first operand transposed,
// its second not: "TN", the only FP8 layout on Hopper), each dequantized by its scale pointer,
// f32 accumulation, a bf16/f16/f32 D. Fast accumulation is off unless a product asks for it: the
// tensor cores' partial sums are then promoted to f32 as the product goes along the reduced
// dimension, rather than kept at their own precision to the end. Problems it has
// no kernel for (k or n not a multiple of 16, rows of C or operands not 16-byte aligned, a device
// without FP8) take the widened f32 product, as does a problem cuBLASLt declines at the call (with a
// warning, once).
//
// BMT_GEMM_AUTOTUNE=1: a large problem's first call times cuBLASLt's top candidates on its own
// operands and keeps the fastest, instead of taking the heuristic's first (slower at some of
// GPT-2 XL's shapes: bench_kernels' LinearForwardBackward with and without it). The timing waits on the host once per new problem, in the
// first step; and as the choice depends on timing, two runs may use different kernels and differ
// in the last bits, which is why it is off unless asked for.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/runtime/environment.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "bmtrain/tensor/tensor.hpp"
#include "memory_bound_seam.hpp"
#include "gemm_check.hpp"
#include "gemm_float8.hpp"

namespace bmt::kernels {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;  // what cuBLAS suggests for Hopper
constexpr std::size_t kMaxPlans = 4096;
constexpr int kTuneCandidates = 8;
constexpr int kTuneRepeats = 3;              // timed calls per candidate, after one untimed
constexpr double kTuneMinFlops = 1 << 30;    // smaller problems keep the heuristic's choice

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
  }
}

// Largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by alignment.
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align) align /= 2;
  return align;
}

// Tells the heuristic the operands' actual alignments (our A, B and C): it otherwise assumes 256
// bytes and may pick a kernel that cublasLtMatmul then refuses (CUBLAS_STATUS_NOT_SUPPORTED) for
// operands aligned less. cuBLASLt's A is our B and its B is our A.
void set_min_alignments(cublasLtMatmulPreference_t pref, std::int64_t align_a, std::int64_t align_b,
                        std::int64_t align_c) {
  const std::uint32_t aligns[4] = {static_cast<std::uint32_t>(align_b), static_cast<std::uint32_t>(align_a),
                                   static_cast<std::uint32_t>(align_c), static_cast<std::uint32_t>(align_c)};
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    BMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof aligns[i]));
}

// Everything that selects a plan. All fields are 64-bit, so the struct has no padding and compares
// and hashes as bytes.
struct PlanKey {
  std::int64_t dtype, trans_a, trans_b, bias;
  std::int64_t m, n, k, batch, lda, ldb, ldc, sa, sb, sc;
  std::int64_t align_a, align_b, align_c, align_bias;
  std::int64_t f32_output, gelu_backward, align_gelu;
  std::int64_t gelu_forward, gelu_pre, align_pre;

  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }
};
static_assert(sizeof(PlanKey) == 24 * sizeof(std::int64_t), "PlanKey must have no padding");

// Everything that selects an FP8 plan; all 64-bit, so it compares and hashes as bytes.
struct Float8Key {
  std::int64_t m, n, k, ldc, a_dtype, b_dtype, c_dtype, accumulate, bias, fast_accumulation;
  std::int64_t align_a, align_b, align_c, align_bias;

  bool operator==(const Float8Key& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }
};
static_assert(sizeof(Float8Key) == 14 * sizeof(std::int64_t), "Float8Key must have no padding");

template <class Key>
struct BytesHash {
  std::size_t operator()(const Key& k) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&k);
    std::size_t h = 1469598103934665603ull;  // FNV-1a
    for (std::size_t i = 0; i < sizeof k; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
  }
};

// Descriptors and the algorithm for one problem.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // The heuristic's candidates, best first, while the plan waits to be timed on real operands.
  std::vector<cublasLtMatmulAlgo_t> candidates;
  bool gelu_after = false;  // a GELU or GELU-backward problem without its epilogue: a pass follows

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (out) cublasLtMatrixLayoutDestroy(out);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// A column-major layout for a row-major stored matrix [rows, cols] (batched when batch > 1).
cublasLtMatrixLayout_t make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                   std::int64_t batch, std::int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  BMT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(cols),
                                              static_cast<std::uint64_t>(rows), ld));
  if (batch > 1) {
    const std::int32_t count = static_cast<std::int32_t>(batch);
    BMT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof count));
    BMT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                      &batch_stride, sizeof batch_stride));
  }
  return layout;
}

class LtSession {
 public:
  LtSession() {
    BMT_CUBLAS_CHECK(cublasLtCreate(&handle_));
    BMT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  }
  ~LtSession() {
    plans_.clear();
    float8_plans_.clear();
    cudaFree(workspace_);  // waits for queued work that still uses it
    cublasLtDestroy(handle_);
  }

  void run(const GemmParams& p) {
    const PlanKey key = key_of(p);
    // Held through the call: the bias and GELU-input pointers are set on the plan's shared descriptor.
    std::lock_guard<std::mutex> lock(mutex_);
    Plan& plan = plan_for(key);
    if (p.bias)
      BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                                      sizeof p.bias));
    const void* aux = p.gelu_input ? p.gelu_input : p.gelu_pre;
    if (aux && !plan.gelu_after)
      BMT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    if (!plan.candidates.empty()) tune(plan, key, p);
    // A GELU that follows the GEMM reads the product from where its input is to be kept.
    void* product = plan.gelu_after && p.gelu_pre ? p.gelu_pre : p.c;
    BMT_CUBLAS_CHECK(matmul(plan, p, product, plan.algo));
    if (plan.gelu_after && p.gelu_output) gelu_after_gemm(p, product);
    if (plan.gelu_after && p.gelu_input) gelu_backward_in_place(p);
  }

  void run_float8(const Float8GemmParams& p) {
    std::unique_lock<std::mutex> lock(mutex_);  // held through the call: the scale pointers are set on the plan
    Plan* plan = float8_plan_for(p);
    if (!plan) {
      lock.unlock();
      gemm_float8_widened(p);
      return;
    }
    // cuBLASLt's A is our B and its B our A (the file comment), so are their scales.
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.b_scale,
                                                    sizeof p.b_scale));
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.a_scale,
                                                    sizeof p.a_scale));
    if (p.bias)
      BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                                      sizeof p.bias));
    const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
    const cublasStatus_t status =
        cublasLtMatmul(handle_, plan->desc, &alpha, p.b, plan->first, p.a, plan->second, &beta, p.c, plan->out, p.c,
                       plan->out, &plan->algo, workspace_, kWorkspaceBytes, context().compute_stream().native());
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
      // cuBLASLt may decline at the call a problem its heuristic gave a kernel for: the problem
      // takes the widened product from now on, and the run says so once, with what was asked.
      warn("gemm: cuBLASLt declined an FP8 product its heuristic chose a kernel for (", describe_float8(p),
           "); products of this shape and placement run as widened f32 products from now on, far slower");
      float8_plans_[float8_key(p)] = nullptr;
      lock.unlock();
      gemm_float8_widened(p);
      return;
    }
    BMT_CUBLAS_CHECK(status);
  }

  bool float8_on_tensor_cores(const Float8GemmParams& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return float8_plan_for(p) != nullptr;
  }

  bool gelu_in_epilogue(const GemmParams& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return !plan_for(key_of(p)).gelu_after;
  }

 private:
  static PlanKey key_of(const GemmParams& p) {
    PlanKey key{};
    key.dtype = static_cast<std::int64_t>(p.dtype);
    key.trans_a = p.a.trans;
    key.trans_b = p.b.trans;
    key.bias = p.bias != nullptr;
    key.m = p.m, key.n = p.n, key.k = p.k, key.batch = p.batch;
    key.lda = p.a.ld, key.ldb = p.b.ld, key.ldc = p.ldc;
    key.sa = p.batch > 1 ? p.a.batch_stride : 0;
    key.sb = p.batch > 1 ? p.b.batch_stride : 0;
    key.sc = p.batch > 1 ? p.c_batch_stride : 0;
    key.align_a = alignment(p.a.data);
    key.align_b = alignment(p.b.data);
    key.align_c = alignment(p.c);
    key.align_bias = p.bias ? alignment(p.bias) : 0;
    key.f32_output = p.f32_output;
    key.gelu_backward = p.gelu_input != nullptr;
    key.align_gelu = p.gelu_input ? alignment(p.gelu_input) : 0;
    key.gelu_forward = p.gelu_output;
    key.gelu_pre = p.gelu_pre != nullptr;
    key.align_pre = p.gelu_pre ? alignment(p.gelu_pre) : 0;
    return key;
  }

  // The cached plan for key, made on first use; the caller holds mutex_.
  Plan& plan_for(const PlanKey& key) {
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans) plans_.clear();  // many distinct shapes: start over
      it = plans_.emplace(key, make_plan(key)).first;
    }
    return *it->second;
  }

  // C = gelu(product) over the [m, n] product (contiguous rows: ldc == n).
  static void gelu_after_gemm(const GemmParams& p, void* product) {
    BMT_REQUIRE(p.ldc == p.n, "gemm: the GELU after a GEMM without the GELU epilogue needs contiguous rows, found ldc="
                                  << p.ldc << " for n=" << p.n);
    const Tensor c = Tensor::wrap(p.c, {p.m, p.n}, p.dtype);
    const Tensor x = Tensor::wrap(product, {p.m, p.n}, p.dtype);
    BMT_REQUIRE(seam::activation_forward(Activation::gelu, c, x), "gemm: no GELU kernel for " << dtype_name(p.dtype));
  }

  // C = C * gelu'(X) over the [m, n] product (contiguous rows: ldc == n).
  static void gelu_backward_in_place(const GemmParams& p) {
    BMT_REQUIRE(p.ldc == p.n, "gemm: the GELU backward after a GEMM without the DGELU epilogue needs contiguous "
                              "rows, found ldc=" << p.ldc << " for n=" << p.n);
    const Tensor c = Tensor::wrap(p.c, {p.m, p.n}, p.dtype);
    const Tensor x = Tensor::wrap(const_cast<void*>(p.gelu_input), {p.m, p.n}, p.dtype);
    BMT_REQUIRE(seam::activation_backward(Activation::gelu, c, x, c), "gemm: no GELU-backward kernel for "
                                                                           << dtype_name(p.dtype));
  }

  // First operand B, second A: see the file comment. D = C = out.
  cublasStatus_t matmul(const Plan& plan, const GemmParams& p, void* out, const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle_, plan.desc, &p.alpha, p.b.data, plan.first, p.a.data, plan.second, &p.beta, out,
                          plan.out, out, plan.out, &algo, workspace_, kWorkspaceBytes,
                          context().compute_stream().native());
  }

  // Times each candidate on p's operands and keeps the fastest. With beta = 0 the trials write p's
  // output, which the real call then overwrites; otherwise they add into a copy of it, so that
  // what p accumulates into is left as it was.
  void tune(Plan& plan, const PlanKey& key, const GemmParams& p) {
    std::vector<cublasLtMatmulAlgo_t> candidates;
    candidates.swap(plan.candidates);
    Stream& stream = context().compute_stream();
    void* out = p.c;
    Tensor copy;
    if (p.beta != 0.0f) {
      const DType type = key.f32_output ? DType::f32 : static_cast<DType>(key.dtype);
      // Column-major [n, m] with leading dimension ldc, batch after batch.
      const std::int64_t elements = (key.batch - 1) * key.sc + (key.m - 1) * key.ldc + key.n;
      const std::size_t bytes = static_cast<std::size_t>(elements) * dtype_size(type);
      copy = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);
      BMT_CUDA_CHECK(cudaMemcpyAsync(copy.data(), p.c, bytes, cudaMemcpyDeviceToDevice, stream.native()));
      out = copy.data();
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    BMT_CUDA_CHECK(cudaEventCreate(&start));
    BMT_CUDA_CHECK(cudaEventCreate(&stop));
    float best = -1.0f;
    for (const cublasLtMatmulAlgo_t& algo : candidates) {
      if (matmul(plan, p, out, algo) != CUBLAS_STATUS_SUCCESS) continue;  // not for these operands
      BMT_CUDA_CHECK(cudaEventRecord(start, stream.native()));
      bool ran = true;
      for (int r = 0; r < kTuneRepeats && ran; ++r) ran = matmul(plan, p, out, algo) == CUBLAS_STATUS_SUCCESS;
      BMT_CUDA_CHECK(cudaEventRecord(stop, stream.native()));
      BMT_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      BMT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (ran && (best < 0.0f || ms < best)) {
        best = ms;
        plan.algo = algo;
      }
    }
    cudaEventDestroy(stop);
    cudaEventDestroy(start);
  }

  static cublasLtEpilogue_t epilogue_of(const PlanKey& key) {
    if (key.gelu_backward) return CUBLASLT_EPILOGUE_DGELU;  // D = (A B) * gelu'(aux)
    if (key.gelu_forward) {
      if (key.gelu_pre) return key.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return key.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    }
    return key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }

  static void set_epilogue(Plan& plan, cublasLtEpilogue_t epilogue) {
    BMT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  }

  static Float8Key float8_key(const Float8GemmParams& p) {
    Float8Key key{};
    key.m = p.m, key.n = p.n, key.k = p.k, key.ldc = p.ldc;
    key.a_dtype = static_cast<std::int64_t>(p.a_dtype);
    key.b_dtype = static_cast<std::int64_t>(p.b_dtype);
    key.c_dtype = static_cast<std::int64_t>(p.c_dtype);
    key.accumulate = p.accumulate;
    key.bias = p.bias != nullptr;
    key.fast_accumulation = p.fast_accumulation;
    key.align_a = alignment(p.a);
    key.align_b = alignment(p.b);
    key.align_c = alignment(p.c);
    key.align_bias = p.bias ? alignment(p.bias) : 0;
    return key;
  }

  // An FP8 product's shape, formats and placement, for a message.
  static std::string describe_float8(const Float8GemmParams& p) {
    std::ostringstream os;
    os << "m=" << p.m << " n=" << p.n << " k=" << p.k << " ldc=" << p.ldc << ", " << dtype_name(p.a_dtype) << " x "
       << dtype_name(p.b_dtype) << " -> " << dtype_name(p.c_dtype) << (p.accumulate ? " added" : "")
       << (p.bias ? " with bias" : "") << (p.fast_accumulation ? ", fast accumulation" : "") << ", alignments a "
       << alignment(p.a) << " b " << alignment(p.b) << " c " << alignment(p.c) << " scales " << alignment(p.a_scale)
       << " " << alignment(p.b_scale);
    if (p.bias) os << " bias " << alignment(p.bias);
    return os.str();
  }

  // The cached FP8 plan for p's problem, made on first use, or null where cuBLASLt has none; the
  // caller holds mutex_.
  Plan* float8_plan_for(const Float8GemmParams& p) {
    const Float8Key key = float8_key(p);
    auto it = float8_plans_.find(key);
    if (it == float8_plans_.end()) {
      if (float8_plans_.size() >= kMaxPlans) float8_plans_.clear();
      it = float8_plans_.emplace(key, make_float8_plan(key)).first;
    }
    return it->second.get();
  }

  // The FP8 plan for key, or null where cuBLASLt has no FP8 kernel for it. Its operands are
  // row-major [n, k] (our B, cuBLASLt's A, transposed) and [m, k] (our A, cuBLASLt's B).
  std::unique_ptr<Plan> make_float8_plan(const Float8Key& key) {
    const std::int64_t c_bytes = static_cast<std::int64_t>(dtype_size(static_cast<DType>(key.c_dtype)));
    if (key.k % 16 != 0 || key.n % 16 != 0 || key.align_a < 16 || key.align_b < 16 || key.align_c < 16 ||
        (key.ldc * c_bytes) % 16 != 0 || (key.bias && key.align_bias < 16))
      return nullptr;
    auto plan = std::make_unique<Plan>();
    BMT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = CUBLAS_OP_T, op_second = CUBLAS_OP_N;
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                    sizeof op_first));
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                    sizeof op_second));
    const std::int8_t fast_accumulation = key.fast_accumulation ? 1 : 0;
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                                    sizeof fast_accumulation));
    if (key.bias) {  // along each row-major row of C, in C's dtype (bf16/f16)
      const cudaDataType_t bias_type = cuda_type(static_cast<DType>(key.c_dtype));
      BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                      sizeof bias_type));
      set_epilogue(*plan, CUBLASLT_EPILOGUE_BIAS);
    }
    plan->first = make_layout(cuda_type(static_cast<DType>(key.b_dtype)), key.n, key.k, key.k, 1, 0);
    plan->second = make_layout(cuda_type(static_cast<DType>(key.a_dtype)), key.m, key.k, key.k, 1, 0);
    plan->out = make_layout(cuda_type(static_cast<DType>(key.c_dtype)), key.m, key.n, key.ldc, 1, 0);
    cublasLtMatmulPreference_t pref = nullptr;
    BMT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t workspace = kWorkspaceBytes;
    BMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                          sizeof workspace));
    set_min_alignments(pref, key.align_a, key.align_b, key.align_c);
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second,
                                                                 plan->out, plan->out, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return nullptr;  // e.g. not a Hopper (or later) device
    plan->algo = result.algo;
    return plan;
  }

  std::unique_ptr<Plan> make_plan(const PlanKey& key) {
    auto plan = std::make_unique<Plan>();
    const DType dtype = static_cast<DType>(key.dtype);
    const cudaDataType_t type = cuda_type(dtype);
    BMT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                    sizeof op_first));
    BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                    sizeof op_second));
    if (key.bias) {
      // Column-major D is [n, m]: the bias runs along its n rows, i.e. along each row-major row.
      BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                                      sizeof type));
    }
    set_epilogue(*plan, epilogue_of(key));
    if (key.gelu_backward || key.gelu_pre) {
      // DGELU reads aux, the GELU_AUX forms write it: laid out like D (its data type is D's by default).
      const std::int64_t aux_ld = key.ldc;
      BMT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                      sizeof aux_ld));
    }
    // Stored shapes (row-major): B is [k, n] or, transposed, [n, k]; A is [m, k] or [k, m].
    plan->first = make_layout(type, key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb, key.batch,
                              key.sb);
    plan->second = make_layout(type, key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda, key.batch,
                               key.sa);
    plan->out = make_layout(key.f32_output ? CUDA_R_32F : type, key.m, key.n, key.ldc, key.batch, key.sc);

    cublasLtMatmulPreference_t pref = nullptr;
    BMT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::uint64_t workspace = kWorkspaceBytes;
    BMT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                          sizeof workspace));
    set_min_alignments(pref, key.align_a, key.align_b, key.align_c);
    const double flops = 2.0 * static_cast<double>(key.m) * key.n * key.k * key.batch;
    const bool tune = gemm_autotune() && flops >= kTuneMinFlops;
    cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
    int found = 0;
    const auto query = [&] {
      BMT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->first, plan->second, plan->out,
                                                      plan->out, pref, tune ? kTuneCandidates : 1, results, &found));
    };
    // cuBLASLt's GELU epilogue is less exact than bmt::gelu (CUDA 13.0 on an H200): in f32 up to
    // 4e-5 off at outputs near 0.01 (bmt::gelu: about an ulp); in bf16/f16 within three roundings
    // of the output where C's rows are whole 16-byte units, but several times further off where
    // they are not (2% of small f16 outputs). f32, the dtype for exact results, and such rows take
    // the pass.
    const std::int64_t row_bytes = key.n * static_cast<std::int64_t>(dtype_size(dtype));
    const bool exact_gelu = key.gelu_forward && (dtype == DType::f32 || row_bytes % 16 != 0 ||
                                                 key.ldc * static_cast<std::int64_t>(dtype_size(dtype)) % 16 != 0 ||
                                                 key.align_c < 16 || (key.gelu_pre && key.align_pre < 16));
    if (!exact_gelu) query();
    if (found == 0 && (key.gelu_backward || key.gelu_forward)) {
      set_epilogue(*plan, key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
      plan->gelu_after = true;
      query();
    }
    cublasLtMatmulPreferenceDestroy(pref);
    const std::string epilogue = std::string(key.bias ? ", bias" : "") + (key.gelu_forward ? ", GELU" : "") +
                                 (key.gelu_backward ? ", GELU backward" : "");
    BMT_REQUIRE(found > 0, "gemm: cuBLASLt has no algorithm for " << dtype_name(dtype) << " m=" << key.m
                                                                 << " n=" << key.n << " k=" << key.k
                                                                 << " batch=" << key.batch << " lda=" << key.lda
                                                                 << " ldb=" << key.ldb << " ldc=" << key.ldc
                                                                 << epilogue);
    plan->algo = results[0].algo;
    if (found > 1)
      for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
    return plan;
  }

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::mutex mutex_;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, BytesHash<PlanKey>> plans_;
  // FP8 plans; a null plan: cuBLASLt has no kernel for the problem, the widened product runs.
  std::unordered_map<Float8Key, std::unique_ptr<Plan>, BytesHash<Float8Key>> float8_plans_;
};

std::unique_ptr<LtSession>& session_slot() {
  static std::unique_ptr<LtSession> session;
  return session;
}

LtSession& session() {
  static std::mutex init_mutex;
  std::lock_guard<std::mutex> lock(init_mutex);
  auto& slot = session_slot();
  if (!slot) {
    slot = std::make_unique<LtSession>();
    // Free the handle and workspace while the device is still up; a later init starts afresh.
    at_finalize([] { session_slot().reset(); });
  }
  return *slot;
}

}  // namespace

void gemm(const GemmParams& p) {
  check_gemm(p);
  session().run(p);
}

void gemm_float8(const Float8GemmParams& p) {
  check_gemm_float8(p);
  session().run_float8(p);
}

bool gemm_float8_on_tensor_cores(const Float8GemmParams& p) {
  check_gemm_float8(p);
  return session().float8_on_tensor_cores(p);
}

bool gemm_fuses_gelu(const GemmParams& p) {
  check_gemm(p);
  return session().gelu_in_epilogue(p);
}

bool gemm_autotune() { return environment().gemm_autotune; }

}  // namespace bmt::kernels
