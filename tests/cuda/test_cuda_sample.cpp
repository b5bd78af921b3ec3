// GPU vs CPU: sample_logits (a decoding step's sampled draw) on rows of distinct logits and
// of many ties (integer logits, exact in every dtype), with -inf and NaN logits and padding
// columns holding larger ones, at GPT-2's vocabulary (64 sequences of a decoding step, and
// 8 gathered from a TP group of 8 rank-major) and awkward widths; temperatures, top-k (1: greedy; within and past the kernel's shared list)
// and per-row top-p. The ids must be the CPU's (draw_token's), except where the uniform or
// the top-p sum lies within 1e-5 of a boundary between two tokens (draw_ref.h's double
// sums), where the GPU's float sums may take the other: those are counted and must be rare.
#include <tuple>

#include "cuda_test_util.h"
#include "unit/kernels/draw_ref.h"

namespace trident::cuda_test {
namespace {

class Sample : public CudaVsCpuDtype {};

TEST_P(Sample, DrawsTheCpusTokens) {
  TRIDENT_SKIP_WITHOUT_GPU();
  int draws_made = 0, near_boundary = 0;
  // N rows of S segments of Vl columns (S > 1: a TP group's logits gathered rank-major).
  for (const auto& [N, Vl, valid, ties, S] :
       {std::tuple<int64_t, int64_t, int64_t, bool, int64_t>{64, 50304, 50257, false, 1}, {16, 50304, 50257, true, 1},
        {37, 4104, 4100, false, 1}, {9, 129, 100, true, 1}, {8, 6288, 50257, false, 8}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << N << " Vl=" << Vl << " valid=" << valid << " segments=" << S
                                      << (ties ? " ties" : ""));
    std::normal_distribution<float> normal(0.f, 3.f);
    std::uniform_int_distribution<int> level(-4, 4);
    const int64_t W = S * Vl;
    std::vector<float> v(static_cast<size_t>(N * W));
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) % W;
      v[i] = c >= valid ? 30.f : i % 97 == 5 ? NAN : i % 89 == 7 ? -INFINITY : ties ? static_cast<float>(level(rng_)) : normal(rng_);
    }
    Pair logits = upload(Shape{S * N, Vl}, dt(), test::to_segments(v, N, S, Vl));
    const std::vector<float> held = test::from_segments(host_cpu(logits), N, S, Vl);  // as the dtype holds them
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const double top_ps[] = {0.0, 0.3, 0.9, 1.0};
    for (double temperature : {0.7, 1.3})
      for (int top_k : {0, 1, 50, 5000}) {
        std::vector<RowDraw> draws(static_cast<size_t>(N));
        for (int64_t r = 0; r < N; ++r) draws[r] = RowDraw{uniform(rng_), top_ps[(r + top_k) % 4]};
        Pair ids = ints(Shape{N}, std::vector<int32_t>(static_cast<size_t>(N), -7));
        cpu().sample_logits(logits.cpu, valid, temperature, top_k, draws, ids.cpu);
        gpu().sample_logits(logits.gpu, valid, temperature, top_k, draws, ids.gpu);
        const std::vector<float> want = host_cpu(ids), got = host_gpu(ids);
        for (int64_t r = 0; r < N; ++r) {
          ++draws_made;
          if (got[r] == want[r]) continue;
          const test::DrawRef ref = test::draw_ref(held.data() + r * W, valid, temperature, top_k, draws[r].top_p);
          EXPECT_TRUE(top_k != 1 && (ref.margin(draws[r].uniform) < 1e-5 || ref.top_p_margin < 1e-5))
              << "row " << r << " temperature " << temperature << " top_k " << top_k << " top_p " << draws[r].top_p
              << " uniform " << draws[r].uniform << ": " << got[r] << " for " << want[r];
          ++near_boundary;
        }
      }
  }
  EXPECT_LE(near_boundary, 2) << near_boundary << " of " << draws_made << " draws differ";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Sample, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
