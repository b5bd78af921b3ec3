// cuBLASLt is loaded when the first GEMM handle is made, not when a trident program starts.
// The static constructors of libcublasLt.so (541 MB in CUDA 13) take ~0.4 s of every process
// start (measured: an empty program, 3 ms; the same linked against libcublasLt, 414 ms), which
// every CPU-only run, tool invocation and MPI rank paid without ever calling it. So trident does
// not link it: cublaslt_loader.cpp defines the cuBLASLt functions that trident calls, and each
// forwards to the library's own, found by dlopen/dlsym on first use.
#pragma once

#include <string>

namespace trident::cuda {

// Loads libcublasLt.so.<CUBLAS_VER_MAJOR> once (thread-safe): by its soname (LD_LIBRARY_PATH,
// the executable's run path, the system's cache), then from the CUDA toolkit directory of the
// build, then from the directory of the libcudart this process runs. Throws trident::Error
// naming the library, the places tried and the loader's message when none has it.
void load_cublaslt();

// The path the library was loaded from (empty before load_cublaslt).
std::string cublaslt_path();

}  // namespace trident::cuda
