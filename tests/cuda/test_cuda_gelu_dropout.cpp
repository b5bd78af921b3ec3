// GPU vs CPU: GELU (tanh approximation) forward/backward and dropout forward/backward.
// Dropout masks come from the same Philox function on both sides, so the kept/dropped
// pattern must match exactly, and fp32 values bit for bit.
#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class Gelu : public CudaVsCpuDtype {};
class Dropout : public CudaVsCpuDtype {};

TEST_P(Gelu, ForwardAndBackward) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair x = random(Shape{37, 129}, dt(), -5.f, 5.f);
  Pair out = random(Shape{37, 129}, dt());  // "=": previous contents must not matter
  cpu().gelu_forward(x.cpu, out.cpu);
  gpu().gelu_forward(x.gpu, out.gpu);
  expect_close(out, storage_tol(dt(), 1e-5, 1e-6), "gelu_forward");
  Pair dout = random(Shape{37, 129}, dt());
  Pair dx = random(Shape{37, 129}, dt());
  cpu().gelu_backward(dout.cpu, x.cpu, dx.cpu);
  gpu().gelu_backward(dout.gpu, x.gpu, dx.gpu);
  expect_close(dx, storage_tol(dt(), 1e-5, 1e-6), "gelu_backward");
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

TEST_P(Dropout, ZeroProbabilityIsACopy) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair x = random(Shape{26, 129}, dt());
  Pair out = random(Shape{26, 129}, dt());
  gpu().dropout_forward(x.gpu, out.gpu, 13, DropoutKey{});
  EXPECT_EQ(host_gpu(x), host_gpu(out));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Gelu, TRIDENT_FLOAT_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, Dropout, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
