// Inputs shared by the attention tests (the GPU one and the CPU-emulated one).
#pragma once

#include <cstddef>

namespace trident {

// The factor for element i of a [B, T, 3, H, D] qkv tensor in a "sharp" case: Q times
// `sharp` and key t's K times 1 + (sharp - 1) t / T, so that scores are large and their row
// maxima grow along the keys (the forward then rescales its output past the first key
// tile); V and every element of a case with sharp <= 0 keep factor 1.
inline float sharp_input_factor(size_t i, int T, int H, int D, float sharp) {
  if (sharp <= 0) return 1.f;
  const size_t t = i / (3 * static_cast<size_t>(H) * D) % T, w = i / (static_cast<size_t>(H) * D) % 3;
  return w == 0 ? sharp : w == 1 ? 1.f + (sharp - 1.f) * static_cast<float>(t) / T : 1.f;
}

}  // namespace trident
