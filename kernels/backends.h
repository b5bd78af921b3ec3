// Backend factory: the one place that knows every backend this build has.
#pragma once

#include <memory>
#include <string>

#include "core/backend.h"

namespace trident {

// Choices that only some backends act on.
struct BackendOptions {
  // CUDA: fp32 GEMMs on TF32 tensor cores (trident-train's default; --no-tf32 sets false).
  bool allow_tf32 = true;
  // CUDA: bf16 GEMMs that split K reduce the partial sums in fp32, never in bf16 (Megatron's
  // --disable-bf16-reduced-precision-matmul; false: cuBLASLt chooses).
  bool bf16_reduction_in_fp32 = false;
};

// "cpu" always; "cuda" when built with CUDA and a GPU is visible; "auto" picks cuda when
// available, else cpu. Throws ConfigError naming --device for an unknown or unavailable one.
// The GPU is this process's MPI local rank modulo the visible count.
std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options = {});

// False when built without CUDA or when no usable GPU is visible (a missing driver, and
// the runtime's "driver version is insufficient", both mean "no GPU", not an error).
bool cuda_available();

}  // namespace trident
