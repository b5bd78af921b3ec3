// One whole training step of a GPT-2 on the CUDA backend against the same step on the CPU
// reference backend: the loss, every parameter's gradient, the gradient norm, and every
// parameter, Adam moment and (16-bit runs) fp32 master weight after one AdamW step, plus the
// loss of a second forward on the updated parameters.
//
// Why: the per-op tests (test_cuda_*.cpp) compare each kernel with its CPU twin on
// synthetic inputs; this test checks that the model composes them the same way on both
// backends (strides, views into the flat parameter/gradient buffers, the fused ops'
// defaults versus their CUDA overrides, dropout masks keyed the same way, the
// layer-gradients-ready hook, the optimizer's flat layout, masters and clip factor).
//
// Setup (training_step_harness.h): gpt2-tiny's shape (2 layers, hidden 64, 4 heads, seq 64,
// micro-batch 4, lr 1e-3, clip 1.0) with a padded vocabulary (500 -> 512), weight decay
// 0.1, random tokens and targets from a fixed seed (every 13th target ignored). Both
// backends initialise from the same seed (Philox keyed by name and index on the host, then
// a cast on the backend); the test checks that the initial parameters are bit-identical
// and then copies the CPU's bytes to the GPU anyway, so every later difference comes from
// the step. Dropout 0.1 (attention and hidden) where the case says so: the CUDA masks
// are drawn from the same Philox stream as the CPU's, so they must be the same elements.
//
// Tolerances (per case below; loss relative, gradients per tensor as max|diff| / max|ref|,
// gradient norm relative; AdamW per element as explained in expect_steps_match):
//   fp32 (no TF32)  loss 1e-5, grad 1e-4, norm 1e-5. Both sides compute in fp32 and differ
//                   only in summation order and the GPU's exp/tanh (~1e-7..1e-6 relative per
//                   op). Measured on the CPU as a proxy: perturbing every parameter by 1e-6
//                   relative moves the gradients by at most 3.5e-6 of their tensor's max.
//   fp32 with TF32  loss 1e-4, grad 1e-2, norm 1e-3: GEMM inputs rounded to a 10-bit
//                   mantissa (2^-11 relative), like fp16's; fp16-level noise (below) is 1.4e-3.
//   bf16            loss 1e-3, grad 5e-2, norm 5e-3. Both sides round every activation and
//                   gradient to bf16 (2^-9 relative); where the fp32 values before rounding
//                   differ in the last bits (GEMM order, fused epilogues, the attention
//                   kernel's bf16 probabilities) the results differ by a bf16 step, and
//                   these steps propagate. CPU proxies: bf16 against fp32 differs by at most
//                   1.0e-2 (gradients), 3.7e-4 (loss after the step), 4.8e-4 (norm); bf16
//                   against bf16 with 10% of the parameters moved by one bf16 ulp by 1.5e-2,
//                   6.8e-6, 2.2e-4. Any bug tried on the CPU side (another dropout mask, no
//                   attention or hidden dropout, dropout 0.11 instead of 0.1, one target
//                   changed) moves some tensor's gradients by 0.32 to 0.96 of its max.
//   fp16, scale 1024  loss 2e-4, grad 1e-2, norm 1e-3 (2^-11 rounding; proxy: 1.4e-3, 3e-5).
//   AdamW, all cases: the update may differ by 1e-4 x lr beyond what the two backends'
//                   gradients explain (sign flips of ~0 gradients: the key bias's gradient is
//                   zero in exact arithmetic) and 4 fp32 ulps; 16-bit parameters by one more
//                   rounding step; Adam's m and v as the gradients (plus the norm, through the
//                   clip factor). On the CPU side a 1% error in lr or a lost weight decay fails
//                   the parameter check, clip 0.9 instead of 1.0 the m check, another beta2
//                   the v check (at step 1 the bias correction hides beta2 from the update).
// How the tolerances were checked without a GPU: training_step_harness.h takes any two
// backends; two CPU runs with the perturbations and bugs above passed and failed as stated.
// What a GPU run adds is the real size of the CUDA-vs-CPU differences: each case prints its
// per-tensor table, so the margins are visible when it passes.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>

#include "cuda/cuda_test_util.h"
#include "cuda/training_step_harness.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "scoped_env.h"

namespace trident {
namespace {

using step_test::StepSetup;
using step_test::StepSide;
using step_test::StepSnapshot;
using step_test::Tolerances;

struct StepCase {
  const char* name;
  DType dtype;
  float dropout;     // attention and hidden
  bool fp32_grads;   // bf16 with --accumulate-allreduce-grads-in-fp32
  float loss_scale;  // static loss scale (fp16)
  bool tf32;         // fp32 GEMMs on TF32 tensor cores (trident-train's default)
  Tolerances tol;    // loss, grad, norm, update (see the header comment)
  // An environment switch set while both models are built and run (the attention dropout mask
  // kept for the backward is allocated by the model, read when it is built).
  const char* env_name = nullptr;
  const char* env_value = nullptr;
  // The MLP's GELU: the erf one takes the unfused GEMM and GELU kernels on the GPU.
  Gelu gelu = Gelu::Tanh;
};

void PrintTo(const StepCase& c, std::ostream* os) { *os << c.name; }

constexpr Tolerances kFp32{1e-5, 1e-4, 1e-5, 1e-4};
constexpr Tolerances kTf32{1e-4, 1e-2, 1e-3, 1e-4};
constexpr Tolerances kBf16{1e-3, 5e-2, 5e-3, 1e-4};
constexpr Tolerances kFp16{2e-4, 1e-2, 1e-3, 1e-4};

class CudaTrainingStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(CudaTrainingStep, MatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const StepCase& c = GetParam();
  const test::ScopedEnv env(c.env_name, c.env_value);
  StepSetup setup = step_test::tiny_step_setup(c.dtype, c.dropout, c.fp32_grads, c.loss_scale);
  setup.cfg.gelu = c.gelu;
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend(0, {.allow_tf32 = c.tf32});
  StepSide ref(*cpu, setup), test(*gpu, setup);

  // Same seed, same parameters: the init is computed on the host, only the cast to the
  // model's dtype runs on the backend.
  const std::vector<unsigned char> cpu_init = ref.param_bytes(), gpu_init = test.param_bytes();
  ASSERT_EQ(cpu_init.size(), gpu_init.size());
  size_t differing = 0;
  for (size_t i = 0; i < cpu_init.size(); ++i) differing += cpu_init[i] != gpu_init[i];
  EXPECT_EQ(differing, 0u) << "initial parameters differ between the backends (bytes of " << cpu_init.size() << ")";
  test.set_param_bytes(cpu_init);

  const StepSnapshot r = ref.run();
  const StepSnapshot t = test.run();
  std::ostringstream report;
  step_test::expect_steps_match(r, t, setup, c.dtype, c.tol, report);
  std::cout << "[" << c.name << "] CUDA (" << gpu->device_name() << ") against CPU, one training step:\n"
            << report.str() << std::flush;
}

INSTANTIATE_TEST_SUITE_P(
    Gpt2Tiny, CudaTrainingStep,
    ::testing::Values(StepCase{"fp32", DType::F32, 0.0f, false, 1.0f, false, kFp32},
                      StepCase{"fp32_dropout", DType::F32, 0.1f, false, 1.0f, false, kFp32},
                      StepCase{"fp32_tf32_dropout", DType::F32, 0.1f, false, 1.0f, true, kTf32},
                      StepCase{"bf16", DType::BF16, 0.0f, false, 1.0f, false, kBf16},
                      StepCase{"bf16_dropout", DType::BF16, 0.1f, false, 1.0f, false, kBf16},
                      StepCase{"bf16_fp32grads_dropout", DType::BF16, 0.1f, true, 1.0f, false, kBf16},
                      StepCase{"fp16_scaled_dropout", DType::F16, 0.1f, false, 1024.0f, false, kFp16},
                      StepCase{"fp32_erf_gelu", DType::F32, 0.0f, false, 1.0f, false, kFp32, nullptr, nullptr,
                               Gelu::Erf},
                      StepCase{"bf16_erf_gelu_dropout", DType::BF16, 0.1f, false, 1.0f, false, kBf16, nullptr, nullptr,
                               Gelu::Erf},
                      // The mask saved by each layer's forward for its backward, and drawn ahead
                      // by a kernel of its own (opt-ins; PERFORMANCE.md 2026-12-06).
                      StepCase{"bf16_dropout_saved_mask", DType::BF16, 0.1f, false, 1.0f, false, kBf16,
                               "TRIDENT_ATTN_SAVE_MASK", "1"},
                      StepCase{"bf16_dropout_mask_ahead", DType::BF16, 0.1f, false, 1.0f, false, kBf16,
                               "TRIDENT_ATTN_MASK_AHEAD", "1"}),
    [](const ::testing::TestParamInfo<StepCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace trident
