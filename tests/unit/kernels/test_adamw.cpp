// AdamW: several steps against a double implementation of the AdamWArgs formula, with
// weight decay, a grad scale, 16-bit gradients and the model-dtype copy of the master.
#include "kernel_test_util.h"

namespace trident::test {
namespace {

class AdamW : public ::testing::TestWithParam<DType> {};

TEST_P(AdamW, StepsMatchReference) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = 2051;
  const auto p0 = randn(n, 1);
  Vec p = to_vec(p0), m(n, 0), v(n, 0);
  Buffer master = upload(*be, p0, Shape{n}, DType::F32);
  Buffer M = be->zeros(Shape{n}, DType::F32), V = be->zeros(Shape{n}, DType::F32);
  Buffer model = be->zeros(Shape{n}, dt);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.25;
  for (int step = 1; step <= 4; ++step) {
    const auto g = randn(n, 10 + step, 3.0f);
    const Vec rg = rounded(g, dt);
    Buffer G = upload(*be, g, Shape{n}, dt);
    AdamWArgs a;
    a.master = master;
    a.grad = G;
    a.m = M;
    a.v = V;
    a.model_param = model;
    a.lr = static_cast<float>(lr);
    a.beta1 = static_cast<float>(b1);
    a.beta2 = static_cast<float>(b2);
    a.eps = static_cast<float>(eps);
    a.weight_decay = static_cast<float>(wd);
    a.grad_scale = static_cast<float>(scale);
    a.step = step;
    be->adamw(a);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = rg[i] * scale;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mh = m[i] / (1 - std::pow(b1, step)), vh = v[i] / (1 - std::pow(b2, step));
      p[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * p[i]);
    }
  }
  // The update is O(lr) per step; fp32 error relative to it stays far below 1e-5.
  expect_close(download(*be, master), p, 1e-5, 1e-6, "master");
  expect_close(download(*be, M), m, 1e-6, 1e-5, "m");
  expect_close(download(*be, V), v, 1e-6, 1e-5, "v");
  // The model copy is the master rounded to its dtype.
  const Vec got_master = download(*be, master);
  std::vector<float> mf(got_master.begin(), got_master.end());
  EXPECT_EQ(download(*be, model), rounded(mf, dt));
}

TEST(AdamWArgsCheck, MismatchThrows) {
  auto be = make_cpu_backend();
  Buffer a = be->zeros(Shape{4}, DType::F32), b = be->zeros(Shape{5}, DType::F32);
  AdamWArgs args;
  args.master = a;
  args.grad = b;
  args.m = a;
  args.v = a;
  EXPECT_THROW(be->adamw(args), InternalError);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamW, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
