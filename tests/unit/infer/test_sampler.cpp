// most_likely (ties by the lower id, with k 1 through its scan and larger k through its
// sort); sample_token: greedy and its equivalents (top-k 1 included, as Megatron), the exact
// distributions of temperature, top-k (ties of the k-th kept) and top-p sampling (frequencies of many draws against the probabilities computed by
// hand), Megatron's top-p rule at its boundary (top_p_keep, and ties drawn through
// sample_token), determinism per seed, and the flag checks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "infer/sampler.h"

namespace trident {
namespace {

// Frequencies of each id over n draws.
std::map<int32_t, double> frequencies(const std::vector<float>& logits, const SamplingOptions& o, int n) {
  std::mt19937_64 rng(42);
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) f[sample_token(logits.data(), static_cast<int64_t>(logits.size()), o, rng)] += 1.0 / n;
  return f;
}

// Probabilities 1/6, 2/6, 3/6 at temperature 1 (ids 0, 1, 2); id 3 is very unlikely.
const std::vector<float> kLogits = {0.0f, std::log(2.0f), std::log(3.0f), -30.0f};
constexpr int kDraws = 60000;  // standard error of a frequency <= 0.002: tolerance 0.01 is 5 sigma

TEST(Sampler, GreedyAndItsEquivalentsTakeTheArgmax) {
  std::mt19937_64 rng(1);
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};  // a tie: the lower id wins
  for (SamplingOptions o : {SamplingOptions{true, 1.0, 0, 0.0}, SamplingOptions{false, 0.0, 0, 0.0},
                            SamplingOptions{false, 1.0, 1, 0.0}, SamplingOptions{false, 1.0, 0, 1e-9}})
    for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(l.data(), 4, o, rng), 1);
}

TEST(Sampler, MostLikelyTakesTheLowerIdOfTies) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(most_likely(l.data(), 5, 1), std::vector<int32_t>({1}));
  EXPECT_EQ(most_likely(l.data(), 5, 3), std::vector<int32_t>({1, 3, 4}));
  EXPECT_EQ(most_likely(l.data(), 5, 0), std::vector<int32_t>());
  EXPECT_EQ(most_likely(l.data() + 2, 3, 1), std::vector<int32_t>({1}));  // the row's own ids
  // A NaN logit is never the greedy draw (as logits_argmax on a device), also when first.
  const std::vector<float> nan_first = {NAN, 2.0f, NAN, 2.0f}, all_nan = {NAN, NAN};
  EXPECT_EQ(most_likely(nan_first.data(), 4, 1), std::vector<int32_t>({1}));
  EXPECT_EQ(most_likely(all_nan.data(), 2, 1), std::vector<int32_t>({0}));
  std::mt19937_64 rng(1);
  SamplingOptions greedy;
  greedy.greedy = true;
  EXPECT_EQ(sample_token(nan_first.data(), 4, greedy, rng), 1);
}

TEST(Sampler, TemperatureOneDrawsTheSoftmax) {
  const auto f = frequencies(kLogits, SamplingOptions{}, kDraws);
  EXPECT_NEAR(f.count(0) ? f.at(0) : 0, 1.0 / 6, 0.01);
  EXPECT_NEAR(f.count(1) ? f.at(1) : 0, 2.0 / 6, 0.01);
  EXPECT_NEAR(f.count(2) ? f.at(2) : 0, 3.0 / 6, 0.01);
}

TEST(Sampler, TemperatureSharpens) {
  SamplingOptions o;
  o.temperature = 0.5;  // probabilities proportional to 1, 4, 9
  const auto f = frequencies(kLogits, o, kDraws);
  EXPECT_NEAR(f.at(0), 1.0 / 14, 0.01);
  EXPECT_NEAR(f.at(2), 9.0 / 14, 0.01);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  SamplingOptions o;
  o.top_k = 2;  // ids 2 and 1, renormalised: 3/5 and 2/5
  const auto f = frequencies(kLogits, o, kDraws);
  EXPECT_EQ(f.count(0), 0u);
  EXPECT_NEAR(f.at(1), 0.4, 0.01);
  EXPECT_NEAR(f.at(2), 0.6, 0.01);
}

// Megatron's and Hugging Face's top-k drop the logits below the k-th largest, so tokens tied
// with the k-th are all kept: here k = 2 keeps ids 0, 2, 3 and 4 (equal odds for the ties).
TEST(Sampler, TopKKeepsTiesOfTheKth) {
  SamplingOptions o;
  o.top_k = 2;
  const std::vector<float> tied = {std::log(3.0f), -0.5f, 0.0f, 0.0f, 0.0f, -1.0f};  // 2, 3, 4 tie at the k-th
  const auto f = frequencies(tied, o, kDraws);
  EXPECT_EQ(f.count(1), 0u);
  EXPECT_EQ(f.count(5), 0u);
  EXPECT_NEAR(f.at(0), 0.5, 0.01);  // 3 / (3 + 1 + 1 + 1)
  for (int32_t id : {2, 3, 4}) EXPECT_NEAR(f.at(id), 1.0 / 6, 0.01);
}

TEST(Sampler, TopPKeepsTheMostLikelyTokens) {
  SamplingOptions o;
  o.top_p = 0.4;  // id 2 alone has 1/2: the tokens after it have more than 0.4 before them
  auto f = frequencies(kLogits, o, 2000);
  EXPECT_EQ(f.size(), 1u);
  EXPECT_EQ(f.begin()->first, 2);
  o.top_p = 0.6;  // ids 2 and 1 (5/6), renormalised
  f = frequencies(kLogits, o, kDraws);
  EXPECT_EQ(f.count(0), 0u);
  EXPECT_NEAR(f.at(2), 0.6, 0.01);
}

// Megatron's rule (megatron/text_generation/sampling.py: cumsum > top_p, shifted right by
// one, the first token always kept): a token stays while the probability before it is at
// most p. Binary fractions, so every sum is exact and the boundary cases are exact.
TEST(Sampler, TopPKeepMatchesMegatronAtTheBoundary) {
  EXPECT_EQ(top_p_keep({0.5, 0.5}, 0.5), 2u);  // Hugging Face keeps 1
  EXPECT_EQ(top_p_keep({0.5, 0.25, 0.25}, 0.5), 2u);
  EXPECT_EQ(top_p_keep({0.5, 0.25, 0.25}, 0.75), 3u);
  EXPECT_EQ(top_p_keep({0.5, 0.25, 0.25}, 0.4), 1u);
  EXPECT_EQ(top_p_keep({0.5, 0.25, 0.25}, 0.625), 2u);
  EXPECT_EQ(top_p_keep({0.25, 0.25, 0.25, 0.25}, 0.5), 3u);
  EXPECT_EQ(top_p_keep({0.25, 0.25, 0.25, 0.25}, 0.25), 2u);
  EXPECT_EQ(top_p_keep({0.25, 0.25, 0.25, 0.25}, 0.125), 1u);
  EXPECT_EQ(top_p_keep({1.0}, 0.5), 1u);
}

// Equal logits give exactly equal probabilities: with 0.5/0.5 and top-p 0.5 Megatron keeps
// both tokens; with four of 0.25 it keeps three (ties: the lower ids).
TEST(Sampler, TopPOnTiesDrawsWhatMegatronKeeps) {
  SamplingOptions o;
  o.top_p = 0.5;
  auto f = frequencies({1.5f, 1.5f}, o, 4000);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NEAR(f.at(0), 0.5, 0.05);
  EXPECT_NEAR(f.at(1), 0.5, 0.05);
  f = frequencies({-2.0f, -2.0f, -2.0f, -2.0f}, o, 6000);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.count(3), 0u);
  for (int32_t id = 0; id < 3; ++id) EXPECT_NEAR(f.at(id), 1.0 / 3, 0.05);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(0.1 * i));
  auto draw = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(sample_token(l.data(), 1000, SamplingOptions{false, 1.0, 50, 0.9}, rng));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, FlagChecksNameTheFlag) {
  auto message = [](SamplingOptions o) {
    try {
      validate_sampling(o);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({false, -1.0, 0, 0.0}).find("--temperature"), std::string::npos);
  EXPECT_NE(message({false, 1.0, -2, 0.0}).find("--top-k"), std::string::npos);
  EXPECT_NE(message({false, 1.0, 0, 1.5}).find("--top-p"), std::string::npos);
  EXPECT_EQ(message({false, 0.7, 40, 0.95}), "");
}

}  // namespace
}  // namespace trident
