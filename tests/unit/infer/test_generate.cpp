// continue_sequences (the generation loop) against the independent double-precision GPT-2
// of tests/unit/model/gpt2_reference.h: the tokens it draws are those the sampler draws from
// the reference's logits of each sequence so far; a sequence stops at the model's sequence
// length (context + generated = seq_length, Megatron's rule), at max_new_tokens, or at
// <|endoftext|>. generate_tokens (the loop under it, and the text-generation server's) the
// same way: prompts of different lengths together, log-probabilities, ends, adjusted logits,
// top-p decay, and prompts fed in passes of several positions (prefill) against one a step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "infer/generate.h"
#include "kernels/profiling_backend.h"
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

namespace trident {
namespace {

// The reference's greedy continuation of `prompt` to `length` tokens.
std::vector<int32_t> reference_greedy(const test::TinyModel& m, std::vector<int32_t> seq, size_t length) {
  while (seq.size() < length) {
    const std::vector<double> last = m.reference_log_softmax(seq).back();
    seq.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
  }
  return seq;
}

DecodeOptions greedy_decode(int64_t max_new) {
  DecodeOptions o;
  o.sampling.greedy = true;
  o.max_new_tokens = max_new;
  return o;
}

// Prompts of 1, 2, 4 and 6 tokens decoded together, each at its own positions: each gets the
// reference's greedy continuation of itself alone, up to its own limit (3 new tokens, or
// the 8 positions), and its prompt unchanged.
TEST(GenerateTokens, PromptsOfDifferentLengthsContinueAsAlone) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{4}, {3, 7}, {11, 2, 5, 9}, {1, 2, 3, 4, 5, 6}};
  std::mt19937_64 rng(1);
  const auto out = generate_tokens(m.cfg, *m.be, *m.params, prompts, greedy_decode(3), rng);
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    const size_t want_length = std::min<size_t>(prompts[b].size() + 3, 8);
    EXPECT_EQ(out[b].tokens, reference_greedy(m, prompts[b], want_length)) << "prompt " << b;
    EXPECT_EQ(out[b].prompt_length, static_cast<int64_t>(prompts[b].size()));
    EXPECT_FALSE(out[b].finished);
    EXPECT_TRUE(out[b].logprobs.empty());
  }
}

// Log-probabilities of every token after the first, prompt tokens and drawn ones, against
// the reference's log-softmax of the whole sequence: when scoring (nothing drawn) and when
// sampling at temperature 2 (the log-probabilities stay at temperature 1).
TEST(GenerateTokens, LogprobsMatchTheReferenceForPromptAndDrawnTokens) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{3, 7, 1}, {11}, {5, 6, 7, 8, 9}};
  for (const int64_t max_new : {0, 3}) {
    DecodeOptions o;
    o.max_new_tokens = max_new;
    o.sampling.temperature = 2.0;
    o.logprobs = true;
    std::mt19937_64 rng(3);
    const auto out = generate_tokens(m.cfg, *m.be, *m.params, prompts, o, rng);
    double worst = 0;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const Generation& g = out[b];
      ASSERT_EQ(g.tokens.size(), std::min<size_t>(prompts[b].size() + max_new, 8)) << "prompt " << b;
      ASSERT_EQ(g.logprobs.size(), g.tokens.size() - 1) << "prompt " << b;
      const auto want = m.reference_log_softmax(g.tokens);
      for (size_t i = 0; i + 1 < g.tokens.size(); ++i)
        worst = std::max(worst, std::fabs(g.logprobs[i] - want[i][g.tokens[i + 1]]));
    }
    EXPECT_LE(worst, 1e-5) << "max_new_tokens " << max_new;
    std::printf("max_new_tokens %lld: worst |logprob - reference| %.3g\n", static_cast<long long>(max_new), worst);
  }
}

// Prefill in chunks of 2 positions (passes of 2, 2, 2 and 1 over the longest prompt's 7, the
// logits of each prompt's last position only, or of all with logprobs) against one position
// a pass (prefill_chunk 1): the same greedy and sampled tokens, log-probabilities within
// 1e-6, the same top-2 ids; and against the reference.
TEST(GenerateTokens, ChunkedPrefillMatchesSingleSteps) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{3, 7, 1, 4, 2}, {9, 8, 7, 6, 5, 4, 3}, {1, 2, 3, 4, 5, 6}};
  for (const bool logprobs : {false, true})
    for (const bool sampled : {false, true}) {
      SCOPED_TRACE(std::string(logprobs ? "logprobs" : "no logprobs") + (sampled ? ", sampled" : ", greedy"));
      DecodeOptions o = greedy_decode(2);
      o.sampling.greedy = !sampled;
      o.logprobs = logprobs;
      o.top_logprobs = logprobs ? 2 : 0;
      std::vector<std::vector<Generation>> runs;
      for (const int64_t chunk : {1, 2}) {
        o.prefill_chunk = chunk;
        std::mt19937_64 rng(7);
        runs.push_back(generate_tokens(m.cfg, *m.be, *m.params, prompts, o, rng));
      }
      double worst = 0, worst_ref = 0;
      for (size_t b = 0; b < prompts.size(); ++b) {
        const Generation &steps = runs[0][b], &chunked = runs[1][b];
        EXPECT_EQ(chunked.tokens, steps.tokens) << "prompt " << b;
        ASSERT_EQ(chunked.logprobs.size(), steps.logprobs.size()) << "prompt " << b;
        ASSERT_EQ(chunked.top_logprobs.size(), steps.top_logprobs.size()) << "prompt " << b;
        const auto want = m.reference_log_softmax(chunked.tokens);
        for (size_t i = 0; i < steps.logprobs.size(); ++i) {
          worst = std::max(worst, std::fabs(chunked.logprobs[i] - steps.logprobs[i]));
          worst_ref = std::max(worst_ref, std::fabs(chunked.logprobs[i] - want[i][chunked.tokens[i + 1]]));
          for (size_t k = 0; k < 2; ++k)
            EXPECT_EQ(chunked.top_logprobs[i][k].first, steps.top_logprobs[i][k].first) << "position " << i;
        }
        if (logprobs) {
          EXPECT_EQ(chunked.logprobs.size(), chunked.tokens.size() - 1);
        }
      }
      EXPECT_LE(worst, 1e-6);
      EXPECT_LE(worst_ref, 1e-5);
    }
}

// Prompts of 1, 3 and 7 tokens go through in one pass (shorter prompts padded), then each
// feeds its draws back at its own length: scored (nothing drawn) or scored and given one
// token each (lm-evaluation-harness's loglikelihood requests: echo, max_tokens 1), one pass
// in all; with 3 tokens drawn (3, 3 and 1: the 7-token prompt has room for one), one pass
// and 2 steps, where stepping every sequence from the shortest prompt's end took 1 + 6.
// Each prompt's log-probabilities, top-2 ids and draws are the reference's of it alone; the
// steps' greedy draws are taken on the device (logits_argmax) when no log-probability is asked.
TEST(GenerateTokens, RaggedPromptsGoThroughInOnePassThenDecodeAtTheirLengths) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{4}, {3, 7, 1}, {11, 2, 5, 9, 6, 1, 8}};
  struct Case {
    int64_t max_new;
    bool logprobs;
    int64_t passes;        // forward passes through the model
    int64_t device_draws;  // steps whose greedy draws stay on the device (logits_argmax)
  };
  for (const Case c : {Case{0, true, 1, 0}, Case{1, true, 1, 0}, Case{1, false, 1, 0}, Case{3, true, 1 + 2, 0},
                       Case{3, false, 1 + 2, 2}}) {
    SCOPED_TRACE("max_new_tokens " + std::to_string(c.max_new) + (c.logprobs ? ", logprobs" : ""));
    ProfilingBackend counting(make_cpu_backend());  // the parameters live in host memory
    DecodeOptions o = greedy_decode(c.max_new);
    o.logprobs = c.logprobs;
    o.top_logprobs = c.logprobs ? 2 : 0;
    std::mt19937_64 rng(1);
    const auto out = generate_tokens(m.cfg, counting, *m.params, prompts, o, rng);
    EXPECT_EQ(counting.times().at("attention").calls, c.passes * m.cfg.num_layers);
    const auto argmax = counting.times().find("argmax");
    EXPECT_EQ(argmax == counting.times().end() ? 0 : argmax->second.calls, c.device_draws);
    double worst = 0;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const size_t length = std::min<size_t>(prompts[b].size() + c.max_new, 8);
      EXPECT_EQ(out[b].tokens, reference_greedy(m, prompts[b], length)) << "prompt " << b;
      if (!c.logprobs) continue;
      const Generation& g = out[b];
      ASSERT_EQ(g.logprobs.size(), g.tokens.size() - 1) << "prompt " << b;
      ASSERT_EQ(g.top_logprobs.size(), g.logprobs.size()) << "prompt " << b;
      const auto want = m.reference_log_softmax(g.tokens);
      for (size_t i = 0; i < g.logprobs.size(); ++i) {
        worst = std::max(worst, std::fabs(g.logprobs[i] - want[i][g.tokens[i + 1]]));
        const auto best = std::max_element(want[i].begin(), want[i].end());
        EXPECT_EQ(g.top_logprobs[i][0].first, best - want[i].begin()) << "prompt " << b << ", position " << i;
      }
    }
    EXPECT_LE(worst, 1e-5);
  }
}

// top_logprobs 3: at every position, the reference's three most likely tokens with their
// log-probabilities; a greedy token's log-probability is exactly its list's first (what
// lm-evaluation-harness's is_greedy compares).
TEST(GenerateTokens, TopLogprobsAreTheReferencesMostLikely) {
  test::TinyModel m(DType::F32);
  DecodeOptions o = greedy_decode(3);
  o.logprobs = true;
  o.top_logprobs = 3;
  std::mt19937_64 rng(1);
  const Generation g = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7, 1}}, o, rng)[0];
  ASSERT_EQ(g.tokens.size(), 6u);
  ASSERT_EQ(g.top_logprobs.size(), 5u);
  const auto want = m.reference_log_softmax(g.tokens);
  for (size_t i = 0; i < 5; ++i) {
    std::vector<int32_t> ids(want[i].size());
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return want[i][a] > want[i][b]; });
    ASSERT_EQ(g.top_logprobs[i].size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(g.top_logprobs[i][k].first, ids[k]) << "position " << i << ", rank " << k;
      EXPECT_NEAR(g.top_logprobs[i][k].second, want[i][ids[k]], 1e-5);
    }
    if (i >= 2) {  // a greedy token: exactly its list's first
      EXPECT_EQ(g.logprobs[i], g.top_logprobs[i][0].second) << "greedy token " << i;
    }
  }
}

// Sampled prompts of 1, 4 and 2 tokens: the draws come from the rng in the documented
// order, each from the reference's logits of its sequence so far: the first draws in the
// prompts' pass by position (sequence 0 after position 0, 2 after 1, 1 after 3), then a step
// at a time, sequences in order, each at its own length, until each has 3.
TEST(GenerateTokens, SampledRaggedPromptsDrawInPositionThenStepOrder) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{4}, {3, 7, 1, 9}, {11, 2}};
  DecodeOptions o;
  o.max_new_tokens = 3;
  std::mt19937_64 rng(11);
  const auto out = generate_tokens(m.cfg, *m.be, *m.params, prompts, o, rng);

  std::vector<std::vector<int32_t>> want = prompts;
  std::mt19937_64 ref_rng(11);
  const int V = static_cast<int>(m.cfg.vocab_size);
  const auto draw = [&](int b) {
    std::vector<int32_t>& seq = want[b];
    const int T = static_cast<int>(seq.size());
    const std::vector<double> logits = m.reference_logits(std::vector<int>(seq.begin(), seq.end()), 1, T);
    const std::vector<float> last(logits.end() - V, logits.end());
    seq.push_back(sample_token(last.data(), V, o.sampling, ref_rng));
  };
  for (int b : {0, 2, 1}) draw(b);
  for (int step = 0; step < 2; ++step)
    for (int b = 0; b < 3; ++b) draw(b);
  for (size_t b = 0; b < prompts.size(); ++b) EXPECT_EQ(out[b].tokens, want[b]) << "prompt " << b;
}

// `ends` stops one sequence at the token it names (kept, finished) while the other goes on;
// `adjust_logits` bans a token: the draw becomes the reference's next best.
TEST(GenerateTokens, EndsAndAdjustedLogits) {
  test::TinyModel m(DType::F32);
  const std::vector<int32_t> a = reference_greedy(m, {3, 7}, 6), b = reference_greedy(m, {9}, 5);
  DecodeOptions o = greedy_decode(4);
  const int32_t stop = a[2];  // the first token drawn
  ASSERT_EQ(std::find(b.begin() + 1, b.end(), stop), b.end()) << "pick other prompts";
  o.ends = [stop](const std::vector<int32_t>& s, int64_t) { return s.back() == stop; };
  std::mt19937_64 rng(1);
  auto out = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7}, {9}}, o, rng);
  EXPECT_TRUE(out[0].finished);
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(a.begin(), a.begin() + 3));
  EXPECT_FALSE(out[1].finished);
  EXPECT_EQ(out[1].tokens, b);

  DecodeOptions banned = greedy_decode(1);
  const int32_t first = a[2];
  banned.adjust_logits = [first](int32_t last, float* row) {
    if (last == 7) row[first] = -1e10f;
  };
  out = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7}}, banned, rng);
  std::vector<double> last = m.reference_log_softmax({3, 7}).back();
  last[first] = -1e300;
  EXPECT_EQ(out[0].tokens.back(), std::max_element(last.begin(), last.end()) - last.begin());
}

// Megatron's top_p_decay: the first draw at top-p 0.9 (the sampler's draw from the
// reference's logits, not the greedy token), then top-p decayed by 1e-3 leaves one token to
// draw from: every later draw is the reference's greedy one.
TEST(GenerateTokens, TopPDecayNarrowsLaterDraws) {
  test::TinyModel m(DType::F32);
  DecodeOptions o;
  o.max_new_tokens = 5;
  o.sampling.top_p = 0.9;
  o.top_p_decay = 1e-3;
  const std::vector<double> logits = m.reference_logits({3, 7}, 1, 2);
  const std::vector<float> first(logits.end() - m.cfg.vocab_size, logits.end());
  const int32_t greedy_first = static_cast<int32_t>(std::max_element(first.begin(), first.end()) - first.begin());
  // The first seed whose draw at top-p 0.9 is not the greedy token.
  uint64_t seed = 1;
  int32_t drawn = greedy_first;
  for (; seed < 100 && drawn == greedy_first; ++seed) {
    std::mt19937_64 ref_rng(seed);
    drawn = sample_token(first.data(), m.cfg.vocab_size, o.sampling, ref_rng);
  }
  ASSERT_NE(drawn, greedy_first) << "no seed below 100 draws another token";
  std::mt19937_64 rng(seed - 1);
  const Generation g = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7}}, o, rng)[0];
  ASSERT_EQ(g.tokens.size(), 7u);
  EXPECT_EQ(g.tokens[2], drawn);
  EXPECT_EQ(g.tokens, reference_greedy(m, {3, 7, drawn}, 7));
  // Behind a prompt of one token, Megatron's loop has decayed top-p once by position 1: the
  // first draw of {3, 7} is already the greedy one, with a seed whose draw for it without
  // the decay is not.
  DecodeOptions undecayed = o;
  undecayed.top_p_decay = 0;
  const auto first_draw = [&](const DecodeOptions& d, uint64_t s) {
    std::mt19937_64 r(s);
    return generate_tokens(m.cfg, *m.be, *m.params, {{3, 7}, {9}}, d, r)[0].tokens;
  };
  uint64_t batch_seed = 1;
  while (batch_seed < 100 && first_draw(undecayed, batch_seed)[2] == greedy_first) ++batch_seed;
  ASSERT_LT(batch_seed, 100u) << "no seed below 100 draws another token without the decay";
  EXPECT_EQ(first_draw(o, batch_seed), reference_greedy(m, {3, 7}, 7));
}

// Sampled decoding steps draw on the device (step_sampled) unless something else needs the
// logits on the host: an adjust_logits that changes nothing sends them there, and the
// tokens are the same, for ragged prompts, top-k, top-p and its decay, some sequences ending
// early.
TEST(GenerateTokens, SampledDrawsOnTheDeviceAreTheHostsDraws) {
  test::TinyModel m(DType::F32);
  const std::vector<std::vector<int32_t>> prompts = {{4}, {3, 7, 1, 9}, {11, 2}};
  for (const SamplingOptions& sampling :
       {SamplingOptions{false, 1.0, 0, 0.0}, SamplingOptions{false, 0.7, 6, 0.0}, SamplingOptions{false, 1.2, 0, 0.8}}) {
    DecodeOptions o;
    o.max_new_tokens = 4;
    o.sampling = sampling;
    o.top_p_decay = 0.9;
    o.ends = [](const std::vector<int32_t>& seq, int64_t) { return seq.back() % 7 == 0; };
    DecodeOptions on_host = o;
    on_host.adjust_logits = [](int32_t, float*) {};
    for (uint64_t seed : {1, 2, 3}) {
      std::mt19937_64 a(seed), b(seed);
      const auto device = generate_tokens(m.cfg, *m.be, *m.params, prompts, o, a);
      const auto host = generate_tokens(m.cfg, *m.be, *m.params, prompts, on_host, b);
      for (size_t p = 0; p < prompts.size(); ++p) {
        EXPECT_EQ(device[p].tokens, host[p].tokens) << "prompt " << p << ", seed " << seed << ", top_k "
                                                    << sampling.top_k << ", top_p " << sampling.top_p;
        EXPECT_EQ(device[p].finished, host[p].finished);
      }
      EXPECT_EQ(a(), b()) << "the same uniforms taken";
    }
  }
}

// Megatron's prevent_newline_after_colon changes the logits of its generation loop, from the
// shortest prompt's last token on: a prompt alone is scored as it is; batched with a shorter
// prompt, its later tokens are scored with the changed logits.
TEST(GenerateTokens, AdjustedLogitsFromTheShortestPromptsEnd) {
  test::TinyModel m(DType::F32);
  DecodeOptions o;
  o.logprobs = true;
  o.adjust_logits = [](int32_t last, float* row) {
    if (last == 7) row[1] = -1e10f;
  };
  std::mt19937_64 rng(1);
  const double want = m.reference_log_softmax({3, 7, 1})[1][1];
  const Generation alone = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7, 1}}, o, rng)[0];
  ASSERT_EQ(alone.logprobs.size(), 2u);
  EXPECT_NEAR(alone.logprobs[1], want, 1e-5);
  const Generation batched = generate_tokens(m.cfg, *m.be, *m.params, {{3, 7, 1}, {5}}, o, rng)[0];
  ASSERT_EQ(batched.logprobs.size(), 2u);
  EXPECT_NEAR(batched.logprobs[0], alone.logprobs[0], 1e-6);
  EXPECT_LT(batched.logprobs[1], -1e9);
}

TEST(GenerateTokens, BadPrompts) {
  test::TinyModel m(DType::F32);
  std::mt19937_64 rng(1);
  const auto run = [&](const std::vector<std::vector<int32_t>>& p, int64_t max_new) {
    return generate_tokens(m.cfg, *m.be, *m.params, p, greedy_decode(max_new), rng);
  };
  EXPECT_THROW(run({{1}, std::vector<int32_t>(8, 1)}, 1), InternalError);  // no room to draw
  EXPECT_NO_THROW(run({std::vector<int32_t>(8, 1)}, 0));                   // but room to score
  EXPECT_THROW(run({{1}, {}}, 1), InternalError);
  EXPECT_THROW(run({}, 1), InternalError);
  EXPECT_EQ(run({{5}}, 0)[0].tokens, std::vector<int32_t>{5});  // one token: nothing to do
}

}  // namespace
}  // namespace trident
