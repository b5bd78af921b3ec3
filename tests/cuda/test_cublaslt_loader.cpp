// No GPU needed: cuBLASLt is not in a trident process until the first GEMM handle asks for
// it, and once loaded, the forwarding definitions reach the library's own functions
// (cublasLtGetStatusName and the matrix layouts are host-only calls).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "kernels/cuda/cublaslt_loader.h"

namespace trident::cuda {
namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(name) != std::string::npos;
}

// One test: the process starts without the library (this binary runs nothing else first).
TEST(CublasLtLoader, LoadsOnFirstUseAndForwards) {
  EXPECT_FALSE(mapped("libcublasLt")) << "libcublasLt was loaded at process start";
  EXPECT_EQ(cublaslt_path(), "");
  load_cublaslt();
  EXPECT_TRUE(mapped("libcublasLt"));
  EXPECT_NE(cublaslt_path().find("/libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)), std::string::npos)
      << cublaslt_path();
  load_cublaslt();  // once only: the same handle
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 96, 40, 96), CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(layout, nullptr);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
  // The library's own argument checks answer through the forwarding definition.
  EXPECT_EQ(cublasLtMatrixLayoutCreate(nullptr, CUDA_R_16BF, 96, 40, 96), CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace trident::cuda
