#include "kernels/cuda/cublaslt_loader.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "csrc/core/error.h"

#ifndef TRIDENT_CUBLASLT_DIR
#define TRIDENT_CUBLASLT_DIR ""
#endif

namespace trident::cuda {
namespace {

// The cuBLASLt entry points trident calls: each is defined at the bottom of this file as a
// forwarder to the library's own. A function trident starts to call must be added to both
// (the link fails with an undefined reference until it is defined).
#define TRIDENT_CUBLASLT_FUNCTIONS(X)                                                               \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtMatmul)                   \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)        \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)

// The library's definitions, typed as cublasLt.h declares them.
struct Functions {
#define TRIDENT_CUBLASLT_POINTER(name) decltype(&::name) name = nullptr;
  TRIDENT_CUBLASLT_FUNCTIONS(TRIDENT_CUBLASLT_POINTER)
#undef TRIDENT_CUBLASLT_POINTER
};

struct Library {
  std::once_flag once;
  void* handle = nullptr;
  std::string path, error;
  Functions fn;
};

Library& library() {
  static Library lib;
  return lib;
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// The path of the libcudart this process has loaded (empty when it is linked statically).
std::string loaded_cudart_path() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        if (name == nullptr || std::strstr(name, "/libcudart.so") == nullptr) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &path);
  return path;
}

void open_library(Library& lib) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates = {soname};
  if (*TRIDENT_CUBLASLT_DIR) candidates.push_back(std::string(TRIDENT_CUBLASLT_DIR) + "/" + soname);
  const std::string cudart_dir = directory_of(loaded_cudart_path());
  if (!cudart_dir.empty()) candidates.push_back(cudart_dir + "/" + soname);
  std::string tried, first_error;
  for (const std::string& c : candidates) {
    // The forwarders below do not meet the library's definitions: the executable does not
    // export them, and libcublasLt binds its own calls inside itself (DF_SYMBOLIC).
    lib.handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) {
      link_map* map = nullptr;  // where the soname led
      const bool named = dlinfo(lib.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
                         *map->l_name != '\0';
      lib.path = named ? map->l_name : c;
      // Every function now, so that a forwarder never fails later (some are first called
      // from destructors).
      std::string missing;
#define TRIDENT_CUBLASLT_RESOLVE(name)                                          \
  lib.fn.name = reinterpret_cast<decltype(&::name)>(dlsym(lib.handle, #name)); \
  if (lib.fn.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
      TRIDENT_CUBLASLT_FUNCTIONS(TRIDENT_CUBLASLT_RESOLVE)
#undef TRIDENT_CUBLASLT_RESOLVE
      if (missing.empty()) return;
      dlclose(lib.handle);
      lib.handle = nullptr;
      lib.error = "cuBLASLt: " + lib.path + " has no " + missing;
      return;
    }
    const char* e = dlerror();
    if (first_error.empty() && e != nullptr) first_error = e;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  lib.error = "cuBLASLt: cannot load " + soname + " (tried " + tried + "): " + first_error +
              "; install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH";
}

const Functions& functions() {
  load_cublaslt();
  return library().fn;
}

}  // namespace

void load_cublaslt() {
  Library& lib = library();
  std::call_once(lib.once, [&] { open_library(lib); });
  if (lib.handle == nullptr) throw Error(lib.error);
}

std::string cublaslt_path() { return library().path; }

}  // namespace trident::cuda

// The forwarders (the list at the top). Once load_cublaslt has succeeded, none can throw.
#define TRIDENT_CUBLASLT_FORWARD(name) return trident::cuda::functions().name

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
