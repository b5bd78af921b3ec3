#include "train/batch_schedule.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace trident {
namespace {

constexpr uint64_t kNoThreshold = std::numeric_limits<uint64_t>::max();

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The threshold of the step after the one `consumed` lies in (kNoThreshold after the last).
uint64_t next_threshold(const std::vector<BatchStep>& steps, uint64_t consumed) {
  for (const BatchStep& s : steps)
    if (s.samples > consumed) return s.samples;
  return kNoThreshold;
}

const char kFlag[] = "--step-batch-size-schedule";

// Megatron's _parse_numeric_value: int(float(digits) x 10^(3, 6, 9, 12 for K, M, B, T)).
int64_t parse_scaled_number(std::string text, const std::string& entry) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double multiplier = 1;
  if (!text.empty()) {
    const char suffix = text.back();
    multiplier = suffix == 'K' ? 1e3 : suffix == 'M' ? 1e6 : suffix == 'B' ? 1e9 : suffix == 'T' ? 1e12 : 1;
    if (multiplier != 1) text.pop_back();
  }
  const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(value))
    throw ConfigError(std::string(kFlag) + ": \"" + entry + "\" is not THRESHOLD:BATCH (numbers with an optional K, "
                      "M, B or T)");
  const double scaled = std::trunc(value * multiplier);
  if (std::fabs(scaled) >= 9.2e18) throw ConfigError(std::string(kFlag) + ": \"" + entry + "\": number too large");
  return static_cast<int64_t>(scaled);
}

}  // namespace

int64_t BatchSchedule::global_batch(uint64_t consumed) const {
  if (!steps.empty()) {
    int64_t batch = steps.front().batch;
    for (const BatchStep& s : steps) {
      if (consumed < s.samples) break;
      batch = s.batch;
    }
    return batch;
  }
  if (!varies() || consumed > samples) return global;
  const double samples_per_increment = static_cast<double>(samples) / static_cast<double>((global - start) / increment);
  const auto increments = static_cast<int64_t>(static_cast<double>(consumed) / samples_per_increment);
  return start + increments * increment;
}

uint64_t BatchSchedule::samples_after(uint64_t start, int64_t iterations) const {
  uint64_t consumed = start;
  if (!steps.empty()) {  // step by step, not iteration by iteration
    for (int64_t left = iterations; left > 0;) {
      const auto batch = static_cast<uint64_t>(global_batch(consumed));
      const uint64_t next = next_threshold(steps, consumed);
      const int64_t k = next == kNoThreshold
                            ? left
                            : std::min<int64_t>(left, static_cast<int64_t>(ceil_div(next - consumed, batch)));
      consumed += static_cast<uint64_t>(k) * batch;
      left -= k;
    }
    return consumed - start;
  }
  // The ramp-up's iterations one by one (at most SAMPLES / START + 1 of them), then whole
  // batches of G: a run of 10^11 iterations is not counted one by one at its start.
  int64_t i = 0;
  for (; i < iterations && varies() && consumed <= samples; ++i)
    consumed += static_cast<uint64_t>(global_batch(consumed));
  return consumed - start + static_cast<uint64_t>(iterations - i) * static_cast<uint64_t>(global);
}

std::vector<int64_t> BatchSchedule::batches_from(uint64_t consumed) const {
  std::vector<int64_t> batches = {global_batch(consumed)};
  if (!steps.empty()) {
    for (const BatchStep& s : steps)
      if (s.samples > consumed && s.batch != batches.back()) batches.push_back(s.batch);
  } else if (varies()) {
    for (int64_t b = batches.back() + increment; b <= global; b += increment) batches.push_back(b);
  }
  return batches;
}

int64_t train_iters_of_samples(const BatchSchedule& s, uint64_t train_samples) {
  int64_t iterations = 0;
  uint64_t consumed = 0;
  if (!s.steps.empty()) {
    for (;;) {  // whole batches, step by step
      const auto batch = static_cast<uint64_t>(s.global_batch(consumed));
      const uint64_t fit = (train_samples - consumed) / batch;
      const uint64_t next = next_threshold(s.steps, consumed);
      const uint64_t in_step = next == kNoThreshold ? fit : ceil_div(next - consumed, batch);
      const uint64_t k = std::min(fit, in_step);
      iterations += static_cast<int64_t>(k);
      consumed += k * batch;
      if (k == 0 || k < in_step) return iterations;  // the run ends within this step
    }
  }
  // Megatron's loop: ramp-up iterations while the consumed samples are within SAMPLES and the
  // run, then the rest in whole batches of G.
  while (consumed <= s.samples && consumed <= train_samples) {
    consumed += static_cast<uint64_t>(s.global_batch(consumed));
    ++iterations;
  }
  if (train_samples > consumed) iterations += static_cast<int64_t>((train_samples - consumed) / s.global);
  return iterations;
}

std::vector<BatchStep> parse_step_batch_schedule(const std::string& text, int64_t seq_length) {
  if (seq_length < 1) throw ConfigError(std::string(kFlag) + " needs a positive --seq-length");
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream words(spaced);
  std::vector<BatchStep> steps;
  for (std::string entry; words >> entry;) {
    const size_t colon = entry.find(':');
    if (colon == std::string::npos)
      throw ConfigError(std::string(kFlag) + ": \"" + entry + "\" is not THRESHOLD:BATCH");
    const int64_t tokens = parse_scaled_number(entry.substr(0, colon), entry);
    const int64_t batch = parse_scaled_number(entry.substr(colon + 1), entry);
    if (tokens < 0) throw ConfigError(std::string(kFlag) + ": \"" + entry + "\": a threshold must not be negative");
    if (batch <= 0 || batch > std::numeric_limits<int>::max())
      throw ConfigError(std::string(kFlag) + ": \"" + entry + "\": the batch must be in [1, 2^31)");
    const auto t = static_cast<uint64_t>(tokens);
    steps.push_back({t / static_cast<uint64_t>(seq_length), batch, t});
  }
  if (steps.empty()) throw ConfigError(std::string(kFlag) + ": no THRESHOLD:BATCH entries");
  std::stable_sort(steps.begin(), steps.end(),
                   [](const BatchStep& a, const BatchStep& b) { return a.samples < b.samples; });
  if (steps.front().samples != 0)
    throw ConfigError(std::string(kFlag) + ": the first threshold must be 0 (tokens), got " +
                      std::to_string(steps.front().tokens));
  for (size_t i = 1; i < steps.size(); ++i) {
    const BatchStep &a = steps[i - 1], &b = steps[i];
    if (b.samples == a.samples)
      throw ConfigError(std::string(kFlag) + ": the thresholds " + std::to_string(a.tokens) + " and " +
                        std::to_string(b.tokens) + " tokens are the same sample (" + std::to_string(a.samples) +
                        ") at --seq-length " + std::to_string(seq_length));
    if (b.batch < a.batch)
      throw ConfigError(std::string(kFlag) + ": the batch may not decrease (" + std::to_string(a.batch) + " from " +
                        std::to_string(a.tokens) + " tokens, then " + std::to_string(b.batch) + " from " +
                        std::to_string(b.tokens) + ")");
  }
  return steps;
}

}  // namespace trident
