#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace trident {

void validate_sampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw ConfigError("--temperature must be a finite number >= 0");
  if (o.top_k < 0) throw ConfigError("--top-k must not be negative");
  if (!(o.top_p >= 0 && o.top_p <= 1)) throw ConfigError("--top-p must be in [0, 1]");
}

double log_sum_exp(const float* logits, int64_t n) {
  const double top = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp(static_cast<double>(logits[v]) - top);
  return top + std::log(sum);
}

std::vector<int32_t> most_likely(const float* logits, int64_t n, int k) {
  TRIDENT_CHECK(k >= 0 && k <= n, "most_likely: ", k, " of ", n, " logits");
  // One id, a greedy draw: a scan, not a sort of 50K ids (~50 us a sequence on a CPU core).
  if (k == 1) return {first_largest(logits, n)};
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), MoreLikely{logits});
  ids.resize(static_cast<size_t>(k));
  return ids;
}

int32_t sample_token(const float* logits, int64_t n, const SamplingOptions& o, std::mt19937_64& rng) {
  TRIDENT_CHECK(n > 0, "sample_token: empty logits");
  // Megatron samples top-k 1 as greedy: the first largest logit, and no random number.
  if (draws_greedily(o)) return first_largest(logits, n);
  return draw_token(logits, n, draw_rule(o), uniform_draw(rng));
}

}  // namespace trident
