// Error checks for CUDA runtime and cuBLASLt calls. A failing call prints the call, its
// error name and message, file and line to stderr and aborts the process: a CUDA failure
// is never recoverable in a training job (ARCHITECTURE.md, "Errors"), and aborting makes
// MPI tear down every rank instead of leaving the others hanging in a collective.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    const cudaError_t trident_err_ = (call);                                              \
    if (trident_err_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "trident: CUDA error %s (%s) in %s at %s:%d\n",                \
                   cudaGetErrorName(trident_err_), cudaGetErrorString(trident_err_), #call, \
                   __FILE__, __LINE__);                                                   \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

#define CUBLAS_CHECK(call)                                                                \
  do {                                                                                    \
    const cublasStatus_t trident_st_ = (call);                                            \
    if (trident_st_ != CUBLAS_STATUS_SUCCESS) {                                           \
      std::fprintf(stderr, "trident: cuBLAS error %s (%d) in %s at %s:%d\n",              \
                   cublasLtGetStatusName(trident_st_), static_cast<int>(trident_st_), #call, \
                   __FILE__, __LINE__);                                                   \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// After a kernel launch: catches bad launch configurations immediately.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
