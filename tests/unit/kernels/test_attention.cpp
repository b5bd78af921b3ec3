// Fused causal attention at odd sizes (B=2, T=7, H=3, D=12), with and without dropout on
// the probabilities (p = 0.1), with a head offset as under tensor parallelism:
// forward (out, lse) per dtype against a double reference; backward (dqkv, "=") against
// central differences of L = sum(out * R) on the double reference (same dropout mask).
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

constexpr int kB = 2, kT = 7, kH = 3, kD = 12;

struct Case {
  DType dt;
  float p;
  int head_offset;
};

class Attention : public ::testing::TestWithParam<Case> {};

DropoutKey key(float p) { return DropoutKey{p, 1234, 4 * 2 + kDropAttnProbs, 40}; }

TEST_P(Attention, ForwardMatchesReference) {
  const Case c = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD;
  const auto qkv = randn(n, 1, 1.5f);
  const AttentionShape s{kB, kT, kH, kD, c.head_offset, kH + c.head_offset};
  Buffer QKV = upload(*be, qkv, Shape{kB, kT, 3 * kH * kD}, c.dt);
  Buffer out = be->empty(Shape{kB, kT, kH * kD}, c.dt), lse = be->empty(Shape{kB, kH, kT}, DType::F32);
  be->attention_forward(QKV, out, lse, s, key(c.p));
  Vec want_lse;
  const Vec want = ref::attention(rounded(qkv, c.dt), kB, kT, kH, kD, c.head_offset, key(c.p), &want_lse);
  const double tol = dtype_tol(c.dt);
  expect_close(download(*be, out), want, 4 * tol, tol, "out");
  expect_close(download(*be, lse), want_lse, 1e-5, 1e-5, "lse");
}

TEST_P(Attention, BackwardMatchesFiniteDifferences) {
  const Case c = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD, no = int64_t{kB} * kT * kH * kD;
  const auto qkv = randn(n, 2), r = randn(no, 3);
  const Vec rq = rounded(qkv, c.dt), rr = rounded(r, c.dt);
  const AttentionShape s{kB, kT, kH, kD, c.head_offset, 0};
  Buffer QKV = upload(*be, qkv, Shape{kB * kT, 3 * kH * kD}, c.dt);
  Buffer out = be->empty(Shape{kB * kT, kH * kD}, c.dt), lse = be->empty(Shape{kB, kH, kT}, DType::F32);
  be->attention_forward(QKV, out, lse, s, key(c.p));
  Buffer R = upload(*be, r, Shape{kB * kT, kH * kD}, c.dt);
  Buffer dqkv = upload(*be, randn(n, 4), Shape{kB * kT, 3 * kH * kD}, c.dt);  // "=": overwritten
  be->attention_backward(R, QKV, out, lse, dqkv, s, key(c.p));
  const Vec want = fd_grad([&](const Vec& v) { return dot(ref::attention(v, kB, kT, kH, kD, c.head_offset, key(c.p)), rr); }, rq);
  const double tol = std::max(dtype_tol(c.dt), 1e-4);
  expect_close(download(*be, dqkv), want, 4 * tol, tol, "dqkv");
}

// Dropout changes the output (the mask is really applied) and depends on the head offset.
TEST(AttentionDropout, MaskIsAppliedAndGlobal) {
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD, no = int64_t{kB} * kT * kH * kD;
  Buffer QKV = upload(*be, randn(n, 5), Shape{n}, DType::F32);
  Buffer o0 = be->empty(Shape{no}, DType::F32), o1 = be->empty(Shape{no}, DType::F32), o2 = be->empty(Shape{no}, DType::F32);
  Buffer lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  be->attention_forward(QKV, o0, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, key(0.0f));
  be->attention_forward(QKV, o1, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, key(0.1f));
  be->attention_forward(QKV, o2, lse, AttentionShape{kB, kT, kH, kD, 3, 6}, key(0.1f));
  EXPECT_NE(bytes(*be, o0), bytes(*be, o1));
  EXPECT_NE(bytes(*be, o1), bytes(*be, o2));
}

// Row 0 attends only to itself: out = v_0 exactly and lse = q_0.k_0 / sqrt(D).
TEST(AttentionCausal, FirstRowIsItsOwnValue) {
  auto be = make_cpu_backend();
  const int64_t n = int64_t{kB} * kT * 3 * kH * kD;
  const auto qkv = randn(n, 6);
  Buffer QKV = upload(*be, qkv, Shape{n}, DType::F32);
  Buffer out = be->empty(Shape{int64_t{kB} * kT * kH * kD}, DType::F32), lse = be->empty(Shape{kB * kH * kT}, DType::F32);
  be->attention_forward(QKV, out, lse, AttentionShape{kB, kT, kH, kD, 0, 0}, DropoutKey{});
  const Vec o = download(*be, out);
  for (int h = 0; h < kH; ++h)
    for (int d = 0; d < kD; ++d) EXPECT_NEAR(o[h * kD + d], qkv[(2 * kH + h) * kD + d], 1e-6);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (float p : {0.0f, 0.1f}) v.push_back({dt, p, p > 0 ? 2 : 0});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, Attention, ::testing::ValuesIn(cases()), [](const auto& info) {
  return std::string(dtype_name(info.param.dt)) + (info.param.p > 0 ? "_dropout" : "_nodrop");
});

}  // namespace
}  // namespace trident::test
