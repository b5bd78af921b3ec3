// One token drawn from a row of logits by a given uniform number: the softmax at a
// temperature, restricted to the k most likely tokens (top-k, ties of the k-th kept) and
// then to the most likely ones by Megatron's top-p rule, the tokens taken by decreasing
// logit (ties by the lower id) and the one drawn where the running sum of their weights
// first exceeds u times the total. Arithmetic in double. The host sampler (infer/sampler.h)
// feeds it one mt19937_64 number a draw; the CPU backend's sample_logits runs it per row,
// and the CUDA kernel of that op is checked against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trident {

// How a token is drawn. temperature 0 or top_k 1 draw the most likely token (no random
// number is used); top_p 0 or 1 and top_k 0 mean no limit.
struct DrawRule {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 0.0;
};

// One row's share of a batch of draws (Backend::sample_logits): its uniform number in
// [0, 1), and its top-p (Megatron decays top-p along a sequence, so it varies by row).
struct RowDraw {
  double uniform = 0.0;
  double top_p = 0.0;
};

// The order of the draws: the larger logit first, of equal ones the lower id (no NaN).
struct MoreLikely {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// Whether `r` draws the most likely token whatever the logits and the uniform.
inline bool draws_most_likely(const DrawRule& r) { return r.temperature == 0 || r.top_k == 1; }

// The first id of the largest of n logits; NaN is never the largest (every logit NaN: 0).
int32_t first_largest(const float* logits, int64_t n);

// Top-p over `probs`, sorted by decreasing probability (ties in the caller's order): how
// many of the first tokens stay. As Megatron's sampler (megatron/text_generation/sampling.py),
// a token stays while the probability of the tokens before it is at most top_p, so the first
// token that takes the total past top_p stays too, and always the first one: with 0.5, 0.5
// and top_p 0.5 both stay (Hugging Face's TopPLogitsWarper keeps only the first).
size_t top_p_keep(const std::vector<double>& probs, double top_p);

// The token of ids [0, n) that `u` (in [0, 1)) draws under `r`. NaN logits are never drawn
// (every logit NaN: 0); -inf ones weigh nothing. As Megatron's sampler, a token stays under
// top-p while the probability of the tokens before it is at most top_p, so the first one
// always stays.
int32_t draw_token(const float* logits, int64_t n, const DrawRule& r, double u);

}  // namespace trident
