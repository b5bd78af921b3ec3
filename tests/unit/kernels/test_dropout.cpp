// Activation dropout: forward per dtype against the mask drawn directly from
// dropout_keep with index (n % T) * row + c of sample sample_base + n / T; p = 0 copies;
// the backward ("=") applies the same mask, checked against finite differences.
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

constexpr int64_t kB = 3, kT = 5, kRow = 19;

Vec reference(const Vec& x, const DropoutKey& k) {
  Vec out(x.size());
  for (int64_t n = 0; n < kB * kT; ++n)
    for (int64_t c = 0; c < kRow; ++c)
      out[n * kRow + c] = x[n * kRow + c] * ref::drop_factor(k, k.sample_base + n / kT, (n % kT) * kRow + c);
  return out;
}

class Dropout : public ::testing::TestWithParam<DType> {};

TEST_P(Dropout, ForwardMatchesMask) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto x = randn(kB * kT * kRow, 1);
  const DropoutKey k{0.1f, 99, kDropMlpOut, 1000};
  Buffer X = upload(*be, x, Shape{kB * kT, kRow}, dt), out = be->empty(Shape{kB * kT, kRow}, dt);
  be->dropout_forward(X, out, static_cast<int>(kT), k);
  const Vec got = download(*be, out), want = reference(rounded(x, dt), k);
  expect_close(got, want, 0, dtype_tol(dt), "dropout");
  int dropped = 0;
  for (double v : want) dropped += v == 0.0;
  EXPECT_GT(dropped, 0);  // with 285 elements and p = 0.1 some are dropped

  be->dropout_forward(X, out, static_cast<int>(kT), DropoutKey{});  // p = 0: a copy
  EXPECT_EQ(bytes(*be, out), bytes(*be, X));
}

TEST_P(Dropout, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = kB * kT * kRow;
  const auto x = randn(n, 2), r = randn(n, 3);
  const Vec rx = rounded(x, dt), rr = rounded(r, dt);
  const DropoutKey k{0.25f, 7, kDropAttnOut, 3};
  Buffer R = upload(*be, r, Shape{kB * kT, kRow}, dt), dx = upload(*be, randn(n, 4), Shape{kB * kT, kRow}, dt);
  be->dropout_backward(R, dx, static_cast<int>(kT), k);
  const Vec want = fd_grad([&](const Vec& v) { return dot(reference(v, k), rr); }, rx);
  const double tol = std::max(dtype_tol(dt), 1e-6);
  expect_close(download(*be, dx), want, tol, tol, "dx");
}

// Shifting sample_base by one sample moves the mask by one block of T rows.
TEST(DropoutLayout, SampleBaseShiftsMask) {
  auto be = make_cpu_backend();
  const int64_t n = kB * kT * kRow;
  std::vector<float> ones(n, 1.0f);
  Buffer X = upload(*be, ones, Shape{kB * kT, kRow}, DType::F32);
  Buffer a = be->empty(Shape{kB * kT, kRow}, DType::F32), b = be->empty(Shape{kB * kT, kRow}, DType::F32);
  be->dropout_forward(X, a, static_cast<int>(kT), DropoutKey{0.5f, 1, 0, 10});
  be->dropout_forward(X, b, static_cast<int>(kT), DropoutKey{0.5f, 1, 0, 11});
  const Vec va = download(*be, a), vb = download(*be, b);
  for (int64_t i = 0; i < (kB - 1) * kT * kRow; ++i) ASSERT_EQ(va[i + kT * kRow], vb[i]) << i;
}

// A tensor holding rows [r0, r1) of one sample (a sequence-parallel shard that starts
// inside a sample) draws, with index_base r0 x row and its rows counted as one "sample" of
// r1 - r0 rows, exactly that part of the whole sample's mask.
TEST(DropoutLayout, IndexBaseContinuesInsideASample) {
  auto be = make_cpu_backend();
  constexpr int64_t kRow4 = 20;  // a multiple of 4: every row starts a Philox block
  const auto x = randn(kT * kRow4, 5);
  const DropoutKey whole{0.3f, 21, kDropAttnOut, 77};
  Buffer X = upload(*be, x, Shape{kT, kRow4}, DType::F32), full = be->empty(Shape{kT, kRow4}, DType::F32);
  be->dropout_forward(X, full, static_cast<int>(kT), whole);
  const Vec want = download(*be, full);
  int dropped = 0;
  for (double v : want) dropped += v == 0.0;
  ASSERT_GT(dropped, 0);
  for (int64_t r0 = 1; r0 < kT; ++r0)
    for (int64_t r1 = r0 + 1; r1 <= kT; ++r1) {
      DropoutKey part = whole;
      part.index_base = static_cast<uint64_t>(r0 * kRow4);
      const int64_t rows = r1 - r0;
      std::vector<float> xs(x.begin() + r0 * kRow4, x.begin() + r1 * kRow4);
      Buffer Xs = upload(*be, xs, Shape{rows, kRow4}, DType::F32), out = be->empty(Shape{rows, kRow4}, DType::F32);
      be->dropout_forward(Xs, out, static_cast<int>(rows), part);
      const Vec got = download(*be, out);
      for (int64_t i = 0; i < rows * kRow4; ++i) ASSERT_EQ(got[i], want[r0 * kRow4 + i]) << "rows " << r0 << "-" << r1;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Dropout, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
