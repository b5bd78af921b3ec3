// GEMM for the CUDA backend through cuBLASLt (see cuda_matmul.cu). One Gemm per backend:
// it owns the cuBLASLt handle, a workspace allocated once, and a cache of matmul plans
// (descriptors, layouts and the heuristic's algorithm) keyed by shape, dtypes and
// pointer alignment, so the steady-state training loop never asks the heuristic again
// (with TRIDENT_GEMM_AUTOTUNE=1 it also times the heuristic's candidates once a shape).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "core/tensor.h"

namespace trident::cuda {

class Gemm {
 public:
  // On the current device. allow_tf32: fp32 GEMMs compute in CUBLAS_COMPUTE_32F_FAST_TF32.
  // bf16_reduction_in_fp32: bf16 GEMMs may split K only with the partial sums reduced in fp32
  // (the heuristic is offered no algorithm that reduces in bf16 in place or in the output type).
  explicit Gemm(bool allow_tf32 = false, bool bf16_reduction_in_fp32 = false);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[M, N] (= or +=) op(a) @ op(b) (+ bias[N]); semantics of Backend::matmul.
  void run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
           bool accumulate, cudaStream_t s);

  // Backend::matmul_bias_gelu and matmul_gelu_backward of the tanh GELU through cuBLASLt's
  // GELU_AUX(_BIAS) and DGELU epilogues (they compute that form only: the erf GELU is for
  // the caller's unfused ops). false (nothing done) when the epilogue does not apply to these
  // dtypes or this shape: the caller then runs the unfused ops.
  bool run_gelu(const Tensor& pre, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias,
                bool trans_a, bool trans_b, cudaStream_t s);
  bool run_dgelu(const Tensor& dpre, const Tensor& a, const Tensor& b, const Tensor& pre, bool trans_a,
                 bool trans_b, cudaStream_t s);

  size_t cached_plans() const { return plans_.size(); }
  // TRIDENT_GEMM_AUTOTUNE: plans whose candidates were timed, and those that left the
  // heuristic's first choice.
  size_t tuned_plans() const { return tuned_plans_; }
  size_t retuned_plans() const { return retuned_plans_; }
  // GEMMs that ran on the slow fallback kernel (no cuBLASLt algorithm), for tests.
  size_t fallback_launches() const { return fallback_launches_; }

  enum class Epilogue : int64_t { kNone = 0, kBias, kGeluAux, kGeluAuxBias, kDGelu };
  bool allow_tf32() const { return allow_tf32_; }
  bool bf16_reduction_in_fp32() const { return bf16_reduction_in_fp32_; }

 private:
  struct Plan;
  using Key = std::array<int64_t, 14>;

  Plan* plan_for(const Key& key, const void* bias_ptr, const void* aux_ptr);
  // One cuBLASLt matmul with epilogue `epi`; false when cuBLASLt does not take this dtype
  // mix or K = 0, or its heuristic found no algorithm.
  bool try_lt(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, bool accumulate,
              Epilogue epi, const Tensor& bias, const Tensor& aux, int64_t M, int64_t N, int64_t K, cudaStream_t s);
  // Times the plan's candidates through `matmul` and keeps the fastest in plan.algo;
  // `accumulated`: the output when the call adds to it (restored after the timing).
  void choose_algorithm(Plan& plan, const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& matmul,
                        void* accumulated, size_t out_bytes, cudaStream_t s);

  bool allow_tf32_ = false;
  bool bf16_reduction_in_fp32_ = false;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::unique_ptr<Plan> transient_plan_;  // the last plan whose heuristic failed in a way that may pass (plan_for)
  std::atomic<size_t> fallback_launches_{0};
  size_t tuned_plans_ = 0, retuned_plans_ = 0;
};

}  // namespace trident::cuda
