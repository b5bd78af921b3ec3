// The CUDA backend (entry points only; no CUDA headers here so host code can include it).
#pragma once

#include <memory>

#include "core/backend.h"

namespace trident {

// Number of usable GPUs; 0 when there is no GPU or the driver is missing/too old
// ("driver version is insufficient" is "no GPU", never an error).
int cuda_device_count();

// Choices fixed when the backend is made.
struct CudaBackendOptions {
  // fp32 GEMMs on TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32: 10-bit mantissa
  // products, fp32 accumulation). false: plain fp32 (CUBLAS_COMPUTE_32F), results close
  // to the CPU's sgemm. fp16/bf16 GEMMs always use the 16-bit tensor cores.
  bool allow_tf32 = true;
  // bf16 GEMMs: split-K partial sums reduced in fp32 only (cuBLASLt's reduction schemes
  // COMPUTE_TYPE or NONE, as PyTorch's allow_bf16_reduced_precision_reduction = False).
  bool bf16_reduction_in_fp32 = false;
};

// A backend on GPU `ordinal` with its own compute stream.
std::unique_ptr<Backend> make_cuda_backend(int ordinal, const CudaBackendOptions& options = {});

// The GPU and compute stream of a backend made by make_cuda_backend, for code that must
// order its own device work after the backend's (NcclComm's communication stream).
// `stream` is the cudaStream_t, typed void* so this header needs no CUDA headers.
struct CudaStreamRef {
  int device = -1;          // CUDA ordinal; -1: not a CUDA backend
  void* stream = nullptr;   // cudaStream_t
  bool valid() const { return device >= 0; }
};
// Invalid (device -1) for any other backend, wrappers such as ProfilingBackend included.
CudaStreamRef cuda_stream_of(Backend& backend);

}  // namespace trident
