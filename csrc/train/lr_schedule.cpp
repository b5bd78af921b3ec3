#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace trident {

LrDecayStyle parse_lr_decay_style(const std::string& s) {
  if (s == "constant") return LrDecayStyle::Constant;
  if (s == "linear") return LrDecayStyle::Linear;
  if (s == "cosine") return LrDecayStyle::Cosine;
  if (s == "inverse-square-root") return LrDecayStyle::InverseSquareRoot;
  if (s == "WSD") return LrDecayStyle::WarmupStableDecay;
  throw ConfigError("--lr-decay-style: unknown style '" + s +
                    "' (expected constant, linear, cosine, inverse-square-root or WSD)");
}

const char* lr_decay_style_name(LrDecayStyle s) {
  switch (s) {
    case LrDecayStyle::Constant: return "constant";
    case LrDecayStyle::Linear: return "linear";
    case LrDecayStyle::Cosine: return "cosine";
    case LrDecayStyle::InverseSquareRoot: return "inverse-square-root";
    case LrDecayStyle::WarmupStableDecay: return "WSD";
  }
  return "linear";
}

WsdDecayStyle parse_wsd_decay_style(const std::string& s) {
  if (s == "exponential") return WsdDecayStyle::Exponential;
  if (s == "linear") return WsdDecayStyle::Linear;
  if (s == "cosine") return WsdDecayStyle::Cosine;
  if (s == "minus_sqrt") return WsdDecayStyle::MinusSqrt;
  throw ConfigError("--lr-wsd-decay-style: unknown style '" + s +
                    "' (expected exponential, linear, cosine or minus_sqrt)");
}

const char* wsd_decay_style_name(WsdDecayStyle s) {
  switch (s) {
    case WsdDecayStyle::Exponential: return "exponential";
    case WsdDecayStyle::Linear: return "linear";
    case WsdDecayStyle::Cosine: return "cosine";
    case WsdDecayStyle::MinusSqrt: return "minus_sqrt";
  }
  return "exponential";
}

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

// Same branch order as Megatron's get_lr: warm-up, constant, past the end, decay.
double LrSchedule::lr(uint64_t samples) const {
  const double step = static_cast<double>(samples);
  if (warmup_samples > 0 && step <= warmup_samples) return init_lr + (max_lr - init_lr) * step / warmup_samples;
  if (style == LrDecayStyle::Constant) return max_lr;
  if (step > decay_samples) return min_lr;
  if (style == LrDecayStyle::InverseSquareRoot)
    return std::max(min_lr, max_lr * std::sqrt(std::max(warmup_samples, 1.0)) / std::sqrt(std::max(step, 1.0)));
  const double ratio = (step - warmup_samples) / (decay_samples - warmup_samples);
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

}  // namespace trident
