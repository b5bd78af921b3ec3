#include "train/data_skip_ranges.h"

#include <algorithm>

#include "core/decimal.h"
#include "core/error.h"

namespace trident {
namespace {

// A positive decimal iteration, or nullopt (no sign, no spaces, nothing after the digits).
std::optional<int64_t> iteration_number(const std::string& s) {
  const std::optional<int64_t> n = parse_digits(s);
  if (!n || *n < 1 || *n > kMaxSkipIteration) return std::nullopt;
  return n;
}

}  // namespace

std::vector<IterationRange> parse_skip_ranges(const std::vector<std::string>& words) {
  std::vector<IterationRange> ranges;
  for (const std::string& w : words) {
    const size_t dash = w.find('-');
    const auto first = dash == std::string::npos ? std::nullopt : iteration_number(w.substr(0, dash));
    const auto last = dash == std::string::npos ? std::nullopt : iteration_number(w.substr(dash + 1));
    if (!first || !last)
      throw ConfigError("--skip-train-iteration-range: '" + w + "' is not a range FIRST-LAST of iterations (from 1 "
                        "to 2^40), as 101-200");
    if (*last < *first)
      throw ConfigError("--skip-train-iteration-range: " + w + " ends before it starts");
    ranges.push_back({*first, *last});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const IterationRange& a, const IterationRange& b) { return a.first < b.first || (a.first == b.first && a.last < b.last); });
  std::vector<IterationRange> merged;
  for (const IterationRange& r : ranges)
    if (!merged.empty() && merged.back().last >= r.first) merged.back().last = std::max(merged.back().last, r.last);
    else merged.push_back(r);
  return merged;
}

std::optional<IterationRange> due_skip_range(const std::vector<IterationRange>& ranges,
                                             const std::vector<IterationRange>& applied, int64_t iteration) {
  for (const IterationRange& r : ranges)
    if (r.first <= iteration + 1 && iteration + 1 <= r.last &&
        std::find(applied.begin(), applied.end(), r) == applied.end())
      return r;
  return std::nullopt;
}

uint64_t samples_read_past(const std::vector<IterationRange>& ranges, const std::vector<IterationRange>& applied,
                           const BatchSchedule& batches, int64_t iteration, uint64_t consumed, int64_t end) {
  uint64_t samples = 0;
  for (const IterationRange& r : ranges) {
    // Where the run reads it past (due_skip_range): on reaching it, or at once inside it.
    const int64_t at = std::max(iteration, r.first - 1);
    if (at >= end || r.last <= at || !due_skip_range({r}, applied, at)) continue;
    const uint64_t consumed_then = consumed + batches.samples_after(consumed, at - iteration);
    uint64_t range_samples = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(r.last - at),
                               static_cast<uint64_t>(batches.global_batch(consumed_then)), &range_samples) ||
        __builtin_add_overflow(samples, range_samples, &samples))
      return UINT64_MAX;
  }
  return samples;
}

std::string range_text(const IterationRange& r) { return std::to_string(r.first) + "-" + std::to_string(r.last); }

}  // namespace trident
