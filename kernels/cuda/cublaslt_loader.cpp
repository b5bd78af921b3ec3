#include "kernels/cuda/cublaslt_loader.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "csrc/core/error.h"

#ifndef TRIDENT_CUBLASLT_DIR
#define TRIDENT_CUBLASLT_DIR ""
#endif

namespace trident::cuda {
namespace {

struct Library {
  std::once_flag once;
  void* handle = nullptr;
  std::string path, error;
};

Library& library() {
  static Library lib;
  return lib;
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

void open_library(Library& lib) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates = {soname};
  if (*TRIDENT_CUBLASLT_DIR) candidates.push_back(std::string(TRIDENT_CUBLASLT_DIR) + "/" + soname);
  Dl_info cudart{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &cudart) != 0 && cudart.dli_fname != nullptr) {
    const std::string dir = directory_of(cudart.dli_fname);
    if (!dir.empty()) candidates.push_back(dir + "/" + soname);
  }
  std::string tried, first_error;
  for (const std::string& c : candidates) {
    // RTLD_LOCAL: its symbols stay out of the global scope, where they would meet the
    // forwarding definitions below.
    lib.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) {
      lib.path = c;
      return;
    }
    const char* e = dlerror();
    if (first_error.empty() && e != nullptr) first_error = e;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  lib.error = "cuBLASLt: cannot load " + soname + " (tried " + tried + "): " + first_error +
              "; install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH";
}

// The library's definition of `name`, of type F (the declaration in cublasLt.h).
template <typename F>
F* resolve(const char* name) {
  load_cublaslt();
  void* sym = dlsym(library().handle, name);
  if (sym == nullptr) throw Error("cuBLASLt: " + library().path + " has no " + name);
  return reinterpret_cast<F*>(sym);
}

}  // namespace

void load_cublaslt() {
  Library& lib = library();
  std::call_once(lib.once, [&] { open_library(lib); });
  if (lib.handle == nullptr) throw Error(lib.error);
}

std::string cublaslt_path() { return library().path; }

}  // namespace trident::cuda

// The cuBLASLt entry points trident calls, each forwarding to the loaded library's (resolved
// once, on its first call). A function trident starts to call must be added here: the link
// fails with an undefined reference until it is.
#define TRIDENT_CUBLASLT_FORWARD(name) \
  static auto* const fn = trident::cuda::resolve<decltype(name)>(#name); \
  return fn

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtCreate)(handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtDestroy)(handle);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtGetStatusName)(status);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                                           cublasLtMatrixLayout_t b_desc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t c_desc, void* D, cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmul)
  (handle, desc, alpha, A, a_desc, B, b_desc, beta, C, c_desc, D, d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                                           cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic)
  (handle, desc, a_desc, b_desc, c_desc, d_desc, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulDescCreate)(desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy)(desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute)(desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate)(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy)(pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute)(pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate)(layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  TRIDENT_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy)(layout);
}

}  // extern "C"
