// Gpt2Decoder (KV-cache generation) against the independent double-precision GPT-2 of
// tests/unit/model/gpt2_reference.h: the logits after every token of several sequences,
// decoded together, equal the reference's logits of the whole sequences at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "infer/decoder.h"
#include "tiny_model.h"

namespace trident {
namespace {

void check_against_reference(DType dt, double tol) {
  test::TinyModel f(dt);
  const int B = 3, T = f.cfg.seq_length;
  std::mt19937 rng(9);
  std::vector<int> tokens(B * T);
  for (int& t : tokens) t = static_cast<int>(rng() % f.cfg.vocab_size);
  const std::vector<double> want = f.reference_logits(tokens, B, T);
  const int64_t V = f.cfg.vocab_size;
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, B, T);
  double worst = 0, scale = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> feed(B);
    for (int b = 0; b < B; ++b) feed[b] = tokens[b * T + t];
    const std::vector<float>& got = dec.step(feed);
    ASSERT_EQ(static_cast<int64_t>(got.size()), B * V);
    for (int b = 0; b < B; ++b)
      for (int64_t v = 0; v < V; ++v) {
        const double w = want[(static_cast<size_t>(b) * T + t) * V + v];
        worst = std::max(worst, std::fabs(got[b * V + v] - w));
        scale = std::max(scale, std::fabs(w));
      }
  }
  EXPECT_EQ(dec.position(), T);
  EXPECT_LE(worst, tol * scale) << "worst |logit - reference| " << worst << " of logits up to " << scale;
  std::printf("%s: worst |logit - reference| %.3g of logits up to %.3g\n", dtype_name(dt), worst, scale);
  // A full cache: one more token is a clear error, not a write past the end.
  EXPECT_THROW(dec.step(std::vector<int32_t>(B, 0)), ConfigError);
  dec.reset();
  EXPECT_EQ(dec.position(), 0);
}

// fp32: the decoder's fp32 sums against double, logits of order 10.
TEST(Gpt2Decoder, LogitsMatchTheReferenceAtEveryPositionFp32) { check_against_reference(DType::F32, 1e-5); }
// bf16 activations (8-bit mantissa) through 2 layers: a few roundings of 0.4%.
TEST(Gpt2Decoder, LogitsMatchTheReferenceAtEveryPositionBf16) { check_against_reference(DType::BF16, 2e-2); }

TEST(Gpt2Decoder, RejectsBadTokensAndSizes) {
  test::TinyModel f(DType::F32);
  Gpt2Decoder dec(f.cfg, *f.be, *f.params, 2, 4);
  EXPECT_THROW(dec.step({1}), InternalError);                      // one token for two sequences
  EXPECT_THROW(dec.step({1, static_cast<int32_t>(f.cfg.vocab_size)}), InternalError);  // outside the vocabulary
  EXPECT_THROW(Gpt2Decoder(f.cfg, *f.be, *f.params, 1, f.cfg.max_position_embeddings + 1), InternalError);
}

}  // namespace
}  // namespace trident
