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

const char* lr_decay_style_name(LrDecayStyle s) {
  switch (s) {
    case LrDecayStyle::Constant: return "constant";
    case LrDecayStyle::Linear: return "linear";
    case LrDecayStyle::Cosine: return "cosine";
  }
  return "linear";
}

// Same branch order as Megatron's get_lr: warm-up, constant, past the end, decay.
double LrSchedule::lr(uint64_t samples) const {
  const double step = static_cast<double>(samples);
  if (warmup_samples > 0 && step <= warmup_samples) return init_lr + (max_lr - init_lr) * step / warmup_samples;
  if (style == LrDecayStyle::Constant) return max_lr;
  if (step > decay_samples) return min_lr;
  const double ratio = (step - warmup_samples) / (decay_samples - warmup_samples);
  const double coeff = style == LrDecayStyle::Linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace trident
