#include "train/lr_schedule.h"

#include <cmath>

#include "core/error.h"

namespace trident {

LrDecayStyle parse_lr_decay_style(const std::string& s) {
  if (s == "constant") return LrDecayStyle::Constant;
  if (s == "linear") return LrDecayStyle::Linear;
  if (s == "cosine") return LrDecayStyle::Cosine;
  throw ConfigError("--lr-decay-style: unknown style '" + s + "' (expected constant, linear or cosine)");
}

double LrSchedule::lr(uint64_t samples) const {
  if (warmup_samples > 0 && samples <= warmup_samples)
    return max_lr * static_cast<double>(samples) / static_cast<double>(warmup_samples);
  if (style == LrDecayStyle::Constant) return max_lr;
  if (samples > decay_samples) return min_lr;
  const double ratio = static_cast<double>(samples - warmup_samples) /
                       static_cast<double>(decay_samples - warmup_samples);
  const double coeff = style == LrDecayStyle::Linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace trident
