#include "core/dtype.h"

#include <algorithm>

// F16C (x86-64 with GCC or Clang): the span conversions pick it at run time.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TRIDENT_F16C 1
#include <immintrin.h>
#endif

#include "core/error.h"

namespace trident {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::I32: return "int32";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32") return DType::F32;
  if (s == "fp16" || s == "float16") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "int32") return DType::I32;
  throw ConfigError("unknown dtype '" + s + "' (expected fp32, fp16 or bf16)");
}

float half_to_float_exact(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_float(sign | ((127 - 15 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

namespace {
const float* build_half_table() {
  static float table[65536];
  for (uint32_t h = 0; h < 65536; ++h) table[h] = half_to_float_exact(static_cast<uint16_t>(h));
  return table;
}
}  // namespace

const float* const kHalfToFloat = build_half_table();

namespace {
void floats_to_halves_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

#ifdef TRIDENT_F16C
// vcvtps2ph rounds to nearest even with subnormals and overflow to inf, as float_to_half
// does; only NaN differs (it keeps the payload's top bits), so blocks holding a NaN are
// converted again by float_to_half (canonical quiet NaN, as on the GPU).
__attribute__((target("avx,f16c"))) void floats_to_halves_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) floats_to_halves_scalar(src + i, dst + i, 8);
  }
  floats_to_halves_scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx,f16c"))) void halves_to_floats_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, x);
    // vcvtph2ps quiets signalling NaNs; the table keeps every NaN's bits.
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0)
      for (int64_t k = i; k < i + 8; ++k) dst[k] = half_to_float(src[k]);
  }
  for (; i < n; ++i) dst[i] = half_to_float(src[i]);
}
bool cpu_has_f16c() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  }();
  return has;
}
#endif
}  // namespace

void floats_to_halves(const float* src, uint16_t* dst, int64_t n) {
#ifdef TRIDENT_F16C
  if (cpu_has_f16c()) return floats_to_halves_f16c(src, dst, n);
#endif
  floats_to_halves_scalar(src, dst, n);
}

void halves_to_floats(const uint16_t* src, float* dst, int64_t n) {
#ifdef TRIDENT_F16C
  if (cpu_has_f16c()) return halves_to_floats_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

void to_floats(const void* src, DType t, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::F16: halves_to_floats(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(h[i]);
      return;
    }
    case DType::I32: {
      const auto* v = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(v[i]);
      return;
    }
  }
}

}  // namespace trident
