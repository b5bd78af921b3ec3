// kernels/cuda/cuda_gemv.cu (the small-M GEMV behind TRIDENT_GEMM_GEMV=1) on the CPU emulator
// vs the CPU backend's matmul and matmul_bias_gelu: out = a w^T (+ bias), and the GELU layer's
// pre and out, for 1 to 16 rows (each row-count kernel, rows short of it), widths under one
// warp's columns and past the 4-column kernel's threshold, K of one vector and of several
// passes with a partial last one, every float dtype; and what gemv_shape_fits refuses.
//
// What it cannot check: the device's FMA contraction and tanhf (the host's here).
#include "emu_cuda_gemv.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"

namespace trident::emu_test {
namespace {

namespace kv = ::trident::cuda::emu_gemv;

class EmulatedGemv : public EmuVsCpuDtype {};

TEST_P(EmulatedGemv, MatchesTheCpuMatmul) {
  const int64_t kv16 = static_cast<int64_t>(16 / dtype_size(dt()));
  struct Case {
    int64_t M, N, vectors;  // K = vectors x 16 bytes
    bool bias;
  };
  const int64_t wide = 2 * 132 * 4 * 4 + 3;  // past the 4-column kernel's threshold, a partial last warp
  for (const Case& c : {Case{1, 5, 1, false}, Case{1, 37, 97, true}, Case{3, 37, 40, false}, Case{4, 5, 97, true},
                        Case{8, 37, 40, true}, Case{13, 5, 40, false}, Case{16, 37, 97, true}, Case{1, wide, 3, false},
                        Case{4, wide, 3, true}, Case{16, wide, 2, false}}) {
    const int64_t M = c.M, N = c.N, K = c.vectors * kv16;
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                 (c.bias ? " bias " : " ") + dtype_name(dt()));
    Buffer a = random(Shape{M, K}, dt()), w = random(Shape{N, K}, dt(), -0.5f, 0.5f);
    Buffer bias = c.bias ? random(Shape{N}, dt()) : Buffer();
    Buffer out = filled(Shape{M, N}, dt(), NAN), e_out = clone(out);
    cpu().matmul(out, a, w, bias, false, true, false);
    ASSERT_TRUE(kv::gemv_shape_fits(e_out, Tensor(), a, w, bias));
    kv::gemv_typed(e_out, Tensor(), a, w, bias, nullptr);
    expect_close(e_out, out, storage_tol(dt(), 1e-4, 1e-4), "gemv out");
    // The GELU layer: pre and gelu(pre), as the unfused ops compute them.
    Buffer pre = filled(Shape{M, N}, dt(), NAN), e_pre = clone(pre);
    Buffer g = filled(Shape{M, N}, dt(), NAN), e_g = clone(g);
    cpu().matmul_bias_gelu(pre, g, a, w, bias, false, true, Gelu::Tanh);  // the GEMV's only form
    kv::gemv_typed(e_g, e_pre, a, w, bias, nullptr);
    expect_close(e_pre, pre, storage_tol(dt(), 1e-4, 1e-4), "gemv pre");
    expect_close(e_g, g, storage_tol(dt(), 1e-4, 1e-4), "gemv gelu");
  }
}

TEST_P(EmulatedGemv, RefusesWhatItDoesNotTake) {
  const int64_t kv16 = static_cast<int64_t>(16 / dtype_size(dt()));
  Buffer a = random(Shape{4, 8 * kv16}, dt()), w = random(Shape{6, 8 * kv16}, dt());
  Buffer out = filled(Shape{4, 6}, dt(), 0.f);
  EXPECT_TRUE(kv::gemv_shape_fits(out, Tensor(), a, w, Tensor()));
  Buffer many = random(Shape{17, 8 * kv16}, dt()), many_out = filled(Shape{17, 6}, dt(), 0.f);
  EXPECT_FALSE(kv::gemv_shape_fits(many_out, Tensor(), many, w, Tensor())) << "17 rows";
  Buffer odd_a = random(Shape{4, 8 * kv16 + 1}, dt()), odd_w = random(Shape{6, 8 * kv16 + 1}, dt());
  EXPECT_FALSE(kv::gemv_shape_fits(out, Tensor(), odd_a, odd_w, Tensor())) << "K not a whole vector";
  const Tensor a_off = Tensor(static_cast<char*>(a.t().data) + dtype_size(dt()), Shape{4, 8 * kv16 - kv16}, dt(),
                              a.t().device);
  Buffer w_short = random(Shape{6, 8 * kv16 - kv16}, dt());
  EXPECT_FALSE(kv::gemv_shape_fits(out, Tensor(), a_off, w_short, Tensor())) << "a off the 16-byte grid";
  if (dt() != DType::F32) {
    Buffer f32_out = filled(Shape{4, 6}, DType::F32, 0.f);
    EXPECT_FALSE(kv::gemv_shape_fits(f32_out, Tensor(), a, w, Tensor())) << "an fp32 output of 16-bit inputs";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedGemv, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
