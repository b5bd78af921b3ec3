// kernels/cuda/cuda_sample.cu on the CPU emulator vs the CPU backend's sample_logits (which
// runs core/token_draw.h's draw_token): rows of distinct logits, of many ties (integer
// logits: exact in every dtype), with -inf and NaN logits and padding columns holding
// larger ones; the vocabulary's width (50257 of 50304), awkward ones, and rows in segments
// (a TP group's logits gathered rank-major); temperatures, top-k (small enough for the
// shared list, too large for it, and 1: greedy) and per-row top-p. The ids must be the same, except where the uniform (or the top-p sum)
// lies within 1e-5 of a boundary between two tokens by draw_ref.h's double sums, where the
// kernel's float sums may take the other: such ids are counted and must stay rare.
//
// What it cannot check: the device's exp2f (host libm here), fused multiply-adds.
#include "emu_cuda_sample.inc"  // first: emu_cuda_common.h sets up the CUDA spellings
#include "emu_test_util.h"
#include "unit/kernels/draw_ref.h"

#include <tuple>

namespace trident::cuda::emu_sample {
namespace {

// Mirror of the host launcher sample_logits in kernels/cuda/cuda_sample.cu (the draws are
// read from host memory here). KEEP IN SYNC with it.
void sample_logits(const Tensor& logits, int64_t valid, double temperature, int top_k,
                   const std::vector<RowDraw>& draws, const Tensor& ids) {
  const int N = static_cast<int>(draws.size()), Vl = static_cast<int>(logits.cols());
  const float log2e_over_t = static_cast<float>(1.4426950408889634 / temperature);
  dispatch_float(logits.dtype, "sample_logits", [&](auto tag) {
    using T = decltype(tag);
    emu::launch(dim3(static_cast<unsigned>(N)), dim3(kSampleBlock), 0, sample_logits_kernel<T>, logits.ptr<T>(), Vl,
                static_cast<int>(valid), log2e_over_t, top_k, draws.data(), ids.ptr<int32_t>());
  });
}

}  // namespace
}  // namespace trident::cuda::emu_sample

namespace trident::emu_test {
namespace {

namespace ks = ::trident::cuda::emu_sample;

class EmulatedSample : public EmuVsCpuDtype {
 protected:
  enum class Kind { kDistinct, kTies };

  // N rows of `kind` logits, `valid` of S Vl columns real, laid out as S segments of N rows
  // of Vl (a TP group's logits gathered rank-major; S = 1: plain rows); every draw rule of
  // the lists on each, the ids against the CPU's.
  void check(int64_t N, int64_t Vl, int64_t valid, Kind kind, const std::vector<int>& top_ks, int64_t S = 1) {
    SCOPED_TRACE(shape_label(N, Vl, dt()) + " valid=" + std::to_string(valid) + " segments=" + std::to_string(S) +
                 (kind == Kind::kTies ? " ties" : " distinct"));
    std::normal_distribution<float> normal(0.f, 3.f);
    std::uniform_int_distribution<int> level(-4, 4);
    const int64_t W = S * Vl;  // a row's columns
    std::vector<float> v(static_cast<size_t>(N * W));
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i) % W;
      v[i] = c >= valid              ? 30.f
             : i % 97 == 5           ? NAN
             : i % 89 == 7           ? -INFINITY
             : kind == Kind::kTies ? static_cast<float>(level(rng_))
                                     : normal(rng_);
    }
    Buffer logits = from_floats(Shape{S * N, Vl}, dt(), test::to_segments(v, N, S, Vl));
    std::vector<float> laid_out(v.size());  // the rows as the dtype holds them
    Buffer f32 = cpu().empty(Shape{S * N, Vl}, DType::F32);
    cpu().cast(logits, f32);
    cpu().copy_to_host(laid_out.data(), f32);
    const std::vector<float> held = test::from_segments(laid_out, N, S, Vl);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const double top_ps[] = {0.0, 0.3, 0.9, 1.0};
    for (double temperature : {0.7, 1.3})
      for (int top_k : top_ks) {
        std::vector<RowDraw> draws(static_cast<size_t>(N));
        for (int64_t r = 0; r < N; ++r) draws[r] = RowDraw{uniform(rng_), top_ps[(r + top_k) % 4]};
        Buffer ids = ints(Shape{N}, std::vector<int32_t>(N, -7)), e_ids = ints(Shape{N}, std::vector<int32_t>(N, -7));
        cpu().sample_logits(logits, valid, temperature, top_k, draws, ids);
        ks::sample_logits(logits, valid, temperature, top_k, draws, e_ids);
        for (int64_t r = 0; r < N; ++r) {
          const int32_t want = ids.t().ptr<int32_t>()[r], got = e_ids.t().ptr<int32_t>()[r];
          ++rows_;
          if (got == want) continue;
          const test::DrawRef ref = test::draw_ref(held.data() + r * W, valid, temperature, top_k, draws[r].top_p);
          const bool near = top_k != 1 && (ref.margin(draws[r].uniform) < 1e-5 || ref.top_p_margin < 1e-5);
          EXPECT_TRUE(near) << "row " << r << " temperature " << temperature << " top_k " << top_k << " top_p "
                            << draws[r].top_p << " uniform " << draws[r].uniform << ": " << got << " for " << want;
          ++near_boundary_;
        }
      }
  }

  void TearDown() override {
    // A boundary within 1e-5 is hit about once in 1e4 draws: a few here would mean a bug
    // that the margin test let through.
    EXPECT_LE(near_boundary_, 1) << near_boundary_ << " of " << rows_ << " draws differ";
  }

  int rows_ = 0, near_boundary_ = 0;
};

TEST_P(EmulatedSample, SmallRowsMatchCpu) {
  check(7, 17, 17, Kind::kDistinct, {0, 1, 3, 40});
  check(9, 136, 130, Kind::kTies, {0, 1, 2, 5});
  check(5, 3, 1, Kind::kDistinct, {0, 2});
}

// 4100 valid columns: top-k 0 and 4097 leave more candidates than the shared list holds, so
// the top-p and draw descents read the row.
TEST_P(EmulatedSample, RowsWiderThanTheListMatchCpu) {
  check(4, 4104, 4100, Kind::kDistinct, {0, 50, 4097});
  check(3, 4104, 4100, Kind::kTies, {0, 1, 600});
}

TEST_P(EmulatedSample, Gpt2VocabularyMatchesCpu) { check(2, 50304, 50257, Kind::kDistinct, {0, 50}); }

// A TP group's rows gathered rank-major: 3 segments of 136 columns, 400 real (the last
// segment's end is padding), and 2 segments of 4104 with 5000 real (the list and the row).
TEST_P(EmulatedSample, SegmentedRowsMatchCpu) {
  check(5, 136, 400, Kind::kTies, {0, 1, 7}, 3);
  check(2, 4104, 5000, Kind::kDistinct, {0, 60}, 2);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedSample, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
