// Peak throughput of an accelerator, for model FLOPs utilisation:
// MFU = model FLOPs per iteration / (seconds per iteration x ranks x peak).
#pragma once

#include <string>

#include "core/dtype.h"

namespace trident {

// Dense (no structured sparsity) peak in TFLOP/s of the device named `name` (as
// cudaGetDeviceProperties reports it, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H200",
// "NVIDIA A100-SXM4-80GB") for matmuls in `dtype`: BF16/F16 use the 16-bit tensor-core
// figure; F32 the TF32 tensor-core one when `allow_tf32` (the CUDA backend's default), else
// plain FP32 on the CUDA cores (--no-tf32). Returns 0 for a device not in the table (the
// caller then needs --peak-tflops, or reports no MFU).
double peak_tflops_for_device(const std::string& name, DType dtype, bool allow_tf32 = true);

// Model FLOPs utilisation in [0, 1]: flops_per_iteration / (seconds x ranks x peak).
// Returns 0 when peak_tflops <= 0 or seconds <= 0.
double model_flops_utilization(double flops_per_iteration, double seconds_per_iteration, int ranks,
                               double peak_tflops);

}  // namespace trident
