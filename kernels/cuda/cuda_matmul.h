// GEMM for the CUDA backend through cuBLASLt (see cuda_matmul.cu). One Gemm per backend:
// it owns the cuBLASLt handle, a workspace allocated once, and a cache of matmul plans
// (descriptors, layouts and the heuristic's algorithm) keyed by shape, dtypes and
// pointer alignment, so the steady-state training loop never asks the heuristic again.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/tensor.h"

namespace trident::cuda {

class Gemm {
 public:
  // On the current device. allow_tf32: fp32 GEMMs compute in CUBLAS_COMPUTE_32F_FAST_TF32.
  explicit Gemm(bool allow_tf32 = false);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[M, N] (= or +=) op(a) @ op(b) (+ bias[N]); semantics of Backend::matmul.
  void run(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a, bool trans_b,
           bool accumulate, cudaStream_t s);

  size_t cached_plans() const { return plans_.size(); }
  bool allow_tf32() const { return allow_tf32_; }

 private:
  struct Plan;
  using Key = std::array<int64_t, 12>;

  Plan* plan_for(const Key& key, const void* bias_ptr);

  bool allow_tf32_ = false;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace trident::cuda
