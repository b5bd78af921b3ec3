// GEMM through cuBLASLt, plus a simple tiled fallback kernel.
//
// Row-major to column-major: a row-major [R, C] matrix is a column-major [C, R] one, so
// row-major out = op(a) op(b) is computed as column-major out^T = op(b)^T op(a)^T, i.e.
// cuBLASLt's A is our b and its B is our a, with m = N, n = M and the transposes kept.
// fp16 and bf16 use CUBLAS_COMPUTE_32F (fp32 accumulation) with fp32 alpha/beta. fp32
// uses CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores, fp32 accumulation) when the Gemm
// allows it (trident-train's default; --no-tf32 turns it off), else CUBLAS_COMPUTE_32F,
// whose results stay close to the CPU's sgemm (the GPU-vs-CPU tests use that). The choice
// is fixed per Gemm, so the plan cache needs no key for it. `accumulate` is beta = 1.
// The bias goes through the BIAS epilogue when its dtype is the output's (cuBLASLt's
// requirement), otherwise through a separate row-bias add after the GEMM.
//
// The fallback kernel (16x16 shared-memory tiles, fp32 accumulation, any dtype mix) is
// used for combinations cuBLASLt does not take (mixed a/b dtypes, K = 0) or when its
// heuristic returns no algorithm for a shape.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what Hopper's kernels like best
constexpr int kTile = 16;

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
  bool bias_epilogue = false;

  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(bool allow_tf32) : allow_tf32_(allow_tf32) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_bytes_ = kWorkspaceBytes;
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

// key: M, N, K, trans_a, trans_b, a/b dtype, out dtype, bias epilogue, align a, b, out, bias
Gemm::Plan* Gemm::plan_for(const Key& key, const void* bias_ptr) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  const int64_t M = key[0], N = key[1], K = key[2];
  const bool ta = key[3] != 0, tb = key[4] != 0;
  const cudaDataType_t ab_type = cuda_type(static_cast<DType>(key[5]));
  const cudaDataType_t out_type = cuda_type(static_cast<DType>(key[6]));
  plan->bias_epilogue = key[7] != 0;

  const cublasComputeType_t compute =
      ab_type == CUDA_R_32F && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (plan->bias_epilogue) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    // The heuristic reads the bias pointer's alignment; any pointer of the same
    // alignment (part of the key) works with the chosen algorithm.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr,
                                                sizeof(bias_ptr)));
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->usable = true;
  }
  Plan* p = plan.get();
  plans_.emplace(key, std::move(plan));
  return p;
}

void Gemm::run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
               bool accumulate, cudaStream_t s) {
  const char* op = "matmul";
  TRIDENT_CHECK(is_float(a.dtype) && is_float(b.dtype) && is_float(out.dtype), op, ": float tensors expected");
  // Matrix views: all dims but the last are rows (a [B, T, C] activation is [B*T, C]).
  const int64_t M = trans_a ? a.cols() : a.rows(), K = trans_a ? a.rows() : a.cols();
  const int64_t Kb = trans_b ? b.cols() : b.rows(), N = trans_b ? b.rows() : b.cols();
  TRIDENT_CHECK(K == Kb, op, ": inner dims differ: a ", a.shape.str(), (trans_a ? "^T" : ""), " b ", b.shape.str(),
                (trans_b ? "^T" : ""));
  TRIDENT_CHECK(out.rows() == M && out.cols() == N, op, ": out ", out.shape.str(), " for [", M, ", ", N, "]");
  const bool has_bias = !bias.empty();
  if (has_bias)
    TRIDENT_CHECK(is_float(bias.dtype) && bias.numel() == N, op, ": bias ", bias.shape.str(), " for N=", N);
  if (M == 0 || N == 0) return;

  const bool lt_types = a.dtype == b.dtype && (out.dtype == a.dtype || out.dtype == DType::F32);
  if (lt_types && K > 0) {
    const bool bias_epilogue = has_bias && bias.dtype == out.dtype;
    const Key key{M, N, K, trans_a, trans_b, static_cast<int64_t>(a.dtype), static_cast<int64_t>(out.dtype),
                  bias_epilogue, alignment(a.data), alignment(b.data), alignment(out.data),
                  bias_epilogue ? alignment(bias.data) : 0};
    std::lock_guard<std::mutex> lock(mu_);
    Plan* plan = plan_for(key, bias_epilogue ? bias.data : nullptr);
    if (plan->usable) {
      if (bias_epilogue) {
        const void* bp = bias.data;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
      }
      const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
      CUBLAS_CHECK(cublasLtMatmul(handle_, plan->desc, &alpha, b.data, plan->a, a.data, plan->b, &beta, out.data,
                                  plan->c, out.data, plan->c, &plan->algo, workspace_, workspace_bytes_, s));
      if (has_bias && !bias_epilogue) add_row_bias(out, bias, s);
      return;
    }
  }
  const dim3 block(kTile, kTile);
  const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile), static_cast<unsigned>((N + kTile - 1) / kTile));
  TRIDENT_CHECK((N + kTile - 1) / kTile <= 65535, op, ": N=", N, " too large for the fallback kernel");
  gemm_fallback_kernel<<<grid, block, 0, s>>>(any_ptr(out), any_ptr(a), any_ptr(b), any_ptr(bias), has_bias, trans_a,
                                              trans_b, accumulate, M, N, K);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
