// Picking the next token from a row of logits: greedy (argmax), or a draw from the softmax
// at a temperature, restricted to the k most likely tokens (top-k) and/or to the smallest
// set whose probability reaches p (top-p, "nucleus"), as Megatron's and Hugging Face's
// samplers do. Arithmetic in double on the host; the draw uses the 53 high bits of one
// mt19937_64 output, so a seed gives the same tokens on every platform.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace trident {

struct SamplingOptions {
  bool greedy = false;       // argmax (the lowest id among ties); also when temperature == 0
  double temperature = 1.0;  // >= 0
  int top_k = 0;             // 0: no limit
  double top_p = 0.0;        // in [0, 1]; 0 or 1: no limit
};

// Throws ConfigError naming the flag (--temperature, --top-k, --top-p) for values outside
// their ranges.
void validate_sampling(const SamplingOptions& o);

// The next token among ids [0, n) of `logits` (n = the real vocabulary: padding columns
// are never passed in).
int32_t sample_token(const float* logits, int64_t n, const SamplingOptions& o, std::mt19937_64& rng);

}  // namespace trident
