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

size_t top_p_keep(const std::vector<double>& probs, double top_p) {
  double before = 0;  // the probability of the tokens before the next one
  size_t keep = 0;
  while (keep < probs.size() && before <= top_p) before += probs[keep++];
  return keep;
}

namespace {

// Larger logit first; ties by the lower id.
struct MoreLikely {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// The first id of the largest logit, NaN never the largest (every logit NaN: id 0), as the
// backends' logits_argmax draws on the device.
int32_t first_largest(const float* logits, int64_t n) {
  int64_t best = -1;
  for (int64_t v = 0; v < n; ++v)
    if (best < 0 ? !std::isnan(logits[v]) : logits[v] > logits[best]) best = v;
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

}  // namespace

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
  // Megatron samples top-k 1 as greedy: the first largest logit.
  if (draws_greedily(o)) return first_largest(logits, n);
  // Candidates by decreasing logit (ties: lower id first). Top-k keeps the first k and, as
  // Megatron and Hugging Face (logits below the k-th largest are dropped), every other token
  // whose logit equals the k-th (likely with 16-bit logits).
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  const MoreLikely by_logit{logits};
  size_t keep = ids.size();
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < keep) {
    const auto kth = ids.begin() + o.top_k;
    std::partial_sort(ids.begin(), kth, ids.end(), by_logit);
    const float kth_logit = logits[*(kth - 1)];
    const auto ties_end = std::partition(kth, ids.end(), [&](int32_t a) { return logits[a] == kth_logit; });
    std::sort(kth, ties_end);  // by id
    keep = static_cast<size_t>(ties_end - ids.begin());
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  // Softmax at the temperature over the candidates, from the largest logit.
  std::vector<double> p(keep);
  const double top = logits[ids[0]];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i] = std::exp((logits[ids[i]] - top) / o.temperature);
  if (o.top_p > 0 && o.top_p < 1) {
    std::vector<double> probs(keep);
    for (size_t i = 0; i < keep; ++i) probs[i] = p[i] / total;
    keep = top_p_keep(probs, o.top_p);
    total = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;  // in [0, total)
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];  // u within rounding of total
}

}  // namespace trident
