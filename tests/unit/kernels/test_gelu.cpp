// GELU (tanh approximation): forward per dtype against the double formula, including
// large |x| where tanh saturates; backward ("=") against central differences.
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

class Gelu : public ::testing::TestWithParam<DType> {};

TEST_P(Gelu, ForwardMatchesReference) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  auto x = randn(3000, 1, 3.0f);
  x.insert(x.end(), {0.0f, -0.0f, 20.0f, -20.0f, 1.0f, -1.0f});
  const int64_t n = static_cast<int64_t>(x.size());
  Buffer X = upload(*be, x, Shape{n}, dt), out = be->empty(Shape{n}, dt);
  be->gelu_forward(X, out);
  Vec want = rounded(x, dt);
  for (auto& v : want) v = ref::gelu(v);
  const double tol = dtype_tol(dt);
  const Vec got = download(*be, out);
  expect_close(got, want, tol, tol, "gelu");
  EXPECT_NEAR(ref::gelu(1.0), 0.841191990608, 1e-11);  // the formula itself: gelu_new(1)
  if (dt == DType::F32) {
    EXPECT_NEAR(got[n - 2], 0.841191990608, 1e-6);
  }
}

TEST_P(Gelu, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = 500;
  const auto x = randn(n, 2, 2.5f), r = randn(n, 3);
  const Vec rx = rounded(x, dt), rr = rounded(r, dt);
  Buffer X = upload(*be, x, Shape{n}, dt), R = upload(*be, r, Shape{n}, dt);
  Buffer dx = upload(*be, randn(n, 4), Shape{n}, dt);  // "=": old contents must vanish
  be->gelu_backward(R, X, dx);
  const Vec want = fd_grad([&](const Vec& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += ref::gelu(v[i]) * rr[i];
    return s;
  }, rx);
  const double tol = std::max(dtype_tol(dt), 1e-5);
  expect_close(download(*be, dx), want, 4 * tol, tol, "dx");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Gelu, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
