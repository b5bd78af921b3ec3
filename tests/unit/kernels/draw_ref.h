// A sampled draw written out the long way, for the tests of Backend::sample_logits: every
// id sorted by decreasing logit (ties by the lower id, NaN left out), top-k with the k-th's
// ties, softmax weights in double at the temperature, Megatron's top-p, and the running
// sums that a uniform is compared with. Besides the drawn id it says how near a uniform
// lies to a boundary between two tokens (or the top-p sum to its cut), so a test of a
// device's float sums can accept another id only where the boundary is that near. And the
// layout of rows in segments (a TP group's logits gathered rank-major).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace trident::test {

struct DrawRef {
  std::vector<int32_t> order;  // candidates, most likely first
  std::vector<double> ends;    // ends[i]: the weight of order[0..i], the kept ones only
  double top_p_margin = std::numeric_limits<double>::infinity();  // |share before a token - top_p|, least

  // The id that `u` draws: the first whose running weight exceeds u times the kept weight.
  int32_t id(double u) const {
    const double target = u * ends.back();
    for (size_t i = 0; i < ends.size(); ++i)
      if (target < ends[i]) return order[i];
    return order[ends.size() - 1];
  }
  // The distance from u times the kept weight to the nearest running sum, as a share of it.
  double margin(double u) const {
    double m = std::numeric_limits<double>::infinity();
    for (double e : ends) m = std::min(m, std::abs(u * ends.back() - e) / ends.back());
    return m;
  }
};

inline DrawRef draw_ref(const float* logits, int64_t n, double temperature, int top_k, double top_p) {
  DrawRef r;
  for (int64_t v = 0; v < n; ++v)
    if (!std::isnan(logits[v])) r.order.push_back(static_cast<int32_t>(v));
  std::stable_sort(r.order.begin(), r.order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = r.order.size();
  if (top_k > 0 && static_cast<size_t>(top_k) < keep) {
    keep = static_cast<size_t>(top_k);
    while (keep < r.order.size() && logits[r.order[keep]] == logits[r.order[top_k - 1]]) ++keep;
  }
  std::vector<double> w(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += w[i] = std::exp((static_cast<double>(logits[r.order[i]]) - logits[r.order[0]]) / temperature);
  if (top_p > 0 && top_p < 1) {
    double before = 0;
    size_t kept = 0;
    while (kept < keep) {
      r.top_p_margin = std::min(r.top_p_margin, std::abs(before - top_p));
      if (before > top_p) break;
      before += w[kept++] / total;
    }
    keep = kept;
  }
  r.order.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) r.ends.push_back(sum += w[i]);
  return r;
}

// N rows of S Vl columns laid out as sample_logits's segments: S blocks of N rows of Vl (a
// TP group's logits gathered rank-major), row r's columns k Vl .. k Vl + Vl - 1 in row k N + r.
inline std::vector<float> to_segments(const std::vector<float>& rows, int64_t N, int64_t S, int64_t Vl) {
  std::vector<float> out(rows.size());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < S * Vl; ++c) out[((c / Vl) * N + r) * Vl + c % Vl] = rows[r * S * Vl + c];
  return out;
}
// The rows back from their segments.
inline std::vector<float> from_segments(const std::vector<float>& segments, int64_t N, int64_t S, int64_t Vl) {
  std::vector<float> out(segments.size());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < S * Vl; ++c) out[r * S * Vl + c] = segments[((c / Vl) * N + r) * Vl + c % Vl];
  return out;
}

}  // namespace trident::test
