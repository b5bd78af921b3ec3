// Embedding forward and backward per dtype, unsharded and as two vocab shards
// (vocab_start), against a double reference; the backward ("+=") is checked against
// central differences of L = sum(out * R). Repeated tokens make the scatter collide.
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

constexpr int64_t kV = 11, kC = 6, kB = 2, kT = 5, kP = 8;  // wpe has more rows than T
const std::vector<int32_t> kTokens = {3, 0, 10, 3, 3, 7, 5, 10, 0, 3};

class Embedding : public ::testing::TestWithParam<DType> {};

TEST_P(Embedding, ForwardShardedMatchesReference) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto wte = randn(kV * kC, 1), wpe = randn(kP * kC, 2);
  const Vec rwte = rounded(wte, dt), rwpe = rounded(wpe, dt);
  Buffer tok = upload_i32(*be, kTokens, Shape{kB, kT});
  Buffer P = upload(*be, wpe, Shape{kP, kC}, dt);
  // Shard 0 owns ids [0, 6), shard 1 owns [6, 11); the sum of the two is the full result.
  for (int64_t start : {int64_t{0}, int64_t{6}}) {
    const int64_t rows = start == 0 ? 6 : kV - 6;
    std::vector<float> part(wte.begin() + start * kC, wte.begin() + (start + rows) * kC);
    const Vec rpart(rwte.begin() + start * kC, rwte.begin() + (start + rows) * kC);
    Buffer W = upload(*be, part, Shape{rows, kC}, dt), out = be->empty(Shape{kB * kT, kC}, dt);
    be->embedding_forward(tok, W, start, P, static_cast<int>(kT), out);
    expect_close(download(*be, out), ref::embedding(kTokens, rpart, rows, kC, start, &rwpe, kT), 0, dtype_tol(dt),
                 "shard " + std::to_string(start));
    be->embedding_forward(tok, W, start, Tensor(), static_cast<int>(kT), out);  // no positions
    expect_close(download(*be, out), ref::embedding(kTokens, rpart, rows, kC, start, nullptr, kT), 0, dtype_tol(dt),
                 "shard no wpe " + std::to_string(start));
  }
}

TEST_P(Embedding, BackwardShardedMatchesFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto wte = randn(kV * kC, 3), wpe = randn(kP * kC, 4), r = randn(kB * kT * kC, 5);
  const Vec rwpe = rounded(wpe, dt), rr = rounded(r, dt);
  Buffer tok = upload_i32(*be, kTokens, Shape{kB * kT});
  Buffer R = upload(*be, r, Shape{kB * kT, kC}, dt);
  const int64_t start = 4, rows = 5;  // a middle shard: ids [4, 9)
  std::vector<float> part(wte.begin() + start * kC, wte.begin() + (start + rows) * kC);
  const Vec rpart = rounded(part, dt);
  const auto g0 = randn(rows * kC, 6), p0 = randn(kP * kC, 7);
  Buffer dW = upload(*be, g0, Shape{rows, kC}, dt), dP = upload(*be, p0, Shape{kP, kC}, dt);
  be->embedding_backward(R, tok, start, static_cast<int>(kT), dW, dP);
  Vec want_w = fd_grad([&](const Vec& v) { return dot(ref::embedding(kTokens, v, rows, kC, start, &rwpe, kT), rr); }, rpart);
  Vec want_p = fd_grad([&](const Vec& v) { return dot(ref::embedding(kTokens, rpart, rows, kC, start, &v, kT), rr); }, rwpe);
  const Vec rg0 = rounded(g0, dt), rp0 = rounded(p0, dt);
  for (size_t i = 0; i < want_w.size(); ++i) want_w[i] += rg0[i];
  for (size_t i = 0; i < want_p.size(); ++i) want_p[i] += rp0[i];
  const double tol = std::max(dtype_tol(dt), 1e-6);
  expect_close(download(*be, dW), want_w, 4 * tol, tol, "dwte");
  expect_close(download(*be, dP), want_p, 4 * tol, tol, "dwpe");
  // Positions T..P-1 of dwpe are untouched.
  const Vec got_p = download(*be, dP);
  for (int64_t i = kT * kC; i < kP * kC; ++i) EXPECT_EQ(got_p[i], rp0[i]);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Embedding, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
