// fp16/bf16 conversions against independent definitions: the exact value of every half
// (computed with ldexp) and round-to-nearest-even found by searching the representable
// neighbours in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace trident {
namespace {

// Exact value of a binary16 bit pattern from its definition.
double half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// Round-to-nearest-even into binary16 by brute force over the sorted finite halves.
uint16_t half_reference(float f) {
  static const std::vector<double> pos = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(half_value(static_cast<uint16_t>(h)));
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  // 65504 + half an ulp (16) and beyond rounds to inf (the tie goes to the even inf).
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(pos.begin(), pos.end(), a);
  uint32_t hi = static_cast<uint32_t>(it - pos.begin());
  if (hi == 0) return sign;
  const uint32_t lo = hi - 1;
  if (hi >= pos.size()) return sign | lo;
  const double dlo = a - pos[lo], dhi = pos[hi] - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// Round-to-nearest-even into bfloat16: the two neighbours are the float truncated to
// 16 high bits and the next pattern up.
uint16_t bf16_reference(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  const double a = std::fabs(static_cast<double>(f));
  const double vlo = std::fabs(static_cast<double>(bits_float(lo)));
  // hi may be the first pattern past the largest finite float: treat it as 2^128.
  const double vhi = ((hi & 0x7f800000u) == 0x7f800000u) ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bits_float(hi)));
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return static_cast<uint16_t>(lo >> 16);
  if (dhi < dlo) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

TEST(Dtype, Sizes) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I32), 4u);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("float16"), DType::F16);
  EXPECT_THROW(parse_dtype("fp8"), ConfigError);
}

TEST(Dtype, HalfToFloatExhaustiveExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = half_value(static_cast<uint16_t>(h));
    const float got = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(Dtype, HalfRoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const uint16_t back = float_to_half(f);
    const bool nan = ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(half_to_float(back))) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

TEST(Dtype, HalfKnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);             // largest finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);             // below the halfway point
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);             // tie rounds to even (inf)
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);                 // overflow
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units -> 2 (even)
  EXPECT_EQ(float_to_half(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 units -> 2 (even)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);        // tie -> even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);    // tie -> even
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400);            // subnormal rounds up to normal
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_half(NAN) & 0x7c00, 0x7c00);
}

// Every rounding case: random floats over the whole half range, plus every midpoint
// between adjacent halves and its two float neighbours.
TEST(Dtype, HalfRoundingMatchesReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> ex(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::exp2(ex(rng)) * ((rng() & 1) ? 1.f : -1.f);
    ASSERT_EQ(float_to_half(f), half_reference(f)) << f;
  }
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double mid = 0.5 * (half_value(static_cast<uint16_t>(h)) + half_value(static_cast<uint16_t>(h + 1)));
    const float f = static_cast<float>(mid);  // exact: halves have <= 11 significant bits
    for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)}) {
      ASSERT_EQ(float_to_half(g), half_reference(g)) << std::hex << h;
      ASSERT_EQ(float_to_half(-g), half_reference(-g)) << std::hex << h;
    }
  }
}

// The span converter (8 at a time with F16C) against the scalar one, bit for bit: every
// half's midpoints and neighbours, random floats, NaNs (canonical, not the input's payload),
// infinities and float subnormals, at every tail length and misaligned starts.
TEST(Dtype, HalfSpanMatchesScalar) {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const float g = static_cast<float>(0.5 * (half_value(static_cast<uint16_t>(h)) + half_value(static_cast<uint16_t>(h + 1))));
    for (float v : {f, g, std::nextafter(g, 0.0f), std::nextafter(g, INFINITY)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ex(-30.0f, 17.0f);
  for (int i = 0; i < 20000; ++i) in.push_back(std::exp2(ex(rng)) * ((rng() & 1) ? 1.f : -1.f));
  const float specials[] = {NAN, -NAN, bits_float(0x7f800001u), bits_float(0xffc12345u), INFINITY, -INFINITY,
                            1e-40f, -1e-45f, 65520.0f, 1e30f};
  for (size_t i = 0; i < std::size(specials); ++i) in.insert(in.begin() + static_cast<long>(37 * i), specials[i]);
  for (int64_t start = 0; start < 3; ++start) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{15}, int64_t{17},
                      static_cast<int64_t>(in.size()) - start}) {
      std::vector<uint16_t> got(static_cast<size_t>(n) + 1, 0xabcd);
      floats_to_halves(in.data() + start, got.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float_to_half(in[start + i])) << start << " " << i;
      ASSERT_EQ(got[n], 0xabcd) << "wrote past the span, n = " << n;
    }
  }
}

// The span reader against the table, bit for bit: every half (signalling and quiet NaNs with
// their payloads included), at every tail length and misaligned starts.
TEST(Dtype, HalfSpanReadMatchesTable) {
  std::vector<uint16_t> in(65536 + 19);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i * 40503u);  // odd: every value once
  for (int64_t start = 0; start < 3; ++start) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{65536}}) {
      std::vector<float> got(static_cast<size_t>(n) + 1, 7.0f);
      halves_to_floats(in.data() + start, got.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(float_bits(got[i]), float_bits(half_to_float(in[start + i]))) << std::hex << in[start + i];
      ASSERT_EQ(got[n], 7.0f) << "wrote past the span, n = " << n;
    }
  }
}

TEST(Dtype, Bf16KnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);  // subnormal tie -> even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(0x7f800001u)))));  // NaN payload in low bits
  EXPECT_EQ(bf16_to_float(0x4049), bits_float(0x40490000u));
}

TEST(Dtype, Bf16RoundingMatchesReference) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300000; ++i) {
    uint32_t u = rng();
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf/NaN covered above
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    const float f = bits_float(u);
    ASSERT_EQ(float_to_bf16(f), bf16_reference(f)) << std::hex << u;
  }
  for (uint32_t b = 0; b < 65536; ++b) {  // exhaustive round trip
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), b) << std::hex << b;
  }
}

TEST(Dtype, LoadStoreAsFloat) {
  uint16_t h[2];
  store_from_float(h, DType::F16, 1, 0.5f);
  EXPECT_EQ(h[1], 0x3800);
  EXPECT_EQ(load_as_float(h, DType::F16, 1), 0.5f);
  store_from_float(h, DType::BF16, 0, -3.0f);
  EXPECT_EQ(load_as_float(h, DType::BF16, 0), -3.0f);
  int32_t t[1];
  store_from_float(t, DType::I32, 0, 50256.0f);
  EXPECT_EQ(t[0], 50256);
}

}  // namespace
}  // namespace trident
