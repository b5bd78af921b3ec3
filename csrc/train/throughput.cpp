#include "train/throughput.h"

#include <algorithm>
#include <cctype>

namespace trident {
namespace {

struct PeakRow {
  const char* pattern;  // matched against the upper-cased device name
  double half;          // dense BF16 / FP16 tensor core, TFLOP/s
  double tf32;          // dense TF32 tensor core, TFLOP/s
  double fp32;          // FP32 on the CUDA cores (no tensor cores), TFLOP/s
};

// NVIDIA's datasheets quote tensor-core figures "with sparsity"; the dense figure is
// half of it.
//  - H100 SXM5 (H100 datasheet): BF16/FP16 1,979 sparse -> 989 dense (989.5, quoted as
//    989 by NVIDIA's and Megatron's MFU papers); TF32 989 sparse -> 494.5 dense.
//  - H100 PCIe: BF16/FP16 1,513 sparse -> 756.5; TF32 756 sparse -> 378.
//  - H100 NVL: BF16/FP16 1,671 sparse -> 835.5; TF32 835 sparse -> 417.5.
//  - H200 SXM (H200 datasheet): same tensor cores and clocks as H100 SXM: 1,979 -> 989;
//    TF32 989 -> 494.5. H200 NVL: 1,671 -> 835.5; TF32 835 -> 417.5.
//  - A100 SXM4 / PCIe, 40 and 80 GB (A100 datasheet): BF16/FP16 312 dense (624 sparse);
//    TF32 156 dense (312 sparse).
//  - FP32 without tensor cores (the same datasheets; no sparsity figure): H100 and H200 SXM
//    67, H100 PCIe 51, H100 and H200 NVL 60, A100 19.5.
// More specific patterns come first (an "H100 NVL" also contains "H100").
const PeakRow kPeaks[] = {
    {"H200 NVL", 835.5, 417.5, 60.0}, {"H200", 989.0, 494.5, 67.0}, {"H100 NVL", 835.5, 417.5, 60.0},
    {"H100 PCIE", 756.5, 378.0, 51.0}, {"H100", 989.0, 494.5, 67.0}, {"A100", 312.0, 156.0, 19.5},
};

}  // namespace

double peak_tflops_for_device(const std::string& name, DType dtype, bool allow_tf32) {
  std::string up = name;
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const PeakRow& row : kPeaks) {
    if (up.find(row.pattern) == std::string::npos) continue;
    if (dtype != DType::F32) return row.half;
    return allow_tf32 ? row.tf32 : row.fp32;
  }
  return 0.0;
}

double model_flops_utilization(double flops_per_iteration, double seconds_per_iteration, int ranks,
                               double peak_tflops) {
  if (peak_tflops <= 0 || seconds_per_iteration <= 0 || ranks <= 0) return 0.0;
  return flops_per_iteration / (seconds_per_iteration * ranks * peak_tflops * 1e12);
}

}  // namespace trident
