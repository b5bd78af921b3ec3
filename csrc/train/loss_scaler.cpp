#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace trident {

LossScaler::LossScaler(const LossScalerConfig& c) : config_(c) {
  switch (c.kind) {
    case LossScaleKind::None:
      scale_ = 1.0;
      break;
    case LossScaleKind::Constant:
      if (!(c.constant_scale > 0) || !std::isfinite(c.constant_scale))
        throw ConfigError("--loss-scale must be positive and finite");
      scale_ = c.constant_scale;
      break;
    case LossScaleKind::Dynamic:
    case LossScaleKind::DeepSpeedFused:
      if (!(c.initial_scale > 0) || !std::isfinite(c.initial_scale))
        throw ConfigError("--initial-loss-scale must be positive and finite");
      if (!(c.min_scale > 0)) throw ConfigError("--min-loss-scale must be positive");
      if (c.min_scale > c.initial_scale) throw ConfigError("--min-loss-scale must not exceed --initial-loss-scale");
      if (c.growth_interval < 1) throw ConfigError("--loss-scale-window must be at least 1");
      if (c.kind == LossScaleKind::Dynamic && c.hysteresis < 1) throw ConfigError("--hysteresis must be at least 1");
      if (!(c.growth_factor > 1)) throw ConfigError("loss scaler: growth factor must exceed 1");
      if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
        throw ConfigError("loss scaler: backoff factor must be in (0, 1)");
      scale_ = c.initial_scale;
      hysteresis_tracker_ = c.kind == LossScaleKind::Dynamic ? c.hysteresis : 0;
      break;
  }
}

void LossScaler::update(bool found_inf) {
  if (config_.kind == LossScaleKind::DeepSpeedFused) {
    if (found_inf) {
      scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
      growth_tracker_ = 0;
      return;
    }
    if (growth_tracker_ > 0 && growth_tracker_ % config_.growth_interval == 0) scale_ *= config_.growth_factor;
    ++growth_tracker_;
    return;
  }
  if (config_.kind != LossScaleKind::Dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    --hysteresis_tracker_;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * config_.backoff_factor, config_.min_scale);
    return;
  }
  if (++growth_tracker_ == config_.growth_interval) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = config_.hysteresis;
    scale_ *= config_.growth_factor;
  }
}

LossScalerState LossScaler::state() const { return {scale_, growth_tracker_, hysteresis_tracker_}; }

void LossScaler::set_state(const LossScalerState& s) {
  if (!(s.scale > 0) || !std::isfinite(s.scale))
    throw IoError("loss scaler state: scale " + std::to_string(s.scale) + " is not positive and finite");
  if (s.growth_tracker < 0)
    throw IoError("loss scaler state: growth tracker " + std::to_string(s.growth_tracker) + " is negative");
  if (config_.kind == LossScaleKind::Dynamic) {
    scale_ = s.scale;
    // A run resumed with a smaller --loss-scale-window may have passed its window already:
    // the next clean step grows the scale (Megatron's tracker would never meet its window).
    growth_tracker_ = std::min<int64_t>(s.growth_tracker, config_.growth_interval - 1);
    hysteresis_tracker_ = s.hysteresis_tracker;
  } else if (config_.kind == LossScaleKind::DeepSpeedFused) {
    scale_ = s.scale;  // the tracker counts on from where it was (DeepSpeed's cur_iter does)
    growth_tracker_ = s.growth_tracker;
  }
  // None and Constant keep nothing (Megatron's ConstantGradScaler.state_dict is empty):
  // the scale comes from the flags.
}

}  // namespace trident
