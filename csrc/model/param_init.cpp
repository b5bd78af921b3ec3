// Fast path of the parameter init (param_init.h). The reference per element is
//   r = Philox4x32-10(counter (index lo, index hi, 0, 0x1417), key (k0, name_hash))
//   D = sqrt(-2 log(u1)) * cos(2 pi u2)   in double, with libm's log and cos
//   value = std * float(D)
// Only the rounding of D to float is observable. The fast path computes D' with its own
// log and cos (polynomials, relative error ~1e-15, against ~5e-16 for libm), so
// |D' - D| <= kGuard |D'| with a wide margin (kGuard = 1e-12). If D' (1 - kGuard) and
// D' (1 + kGuard) round to the same float f, then so does every double between them,
// D included (rounding is monotone), and f is the reference's float. Otherwise (about
// 4 in 100,000 elements, counted by init_normal_fallbacks), and where the fast math is not accurate enough to trust (cos
// within 1e-5 of a zero, log(u1) = 0), the element is recomputed with init_normal itself.
//
// The block loops are written branch-free so that the compiler vectorises them; through
// target_clones the CPU picks an AVX-512 (x86-64-v4), AVX2 or baseline build at load
// time (per element on one thread of a 2.6 GHz EPYC: reference ~31 ns, baseline build ~25,
// AVX2 ~12, AVX-512 ~5). The numbers never depend on which clone runs: the fast path only
// decides which elements need the reference.
#include "model/param_init.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>

#include "core/philox.h"

namespace trident {
namespace {

constexpr int kBlock = 256;
constexpr double kGuard = 1e-12;
constexpr double kMinReduced = 1e-5;  // |x - k pi/2| below this: cos is left to libm

std::atomic<uint64_t> fallbacks{0};

// pi/2 = kPio2Hi + kPio2Lo (fdlibm's pio2_1, pio2_1t): kPio2Hi has 33 significant bits,
// so k * kPio2Hi is exact for the k <= 4 used here.
constexpr double kPio2Hi = 1.57079632673412561417e+00;
constexpr double kPio2Lo = 6.07710050650619224932e-11;
constexpr double kTwoOverPi = 0.63661977236758134308;
constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52: x + magic rounds x to an integer
constexpr double kLn2 = 0.6931471805599453;
constexpr double kSqrt2 = 1.4142135623730951;

// Fills val[j] with the fast std * float(D') and ok[j] with 1 where it is proven equal to
// the reference.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
void fast_block(uint32_t k0, uint32_t k1, uint64_t first, int n, float std, float* val, uint32_t* ok) {
  // Philox4x32-10 exactly as philox4x32_10, rounds unrolled, every word held in a 64-bit
  // lane (its top half zero) so that the products need no shuffles once vectorised.
  uint32_t ra[kBlock], rb[kBlock];
  for (int j = 0; j < n; ++j) {
    constexpr uint64_t kLo = 0xffffffffull;
    const uint64_t index = first + static_cast<uint64_t>(j);
    uint64_t c0 = index & kLo, c1 = index >> 32, c2 = 0u, c3 = 0x1417u;
    uint64_t key0 = k0, key1 = k1;
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = 0xD2511F53ull * c0;
      const uint64_t p1 = 0xCD9E8D57ull * c2;
      const uint64_t n0 = (p1 >> 32) ^ c1 ^ key0;
      const uint64_t n2 = (p0 >> 32) ^ c3 ^ key1;
      c1 = p1 & kLo;
      c3 = p0 & kLo;
      c0 = n0;
      c2 = n2;
      key0 = (key0 + 0x9E3779B9u) & kLo;
      key1 = (key1 + 0xBB67AE85u) & kLo;
    }
    ra[j] = static_cast<uint32_t>(c0);
    rb[j] = static_cast<uint32_t>(c1);
  }
  for (int j = 0; j < n; ++j) {
    // The reference's u1 in (0, 1] and x = 2 pi u2, the same doubles.
    const double u1 = (static_cast<double>(ra[j]) + 1.0) * (1.0 / 4294967296.0);
    const double u2 = static_cast<double>(rb[j]) * (1.0 / 4294967296.0);
    const double x = 6.283185307179586 * u2;

    // log(u1): u1 = m 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
    // |s| <= 0.1716, series to s^19 (truncation < 3e-17 relative).
    // Branch-free (integer selects) so that the loop vectorises.
    const uint64_t bits = std::bit_cast<uint64_t>(u1);
    const uint64_t m_bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // [1, 2)
    const uint64_t big = m_bits > std::bit_cast<uint64_t>(kSqrt2) ? 1u : 0u;         // then halve m
    const double m = std::bit_cast<double>(m_bits - (big << 52));
    // The unbiased exponent as a double without an int64 -> double conversion (SSE2 has none).
    const double e = std::bit_cast<double>(0x4330000000000000ull | ((bits >> 52) + big)) - 4503599627370496.0 - 1023.0;
    const double f = m - 1.0;  // exact (Sterbenz)
    const double s = f / (m + 1.0);
    const double z = s * s;
    double p = 2.0 / 19;
    p = p * z + 2.0 / 17;
    p = p * z + 2.0 / 15;
    p = p * z + 2.0 / 13;
    p = p * z + 2.0 / 11;
    p = p * z + 2.0 / 9;
    p = p * z + 2.0 / 7;
    p = p * z + 2.0 / 5;
    p = p * z + 2.0 / 3;
    p = p * z + 2.0;
    const double log_u1 = e * kLn2 + s * p;

    // cos(x), x in [0, 2 pi): x = k pi/2 + t, |t| <= pi/4; cos x = cos t, -sin t, -cos t, sin t.
    const double kr = (x * kTwoOverPi + kRoundMagic);
    const uint64_t q = std::bit_cast<uint64_t>(kr) & 3u;
    const double kd = kr - kRoundMagic;
    const double t = (x - kd * kPio2Hi) - kd * kPio2Lo;
    const double t2 = t * t;
    // Taylor series, Horner in t^2 (truncation < 1e-19 for |t| <= pi/4).
    double c = 1.0 / 6402373705728000.0;  // 1/18!
    c = 1.0 / 20922789888000.0 - t2 * c;   // 1/16!
    c = 1.0 / 87178291200.0 - t2 * c;      // 1/14!
    c = 1.0 / 479001600.0 - t2 * c;        // 1/12!
    c = 1.0 / 3628800.0 - t2 * c;          // 1/10!
    c = 1.0 / 40320.0 - t2 * c;            // 1/8!
    c = 1.0 / 720.0 - t2 * c;              // 1/6!
    c = 1.0 / 24.0 - t2 * c;               // 1/4!
    c = 0.5 - t2 * c;                      // 1/2!
    const double cos_t = 1.0 - t2 * c;
    double sn = 1.0 / 355687428096000.0;  // 1/17!
    sn = 1.0 / 1307674368000.0 - t2 * sn;  // 1/15!
    sn = 1.0 / 6227020800.0 - t2 * sn;     // 1/13!
    sn = 1.0 / 39916800.0 - t2 * sn;       // 1/11!
    sn = 1.0 / 362880.0 - t2 * sn;         // 1/9!
    sn = 1.0 / 5040.0 - t2 * sn;           // 1/7!
    sn = 1.0 / 120.0 - t2 * sn;            // 1/5!
    sn = 1.0 / 6.0 - t2 * sn;              // 1/3!
    const double sin_t = t - t * t2 * sn;
    const uint64_t odd = q & 1u, negate = ((q + 1u) >> 1) & 1u;  // q = 1, 3: sin; q = 1, 2: negative
    const uint64_t pick_sin = 0u - odd;
    const uint64_t mag = (std::bit_cast<uint64_t>(sin_t) & pick_sin) | (std::bit_cast<uint64_t>(cos_t) & ~pick_sin);
    const double cos_x = std::bit_cast<double>(mag ^ (negate << 63));

    const double d = std::sqrt(-2.0 * log_u1) * cos_x;
    const float fv = static_cast<float>(d);
    const uint32_t same = (static_cast<float>(d * (1.0 - kGuard)) == fv) & (static_cast<float>(d * (1.0 + kGuard)) == fv);
    const uint32_t trusted = (std::fabs(t) >= kMinReduced) & (ra[j] != 0xffffffffu);  // u1 = 1: sign of zero
    val[j] = std * fv;
    ok[j] = same & trusted;
  }
}

}  // namespace

void init_normal_range(uint64_t seed, uint32_t name_hash, uint64_t first, int64_t n, float std, float* out) {
  // The key exactly as init_normal forms it.
  const uint32_t k0 = static_cast<uint32_t>(seed) ^ static_cast<uint32_t>(seed >> 32) * 0x85EBCA6Bu;
  uint32_t ok[kBlock];
  uint64_t redone = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int len = static_cast<int>(std::min<int64_t>(kBlock, n - b));
    const uint64_t start = first + static_cast<uint64_t>(b);
    fast_block(k0, name_hash, start, len, std, out + b, ok);
    for (int j = 0; j < len; ++j) {
      if (ok[j]) continue;
      out[b + j] = std * init_normal(seed, name_hash, start + static_cast<uint64_t>(j));
      ++redone;
    }
  }
  if (redone) fallbacks.fetch_add(redone, std::memory_order_relaxed);
}

uint64_t init_normal_fallbacks() { return fallbacks.load(std::memory_order_relaxed); }

}  // namespace trident
