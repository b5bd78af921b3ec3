#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"

namespace trident {

namespace {

// Each style's name (Megatron's), in the order the errors list them.
template <typename Style>
using StyleNames = std::vector<std::pair<Style, const char*>>;

const StyleNames<LrDecayStyle> kLrDecayStyles = {{LrDecayStyle::Constant, "constant"},
                                                 {LrDecayStyle::Linear, "linear"},
                                                 {LrDecayStyle::Cosine, "cosine"},
                                                 {LrDecayStyle::InverseSquareRoot, "inverse-square-root"},
                                                 {LrDecayStyle::WarmupStableDecay, "WSD"}};
const StyleNames<WsdDecayStyle> kWsdDecayStyles = {{WsdDecayStyle::Exponential, "exponential"},
                                                   {WsdDecayStyle::Linear, "linear"},
                                                   {WsdDecayStyle::Cosine, "cosine"},
                                                   {WsdDecayStyle::MinusSqrt, "minus_sqrt"}};

// The style named `s`, or a ConfigError naming `flag` and listing the names ("a, b or c").
template <typename Style>
Style parse_style(const StyleNames<Style>& names, const std::string& s, const char* flag) {
  std::string expected;
  size_t k = 0;
  for (const auto& [style, name] : names) {
    if (s == name) return style;
    expected += k == 0 ? "" : k + 1 == names.size() ? " or " : ", ";
    expected += name;
    ++k;
  }
  throw ConfigError(std::string(flag) + ": unknown style '" + s + "' (expected " + expected + ")");
}

template <typename Style>
const char* style_name(const StyleNames<Style>& names, Style s) {
  for (const auto& [style, name] : names)
    if (style == s) return name;
  return names.front().second;
}

}  // namespace

LrDecayStyle parse_lr_decay_style(const std::string& s) { return parse_style(kLrDecayStyles, s, "--lr-decay-style"); }
const char* lr_decay_style_name(LrDecayStyle s) { return style_name(kLrDecayStyles, s); }
WsdDecayStyle parse_wsd_decay_style(const std::string& s) {
  return parse_style(kWsdDecayStyles, s, "--lr-wsd-decay-style");
}
const char* wsd_decay_style_name(WsdDecayStyle s) { return style_name(kWsdDecayStyles, s); }

namespace {

// WSD's coefficient: 1 while stable, then the anneal's shape over its last wsd_decay samples.
double wsd_coefficient(double step, double decay, double wsd_decay, WsdDecayStyle style) {
  const double anneal_start = decay - wsd_decay;
  if (step <= anneal_start) return 1.0;
  const double a = (step - anneal_start) / wsd_decay;
  switch (style) {
    case WsdDecayStyle::Linear: return 1.0 - a;
    case WsdDecayStyle::Cosine: return 0.5 * (std::cos(M_PI * a) + 1.0);
    case WsdDecayStyle::Exponential: return 2.0 * std::pow(0.5, a) - 1.0;
    case WsdDecayStyle::MinusSqrt: return 1.0 - std::sqrt(a);
  }
  return 1.0;
}

}  // namespace

// Same branch order as Megatron's get_lr (Megatron-DeepSpeed's with tokens): warm-up,
// constant, past the end, decay.
double LrSchedule::lr(const LrPosition& p) const {
  const double step = static_cast<double>(p.samples), tokens = static_cast<double>(p.tokens);
  const auto warmup = [&](double fraction) { return init_lr + (max_lr - init_lr) * fraction; };
  if (warmup_tokens) {
    const double w = static_cast<double>(*warmup_tokens);
    if (w > 0 && tokens <= w) return warmup(tokens / w);
  } else if (warmup_samples > 0 && step <= warmup_samples) {
    return warmup(step / warmup_samples);
  }
  if (style == LrDecayStyle::Constant) return max_lr;
  if (decay_tokens ? tokens > static_cast<double>(*decay_tokens) : step > decay_samples) return min_lr;
  // The warm-up's end in tokens: given, or recorded when a warm-up in samples ended under a
  // decay in tokens (Megatron-DeepSpeed's lr_warmup_tokens, which its step sets then).
  const std::optional<uint64_t> warmup_end = warmup_tokens ? warmup_tokens : p.warmup_end_tokens;
  if (style == LrDecayStyle::InverseSquareRoot) {
    const double w = warmup_end ? static_cast<double>(*warmup_end) : warmup_samples, x = warmup_end ? tokens : step;
    return std::max(min_lr, max_lr * std::sqrt(std::max(w, 1.0)) / std::sqrt(std::max(x, 1.0)));
  }
  double ratio = 0;
  if (decay_tokens) {
    // Without a recorded end the warm-up had no samples: the decay counts from token 0
    // (where Megatron-DeepSpeed fails on its None).
    const double start = static_cast<double>(warmup_end.value_or(0));
    const double span = static_cast<double>(*decay_tokens) - start;
    if (span <= 0) return min_lr;  // the warm-up ended at or past the decay's end: nothing to decay
    ratio = (tokens - start) / span;
  } else {
    ratio = (step - warmup_samples) / (decay_samples - warmup_samples);
  }
  double coeff = 0;
  switch (style) {
    case LrDecayStyle::Linear: coeff = 1.0 - ratio; break;
    case LrDecayStyle::Cosine: coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0); break;
    case LrDecayStyle::WarmupStableDecay:
      coeff = wsd_coefficient(step, decay_samples, wsd_decay_samples, wsd_style);
      break;
    case LrDecayStyle::Constant:
    case LrDecayStyle::InverseSquareRoot: break;  // returned above
  }
  return min_lr + coeff * (max_lr - min_lr);
}

double LrSchedule::lr(uint64_t samples) const {
  TRIDENT_CHECK(!counts_tokens(), "a schedule that counts tokens needs its position's tokens");
  return lr(LrPosition{samples, 0, std::nullopt});
}

double LrSchedule::decoupled_lr(const LrPosition& p) const {
  if (!decoupled_max_lr) return lr(p);
  LrSchedule embedding = *this;
  embedding.max_lr = *decoupled_max_lr;
  embedding.min_lr = decoupled_min_lr.value_or(min_lr);
  return embedding.lr(p);
}

LrPosition LrSchedule::step(LrPosition p, uint64_t samples, uint64_t tokens) const {
  p.samples += samples;
  p.tokens = tokens;
  // Megatron-DeepSpeed records it at the step that lands on the warm-up's end exactly. When
  // none does, its linear and cosine decays fail on the missing start: they start at the
  // first step past it here. Its inverse-square-root and constant styles run on without it.
  const double s = static_cast<double>(p.samples);
  const bool needs_start = style == LrDecayStyle::Linear || style == LrDecayStyle::Cosine;
  if (decay_tokens && !warmup_tokens && warmup_samples > 0 && !p.warmup_end_tokens &&
      (s == warmup_samples || (needs_start && s > warmup_samples)))
    p.warmup_end_tokens = p.tokens;
  return p;
}

}  // namespace trident
