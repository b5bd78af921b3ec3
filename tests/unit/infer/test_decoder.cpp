// Gpt2Decoder (KV-cache generation) against the independent double-precision GPT-2 of
// tests/unit/model/gpt2_reference.h: the logits after every token of several sequences,
// decoded together one token a step or several a pass (prefill), equal the reference's
// logits of the whole sequences at every position, also with each sequence at a position
// of its own. step_greedy's ids against most_likely on step()'s logits, step_sampled's
// against draw_token on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "infer/decoder.h"
#include "infer/sampler.h"
#include "tiny_model.h"

namespace trident {
namespace {

// Feeds B random sequences of the model's length in passes of chunks[i].first tokens,
// keeping the logits of the last chunks[i].second of each (the chunks cover the sequence),
// and compares every kept logit with the reference's at its position.
void check_against_reference(DType dt, double tol, const std::vector<std::pair<int, int>>& chunks,
                             Gelu gelu = Gelu::Tanh) {
  test::TinyModel f(dt, gelu);
  const int B = 3, T = f.cfg.seq_length;
  std::mt19937 rng(9);
  std::vector<int> tokens(B * T);
  for (int& t : tokens) t = static_cast<int>(rng() % f.cfg.vocab_size);
  const std::vector<double> want = f.reference_logits(tokens, B, T);
  const int64_t V = f.cfg.vocab_size;
  int max_chunk = 1;
  for (const auto& c : chunks) max_chunk = std::max(max_chunk, c.first);
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T, nullptr, max_chunk);
  double worst = 0, scale = 0;
  int compared = 0;
  for (const auto& [n, keep] : chunks) {
    const int pos = dec.position();
    std::vector<int32_t> feed;
    for (int b = 0; b < B; ++b) feed.insert(feed.end(), tokens.begin() + b * T + pos, tokens.begin() + b * T + pos + n);
    const std::vector<float>& got = n == 1 && keep == 1 ? dec.step(feed) : dec.forward(feed, n, keep);
    ASSERT_EQ(static_cast<int64_t>(got.size()), B * keep * V);
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < keep; ++k, ++compared)
        for (int64_t v = 0; v < V; ++v) {
          const double w = want[(static_cast<size_t>(b) * T + pos + n - keep + k) * V + v];
          worst = std::max(worst, std::fabs(got[(b * keep + k) * V + v] - w));
          scale = std::max(scale, std::fabs(w));
        }
  }
  ASSERT_EQ(dec.position(), T) << "the chunks must cover the sequence";
  EXPECT_GT(compared, 0);
  EXPECT_LE(worst, tol * scale) << "worst |logit - reference| " << worst << " of logits up to " << scale;
  std::printf("%s, %s GELU, %zu passes: worst |logit - reference| %.3g of logits up to %.3g (%d rows)\n",
              dtype_name(dt), gelu_name(gelu), chunks.size(), worst, scale, compared);
  // A full cache: one more token is a clear error, not a write past the end.
  EXPECT_THROW(dec.step(std::vector<int32_t>(B, 0)), ConfigError);
  dec.reset();
  EXPECT_EQ(dec.position(), 0);
}

// One token a step, every position kept.
std::vector<std::pair<int, int>> single_steps(int T) { return std::vector<std::pair<int, int>>(T, {1, 1}); }

// fp32: the decoder's fp32 sums against double, logits of order 10.
TEST(Gpt2Decoder, LogitsMatchTheReferenceAtEveryPositionFp32) {
  check_against_reference(DType::F32, 1e-5, single_steps(test::TinyModel(DType::F32).cfg.seq_length));
}
// bf16 activations (8-bit mantissa) through 2 layers: a few roundings of 0.4%.
TEST(Gpt2Decoder, LogitsMatchTheReferenceAtEveryPositionBf16) {
  check_against_reference(DType::BF16, 2e-2, single_steps(test::TinyModel(DType::BF16).cfg.seq_length));
}

// The erf GELU's model decodes with it (the reference's erf logits), prefill and steps.
TEST(Gpt2Decoder, ErfGeluLogitsMatchTheReference) {
  const int T = test::TinyModel(DType::F32).cfg.seq_length;
  std::vector<std::pair<int, int>> chunks = {{T / 2, T / 2}};
  for (int t = T / 2; t < T; ++t) chunks.push_back({1, 1});
  check_against_reference(DType::F32, 1e-5, chunks, Gelu::Erf);
}

// Prefill: several tokens a pass (a whole sequence; or chunks after cached positions with
// all logits kept, some, none, and a single step between them).
TEST(Gpt2Decoder, ChunkedPassesMatchTheReference) {
  const int T = test::TinyModel(DType::F32).cfg.seq_length;
  ASSERT_GE(T, 8);
  const std::vector<std::pair<int, int>> whole = {{T, T}};
  const std::vector<std::pair<int, int>> mixed = {{2, 2}, {3, 2}, {1, 0}, {1, 1}, {T - 7, T - 7}};
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::F32 ? 1e-5 : 2e-2;
    check_against_reference(dt, tol, whole);
    check_against_reference(dt, tol, mixed);
  }
}

// A pass that keeps scattered rows (runs of one and two, one across a sequence boundary), one
// run inside the pass, and all of them: each kept row's logits are the reference's at its position.
TEST(Gpt2Decoder, KeptRowsMatchTheReference) {
  test::TinyModel f(DType::F32);
  const int B = 3, T = f.cfg.seq_length;
  const int64_t V = f.cfg.vocab_size;
  std::mt19937 rng(5);
  std::vector<int> tokens(B * T);
  for (int& t : tokens) t = static_cast<int>(rng() % f.cfg.vocab_size);
  const std::vector<double> want = f.reference_logits(tokens, B, T);
  const std::vector<int32_t> feed(tokens.begin(), tokens.end());
  std::vector<int64_t> all(B * T);
  std::iota(all.begin(), all.end(), 0);
  for (const std::vector<int64_t>& kept :
       {std::vector<int64_t>{0, 2, 3, T - 1, T, 2 * T + 5}, std::vector<int64_t>{T + 1, T + 2, T + 3}, all}) {
    Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T, nullptr, T);
    const std::vector<float>& got = dec.forward(feed, T, kept);
    ASSERT_EQ(got.size(), kept.size() * V);
    double worst = 0;
    for (size_t i = 0; i < kept.size(); ++i)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(got[i * V + v] - want[kept[i] * V + v]));
    EXPECT_LE(worst, 1e-5) << kept.size() << " rows kept";
  }
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T, nullptr, T);
  EXPECT_THROW(dec.forward(feed, T, std::vector<int64_t>{3, 2}), InternalError);  // not increasing
  EXPECT_THROW(dec.forward(feed, T, std::vector<int64_t>{B * T}), InternalError);  // past the pass
  EXPECT_THROW(dec.forward(feed, T, std::vector<int64_t>{-1, 0}), InternalError);
  EXPECT_EQ(dec.position(), 0);
}

// Sequences at positions of their own: prompts of 2, 5 and 3 tokens in one pass padded to
// 5 (junk tokens past each prompt, kept rows at each prompt's end), then each sequence fed
// on from its own length, a step and a pass of 2 (per-row attention positions and position
// embedding rows), then rows reordered (each takes another's cache and position) and stepped once
// more: every logit is the reference's at the sequence's position.
TEST(Gpt2Decoder, SequencesAtTheirOwnPositionsMatchTheReference) {
  test::TinyModel f(DType::F32);
  const int B = 3, T = f.cfg.seq_length, padded = 5;
  ASSERT_GE(T, padded + 2);
  const std::vector<int> length = {2, 5, 3};
  const int64_t V = f.cfg.vocab_size;
  std::mt19937 rng(13);
  std::vector<int> tokens(B * T);
  for (int& t : tokens) t = static_cast<int>(rng() % f.cfg.vocab_size);
  const std::vector<double> want = f.reference_logits(tokens, B, T);
  const auto token = [&](int b, int pos) { return tokens[static_cast<size_t>(b) * T + pos]; };
  double worst = 0, scale = 0;
  // Compares logits row `row` with the reference's of sequence b after position pos.
  const auto check = [&](const std::vector<float>& got, int row, int b, int pos) {
    for (int64_t v = 0; v < V; ++v) {
      const double w = want[(static_cast<size_t>(b) * T + pos) * V + v];
      worst = std::max(worst, std::fabs(got[row * V + v] - w));
      scale = std::max(scale, std::fabs(w));
    }
  };
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T, nullptr, padded);
  std::vector<int32_t> feed;
  std::vector<int64_t> kept;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < padded; ++t) {
      feed.push_back(t < length[b] ? token(b, t) : 7);  // padding: any token
      if (t == length[b] - 1) kept.push_back(static_cast<int64_t>(b) * padded + t);
    }
  const std::vector<float>& first = dec.forward(feed, padded, kept);
  for (int b = 0; b < B; ++b) check(first, b, b, length[b] - 1);
  for (int b = 0; b < B; ++b) dec.set_position(b, length[b]);
  EXPECT_THROW(dec.position(), InternalError) << "the sequences are at different positions";
  // A step, then passes of 2 tokens a sequence (the position rows gathered both ways).
  for (int k = 0; k < T - padded;) {
    const int n = k == 0 ? 1 : std::min(2, T - padded - k);
    feed.clear();
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t) feed.push_back(token(b, length[b] + k + t));
    const std::vector<float>& got = n == 1 ? dec.step(feed) : dec.forward(feed, n, n);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < n; ++t) check(got, b * n + t, b, length[b] + k + t);
    k += n;
  }
  for (int b = 0; b < B; ++b) EXPECT_EQ(dec.position(b), length[b] + T - padded);
  // Row 0 continues sequence 2, rows 1 and 2 sequence 0.
  dec.reorder({2, 0, 0});
  const int p0 = length[0] + T - padded, p2 = length[2] + T - padded;
  EXPECT_EQ(dec.position(0), p2);
  EXPECT_EQ(dec.position(1), p0);
  const std::vector<float>& after = dec.step({token(2, p2), token(0, p0), token(0, p0)});
  check(after, 0, 2, p2);
  check(after, 1, 0, p0);
  check(after, 2, 0, p0);
  EXPECT_LE(worst, 1e-5 * scale) << "worst |logit - reference| " << worst << " of logits up to " << scale;
  std::printf("per-row positions: worst |logit - reference| %.3g of logits up to %.3g\n", worst, scale);
  // A position past the cache is refused; one sequence at the cache's end stops the pass.
  EXPECT_THROW(dec.set_position(0, T + 1), InternalError);
  EXPECT_THROW(dec.set_position(3, 0), InternalError);
  dec.set_position(1, T);
  EXPECT_THROW(dec.step({1, 1, 1}), ConfigError);
}

// step_greedy (the draw on the device: logits_argmax) against a twin decoder's step()
// logits and most_likely on the host, step after step with sequences at their own
// positions, each fed its draw, in fp32 and bf16 (ties are the kernel tests' part).
TEST(Gpt2Decoder, GreedyStepsDrawTheMostLikelyOfTheStepsLogits) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    test::TinyModel f(dt);
    const int B = 3, T = f.cfg.seq_length;
    const int64_t V = f.cfg.vocab_size;
    Gpt2Decoder on_device(f.cfg, *f.be, *f.params, B, T), on_host(f.cfg, *f.be, *f.params, B, T);
    std::vector<int32_t> feed = {3, 1, 4};
    for (Gpt2Decoder* dec : {&on_device, &on_host}) {  // positions 0 and 1 written, then 2, 0 and 1 next
      dec->forward({3, 1, 4}, 1, 0);
      dec->forward({1, 5, 9}, 1, 0);
      for (int b = 0; b < B; ++b) dec->set_position(b, (2 + b) % 3);
    }
    for (int step = 0; step + 3 <= T; ++step) {
      const std::vector<float>& logits = on_host.step(feed);
      const std::vector<int32_t> got = on_device.step_greedy(feed);
      ASSERT_EQ(got.size(), static_cast<size_t>(B));
      for (int b = 0; b < B; ++b) {
        const float* row = logits.data() + b * V;
        EXPECT_EQ(got[b], most_likely(row, V, 1)[0]) << "step " << step << ", sequence " << b;
      }
      feed = got;
    }
  }
}

// step_sampled (the sampled draw on the device: sample_logits) against a twin decoder's
// step() logits and draw_token on the host with the same uniforms, under rules with and
// without top-k and top-p (each sequence its own top-p), step after step, each sequence fed
// its draw.
TEST(Gpt2Decoder, SampledStepsDrawWhatTheHostDrawsFromTheStepsLogits) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    test::TinyModel f(dt);
    const int B = 3, T = f.cfg.seq_length;
    const int64_t V = f.cfg.vocab_size;
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    for (const DrawRule& rule : {DrawRule{1.0, 0, 0.0}, DrawRule{0.8, 5, 0.0}, DrawRule{1.5, 0, 0.0}}) {
      Gpt2Decoder on_device(f.cfg, *f.be, *f.params, B, T), on_host(f.cfg, *f.be, *f.params, B, T);
      std::vector<int32_t> feed = {3, 1, 4};
      for (int step = 0; step < T; ++step) {
        std::vector<RowDraw> draws;
        for (int b = 0; b < B; ++b) draws.push_back(RowDraw{uniform(rng), b == 0 ? 0.0 : b == 1 ? 0.9 : 0.3});
        const std::vector<float>& logits = on_host.step(feed);
        const std::vector<int32_t> got = on_device.step_sampled(feed, rule, draws);
        ASSERT_EQ(got.size(), static_cast<size_t>(B));
        for (int b = 0; b < B; ++b) {
          DrawRule row_rule = rule;
          row_rule.top_p = draws[b].top_p;
          EXPECT_EQ(got[b], draw_token(logits.data() + b * V, V, row_rule, draws[b].uniform))
              << "step " << step << ", sequence " << b << ", top_k " << rule.top_k;
        }
        feed = got;
      }
    }
    Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T);
    EXPECT_THROW(dec.step_sampled({1, 2, 3}, DrawRule{}, std::vector<RowDraw>(2)), InternalError);
  }
}

TEST(Gpt2Decoder, RejectsBadTokensAndSizes) {
  test::TinyModel f(DType::F32);
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, 2, 4);
  EXPECT_THROW(dec.step({1}), InternalError);                      // one token for two sequences
  EXPECT_THROW(dec.step({1, static_cast<int32_t>(f.cfg.vocab_size)}), InternalError);  // outside the vocabulary
  EXPECT_THROW(Gpt2Decoder(f.cfg, *f.be, *f.params, 1, f.cfg.max_position_embeddings + 1), InternalError);
  Gpt2Decoder chunked(f.cfg, *f.be, *f.params, 2, 4, nullptr, 3);
  EXPECT_THROW(chunked.forward(std::vector<int32_t>(8, 1), 4, 1), InternalError);  // above max_chunk
  EXPECT_THROW(chunked.forward(std::vector<int32_t>(6, 1), 3, 4), InternalError);  // keeps more than it feeds
  EXPECT_THROW(chunked.forward(std::vector<int32_t>(5, 1), 3, 1), InternalError);  // 5 tokens for 2 x 3
  EXPECT_THROW(chunked.forward({}, 0, 0), InternalError);
  EXPECT_EQ(chunked.position(), 0) << "a rejected pass moved the position";
  chunked.forward(std::vector<int32_t>(6, 1), 3, 0);
  EXPECT_THROW(chunked.forward(std::vector<int32_t>(4, 1), 2, 1), ConfigError);  // positions 3 and 4 of 4
  EXPECT_THROW(Gpt2Decoder(f.cfg, *f.be, *f.params, 1, 4, nullptr, 0), InternalError);
}

// The pass length of a prefill: a batch's prompts in one pass from position 0 where B x length
// fits 8192 rows (the CUDA backend's flash prefill takes only passes from position 0), 256
// rows when every position's logits come to the host, at least 1, at most the length; the
// caller's request wins, capped at the length.
TEST(PrefillChunk, FeedsABatchsPromptsInOnePassWhereTheyFit) {
  EXPECT_EQ(prefill_chunk(8, 512, false), 512);    // trident-bench --generate's 8 x 512: one pass
  EXPECT_EQ(prefill_chunk(16, 512, false), 512);   // 8192 rows
  EXPECT_EQ(prefill_chunk(32, 512, false), 256);   // 16384 rows: two passes
  EXPECT_EQ(prefill_chunk(1, 20000, false), 8192);
  EXPECT_EQ(prefill_chunk(10000, 5, false), 1);    // never below one position
  EXPECT_EQ(prefill_chunk(4, 512, true), 64);      // every position's logits: 256 rows
  EXPECT_EQ(prefill_chunk(8, 512, false, 100), 100);
  EXPECT_EQ(prefill_chunk(8, 50, false, 100), 50);
  EXPECT_EQ(prefill_chunk(8, 0, false), 1);
}

}  // namespace
}  // namespace trident
