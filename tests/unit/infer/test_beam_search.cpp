// beam_search against a beam search over the double-precision reference GPT-2 of
// tests/unit/model/gpt2_reference.h that recomputes every beam's whole sequence at each
// step (no cache, so no reordering of one): the same hypotheses in the same order, with
// scores within 1e-6. Also: one beam is the reference's greedy continuation, and each score
// is the reference's summed log-probability of the generated tokens over length^penalty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "infer/beam_search.h"
#include "tiny_model.h"

namespace trident {
namespace {

std::vector<double> reference_last_log_softmax(const test::TinyModel& m, const std::vector<int32_t>& seq) {
  return m.reference_log_softmax(seq).back();
}

BeamSearchOptions beam_options(int width, int64_t max_new_tokens, int32_t stop_token) {
  BeamSearchOptions o;
  o.beam_width = width;
  o.max_new_tokens = max_new_tokens;
  o.stop_token = stop_token;
  return o;
}

// Megatron's beam search written directly over the reference: candidates sorted by score
// (ties by beam, then token), stop tokens among the first W finish, W others go on.
std::vector<BeamHypothesis> reference_beam_search(const test::TinyModel& m, const std::vector<int32_t>& prompt,
                                                  const BeamSearchOptions& o) {
  const int W = o.beam_width;
  std::vector<std::vector<int32_t>> beams(W, prompt);
  std::vector<double> sums(W, 0.0);
  std::vector<BeamHypothesis> done;  // every finished one, with its score
  const auto score = [&](double sum, int64_t length) { return sum / std::pow(static_cast<double>(length), o.length_penalty); };
  const auto worst_kept = [&] {  // the W-th best finished score
    std::vector<double> s;
    for (const auto& h : done) s.push_back(h.score);
    std::sort(s.rbegin(), s.rend());
    return s[W - 1];
  };
  for (int64_t n = 1;; ++n) {
    std::vector<std::tuple<double, int, int32_t>> cand;
    for (int b = 0; b < (n == 1 ? 1 : W); ++b) {
      const std::vector<double> lp = reference_last_log_softmax(m, beams[b]);
      for (int32_t v = 0; v < static_cast<int32_t>(lp.size()); ++v) cand.emplace_back(sums[b] + lp[v], b, v);
    }
    std::sort(cand.begin(), cand.end(), [](const auto& x, const auto& y) {
      if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) > std::get<0>(y);
      return std::make_pair(std::get<1>(x), std::get<2>(x)) < std::make_pair(std::get<1>(y), std::get<2>(y));
    });
    std::vector<std::vector<int32_t>> next;
    std::vector<double> next_sums;
    for (size_t r = 0; r < 2u * W && static_cast<int>(next.size()) < W; ++r) {
      auto [s, b, v] = cand[r];
      std::vector<int32_t> seq = beams[b];
      seq.push_back(v);
      if (v != o.stop_token) {
        next.push_back(seq);
        next_sums.push_back(s);
      } else if (static_cast<int>(r) < W) {
        done.push_back({seq, score(s, n)});
      }
    }
    const double best = std::get<0>(cand[0]);  // the best candidate, a stop token or not
    if (static_cast<int>(done.size()) >= W && worst_kept() >= score(best, n)) break;
    beams = next;
    sums = next_sums;
    if (n == o.max_new_tokens) {
      for (int b = 0; b < W; ++b) done.push_back({beams[b], score(sums[b], n)});
      break;
    }
  }
  std::stable_sort(done.begin(), done.end(), [](const auto& x, const auto& y) { return x.score > y.score; });
  if (static_cast<int>(done.size()) > W) done.resize(W);
  return done;
}

void expect_same(const std::vector<BeamHypothesis>& got, const std::vector<BeamHypothesis>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "hypothesis " << i;
    EXPECT_NEAR(got[i].score, want[i].score, 1e-6) << "hypothesis " << i;
  }
}

TEST(BeamSearch, MatchesAReferenceSearchWithoutACache) {
  test::TinyModel m(DType::F32);
  for (const int width : {2, 4}) {
    for (const double penalty : {1.0, 0.5}) {
      BeamSearchOptions o = beam_options(width, 5, 0);  // the stop token is chosen below
      o.length_penalty = penalty;
      // A stop token the search meets: the reference's second-best first token.
      std::vector<double> first = reference_last_log_softmax(m, {3, 7});
      const int32_t top = static_cast<int32_t>(std::max_element(first.begin(), first.end()) - first.begin());
      first[top] = -1e300;
      o.stop_token = static_cast<int32_t>(std::max_element(first.begin(), first.end()) - first.begin());
      const auto got = beam_search(m.cfg, *m.be, *m.params, {3, 7}, o);
      expect_same(got, reference_beam_search(m, {3, 7}, o));
      for (size_t i = 1; i < got.size(); ++i) EXPECT_GE(got[i - 1].score, got[i].score);
      std::printf("width %d, penalty %.1f: %zu hypotheses, best score %.4f, %zu tokens\n", width, penalty, got.size(),
                  got[0].score, got[0].tokens.size());
    }
  }
}

// A 5-token prompt fed in passes of 2 positions (2, 2, 1): the reference search's hypotheses.
TEST(BeamSearch, ChunkedPrefillMatchesAReferenceSearch) {
  test::TinyModel m(DType::F32);
  BeamSearchOptions o = beam_options(3, 3, 0);
  o.prefill_chunk = 2;
  const std::vector<int32_t> prompt = {3, 7, 1, 4, 2};
  expect_same(beam_search(m.cfg, *m.be, *m.params, prompt, o), reference_beam_search(m, prompt, o));
}

// One beam, no stop token met: the greedy continuation, scored by its summed log-probability
// over its length.
TEST(BeamSearch, OneBeamIsGreedy) {
  test::TinyModel m(DType::F32);
  const BeamSearchOptions o = beam_options(1, 4, 49);
  std::vector<int32_t> seq = {5};
  double sum = 0;
  while (seq.size() < 5) {
    const std::vector<double> lp = reference_last_log_softmax(m, seq);
    const auto best = std::max_element(lp.begin(), lp.end());
    ASSERT_NE(best - lp.begin(), 49) << "pick another stop token";
    sum += *best;
    seq.push_back(static_cast<int32_t>(best - lp.begin()));
  }
  const auto got = beam_search(m.cfg, *m.be, *m.params, {5}, o);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tokens, seq);
  EXPECT_NEAR(got[0].score, sum / 4, 1e-6);
}

TEST(BeamSearch, BadArguments) {
  test::TinyModel m(DType::F32);
  BeamSearchOptions o = beam_options(2, 6, 0);
  EXPECT_NO_THROW(beam_search(m.cfg, *m.be, *m.params, {1, 2}, o));
  o.max_new_tokens = 7;
  EXPECT_THROW(beam_search(m.cfg, *m.be, *m.params, {1, 2}, o), InternalError);  // past 8 positions
  o.max_new_tokens = 2;
  o.beam_width = 26;  // 52 candidates over 50 tokens
  EXPECT_THROW(beam_search(m.cfg, *m.be, *m.params, {1, 2}, o), InternalError);
  o.beam_width = 2;
  o.stop_token = 50;  // outside the vocabulary
  EXPECT_THROW(beam_search(m.cfg, *m.be, *m.params, {1, 2}, o), InternalError);
}

}  // namespace
}  // namespace trident
