// Inputs shared by the attention tests (the GPU one and the CPU-emulated one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

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

// The first key of every query (AttentionShape::document_starts, [B, T]) for random
// documents: each position ends its document with probability `eod` (the next one starts
// another), drawn from `seed`. Empty when eod is 0 (plain causal attention).
inline std::vector<int32_t> random_document_starts(int B, int T, float eod, uint64_t seed) {
  if (eod <= 0.f) return {};
  std::mt19937_64 rng(seed ^ 0xD0C5ull);
  std::bernoulli_distribution ends(eod);
  std::vector<int32_t> first(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int t = 0; t < T; ++t) {
      first[static_cast<size_t>(b) * T + t] = start;
      if (ends(rng)) start = t + 1;
    }
  }
  return first;
}

}  // namespace trident
