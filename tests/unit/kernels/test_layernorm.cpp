// LayerNorm forward (out, mean, rstd) per dtype against a double reference, and the
// backward (dx, dgamma, dbeta, all "+=") against central differences of
// L = sum(out * R) evaluated on the double reference.
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

class LayerNorm : public ::testing::TestWithParam<DType> {};

constexpr int64_t kN = 9, kC = 37;

TEST_P(LayerNorm, ForwardMatchesReference) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  auto x = randn(kN * kC, 1, 2.0f);
  for (int64_t c = 0; c < kC; ++c) x[c] += 50.0f;  // a row with a large mean
  const auto g = randn(kC, 2), b = randn(kC, 3);
  Buffer X = upload(*be, x, Shape{kN, kC}, dt), G = upload(*be, g, Shape{kC}, dt), Bt = upload(*be, b, Shape{kC}, dt);
  Buffer out = be->empty(Shape{kN, kC}, dt), mean = be->empty(Shape{kN}, DType::F32), rstd = be->empty(Shape{kN}, DType::F32);
  be->layernorm_forward(X, G, Bt, out, mean, rstd);
  Vec wm, wr;
  const Vec want = ref::layernorm(rounded(x, dt), rounded(g, dt), rounded(b, dt), kN, kC, &wm, &wr);
  const double tol = dtype_tol(dt);
  expect_close(download(*be, out), want, 4 * tol, tol, "out");
  expect_close(download(*be, mean), wm, 1e-6, 1e-6, "mean");
  expect_close(download(*be, rstd), wr, 1e-6, 1e-5, "rstd");
}

TEST_P(LayerNorm, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto x = randn(kN * kC, 4, 1.5f), g = randn(kC, 5), b = randn(kC, 6), r = randn(kN * kC, 7);
  const Vec rx = rounded(x, dt), rg = rounded(g, dt), rb = rounded(b, dt), rr = rounded(r, dt);
  Buffer X = upload(*be, x, Shape{kN, kC}, dt), G = upload(*be, g, Shape{kC}, dt), Bt = upload(*be, b, Shape{kC}, dt);
  Buffer out = be->empty(Shape{kN, kC}, dt), mean = be->empty(Shape{kN}, DType::F32), rstd = be->empty(Shape{kN}, DType::F32);
  be->layernorm_forward(X, G, Bt, out, mean, rstd);
  // Gradients start non-zero: the op must add to them.
  const auto dx0 = randn(kN * kC, 8), dg0 = randn(kC, 9), db0 = randn(kC, 10);
  Buffer dout = upload(*be, r, Shape{kN, kC}, dt);
  Buffer dx = upload(*be, dx0, Shape{kN, kC}, dt), dg = upload(*be, dg0, Shape{kC}, dt), db = upload(*be, db0, Shape{kC}, dt);
  be->layernorm_backward(dout, X, G, mean, rstd, dx, dg, db);

  auto add = [](Vec a, const Vec& b) { for (size_t i = 0; i < a.size(); ++i) a[i] += b[i]; return a; };
  const Vec want_dx = add(fd_grad([&](const Vec& v) { return dot(ref::layernorm(v, rg, rb, kN, kC), rr); }, rx), rounded(dx0, dt));
  const Vec want_dg = add(fd_grad([&](const Vec& v) { return dot(ref::layernorm(rx, v, rb, kN, kC), rr); }, rg), rounded(dg0, dt));
  const Vec want_db = add(fd_grad([&](const Vec& v) { return dot(ref::layernorm(rx, rg, v, kN, kC), rr); }, rb), rounded(db0, dt));
  // f32: FD truncation (h = 1e-6) and fp32 arithmetic both stay below 1e-4 of O(1..10) values.
  const double tol = std::max(dtype_tol(dt), 1e-4);
  expect_close(download(*be, dx), want_dx, 4 * tol, tol, "dx");
  expect_close(download(*be, dg), want_dg, 8 * tol, tol, "dgamma");
  expect_close(download(*be, db), want_db, 8 * tol, tol, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNorm, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
