// GEMM through cuBLASLt, plus a simple tiled fallback kernel.
//
// Row-major to column-major: a row-major [R, C] matrix is a column-major [C, R] one, so
// row-major out = op(a) op(b) is computed as column-major out^T = op(b)^T op(a)^T, i.e.
// cuBLASLt's A is our b and its B is our a, with m = N, n = M and the transposes kept.
// fp16 and bf16 use CUBLAS_COMPUTE_32F (fp32 accumulation) with fp32 alpha/beta. fp32
// uses CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores, fp32 accumulation) when the Gemm
// allows it (trident-train's default; --no-tf32 turns it off), else CUBLAS_COMPUTE_32F,
// whose results stay close to the CPU's sgemm (the GPU-vs-CPU tests use that). bf16 GEMMs
// may be kept from reducing split-K partial sums in bf16 (bf16_reduction_in_fp32). Both
// choices are fixed per Gemm, so the plan cache needs no key for them. `accumulate` is beta = 1.
// The bias goes through the BIAS epilogue when its dtype is the output's (cuBLASLt's
// requirement), otherwise through a separate row-bias add after the GEMM.
// The MLP's GELU (tanh approximation, as cuBLASLt's GELU epilogues compute it) goes
// through GELU_AUX(_BIAS) in the forward, which writes gelu(acc + bias) to the output and
// the pre-activation to the aux matrix, and through DGELU in the backward, which multiplies
// the GEMM result by gelu'(aux) (16-bit only: its derivative is too coarse for fp32). Both
// need one dtype for every matrix and an aux leading dimension that is a multiple of 8;
// otherwise run_gelu/run_dgelu return false and the backend runs the GEMM and the GELU
// kernel instead, as it always does for the exact (erf) GELU, which no epilogue computes.
// (The BGRADB epilogue, the bias gradient summed in the weight-gradient GEMM, was tried and
// removed: on an H200 it was slower than the GEMM and bias_backward, and its fp16 sums missed
// the CPU's by up to 0.03: kernels/cuda/PERFORMANCE.md, 2026-12-04.)
//
// TRIDENT_GEMM_AUTOTUNE=1 (opt-in): a plan made while it is set asks the heuristic for up to
// kTuneCandidates algorithms and, on its first call, times each on that call's operands
// (a warm-up and kTuneRuns runs; an accumulating call's output is saved before and restored
// after, so the call itself is unchanged) and keeps the fastest when it beats the
// heuristic's first choice by 3% or more (the noise of one timing; the first choice
// otherwise, so that runs agree unless the gain is real). The heuristic ranks by an estimate
// per shape; timing finds where it is off (FasterTransformer's and TensorRT-LLM's GEMM
// profilers do the same offline). Which algorithm wins may differ between runs and
// processes, and with it the summation order: results then differ by rounding.
//
// TRIDENT_GEMM_GEMV=1 (opt-in): products x W^T of at most kGemvMaxRows rows (decoding's) go
// to the GEMV kernel of cuda_gemv.cu instead, with their bias and GELU.
//
// The fallback kernel (16x16 shared-memory tiles, fp32 accumulation, any dtype mix) is
// used for combinations cuBLASLt does not take (mixed a/b dtypes, K = 0) or when its
// heuristic returns no algorithm for a shape.
#include <vector>

#include "kernels/cuda/cublaslt_loader.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"

namespace trident::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what Hopper's kernels like best
constexpr int kTile = 16;
constexpr int kTuneCandidates = 8;  // algorithms timed per shape (TRIDENT_GEMM_AUTOTUNE=1)
constexpr int kTuneRuns = 5;
constexpr double kTuneMargin = 0.97;  // another algorithm must take at most 97% of the first's time

__global__ void gemm_fallback_kernel(AnyPtr out, AnyPtr a, AnyPtr b, AnyPtr bias, bool has_bias, bool ta, bool tb,
                                     bool acc, int64_t M, int64_t N, int64_t K) {
  __shared__ float as[kTile][kTile + 1];
  __shared__ float bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = blockIdx.x * (int64_t)kTile + ty;  // rows on x: up to 2^31 blocks
  const int64_t col = blockIdx.y * (int64_t)kTile + tx;
  float sum = 0.f;
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    const int64_t ka = k0 + tx, kb = k0 + ty;
    as[ty][tx] = (row < M && ka < K) ? load_any(a, ta ? ka * M + row : row * K + ka) : 0.f;
    bs[ty][tx] = (kb < K && col < N) ? load_any(b, tb ? col * K + kb : kb * N + col) : 0.f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) sum += as[ty][kk] * bs[kk][tx];
    __syncthreads();
  }
  if (row < M && col < N) {
    const int64_t i = row * N + col;
    if (acc) sum += load_any(out, i);
    if (has_bias) sum += load_any(bias, col);
    store_any(out, i, sum);
  }
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: break;
  }
  throw InternalError(std::string("matmul: unsupported dtype ") + dtype_name(t));
}

// Largest power of two <= 256 that divides the address (what the algorithm may assume).
int64_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 256;
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a >>= 1;
  return a;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: the heuristic found nothing, use the fallback kernel
  Gemm::Epilogue epilogue = Gemm::Epilogue::kNone;
  // With autotuning: the heuristic's algorithms, its first choice first, until the first call
  // has timed them (then empty).
  std::vector<cublasLtMatmulAlgo_t> candidates;

  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(bool allow_tf32, bool bf16_reduction_in_fp32)
    : allow_tf32_(allow_tf32), bf16_reduction_in_fp32_(bf16_reduction_in_fp32) {
  load_cublaslt();  // a missing library is one error line, not an abort
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_bytes_ = kWorkspaceBytes;
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  plans_.clear();
  transient_plan_.reset();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

namespace {

// Epilogues that read the vector at CUBLASLT_MATMUL_DESC_BIAS_POINTER.
bool has_bias(Gemm::Epilogue e) {
  return e == Gemm::Epilogue::kBias || e == Gemm::Epilogue::kGeluAuxBias;
}
bool has_aux(Gemm::Epilogue e) {
  return e == Gemm::Epilogue::kGeluAux || e == Gemm::Epilogue::kGeluAuxBias || e == Gemm::Epilogue::kDGelu;
}
cublasLtEpilogue_t lt_epilogue(Gemm::Epilogue e) {
  switch (e) {
    case Gemm::Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Gemm::Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Gemm::Epilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case Gemm::Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Gemm::Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

// key: M, N, K, trans_a, trans_b, a/b dtype, out dtype, epilogue, align a, b, out, bias, aux,
// autotune
Gemm::Plan* Gemm::plan_for(const Key& key, const void* bias_ptr, const void* aux_ptr) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  const int64_t M = key[0], N = key[1], K = key[2];
  const bool ta = key[3] != 0, tb = key[4] != 0;
  const cudaDataType_t ab_type = cuda_type(static_cast<DType>(key[5]));
  const cudaDataType_t out_type = cuda_type(static_cast<DType>(key[6]));
  plan->epilogue = static_cast<Epilogue>(key[7]);

  const cublasComputeType_t compute =
      ab_type == CUDA_R_32F && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (plan->epilogue != Epilogue::kNone) {
    const cublasLtEpilogue_t epi = lt_epilogue(plan->epilogue);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  }
  // The heuristic reads the bias and aux pointers' alignment; any pointers of the same
  // alignment (part of the key) work with the chosen algorithm.
  if (has_bias(plan->epilogue))
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                sizeof(bias_ptr)));
  if (has_aux(plan->epilogue)) {
    // The aux matrix has the output's layout: column-major [N, M], leading dimension N.
    const int64_t ld = N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                                sizeof(aux_ptr)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  // Stored (column-major) dimensions of each operand.
  CUBLAS_CHECK(tb ? cublasLtMatrixLayoutCreate(&plan->a, ab_type, K, N, K)
                  : cublasLtMatrixLayoutCreate(&plan->a, ab_type, N, K, N));
  CUBLAS_CHECK(ta ? cublasLtMatrixLayoutCreate(&plan->b, ab_type, M, K, M)
                  : cublasLtMatrixLayoutCreate(&plan->b, ab_type, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, out_type, N, M, N));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align_a = static_cast<uint32_t>(key[9]), align_b = static_cast<uint32_t>(key[8]);
  const uint32_t align_c = static_cast<uint32_t>(key[10]);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                    sizeof(align_a)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                    sizeof(align_b)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                    sizeof(align_c)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                    sizeof(align_c)));
  if (ab_type == CUDA_R_16BF && bf16_reduction_in_fp32_) {  // PyTorch's mask for this setting
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_NONE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof(schemes)));
  }
  const bool autotune = key[13] != 0;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                           pref, autotune ? kTuneCandidates : 1, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->candidates.push_back(results[i].algo);
  if (!plan->candidates.empty()) {
    plan->algo = plan->candidates[0];
    plan->usable = true;
  }
  if (plan->candidates.size() < 2) plan->candidates.clear();  // nothing to choose from
  // A failure that may pass (no memory for the heuristic's own use, an internal error) makes
  // this call fall back without deciding the shape for the rest of the run: the plan is
  // kept aside, unusable, and asked again next time. Only "no algorithm" is remembered.
  const bool transient = st == CUBLAS_STATUS_ALLOC_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR ||
                         st == CUBLAS_STATUS_EXECUTION_FAILED;
  if (transient) {
    transient_plan_ = std::move(plan);
    return transient_plan_.get();
  }
  Plan* p = plan.get();
  plans_.emplace(key, std::move(plan));
  return p;
}

// Whether a product goes to the small-M GEMV (cuda_gemv.cu) when it fits: x W^T with few
// rows, not accumulated, and TRIDENT_GEMM_GEMV=1 (opt-in until timed).
static bool small_m_gemv(int64_t M, bool trans_a, bool trans_b, bool accumulate, const char* op) {
  return !trans_a && trans_b && !accumulate && M <= kGemvMaxRows && env_switch("TRIDENT_GEMM_GEMV", op) == 1;
}

// M, N, K of out[M, N] = op(a)[M, K] op(b)[K, N], after checking the shapes.
static std::array<int64_t, 3> gemm_dims(const char* op, const Tensor& out, const Tensor& a, const Tensor& b,
                                        bool trans_a, bool trans_b) {
  TRIDENT_CHECK(is_float(a.dtype) && is_float(b.dtype) && is_float(out.dtype), op, ": float tensors expected");
  // Matrix views: all dims but the last are rows (a [B, T, C] activation is [B*T, C]).
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  TRIDENT_CHECK(K == Kb, op, ": inner dims differ: a ", a.shape.str(), (trans_a ? "^T" : ""), " b ", b.shape.str(),
                (trans_b ? "^T" : ""));
  TRIDENT_CHECK(out.rows() == M && out.cols() == N, op, ": out ", out.shape.str(), " for [", M, ", ", N, "]");
  return {M, N, K};
}

bool Gemm::try_lt(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, bool accumulate,
                  Epilogue epi, const Tensor& bias, const Tensor& aux, int64_t M, int64_t N, int64_t K,
                  cudaStream_t s) {
  const bool lt_types = a.dtype == b.dtype && (out.dtype == a.dtype || out.dtype == DType::F32);
  if (!lt_types || K == 0) return false;
  const bool autotune = env_switch("TRIDENT_GEMM_AUTOTUNE", "matmul") == 1;
  const Key key{M, N, K, trans_a, trans_b, static_cast<int64_t>(a.dtype), static_cast<int64_t>(out.dtype),
                static_cast<int64_t>(epi), alignment(a.data), alignment(b.data), alignment(out.data),
                has_bias(epi) ? alignment(bias.data) : 0, has_aux(epi) ? alignment(aux.data) : 0, autotune};
  std::lock_guard<std::mutex> lock(mu_);
  Plan* plan = plan_for(key, has_bias(epi) ? bias.data : nullptr, has_aux(epi) ? aux.data : nullptr);
  if (!plan->usable) return false;
  if (has_bias(epi)) {
    const void* bp = bias.data;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
  }
  if (has_aux(epi)) {
    const void* ap = aux.data;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof(ap)));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(handle_, plan->desc, &alpha, b.data, plan->a, a.data, plan->b, &beta, out.data, plan->c,
                          out.data, plan->c, &algo, workspace_, workspace_bytes_, s);
  };
  if (!plan->candidates.empty())
    choose_algorithm(*plan, matmul, accumulate ? out.data : nullptr, static_cast<size_t>(M * N) * dtype_size(out.dtype),
                     s);
  CUBLAS_CHECK(matmul(plan->algo));
  return true;
}

// TRIDENT_GEMM_AUTOTUNE's timing (the comment at the top), on the plan's first call.
void Gemm::choose_algorithm(Plan& plan, const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& matmul,
                            void* accumulated, size_t out_bytes, cudaStream_t s) {
  const std::vector<cublasLtMatmulAlgo_t> candidates = std::move(plan.candidates);
  plan.candidates.clear();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // no timing inside a graph: the first choice
  // The output the call accumulates onto, kept aside while the candidates add to it.
  void* saved = nullptr;
  if (accumulated != nullptr) {
    if (cudaMalloc(&saved, out_bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // no memory to spare: keep the first choice
      return;
    }
    CUDA_CHECK(cudaMemcpyAsync(saved, accumulated, out_bytes, cudaMemcpyDeviceToDevice, s));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(candidates.size(), -1.0f);  // -1: the algorithm failed
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (matmul(candidates[i]) != CUBLAS_STATUS_SUCCESS) continue;  // (the warm-up)
    CUDA_CHECK(cudaEventRecord(start, s));
    bool ok = true;
    for (int r = 0; r < kTuneRuns && ok; ++r) ok = matmul(candidates[i]) == CUBLAS_STATUS_SUCCESS;
    CUDA_CHECK(cudaEventRecord(stop, s));
    CUDA_CHECK(cudaEventSynchronize(stop));
    if (ok) CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (saved != nullptr) {
    CUDA_CHECK(cudaMemcpyAsync(accumulated, saved, out_bytes, cudaMemcpyDeviceToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(saved));
  }
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (ms[i] >= 0 && (ms[best] < 0 || ms[i] < ms[best])) best = i;
  if (best != 0 && ms[0] >= 0 && ms[best] > kTuneMargin * ms[0]) best = 0;
  if (ms[best] < 0) return;  // none ran: the first choice, whose own call reports the error
  plan.algo = candidates[best];
  ++tuned_plans_;
  if (best != 0) ++retuned_plans_;
}

void Gemm::run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
               bool accumulate, cudaStream_t s) {
  const char* op = "matmul";
  const auto [M, N, K] = gemm_dims(op, out, a, b, trans_a, trans_b);
  const bool with_bias = !bias.empty();
  if (with_bias)
    TRIDENT_CHECK(is_float(bias.dtype) && bias.numel() == N, op, ": bias ", bias.shape.str(), " for N=", N);
  if (M == 0 || N == 0) return;

  // The bias in cuBLASLt's epilogue: of the output's dtype and 16-byte aligned (a bias that is
  // a view at an odd offset may have no algorithm, or fail in one: cuBLASLt has no alignment
  // preference for it). Otherwise, or when the epilogue has no algorithm for the shape, the
  // plain GEMM and add_row_bias, rather than the fallback kernel.
  if (small_m_gemv(M, trans_a, trans_b, accumulate, op) && gemv_small_m(out, Tensor(), a, b, bias, s)) return;
  const bool bias_epilogue = with_bias && bias.dtype == out.dtype && alignment(bias.data) >= 16;
  if (bias_epilogue &&
      try_lt(out, a, b, trans_a, trans_b, accumulate, Epilogue::kBias, bias, Tensor(), M, N, K, s))
    return;
  if (try_lt(out, a, b, trans_a, trans_b, accumulate, Epilogue::kNone, bias, Tensor(), M, N, K, s)) {
    if (with_bias) add_row_bias(out, bias, s);
    return;
  }
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile), static_cast<unsigned>((N + kTile - 1) / kTile));
  TRIDENT_CHECK((N + kTile - 1) / kTile <= 65535, op, ": N=", N, " too large for the fallback kernel");
  ++fallback_launches_;
  gemm_fallback_kernel<<<grid, block, 0, s>>>(any_ptr(out), any_ptr(a), any_ptr(b), any_ptr(bias), with_bias, trans_a,
                                              trans_b, accumulate, M, N, K);
  CUDA_CHECK_LAUNCH();
}

// The epilogues need every matrix in one dtype (the 16-bit or the fp32 one), an aux leading
// dimension (N) that is a multiple of 8, and 16-byte aligned aux and bias vectors (as the
// plain bias epilogue, Gemm::run).
static bool gelu_epilogue_fits(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& aux,
                               const Tensor& bias, int64_t N) {
  if (a.dtype != out.dtype || b.dtype != out.dtype || aux.dtype != out.dtype) return false;
  if (!bias.empty() && (bias.dtype != out.dtype || alignment(bias.data) < 16)) return false;
  return N % 8 == 0 && alignment(aux.data) >= 16;
}

bool Gemm::run_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                    bool trans_a, bool trans_b, cudaStream_t s) {
  const char* op = "matmul_bias_gelu";
  const auto [M, N, K] = gemm_dims(op, out, a, b, trans_a, trans_b);
  TRIDENT_CHECK(pre.rows() == M && pre.cols() == N, op, ": pre ", pre.shape.str(), " for [", M, ", ", N, "]");
  if (!bias.empty())
    TRIDENT_CHECK(is_float(bias.dtype) && bias.numel() == N, op, ": bias ", bias.shape.str(), " for N=", N);
  if (M == 0 || N == 0) return true;
  if (small_m_gemv(M, trans_a, trans_b, false, op) && gemv_small_m(out, pre, a, b, bias, s)) return true;
  if (!gelu_epilogue_fits(out, a, b, pre, bias, N)) return false;
  return try_lt(out, a, b, trans_a, trans_b, false, bias.empty() ? Epilogue::kGeluAux : Epilogue::kGeluAuxBias, bias,
                pre, M, N, K, s);
}

bool Gemm::run_dgelu(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a,
                     bool trans_b, cudaStream_t s) {
  const char* op = "matmul_gelu_backward";
  const auto [M, N, K] = gemm_dims(op, dpre, a, b, trans_a, trans_b);
  TRIDENT_CHECK(pre.rows() == M && pre.cols() == N, op, ": pre ", pre.shape.str(), " for [", M, ", ", N, "]");
  if (M == 0 || N == 0) return true;
  // fp32 keeps the exact GELU backward kernel: on an H200 (cuBLASLt 13.0) the DGELU
  // epilogue's derivative was off by up to 1.1e-4 on gradients of 0.02 (0.5%), far above
  // fp32 rounding; in bf16/fp16 that error is below the storage rounding of dpre.
  if (dpre.dtype == DType::F32) return false;
  if (!gelu_epilogue_fits(dpre, a, b, pre, Tensor(), N)) return false;
  return try_lt(dpre, a, b, trans_a, trans_b, false, Epilogue::kDGelu, Tensor(), pre, M, N, K, s);
}

}  // namespace trident::cuda
