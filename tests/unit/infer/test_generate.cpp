// continue_sequences (the generation loop) against the independent double-precision GPT-2
// of tests/unit/model/gpt2_reference.h: the tokens it draws are those the sampler draws from
// the reference's logits of each sequence so far; a sequence stops at the model's sequence
// length (context + generated = seq_length, Megatron's rule), at max_new_tokens, or at
// <|endoftext|>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "infer/generate.h"
#include "tiny_model.h"

namespace trident {
namespace {

GenerationOptions greedy(int64_t max_new, bool stop_at_eod, int32_t eod) {
  GenerationOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = max_new;
  o.stop_at_eod = stop_at_eod;
  o.eod = eod;
  return o;
}

// Two sequences decoded together, sampled at temperature 1, asked for 100 tokens: each
// fills the 8 positions exactly (2 + 6), and the tokens are those the same sampler and seed
// draw from the reference's logits of each whole sequence so far, in the same order
// (step by step, sequence 0 then 1).
TEST(ContinueSequences, SampledTokensFollowTheReferenceUpToTheSequenceLength) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> contexts = {{3, 7}, {11, 2}};
  GenerationOptions o = greedy(100, false, 0);
  o.sampling.greedy = false;
  std::mt19937_64 rng(42);
  const auto out = continue_sequences(m.cfg, *m.be, *m.params, contexts, o, rng);

  std::vector<std::vector<int32_t>> want = contexts;
  std::mt19937_64 ref_rng(42);
  const int V = static_cast<int>(m.cfg.vocab_size);
  for (int step = 0; step < m.cfg.seq_length - 2; ++step)
    for (auto& seq : want) {
      const int T = static_cast<int>(seq.size());
      const std::vector<double> logits = m.reference_logits(std::vector<int>(seq.begin(), seq.end()), 1, T);
      const std::vector<float> last(logits.end() - V, logits.end());
      seq.push_back(sample_token(last.data(), V, o.sampling, ref_rng));
    }
  ASSERT_EQ(out.size(), 2u);
  for (size_t b = 0; b < out.size(); ++b) {
    EXPECT_FALSE(out[b].finished);
    std::vector<int32_t> got = contexts[b];
    got.insert(got.end(), out[b].tokens.begin(), out[b].tokens.end());
    EXPECT_EQ(static_cast<int>(got.size()), m.cfg.seq_length) << "sequence " << b;
    EXPECT_EQ(got, want[b]) << "sequence " << b;
    for (int32_t token : got) std::printf("%d ", token);
    std::printf("(sequence %zu)\n", b);
  }
}

TEST(ContinueSequences, StopsAtMaxNewTokens) {
  test::TinyModel m(DType::F32);
  std::mt19937_64 rng(1);
  const auto out = continue_sequences(m.cfg, *m.be, *m.params, {{3, 7}}, greedy(3, false, 0), rng);
  EXPECT_EQ(out[0].tokens.size(), 3u);
  EXPECT_FALSE(out[0].finished);
  // A 7-token context of 8 positions: room for one token whatever is asked.
  const auto last = continue_sequences(m.cfg, *m.be, *m.params, {{1, 2, 3, 4, 5, 6, 7}}, greedy(50, false, 0), rng);
  EXPECT_EQ(last[0].tokens.size(), 1u);
}

// Sampling with one seed three times: free, then with <|endoftext|> set to the first token
// drawn at a step k > 0 that was not drawn before it. The second run ends after k tokens
// and is finished; the third, ignoring <|endoftext|>, keeps that token and draws the rest.
TEST(ContinueSequences, EndsAtEndOfText) {
  test::TinyModel m(DType::F32);
  const auto run = [&](bool stop_at_eod, int32_t eod) {
    GenerationOptions o = greedy(6, stop_at_eod, eod);
    o.sampling.greedy = false;  // temperature 1 over every token
    std::mt19937_64 rng(5);
    return continue_sequences(m.cfg, *m.be, *m.params, {{3, 7}}, o, rng)[0];
  };
  const std::vector<int32_t> t = run(false, 0).tokens;
  ASSERT_EQ(t.size(), 6u);
  size_t k = 1;
  while (k < t.size() && std::find(t.begin(), t.begin() + k, t[k]) != t.begin() + k) ++k;
  ASSERT_LT(k, t.size()) << "the draws repeat one token: pick another seed";
  const Continuation stopped = run(true, t[k]);
  EXPECT_TRUE(stopped.finished);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(t.begin(), t.begin() + k));
  const Continuation ignored = run(false, t[k]);
  EXPECT_FALSE(ignored.finished);
  EXPECT_EQ(ignored.tokens, t);
}

TEST(ContinueSequences, RoomAndBadContexts) {
  test::TinyModel m(DType::F32);
  EXPECT_EQ(room_after(m.cfg, 1), 7);
  EXPECT_EQ(room_after(m.cfg, 7), 1);
  EXPECT_EQ(room_after(m.cfg, 8), 0);
  std::mt19937_64 rng(1);
  const auto run = [&](const std::vector<std::vector<int32_t>>& c) {
    return continue_sequences(m.cfg, *m.be, *m.params, c, greedy(4, true, 0), rng);
  };
  EXPECT_THROW(run({std::vector<int32_t>(8, 1)}), InternalError);  // no room left
  EXPECT_THROW(run({{1, 2}, {3}}), InternalError);                 // different lengths
  EXPECT_THROW(run({}), InternalError);
}

}  // namespace
}  // namespace trident
