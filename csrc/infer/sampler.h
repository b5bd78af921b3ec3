// Picking the next token from a row of logits: greedy (argmax), or a draw from the softmax
// at a temperature, restricted to the k most likely tokens (top-k) and/or to the most
// likely tokens by Megatron's top-p ("nucleus") rule (top_p_keep), top-p applying to the
// top-k tokens' renormalised probabilities (core/token_draw.h does the drawing). The draw
// takes the 53 high bits of one mt19937_64 output (uniform_draw), so a seed gives the same
// tokens on every platform, and the same whether the host draws (sample_token) or the
// backend (Gpt2Decoder::step_sampled, given the same uniforms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "core/token_draw.h"

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

// Whether `o` draws the most likely token whatever the logits (greedy, temperature 0, or
// top-k 1, which Megatron samples as greedy): sample_token then takes no random number.
inline bool draws_greedily(const SamplingOptions& o) { return o.greedy || o.temperature == 0 || o.top_k == 1; }

// The rule of a draw that is not greedy.
inline DrawRule draw_rule(const SamplingOptions& o) { return DrawRule{o.temperature, o.top_k, o.top_p}; }

// One uniform number in [0, 1) from the 53 high bits of one output of `rng`.
inline double uniform_draw(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// The next token among ids [0, n) of `logits` (n = the real vocabulary: padding columns
// are never passed in).
int32_t sample_token(const float* logits, int64_t n, const SamplingOptions& o, std::mt19937_64& rng);

// log(sum(exp(logits))) over n logits, in double: logits[v] minus it is v's log-probability
// at temperature 1.
double log_sum_exp(const float* logits, int64_t n);

// The k most likely of n logits (k <= n), most likely first, ties by the lower id (the order
// sample_token draws in). One (k 1, the greedy draw, also sample_token's) is never a NaN
// logit unless every logit is NaN (then id 0), as the backends' logits_argmax.
std::vector<int32_t> most_likely(const float* logits, int64_t n, int k);

}  // namespace trident
