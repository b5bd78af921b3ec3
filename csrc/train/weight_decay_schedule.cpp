#include "train/weight_decay_schedule.h"

#include <cmath>

#include "core/error.h"

namespace trident {

WdIncrStyle parse_wd_incr_style(const std::string& s) {
  if (s == "constant") return WdIncrStyle::Constant;
  if (s == "linear") return WdIncrStyle::Linear;
  if (s == "cosine") return WdIncrStyle::Cosine;
  throw ConfigError("--weight-decay-incr-style: unknown style '" + s + "' (expected constant, linear or cosine)");
}

const char* wd_incr_style_name(WdIncrStyle s) {
  switch (s) {
    case WdIncrStyle::Constant: return "constant";
    case WdIncrStyle::Linear: return "linear";
    case WdIncrStyle::Cosine: return "cosine";
  }
  return "constant";
}

// Same branch order as Megatron's get_wd: past the end, constant, increase.
double WeightDecaySchedule::weight_decay(uint64_t samples) const {
  const double step = static_cast<double>(samples);
  if (step > incr_samples) return end_wd;
  if (style == WdIncrStyle::Constant) return end_wd;
  const double ratio = step / incr_samples;
  const double coeff = style == WdIncrStyle::Linear ? ratio : 0.5 * (std::cos(M_PI * (1.0 - ratio)) + 1.0);
  return start_wd + coeff * (end_wd - start_wd);
}

}  // namespace trident
