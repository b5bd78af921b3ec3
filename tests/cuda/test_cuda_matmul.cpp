// GPU vs CPU: matmul (cuBLASLt, every transpose combination, bias, accumulate, mixed
// output/bias dtypes, awkward and aligned shapes), bias_backward (also behind the hidden
// dropout), the GEMMs with the GELU epilogue (matmul_bias_gelu, matmul_gelu_backward), and a
// linear layer's weight and bias gradients (linear_param_grads); the algorithms
// TRIDENT_GEMM_AUTOTUNE=1 times and the small-M GEMV of TRIDENT_GEMM_GEMV=1; bf16 split-K
// reduced in fp32 (--disable-bf16-reduced-precision-matmul).
#include <cuda_runtime_api.h>

#include <cmath>
#include <tuple>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda_test {
namespace {

class Matmul : public CudaVsCpuDtype {
 protected:
  // out[M, N] (=|+=) op(a) op(b) (+ bias) on both backends, then compared.
  void check(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool with_bias, bool acc, DType out_dt,
             DType bias_dt) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb
                                      << " bias=" << with_bias << " acc=" << acc << " out=" << dtype_name(out_dt));
    Pair a = random(ta ? Shape{K, M} : Shape{M, K}, dt());
    Pair b = random(tb ? Shape{N, K} : Shape{K, N}, dt());
    Pair out = random(Shape{M, N}, out_dt);  // garbage for "=", the addend for "+="
    Pair bias = with_bias ? random(Shape{N}, bias_dt) : Pair{};
    cpu().matmul(out.cpu, a.cpu, b.cpu, bias.cpu, ta, tb, acc);
    gpu().matmul(out.gpu, a.gpu, b.gpu, bias.gpu, ta, tb, acc);
    // fp32 sums of K products of values in [-1, 1]: a few 1e-6 of sqrt(K) each.
    expect_close(out, storage_tol(out_dt, 1e-4, 1e-4), "matmul");
  }
};

TEST_P(Matmul, EveryTransposeBiasAndAccumulateAwkwardShape) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bias : {false, true})
        for (bool acc : {false, true}) check(37, 129, 67, ta, tb, bias, acc, dt(), dt());
}

TEST_P(Matmul, AlignedShapesLinearLayer) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(64, 256, 128, false, true, true, false, dt(), dt());   // y = x W^T + b
  check(64, 128, 256, false, false, false, false, dt(), dt()); // dx = dy W
  check(256, 128, 64, true, false, false, true, dt(), dt());   // dW += dy^T x
}

TEST_P(Matmul, F32OutputAndF32BiasWith16BitInputs) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 129, 67, false, true, true, false, DType::F32, DType::F32);  // f32 out: epilogue bias is f32
  check(37, 129, 67, false, true, true, true, dt(), DType::F32);         // bias dtype != out: separate add
}

TEST_P(Matmul, ThreeDimActivationAndRepeatedCallsReuseThePlan) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair x = random(Shape{3, 13, 64}, dt());  // [B, T, C] used as [B*T, C]
  Pair w = random(Shape{96, 64}, dt());
  Pair bias = random(Shape{96}, dt());
  Pair y{cpu().empty(Shape{3, 13, 96}, dt()), gpu().empty(Shape{3, 13, 96}, dt())};
  cpu().matmul(y.cpu, x.cpu, w.cpu, bias.cpu, false, true, false);
  gpu().matmul(y.gpu, x.gpu, w.gpu, bias.gpu, false, true, false);
  expect_close(y, storage_tol(dt(), 1e-4, 1e-4), "matmul 3-D");
  const std::vector<float> first = host_gpu(y);
  for (int i = 0; i < 3; ++i) gpu().matmul(y.gpu, x.gpu, w.gpu, bias.gpu, false, true, false);
  EXPECT_EQ(first, host_gpu(y)) << "repeated GEMM is not bit-identical";
}

// A bias that is a view one element into its buffer (2-byte aligned in 16-bit, 4 in fp32):
// cuBLASLt's bias epilogue is kept for 16-byte aligned vectors, so this takes the plain GEMM
// and the separate bias add, never the slow fallback kernel (before, the epilogue was
// planned for any alignment, and a shape without an algorithm for it fell to that kernel).
// The result is the CPU's.
TEST_P(Matmul, MisalignedBiasView) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t M = 256, N = 768, K = 768;
  Pair x = random(Shape{M, K}, dt());
  Pair w = random(Shape{N, K}, dt());
  Pair bias_buf = random(Shape{N + 1}, dt());
  Pair y{cpu().empty(Shape{M, N}, dt()), gpu().empty(Shape{M, N}, dt())};
  cpu().matmul(y.cpu, x.cpu, w.cpu, bias_buf.cpu.t().flat_slice(1, N), false, true, false);
  gpu().matmul(y.gpu, x.gpu, w.gpu, bias_buf.gpu.t().flat_slice(1, N), false, true, false);
  expect_close(y, storage_tol(dt(), 1e-4, 1e-4), "matmul, bias view at +1 element");
  gpu().synchronize();
  cuda::Gemm gemm(false);
  gemm.run(y.gpu, x.gpu, w.gpu, bias_buf.gpu.t().flat_slice(1, N), false, true, false, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(gemm.fallback_launches(), 0u) << "a misaligned bias sent the GEMM to the fallback kernel";
  expect_close(y, storage_tol(dt(), 1e-4, 1e-4), "matmul through cuda::Gemm, bias view at +1 element");
}

// Long reductions accumulate in fp32: K = 4096 products of ones sum to 4096 exactly (a
// power of two, exact in bf16 and fp16), where a 16-bit running sum would stall (bf16 at
// 256: 256 + 1 rounds to 256; fp16 at 2048). Likewise bias_backward's column sums over 4096
// rows of ones. Against the exact value, not the CPU.
TEST_P(Matmul, LongReductionsAccumulateInFp32) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t M = 16, N = 64, K = 4096;
  Pair a = filled(Shape{M, K}, dt(), 1.f), b = filled(Shape{N, K}, dt(), 1.f);
  Pair y = filled(Shape{M, N}, dt(), 0.f);
  gpu().matmul(y.gpu, a.gpu, b.gpu, Tensor(), false, true, false);
  for (float v : host_gpu(y)) ASSERT_EQ(v, 4096.f) << "matmul over K = 4096";
  Pair rows = filled(Shape{K, N}, dt(), 1.f), dbias = filled(Shape{N}, dt(), 0.f);
  gpu().bias_backward(rows.gpu, dbias.gpu);
  for (float v : host_gpu(dbias)) ASSERT_EQ(v, 4096.f) << "bias_backward over 4096 rows";
}

// TRIDENT_GEMM_AUTOTUNE=1: each shape's first call times the heuristic's candidates on its
// operands, then runs the fastest; the results are the CPU's, an accumulating call's too (its
// output is restored after the timing), through the backend and through a Gemm of the test's
// own, which says it timed its one shape.
TEST_P(Matmul, AutotunedAlgorithmsMatchCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ScopedEnv tune("TRIDENT_GEMM_AUTOTUNE", "1");
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool acc : {false, true}) check(256, 512, 384, ta, tb, !acc, acc, dt(), dt());
  check(37, 129, 67, false, true, true, true, dt(), dt());
  check(256, 512, 384, true, false, false, true, DType::F32, DType::F32);  // dW += dy^T x in fp32
  cuda::Gemm gemm(false);
  Pair a = random(Shape{128, 256}, dt()), b = random(Shape{192, 256}, dt()), out = random(Shape{128, 192}, dt());
  cpu().matmul(out.cpu, a.cpu, b.cpu, Tensor(), false, true, true);
  gpu().synchronize();
  for (int call = 0; call < 2; ++call) {  // the first call times; both add once
    gemm.run(out.gpu, a.gpu, b.gpu, Tensor(), false, true, true, nullptr);
    if (call == 0) cpu().matmul(out.cpu, a.cpu, b.cpu, Tensor(), false, true, true);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close(out, storage_tol(dt(), 1e-4, 1e-4), "autotuned matmul, accumulated twice");
  EXPECT_EQ(gemm.tuned_plans(), 1u);
  EXPECT_LE(gemm.retuned_plans(), 1u);
}

// --disable-bf16-reduced-precision-matmul: a bf16 GEMM over a long K of small integers, whose
// sums fp32 holds exactly (< 2^24) and bf16 does not: with split-K partial sums reduced only in
// fp32, every output is the exact sum rounded once to bf16, the CPU's bytes.
TEST_F(CudaVsCpu, Bf16GemmReducesSplitKInFp32WhenAsked) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t M = 64, N = 128, K = 32768;
  std::uniform_int_distribution<int> digit(0, 3);
  auto small_ints = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(digit(rng_));
    return v;
  };
  Pair a = upload(Shape{M, K}, DType::BF16, small_ints(M * K));
  Pair b = upload(Shape{N, K}, DType::BF16, small_ints(N * K));
  Pair out = filled(Shape{M, N}, DType::BF16, 0.f);
  cpu().matmul(out.cpu, a.cpu, b.cpu, Tensor(), false, true, false);
  gpu().synchronize();
  cuda::Gemm gemm(false, /*bf16_reduction_in_fp32=*/true);
  EXPECT_TRUE(gemm.bf16_reduction_in_fp32());
  gemm.run(out.gpu, a.gpu, b.gpu, Tensor(), false, true, false, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_identical(out, "bf16 GEMM, K = 32768, split-K reduced in fp32");
  EXPECT_EQ(gemm.fallback_launches(), 0u) << "cuBLASLt found no algorithm under the reduction mask";
}

// TRIDENT_GEMM_GEMV=1: x W^T of 1 to 16 rows (decoding's) through the GEMV kernel, with and
// without a bias, against the CPU; 17 rows, an accumulating call and an odd K still take
// cuBLASLt or the fallback (the same results).
TEST_P(Matmul, SmallRowsGemvMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ScopedEnv gemv("TRIDENT_GEMM_GEMV", "1");
  for (int64_t M : {1, 3, 8, 16, 17})
    for (int64_t N : {37, 2304})
      for (bool bias : {false, true}) check(M, N, 776, false, true, bias, false, dt(), dt());
  check(8, 64, 776, false, true, true, true, dt(), dt());  // accumulate: not the GEMV
  check(8, 64, 77, false, true, false, false, dt(), dt());  // K not whole vectors: not the GEMV
  // The kernel itself (cuBLASLt would give the same results, so the above cannot tell that the
  // GEMV ran): it takes these shapes, and its results are the CPU's.
  for (int64_t M : {1, 16}) {
    Pair a = random(Shape{M, 776}, dt()), w = random(Shape{2304, 776}, dt()), bias = random(Shape{2304}, dt());
    Pair out = random(Shape{M, 2304}, dt());
    cpu().matmul(out.cpu, a.cpu, w.cpu, bias.cpu, false, true, false);
    gpu().synchronize();
    EXPECT_TRUE(cuda::gemv_small_m(out.gpu, Tensor(), a.gpu, w.gpu, bias.gpu, nullptr)) << M << " rows";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_close(out, storage_tol(dt(), 1e-4, 1e-4), "gemv_small_m");
  }
  Pair a = random(Shape{17, 776}, dt()), w = random(Shape{64, 776}, dt()), out = random(Shape{17, 64}, dt());
  EXPECT_FALSE(cuda::gemv_small_m(out.gpu, Tensor(), a.gpu, w.gpu, Tensor(), nullptr)) << "17 rows";
}

TEST_P(Matmul, InnerDimensionMismatchThrows) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Buffer a = gpu().empty(Shape{4, 5}, dt()), b = gpu().empty(Shape{6, 7}, dt()), out = gpu().empty(Shape{4, 7}, dt());
  EXPECT_THROW(gpu().matmul(out, a, b, Tensor(), false, false, false), InternalError);
}

// Column sums by blocks of 32 lanes (16-byte vectors where C allows) over chunks of rows: one
// column block and the scalar path (C 129), several column blocks with the last one partial,
// vectors (C 2056, 16-bit: 9 blocks of 256 columns) and scalars (C 2050), over several row chunks.
TEST_P(Matmul, BiasBackwardAccumulatesColumnSums) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 129}, {1000, 129}, {1000, 2056}, {4099, 2056},
                                   {1000, 2050}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    Pair dout = random(Shape{rows, cols}, dt());
    Pair dbias = random(Shape{cols}, DType::F32);
    cpu().bias_backward(dout.cpu, dbias.cpu);
    gpu().bias_backward(dout.gpu, dbias.gpu);
    expect_close(dbias, Tol{1e-5, 1e-4}, "bias_backward f32 grad");
    Pair dbias16 = random(Shape{cols}, dt());
    cpu().bias_backward(dout.cpu, dbias16.cpu);
    gpu().bias_backward(dout.gpu, dbias16.gpu);
    expect_close(dbias16, storage_tol(dt(), 1e-5, 1e-4), "bias_backward");
  }
}

// The backward of a row-parallel projection's output through the hidden dropout, with the
// bias gradient, in one pass: dx identical to dropout_backward's (the same mask), dbias
// the column sums of that dx. 16-byte vector (C 136) and scalar (C 129) paths, rows of
// several samples.
TEST_P(Matmul, DropoutBiasBackward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  DropoutKey drop;
  drop.p = 0.1f;
  drop.seed = 77;
  drop.site = 2 * kSitesPerLayer + kDropMlpOut;
  drop.sample_base = 3;
  for (int64_t C : {int64_t{136}, int64_t{129}}) {
    SCOPED_TRACE(::testing::Message() << "C=" << C);
    Pair dout = random(Shape{1000, C}, dt());
    Pair dx = random(Shape{1000, C}, dt()), dbias = random(Shape{C}, DType::F32);
    cpu().dropout_bias_backward(dout.cpu, 250, drop, dx.cpu, dbias.cpu);
    gpu().dropout_bias_backward(dout.gpu, 250, drop, dx.gpu, dbias.gpu);
    expect_identical(dx, "dx");
    expect_close(dbias, Tol{1e-5, 1e-4}, "dbias");
  }
}

// A linear layer's weight and bias gradients (dw += dout^T x, dbias += column sums of dout:
// the GEMM and bias_backward) on an aligned and an awkward shape.
TEST_P(Matmul, LinearParamGrads) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (const auto& [rows, out, in] : {std::tuple<int64_t, int64_t, int64_t>{256, 192, 128}, {37, 129, 67}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows << " out=" << out << " in=" << in);
    Pair dout = random(Shape{rows, out}, dt()), x = random(Shape{rows, in}, dt());
    Pair dw = random(Shape{out, in}, dt()), dbias = random(Shape{out}, dt());  // the gradients so far
    cpu().linear_param_grads(dout.cpu, x.cpu, dw.cpu, dbias.cpu);
    gpu().linear_param_grads(dout.gpu, x.gpu, dw.gpu, dbias.gpu);
    expect_close(dw, storage_tol(dt(), 1e-4, 1e-4), "dw");
    expect_close(dbias, storage_tol(dt(), 1e-5, 1e-4), "dbias");
  }
}

// The MLP's GEMMs with GELU: forward pre = x W^T + b, out = gelu(pre); backward
// dpre = (dy W) * gelu'(pre). N = 64 takes cuBLASLt's GELU_AUX_BIAS / DGELU epilogues;
// N = 60 (not a multiple of 8) the unfused fallback. The epilogue applies gelu to the fp32
// accumulator, the CPU to the rounded pre: one extra rounding of a 16-bit pre, inside
// storage_tol. In fp32 the 1e-4 tolerance would catch an erf-GELU epilogue (it differs
// from the tanh approximation by up to 4.7e-4 around |x| = 2; these pre values reach 6).
// fp32's backward is the GEMM plus the exact GELU backward kernel: the DGELU epilogue failed
// this 1e-4 tolerance on an H200 (1.1e-4 on a gradient of 0.016), so it is 16-bit only.
// The erf GELU takes the GEMM (its bias epilogue) and the erf GELU kernels at every shape:
// the same tolerance catches a tanh epilogue computing it.
class MatmulGelu : public CudaVsCpuDtype {
 protected:
  void check(int64_t M, int64_t N, int64_t K, bool with_bias, Gelu form = Gelu::Tanh) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K << " bias=" << with_bias << " "
                                      << gelu_name(form));
    Pair x = random(Shape{M, K}, dt()), w = random(Shape{N, K}, dt());
    Pair bias = with_bias ? random(Shape{N}, dt()) : Pair{};
    Pair pre = random(Shape{M, N}, dt()), out = random(Shape{M, N}, dt());  // garbage: both are "="
    cpu().matmul_bias_gelu(pre.cpu, out.cpu, x.cpu, w.cpu, bias.cpu, false, true, form);
    gpu().matmul_bias_gelu(pre.gpu, out.gpu, x.gpu, w.gpu, bias.gpu, false, true, form);
    expect_close(pre, storage_tol(dt(), 1e-4, 1e-4), "pre");
    expect_close(out, storage_tol(dt(), 1e-4, 1e-4), "gelu out");

    // Backward from the CPU's pre on both sides, so only the backward differs.
    gpu().copy_from_host(pre.gpu, raw(cpu(), pre.cpu).data());
    Pair dy = random(Shape{M, K}, dt());
    Pair w2 = random(Shape{K, N}, dt());  // the down-projection [out=K, in=N]
    Pair dpre = random(Shape{M, N}, dt());
    cpu().matmul_gelu_backward(dpre.cpu, dy.cpu, w2.cpu, pre.cpu, false, false, form);
    gpu().matmul_gelu_backward(dpre.gpu, dy.gpu, w2.gpu, pre.gpu, false, false, form);
    expect_close(dpre, storage_tol(dt(), 1e-4, 1e-4), "dpre");
  }
  static std::vector<unsigned char> raw(Backend& be, const Tensor& t) {
    std::vector<unsigned char> b(t.nbytes());
    be.copy_to_host(b.data(), t);
    return b;
  }
};

TEST_P(MatmulGelu, EpilogueAndFallbackShapes) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 64, 96, true);
  check(37, 64, 96, false);
  check(37, 60, 96, true);
  check(128, 256, 64, true);
}

TEST_P(MatmulGelu, SmallRowsGemvMatchesCpu) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ScopedEnv gemv("TRIDENT_GEMM_GEMV", "1");
  check(1, 3072, 768, true);
  check(8, 3072, 768, true);
  check(16, 64, 96, false);
}

// The erf GELU at the epilogue's shapes (N = 64, 256), the fallback's (N = 60), and the small-M
// rows that TRIDENT_GEMM_GEMV=1 sends to the GEMV kernel for the tanh GELU only.
TEST_P(MatmulGelu, ErfTakesTheGemmAndTheErfKernel) {
  TRIDENT_SKIP_WITHOUT_GPU();
  check(37, 64, 96, true, Gelu::Erf);
  check(37, 64, 96, false, Gelu::Erf);
  check(37, 60, 96, true, Gelu::Erf);
  check(128, 256, 64, true, Gelu::Erf);
  ScopedEnv gemv("TRIDENT_GEMM_GEMV", "1");
  check(8, 3072, 768, true, Gelu::Erf);
}

// In fp16 and bf16 the tolerance above cannot tell the erf GELU from a tanh epilogue. The erf
// layers are the GEMM with its bias and then the GELU kernel: the same bits as those two ops
// called one after the other, forward and backward, at an epilogue's shape (N = 256) and the
// fallback's (N = 60). The tanh layer's bits differ there, so the check can fail.
TEST_P(MatmulGelu, ErfIsTheGemmThenTheGeluKernelBitForBit) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Backend& g = gpu();
  for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{128, 256, 64}, {37, 60, 96}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
    Pair x = random(Shape{M, K}, dt()), w = random(Shape{N, K}, dt()), bias = random(Shape{N}, dt());
    Pair pre = random(Shape{M, N}, dt()), out = random(Shape{M, N}, dt());
    Pair pre_ops = random(Shape{M, N}, dt()), out_ops = random(Shape{M, N}, dt()), out_tanh = random(Shape{M, N}, dt());
    g.matmul_bias_gelu(pre.gpu, out.gpu, x.gpu, w.gpu, bias.gpu, false, true, Gelu::Erf);
    g.matmul(pre_ops.gpu, x.gpu, w.gpu, bias.gpu, false, true, false);
    g.gelu_forward(pre_ops.gpu, out_ops.gpu, Gelu::Erf);
    EXPECT_EQ(raw(g, pre.gpu), raw(g, pre_ops.gpu)) << "pre";
    EXPECT_EQ(raw(g, out.gpu), raw(g, out_ops.gpu)) << "erf GELU out";
    g.matmul_bias_gelu(pre.gpu, out_tanh.gpu, x.gpu, w.gpu, bias.gpu, false, true, Gelu::Tanh);
    EXPECT_NE(raw(g, out_tanh.gpu), raw(g, out_ops.gpu)) << "the tanh GELU gave the erf GELU's bits";

    Pair dy = random(Shape{M, K}, dt()), w2 = random(Shape{K, N}, dt());
    Pair dpre = random(Shape{M, N}, dt()), dpre_ops = random(Shape{M, N}, dt());
    g.matmul_gelu_backward(dpre.gpu, dy.gpu, w2.gpu, pre_ops.gpu, false, false, Gelu::Erf);
    g.matmul(dpre_ops.gpu, dy.gpu, w2.gpu, Tensor{}, false, false, false);
    g.gelu_backward(dpre_ops.gpu, pre_ops.gpu, dpre_ops.gpu, Gelu::Erf);
    EXPECT_EQ(raw(g, dpre.gpu), raw(g, dpre_ops.gpu)) << "dpre";
  }
}

TEST_P(MatmulGelu, AutotunedAlgorithmsMatchCpuWithEpilogues) {
  TRIDENT_SKIP_WITHOUT_GPU();
  ScopedEnv tune("TRIDENT_GEMM_AUTOTUNE", "1");
  check(128, 256, 64, true);
  check(256, 512, 128, false);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulGelu, TRIDENT_FLOAT_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, Matmul, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
