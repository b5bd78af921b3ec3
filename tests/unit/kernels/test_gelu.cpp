// GELU of both forms (the tanh approximation, the exact erf one): forward per dtype against
// the double formula on sizes around the CPU op's 1024-element chunks (a lone chunk's tail,
// one past a chunk, several), including large |x| where tanh and erf saturate; backward
// ("=", and in place over dout as matmul_gelu_backward calls it) against central differences.
#include <tuple>

#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

class GeluOp : public ::testing::TestWithParam<std::tuple<DType, Gelu>> {};

TEST_P(GeluOp, ForwardMatchesReference) {
  const auto [dt, form] = GetParam();
  auto be = make_cpu_backend();
  for (size_t random : {size_t{0}, size_t{1017}, size_t{1019}, size_t{3000}}) {
    auto x = randn(random, 1, 3.0f);
    x.insert(x.end(), {0.0f, -0.0f, 20.0f, -20.0f, 1.0f, -1.0f});
    const int64_t n = static_cast<int64_t>(x.size());
    SCOPED_TRACE("n=" + std::to_string(n));
    Buffer X = upload(*be, x, Shape{n}, dt), out = upload(*be, randn(x.size(), 2), Shape{n}, dt);  // "="
    be->gelu_forward(X, out, form);
    Vec want = rounded(x, dt);
    for (auto& v : want) v = ref::gelu(v, form);
    const double tol = dtype_tol(dt);
    const Vec got = download(*be, out);
    expect_close(got, want, tol, tol, "gelu");
    if (dt == DType::F32) {  // the formula itself at 1: gelu_new(1), and Phi(1) for the exact form
      EXPECT_NEAR(got[n - 2], form == Gelu::Erf ? 0.841344746068543 : 0.841191990608, 1e-6);
    }
  }
  EXPECT_NEAR(ref::gelu(1.0, Gelu::Tanh), 0.841191990608, 1e-11);
  EXPECT_NEAR(ref::gelu(1.0, Gelu::Erf), 0.841344746068543, 1e-14);
}

TEST_P(GeluOp, BackwardMatchesFiniteDifferences) {
  const auto [dt, form] = GetParam();
  auto be = make_cpu_backend();
  for (int64_t n : {int64_t{1}, int64_t{500}, int64_t{1025}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = randn(n, 2, 2.5f), r = randn(n, 3);
    const Vec rx = rounded(x, dt), rr = rounded(r, dt);
    Buffer X = upload(*be, x, Shape{n}, dt), R = upload(*be, r, Shape{n}, dt);
    Buffer dx = upload(*be, randn(n, 4), Shape{n}, dt);  // "=": old contents must vanish
    be->gelu_backward(R, X, dx, form);
    const Vec want = fd_grad([&](const Vec& v) {
      double s = 0;
      for (size_t i = 0; i < v.size(); ++i) s += ref::gelu(v[i], form) * rr[i];
      return s;
    }, rx);
    const double tol = std::max(dtype_tol(dt), 1e-5);
    expect_close(download(*be, dx), want, 4 * tol, tol, "dx");
    be->gelu_backward(R, X, R, form);  // in place over dout
    expect_close(download(*be, R), download(*be, dx), 0, 0, "dx in place");
  }
}

// The two forms are different functions: up to 4.7e-4 apart near x = -2.7.
TEST(GeluForms, DifferWhereExpected) {
  auto be = make_cpu_backend();
  Buffer X = upload(*be, {-2.7f, 0.0f, 3.0f}, Shape{3}, DType::F32);
  Buffer t = be->empty(Shape{3}, DType::F32), e = be->empty(Shape{3}, DType::F32);
  be->gelu_forward(X, t, Gelu::Tanh);
  be->gelu_forward(X, e, Gelu::Erf);
  const Vec tv = download(*be, t), ev = download(*be, e);
  EXPECT_NEAR(tv[0] - ev[0], 4.73e-4, 2e-6);
  EXPECT_EQ(tv[1], 0.0);
  EXPECT_EQ(ev[1], 0.0);
  EXPECT_NE(tv[2], ev[2]);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndForms, GeluOp,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Values(Gelu::Tanh, Gelu::Erf)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  gelu_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace trident::test
