// Peak TFLOP/s table (NVIDIA datasheets, dense) and the MFU formula.
#include <gtest/gtest.h>

#include "train/throughput.h"

namespace trident {
namespace {

TEST(PeakTflops, DatasheetFigures) {
  // Names as cudaGetDeviceProperties reports them.
  for (const char* h100_sxm : {"NVIDIA H100 80GB HBM3", "NVIDIA H100", "NVIDIA H100 SXM5 80GB"}) {
    EXPECT_EQ(peak_tflops_for_device(h100_sxm, DType::BF16), 989.0) << h100_sxm;
    EXPECT_EQ(peak_tflops_for_device(h100_sxm, DType::F16), 989.0) << h100_sxm;
    EXPECT_EQ(peak_tflops_for_device(h100_sxm, DType::F32), 494.5) << h100_sxm;
  }
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H200", DType::BF16), 989.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H200", DType::F32), 494.5);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H200 NVL", DType::BF16), 835.5);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 PCIe", DType::F16), 756.5);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 PCIe", DType::F32), 378.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 NVL", DType::BF16), 835.5);
  for (const char* a100 : {"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB",
                           "NVIDIA A100 80GB PCIe"}) {
    EXPECT_EQ(peak_tflops_for_device(a100, DType::BF16), 312.0) << a100;
    EXPECT_EQ(peak_tflops_for_device(a100, DType::F32), 156.0) << a100;
  }
  EXPECT_EQ(peak_tflops_for_device("cpu", DType::F32), 0.0);
  EXPECT_EQ(peak_tflops_for_device("cpu", DType::F32, false), 0.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA GeForce RTX 4090", DType::BF16), 0.0);
}

// --no-tf32: fp32 GEMMs run on the CUDA cores, so MFU is against the datasheets' plain FP32
// figure (about 1/7 of TF32 on Hopper, 1/8 on the A100); 16-bit runs do not change.
TEST(PeakTflops, PlainFp32WithoutTf32) {
  for (const char* hopper_sxm : {"NVIDIA H100 80GB HBM3", "NVIDIA H200"})
    EXPECT_EQ(peak_tflops_for_device(hopper_sxm, DType::F32, false), 67.0) << hopper_sxm;
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 PCIe", DType::F32, false), 51.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 NVL", DType::F32, false), 60.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H200 NVL", DType::F32, false), 60.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA A100-SXM4-80GB", DType::F32, false), 19.5);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA A100-SXM4-80GB", DType::F32, true), 156.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H200", DType::BF16, false), 989.0);
  EXPECT_EQ(peak_tflops_for_device("NVIDIA H100 PCIe", DType::F16, false), 756.5);
}

TEST(PeakTflops, ModelFlopsUtilization) {
  // 8 ranks, 2 s per iteration, 4.0e15 FLOPs per iteration, 989 TFLOP/s peak:
  // 4e15 / (2 x 8 x 989e12) = 0.25278...
  EXPECT_DOUBLE_EQ(model_flops_utilization(4.0e15, 2.0, 8, 989.0), 4.0e15 / (2.0 * 8 * 989e12));
  EXPECT_NEAR(model_flops_utilization(4.0e15, 2.0, 8, 989.0), 0.252780586, 1e-9);
  EXPECT_EQ(model_flops_utilization(1e15, 1.0, 1, 0.0), 0.0);
  EXPECT_EQ(model_flops_utilization(1e15, 0.0, 1, 989.0), 0.0);
}

}  // namespace
}  // namespace trident
