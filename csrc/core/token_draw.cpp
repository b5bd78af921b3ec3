#include "core/token_draw.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace trident {

int32_t first_largest(const float* logits, int64_t n) {
  int64_t best = -1;
  for (int64_t v = 0; v < n; ++v)
    if (best < 0 ? !std::isnan(logits[v]) : logits[v] > logits[best]) best = v;
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

size_t top_p_keep(const std::vector<double>& probs, double top_p) {
  double before = 0;  // the probability of the tokens before the next one
  size_t keep = 0;
  while (keep < probs.size() && before <= top_p) before += probs[keep++];
  return keep;
}

int32_t draw_token(const float* logits, int64_t n, const DrawRule& r, double u) {
  TRIDENT_CHECK(n > 0, "draw_token: empty logits");
  if (draws_most_likely(r)) return first_largest(logits, n);
  // Candidates by decreasing logit, ties by the lower id (NaN left out: it has no order).
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int64_t v = 0; v < n; ++v)
    if (!std::isnan(logits[v])) ids.push_back(static_cast<int32_t>(v));
  if (ids.empty()) return 0;
  const MoreLikely more_likely{logits};
  // Top-k keeps the first k and, as Megatron and Hugging Face (logits below the k-th largest
  // are dropped), every other token whose logit equals the k-th (likely with 16-bit logits).
  size_t keep = ids.size();
  if (r.top_k > 0 && static_cast<size_t>(r.top_k) < keep) {
    const auto kth = ids.begin() + r.top_k;
    std::partial_sort(ids.begin(), kth, ids.end(), more_likely);
    const float kth_logit = logits[*(kth - 1)];
    const auto ties_end = std::partition(kth, ids.end(), [&](int32_t a) { return logits[a] == kth_logit; });
    std::sort(kth, ties_end);  // by id
    keep = static_cast<size_t>(ties_end - ids.begin());
  } else {
    std::sort(ids.begin(), ids.end(), more_likely);
  }
  // Softmax weights at the temperature, from the largest logit.
  std::vector<double> w(keep);
  const double top = logits[ids[0]];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += w[i] = std::exp((logits[ids[i]] - top) / r.temperature);
  if (r.top_p > 0 && r.top_p < 1) {
    std::vector<double> probs(keep);
    for (size_t i = 0; i < keep; ++i) probs[i] = w[i] / total;
    keep = top_p_keep(probs, r.top_p);
    total = std::accumulate(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(keep), 0.0);
  }
  const double target = u * total;  // in [0, total)
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += w[i];
    if (target < acc) return ids[i];
  }
  return ids[keep - 1];  // u within rounding of 1
}

}  // namespace trident
