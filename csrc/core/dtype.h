// Element types and host-side conversions between fp32 and the 16-bit formats.
// Conversions round to nearest, ties to even; NaN stays NaN, overflow goes to inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace trident {

// F32/F16/BF16 hold parameters, activations and gradients; I32 holds token ids.
enum class DType : uint8_t { F32, F16, BF16, I32 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
  }
  return 0;
}

inline bool is_float(DType t) { return t != DType::I32; }

const char* dtype_name(DType t);
// Parses "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16", "int32"; throws ConfigError.
DType parse_dtype(const std::string& s);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// fp32 -> bf16 with round-to-nearest-even; NaN is kept quiet.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// fp32 -> fp16, round-to-nearest-even, subnormals, overflow to inf (inline: hot in the CPU backend).
inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = mant * 2^-24. Round the exact value to an integer.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // value = mant * 2^(exp-150); we want units of 2^-24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits (without a
  // branch: the dropped bits are random, so a branch would mispredict half the time).
  const uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  const uint32_t up = static_cast<uint32_t>(rem > 0x1000u) | (static_cast<uint32_t>(rem == 0x1000u) & h);
  return static_cast<uint16_t>(sign | (h + (up & 1u)));
}

// float_to_half over a span, bit for bit the same; x86-64 CPUs with F16C convert 8 at a time.
void floats_to_halves(const float* src, uint16_t* dst, int64_t n);

float half_to_float_exact(uint16_t h);  // the bit manipulation the table below is built from
// Every fp16 value as fp32, so that the CPU backend's hot loops convert with one load.
extern const float* const kHalfToFloat;
inline float half_to_float(uint16_t h) { return kHalfToFloat[h]; }
// half_to_float over a span, bit for bit the same (F16C: 8 at a time, no table lookups,
// which miss the cache on large spans).
void halves_to_floats(const uint16_t* src, float* dst, int64_t n);

// n elements of a buffer of type t as floats (I32 converts by value): load_as_float over a
// span with the type's branch taken once, not per element (a step's 8 x 50K logits).
void to_floats(const void* src, DType t, float* dst, int64_t n);

// Reads element i of a buffer of type t as float (I32 converts by value).
inline float load_as_float(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
  }
  return 0.f;
}
inline void store_from_float(void* p, DType t, size_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = float_to_half(v); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
  }
}

}  // namespace trident
