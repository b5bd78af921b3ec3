// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), and the
// statistics and key dependence of the dropout masks built on it.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/philox.h"

namespace trident {
namespace {

void expect_kat(Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 want) {
  const Philox4 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox, KnownAnswerZero) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
}

TEST(Philox, KnownAnswerOnes) {
  expect_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
             {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
}

TEST(Philox, KnownAnswerPi) {
  expect_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
             {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, UniformRange) {
  EXPECT_EQ(philox_uniform(0), 0.0f);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0f);
  EXPECT_EQ(philox_uniform(0x80000000u), 0.5f);
}

// Mean and variance of init_normal over many indices: N(0, 1) within 5 sigma.
TEST(Philox, InitNormalMoments) {
  const int n = 200000;
  double s = 0, ss = 0;
  for (int i = 0; i < n; ++i) {
    const double x = init_normal(1234, fnv1a32("transformer.wte.weight"), static_cast<uint64_t>(i));
    s += x;
    ss += x * x;
  }
  const double mean = s / n, var = ss / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(n));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
  // A different name gives different numbers.
  EXPECT_NE(init_normal(1234, fnv1a32("a"), 5), init_normal(1234, fnv1a32("b"), 5));
}

// Keep rate equals 1 - p within 5 sigma, for every one of the four Philox output words.
TEST(Philox, DropoutKeepRate) {
  for (float p : {0.1f, 0.5f}) {
    DropoutKey k{p, 42, 7, 0};
    const int n = 400000;
    int kept[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; ++i) kept[i & 3] += dropout_keep(k, 3, static_cast<uint64_t>(i));
    const double sigma = std::sqrt(p * (1 - p) / (n / 4));
    for (int w = 0; w < 4; ++w) EXPECT_NEAR(kept[w] / (n / 4.0), 1.0 - p, 5 * sigma) << "p=" << p << " word " << w;
  }
}

TEST(Philox, DropoutZeroKeepsAll) {
  DropoutKey k{0.0f, 42, 1, 0};
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(dropout_keep(k, 0, static_cast<uint64_t>(i)));
}

// Masks differ between samples, sites and seeds, and are reproducible.
TEST(Philox, DropoutMaskDependsOnKey) {
  auto mask = [](DropoutKey k, uint64_t sample, uint64_t index_base) {
    uint64_t bits = 0;
    for (int i = 0; i < 64; ++i) bits |= static_cast<uint64_t>(dropout_keep(k, sample, index_base + i)) << i;
    return bits;
  };
  const DropoutKey base{0.5f, 1, 2, 0};
  std::set<uint64_t> seen;
  seen.insert(mask(base, 0, 0));
  seen.insert(mask(base, 1, 0));                       // other sample
  seen.insert(mask(base, 1ull << 32, 0));              // high bits of the sample count
  seen.insert(mask(base, 0, 64));                      // other indices
  seen.insert(mask(base, 0, 1ull << 34));              // high bits of the index count
  seen.insert(mask(DropoutKey{0.5f, 1, 3, 0}, 0, 0));  // other site
  seen.insert(mask(DropoutKey{0.5f, 9, 2, 0}, 0, 0));  // other seed
  seen.insert(mask(DropoutKey{0.5f, 1ull << 33, 2, 0}, 0, 0));  // high bits of the seed
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(mask(base, 5, 128), mask(base, 5, 128));
}

// Attention dropout: the keep rate of each of a block's 8 elements (4 words x 2 halves:
// keys j & 3, query parity) is 1 - ceil(p 2^16) / 2^16 within 5 sigma, over many blocks.
TEST(Philox, AttnDropoutKeepRatePerBlockPosition) {
  for (float p : {0.1f, 0.5f}) {
    const DropoutKey k{p, 42, 5, 0};
    const uint64_t T = 400;  // 200 row pairs x 100 key quads
    int kept[2][4] = {};
    for (uint64_t i = 0; i < T; ++i)
      for (uint64_t j = 0; j < T; ++j) kept[i & 1][j & 3] += attn_dropout_keep(k, 3, 7, T, i, j);
    const double keep = 1.0 - std::ceil(p * 65536.0) / 65536.0, n = T * T / 8.0;
    const double sigma = std::sqrt(keep * (1 - keep) / n);
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 4; ++w)
        EXPECT_NEAR(kept[h][w] / n, keep, 5 * sigma) << "p=" << p << " half " << h << " word " << w;
  }
}

// The 16-bit threshold and the factor that keeps the expectation: p = 0.5 is exact, 0.1
// rounds up to 6554 / 65536, p within 2^-16 of 1 keeps nothing (factor 0), p = 0 keeps all.
TEST(Philox, AttnDropoutThresholdAndScale) {
  EXPECT_EQ(attn_drop_threshold(0.0f), 0u);
  EXPECT_EQ(attn_drop_threshold(0.5f), 32768u);
  EXPECT_EQ(attn_drop_threshold(0.1f), 6554u);
  EXPECT_EQ(attn_drop_threshold(1e-9f), 1u);
  EXPECT_EQ(attn_drop_threshold(0.99999f), 65536u);
  EXPECT_FLOAT_EQ(attn_drop_scale(0.5f), 2.0f);
  EXPECT_FLOAT_EQ(attn_drop_scale(0.1f), static_cast<float>(65536.0 / (65536 - 6554)));
  EXPECT_EQ(attn_drop_scale(0.99999f), 0.0f);
  const DropoutKey none{0.0f, 42, 1, 0};
  for (uint64_t j = 0; j < 1000; ++j) ASSERT_TRUE(attn_dropout_keep(none, 0, 0, 1000, j % 7, j));
  const DropoutKey all{0.99999f, 42, 1, 0};
  for (uint64_t j = 0; j < 1000; ++j) ASSERT_FALSE(attn_dropout_keep(all, 0, 0, 1000, j % 7, j));
}

// A block is shared by exactly its 2 x 4 elements: changing the query pair, the key quad,
// the head or T moves to another block (masks of 64 elements differ), and blocks with the
// same counter agree.
TEST(Philox, AttnDropoutBlocks) {
  const DropoutKey k{0.5f, 11, 6, 0};
  auto mask = [&](uint64_t hg, uint64_t T, uint64_t i0, uint64_t j0) {
    uint64_t bits = 0;
    for (int e = 0; e < 64; ++e)
      bits |= static_cast<uint64_t>(attn_dropout_keep(k, 9, hg, T, i0 + (e & 1), j0 + (e >> 1) % 4 + (e >> 3) * 4))
              << e;
    return bits;
  };
  std::set<uint64_t> seen{mask(0, 64, 0, 0), mask(0, 64, 2, 0), mask(0, 64, 0, 32), mask(1, 64, 0, 0),
                          mask(0, 128, 2, 0)};
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(attn_drop_counter(2, 64, 5, 13), (2 * 64 + 4) * 64 + 12u);
  EXPECT_EQ(attn_drop_counter(2, 64, 4, 12), attn_drop_counter(2, 64, 5, 15));
}

}  // namespace
}  // namespace trident
