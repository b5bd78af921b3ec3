// Megatron's learning-rate schedule, counted in samples: linear warm-up from 0 to max_lr,
// then constant, linear or cosine decay to min_lr, then min_lr.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

enum class LrDecayStyle { Constant, Linear, Cosine };
LrDecayStyle parse_lr_decay_style(const std::string& s);  // ConfigError naming --lr-decay-style

struct LrSchedule {
  double max_lr = 0, min_lr = 0;
  uint64_t warmup_samples = 0, decay_samples = 0;
  LrDecayStyle style = LrDecayStyle::Linear;
  // Learning rate after `samples` consumed samples (Megatron's OptimizerParamScheduler:
  // the step that starts at `samples` uses this rate, so iteration 1 of a warm-up uses 0).
  double lr(uint64_t samples) const;
};

}  // namespace trident
