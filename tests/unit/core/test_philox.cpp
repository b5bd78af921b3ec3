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

}  // namespace
}  // namespace trident
