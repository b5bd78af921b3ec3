#include "core/dtype.h"

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

}  // namespace trident
