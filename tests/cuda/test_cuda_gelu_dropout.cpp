// GPU vs CPU: GELU (tanh approximation and exact erf) forward/backward and dropout
// forward/backward.
// Dropout masks come from the same Philox function on both sides, so the kept/dropped
// pattern must match exactly, and fp32 values bit for bit.
#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class Gelu : public CudaVsCpuDtype {};
class Dropout : public CudaVsCpuDtype {};

// Both forms, on the 16-byte vector kernel (a tail of 37 x 129 elements) and, in place over
// dout, as matmul_gelu_backward's fallback calls it; an fp32 output of 16-bit input takes the
// runtime-typed kernel.
TEST_P(Gelu, ForwardAndBackward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (const trident::Gelu form : {trident::Gelu::Tanh, trident::Gelu::Erf}) {
    SCOPED_TRACE(gelu_name(form));
    Pair x = random(Shape{37, 129}, dt(), -5.f, 5.f);
    Pair out = random(Shape{37, 129}, dt());  // "=": previous contents must not matter
    cpu().gelu_forward(x.cpu, out.cpu, form);
    gpu().gelu_forward(x.gpu, out.gpu, form);
    expect_close(out, storage_tol(dt(), 1e-5, 1e-6), "gelu_forward");
    Pair dout = random(Shape{37, 129}, dt());
    Pair dx = random(Shape{37, 129}, dt());
    cpu().gelu_backward(dout.cpu, x.cpu, dx.cpu, form);
    gpu().gelu_backward(dout.gpu, x.gpu, dx.gpu, form);
    expect_close(dx, storage_tol(dt(), 1e-5, 1e-6), "gelu_backward");
    cpu().gelu_backward(dout.cpu, x.cpu, dout.cpu, form);
    gpu().gelu_backward(dout.gpu, x.gpu, dout.gpu, form);
    expect_close(dout, storage_tol(dt(), 1e-5, 1e-6), "gelu_backward in place");
    if (dt() != DType::F32) {
      Pair out32 = random(Shape{37, 129}, DType::F32);
      cpu().gelu_forward(x.cpu, out32.cpu, form);
      gpu().gelu_forward(x.gpu, out32.gpu, form);
      expect_close(out32, storage_tol(DType::F32, 1e-5, 1e-6), "gelu_forward to fp32");
    }
  }
}

TEST_P(Dropout, MasksMatchTheCpuBitForBit) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int T = 13;
  const int64_t N = 3 * T, row = 129;
  DropoutKey key;
  key.p = 0.1f;
  key.seed = 0x123456789abcULL;
  key.site = 7 * kSitesPerLayer + kDropMlpOut;
  key.sample_base = 4242;
  Pair x = random(Shape{N, row}, dt(), 0.5f, 1.5f);  // no zeros: a zero output means dropped
  Pair out = random(Shape{N, row}, dt());
  cpu().dropout_forward(x.cpu, out.cpu, T, key);
  gpu().dropout_forward(x.gpu, out.gpu, T, key);
  const std::vector<float> c = host_cpu(out), g = host_gpu(out);
  int64_t dropped = 0, mismatched = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    dropped += c[i] == 0.f;
    mismatched += (c[i] == 0.f) != (g[i] == 0.f);
  }
  EXPECT_EQ(mismatched, 0) << "dropout masks differ";
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, static_cast<int64_t>(c.size()) / 5);
  expect_identical(out, "dropout_forward");  // x * (1 / (1 - p)), one rounding on both
  Pair dout = random(Shape{N, row}, dt());
  Pair dx = random(Shape{N, row}, dt());
  cpu().dropout_backward(dout.cpu, dx.cpu, T, key);
  gpu().dropout_backward(dout.gpu, dx.gpu, T, key);
  expect_identical(dx, "dropout_backward");
}

// Every path of the CUDA kernel (units of 16 bytes of input as one vector, units of 4
// fp16/bf16 elements as one 8-byte vector, element-wise accesses for any sample size or
// alignment): sample sizes T * row that are multiples of 8, of 4 only, or of neither;
// views that start 0, 1, 2 or 4 elements into their allocations (on or off the vector
// grid) for the input and the output separately; every output dtype; p = 0.1 and p = 0
// (a copy/cast). Whole allocations are compared byte for byte, so the elements around
// each output view must stay untouched too.
TEST_P(Dropout, EveryPathAndLayoutMatchesTheCpuBitForBit) {
  TRIDENT_SKIP_WITHOUT_GPU();
  struct Case {
    int T;
    int64_t B, row;
  };
  const Case cases[] = {{64, 2, 2048}, {4, 3, 64}, {3, 5, 4},  {1, 7, 4},  {3, 3, 12},    {5, 3, 1000},
                        {3, 3, 1002},   {2, 3, 6},  {1, 3, 3},  {7, 3, 17}, {3, 1, 130}};
  constexpr int64_t kGuard = 19;
  for (const Case& c : cases) {
    const int64_t N = c.B * c.T, n = N * c.row;
    for (float p : {0.1f, 0.0f}) {
      DropoutKey key;
      key.p = p;
      key.seed = 0x5EED1234ABCDull;
      key.site = 3 * kSitesPerLayer + kDropAttnOut;
      key.sample_base = (uint64_t{1} << 32) + 99;
      for (int64_t in_off : {0, 1, 2, 4}) {
        for (int64_t out_off : {0, 1, 4}) {
          for (DType out_dt : {DType::F32, DType::F16, DType::BF16}) {
            SCOPED_TRACE("N=" + std::to_string(N) + " row=" + std::to_string(c.row) + " T=" + std::to_string(c.T) +
                         " p=" + std::to_string(p) + " out " + dtype_name(out_dt) + " offsets in " +
                         std::to_string(in_off) + " out " + std::to_string(out_off));
            Pair x = random(Shape{in_off + n + kGuard}, dt(), 0.5f, 1.5f);
            Pair out = filled(Shape{out_off + n + kGuard}, out_dt, NAN);
            const Shape s{N, c.row};
            const Tensor xc = x.cpu.t().flat_slice(in_off, n).view(s), xg = x.gpu.t().flat_slice(in_off, n).view(s);
            const Tensor oc = out.cpu.t().flat_slice(out_off, n).view(s);
            const Tensor og = out.gpu.t().flat_slice(out_off, n).view(s);
            cpu().dropout_forward(xc, oc, c.T, key);
            gpu().dropout_forward(xg, og, c.T, key);
            expect_identical(out, "dropout_forward");
            cpu().dropout_backward(xc, oc, c.T, key);
            gpu().dropout_backward(xg, og, c.T, key);
            expect_identical(out, "dropout_backward");
          }
        }
      }
    }
  }
}

// In place, as the model runs its hidden dropouts; p = 0 leaves the tensor as it is.
TEST_P(Dropout, InPlaceMatchesTheCpuBitForBit) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (float p : {0.1f, 0.0f}) {
    for (int64_t row : {2048, 12, 17}) {
      SCOPED_TRACE("row=" + std::to_string(row) + " p=" + std::to_string(p));
      DropoutKey key;
      key.p = p;
      key.seed = 77;
      key.site = kDropMlpOut;
      key.sample_base = 5;
      Pair x = random(Shape{3 * 16, row}, dt());
      cpu().dropout_forward(x.cpu, x.cpu, 16, key);
      gpu().dropout_forward(x.gpu, x.gpu, 16, key);
      expect_identical(x, "dropout_forward in place");
    }
  }
}

TEST_P(Dropout, ZeroProbabilityIsACopy) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair x = random(Shape{26, 129}, dt());
  Pair out = random(Shape{26, 129}, dt());
  gpu().dropout_forward(x.gpu, out.gpu, 13, DropoutKey{});
  EXPECT_EQ(host_gpu(x), host_gpu(out));
}

// Sequence parallelism's shards start inside a sample: DropoutKey::index_base continues the
// sample's numbering. Every kernel that draws a row-wise mask (dropout, the fused residual +
// LayerNorm, the fused dropout + bias gradient) must draw the CPU's.
TEST_P(Dropout, IndexBaseMatchesTheCpuBitForBit) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t rows = 6, row = 136;  // one piece of a sample, from its row 5 (index_base 5 x 136)
  DropoutKey key;
  key.p = 0.2f;
  key.seed = 31337;
  key.site = 5 * kSitesPerLayer + kDropAttnOut;
  key.sample_base = 99;
  key.index_base = 5 * row;
  Pair x = random(Shape{rows, row}, dt(), 0.5f, 1.5f), out = random(Shape{rows, row}, dt());
  cpu().dropout_forward(x.cpu, out.cpu, static_cast<int>(rows), key);
  gpu().dropout_forward(x.gpu, out.gpu, static_cast<int>(rows), key);
  expect_identical(out, "dropout_forward");
  Pair dx = random(Shape{rows, row}, dt()), dbias = random(Shape{row}, DType::F32);
  cpu().dropout_bias_backward(x.cpu, static_cast<int>(rows), key, dx.cpu, dbias.cpu);
  gpu().dropout_bias_backward(x.gpu, static_cast<int>(rows), key, dx.gpu, dbias.gpu);
  expect_identical(dx, "dropout_bias_backward dx");
  expect_close(dbias, Tol{1e-5, 1e-4}, "dropout_bias_backward dbias");
  Pair base = random(Shape{rows, row}, dt()), resid = random(Shape{rows, row}, dt());
  Pair gamma = random(Shape{row}, dt(), 0.5f, 1.5f), beta = random(Shape{row}, dt());
  Pair ln = random(Shape{rows, row}, dt()), mean = random(Shape{rows}, DType::F32), rstd = random(Shape{rows}, DType::F32);
  cpu().dropout_residual_layernorm_forward(base.cpu, x.cpu, static_cast<int>(rows), key, resid.cpu, gamma.cpu,
                                           beta.cpu, ln.cpu, mean.cpu, rstd.cpu);
  gpu().dropout_residual_layernorm_forward(base.gpu, x.gpu, static_cast<int>(rows), key, resid.gpu, gamma.gpu,
                                           beta.gpu, ln.gpu, mean.gpu, rstd.gpu);
  expect_identical(resid, "dropout_residual_layernorm_forward resid");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Gelu, TRIDENT_FLOAT_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, Dropout, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
