// sample_logits (a decoding step's sampled draw) on the CPU backend, per dtype: the ids of
// rows with ties, -inf and NaN logits, and padding columns holding larger logits, under
// temperatures, top-k (with the k-th's ties) and per-row top-p, against the draw written
// out in draw_ref.h (a full sort and running sums); a grid of uniforms over a small row
// draws each token in proportion to its probability worked out by hand; rows in segments (a
// TP group's logits gathered rank-major) as the whole rows; and the argument checks.
#include "kernel_test_util.h"
#include "unit/kernels/draw_ref.h"

namespace trident::test {
namespace {

class Sample : public ::testing::TestWithParam<DType> {};

std::vector<int32_t> ids_of(Backend& be, const Tensor& ids) {
  std::vector<int32_t> out(static_cast<size_t>(ids.numel()));
  be.copy_to_host(out.data(), ids);
  return out;
}

TEST_P(Sample, DrawsWhatTheSortedRunningSumsDraw) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  constexpr int64_t kRows = 12, kValid = 301, kWidth = 304;
  std::vector<float> l = randn(kRows * kWidth, 7, 2.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    float* row = l.data() + r * kWidth;
    std::fill(row + kValid, row + kWidth, 100.0f);                          // padding: never drawn
    if (r % 3 == 1) for (int64_t c = 0; c < kValid; ++c) row[c] = std::round(row[c] * 2) / 2;  // many ties
    if (r % 4 == 2) for (int64_t c = 0; c < kValid; c += 5) row[c] = -INFINITY;
    if (r % 5 == 3) row[r] = row[r + 40] = NAN;
  }
  Buffer logits = upload(*be, l, Shape{kRows, kWidth}, dt);
  const Vec held_d = rounded(l, dt);
  const std::vector<float> held(held_d.begin(), held_d.end());
  Buffer ids = be->empty(Shape{kRows}, DType::I32);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int checked = 0;
  for (double temperature : {0.6, 1.0, 2.5})
    for (int top_k : {0, 2, 7, 40, 400}) {
      std::vector<RowDraw> draws(kRows);
      for (int64_t r = 0; r < kRows; ++r) {
        const double top_p_choices[] = {0.0, 0.05, 0.5, 0.9, 1.0};
        draws[r] = RowDraw{uniform(rng), top_p_choices[(r + top_k) % 5]};
      }
      be->sample_logits(logits, kValid, temperature, top_k, draws, ids);
      const std::vector<int32_t> got = ids_of(*be, ids);
      for (int64_t r = 0; r < kRows; ++r) {
        const DrawRef ref = draw_ref(held.data() + r * kWidth, kValid, temperature, top_k, draws[r].top_p);
        EXPECT_EQ(got[r], ref.id(draws[r].uniform))
            << "row " << r << " temperature " << temperature << " top_k " << top_k << " top_p " << draws[r].top_p;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 3 * 5 * kRows);
}

TEST_P(Sample, UniformsDrawTheProbabilities) {
  // Logits 0, log 2, log 3, log 2 (one row, padding after): at temperature 1 the
  // probabilities 1/8, 2/8, 3/8, 2/8; top-k 2 keeps ids 2 and 1 and 1's tie 3: 2/7, 3/7,
  // 2/7 for ids 1..3; top-p 0.5 keeps 2 (0 before it) and 1 (3/8 before it), not 3 (5/8
  // before it): 2/5, 3/5 for ids 1, 2.
  const DType dt = GetParam();
  if (dt != DType::F32) GTEST_SKIP() << "log 2, log 3 are rounded in 16 bits";
  auto be = make_cpu_backend();
  const std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(2.0f), 50.0f};
  Buffer logits = upload(*be, l, Shape{1, 5}, dt);
  Buffer ids = be->empty(Shape{1}, DType::I32);
  constexpr int kGrid = 1000;
  const auto frequencies = [&](int top_k, double top_p) {
    std::vector<double> f(4, 0.0);
    for (int i = 0; i < kGrid; ++i) {
      be->sample_logits(logits, 4, 1.0, top_k, {RowDraw{(i + 0.5) / kGrid, top_p}}, ids);
      f.at(static_cast<size_t>(ids_of(*be, ids)[0])) += 1.0 / kGrid;
    }
    return f;
  };
  const double tol = 1.5 / kGrid;
  const std::vector<double> plain = frequencies(0, 0.0), top_k = frequencies(2, 0.0), top_p = frequencies(0, 0.5);
  const double want_plain[] = {1 / 8.0, 2 / 8.0, 3 / 8.0, 2 / 8.0}, want_k[] = {0, 2 / 7.0, 3 / 7.0, 2 / 7.0},
               want_p[] = {0, 2 / 5.0, 3 / 5.0, 0};
  for (int v = 0; v < 4; ++v) {
    EXPECT_NEAR(plain[v], want_plain[v], tol) << "id " << v;
    EXPECT_NEAR(top_k[v], want_k[v], tol) << "top-k, id " << v;
    EXPECT_NEAR(top_p[v], want_p[v], tol) << "top-p, id " << v;
  }
}

// Rows in segments, as a TP group's logits gathered rank-major ([S R, Vl], row r's k-th
// columns in row k R + r), draw what the same rows side by side draw: 3 segments of 40
// columns, 110 real.
TEST_P(Sample, SegmentedRowsDrawAsTheWholeRows) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  constexpr int64_t kRows = 4, kSegments = 3, kVl = 40, kValid = 110;
  const std::vector<float> whole = randn(kRows * kSegments * kVl, 9, 2.0f);
  Buffer plain = upload(*be, whole, Shape{kRows, kSegments * kVl}, dt);
  Buffer parts = upload(*be, to_segments(whole, kRows, kSegments, kVl), Shape{kSegments * kRows, kVl}, dt);
  Buffer want = be->empty(Shape{kRows}, DType::I32), got = be->empty(Shape{kRows}, DType::I32);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int top_k : {0, 5}) {
    std::vector<RowDraw> draws;
    for (int64_t r = 0; r < kRows; ++r) draws.push_back(RowDraw{uniform(rng), r % 2 ? 0.8 : 0.0});
    be->sample_logits(plain, kValid, 1.0, top_k, draws, want);
    be->sample_logits(parts, kValid, 1.0, top_k, draws, got);
    EXPECT_EQ(ids_of(*be, got), ids_of(*be, want)) << "top_k " << top_k;
  }
  // Past the segments' columns: refused.
  EXPECT_THROW(be->sample_logits(parts, kSegments * kVl + 1, 1.0, 0, std::vector<RowDraw>(kRows), got), std::exception);
}

TEST_P(Sample, RefusesWhatItCannotDraw) {
  auto be = make_cpu_backend();
  Buffer logits = upload(*be, randn(2 * 8, 3), Shape{2, 8}, GetParam());
  Buffer ids = be->empty(Shape{2}, DType::I32);
  const std::vector<RowDraw> two(2, RowDraw{0.5, 0.0});
  EXPECT_NO_THROW(be->sample_logits(logits, 8, 1.0, 0, two, ids));
  EXPECT_THROW(be->sample_logits(logits, 8, 0.0, 0, two, ids), std::exception);   // greedy: logits_argmax
  EXPECT_THROW(be->sample_logits(logits, 0, 1.0, 0, two, ids), std::exception);   // no column
  EXPECT_THROW(be->sample_logits(logits, 8, 1.0, -1, two, ids), std::exception);  // top_k
  EXPECT_THROW(be->sample_logits(logits, 8, 1.0, 0, std::vector<RowDraw>(3), ids), std::exception);  // 2 rows, 3 draws
  EXPECT_THROW(be->sample_logits(logits, 8, 1.0, 0, {RowDraw{1.0, 0.0}, RowDraw{0.5, 0.0}}, ids), std::exception);
  EXPECT_THROW(be->sample_logits(logits, 8, 1.0, 0, {RowDraw{0.5, 1.5}, RowDraw{0.5, 0.0}}, ids), std::exception);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Sample, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
