// Megatron's learning-rate schedule, counted in samples: linear warm-up from init_lr
// (--lr-warmup-init, 0 by default) to max_lr, then constant, linear or cosine decay to
// min_lr, then min_lr.
//
// The formulas follow Megatron-LM's OptimizerParamScheduler.get_lr
// (megatron/core/optimizer_param_scheduler.py):
//   step <= warmup (and warmup > 0):  lr = init_lr + (max_lr - init_lr) * step / warmup
//   constant style:                   lr = max_lr
//   step > decay:                     lr = min_lr
//   otherwise, with r = (step - warmup) / (decay - warmup):
//     linear: lr = min_lr + (1 - r) (max_lr - min_lr)
//     cosine: lr = min_lr + 0.5 (cos(pi r) + 1) (max_lr - min_lr)
// Megatron's "steps" are samples (training.py's get_optimizer_param_scheduler multiplies
// iterations by the global batch; sample-based runs pass samples directly), and
// --lr-warmup-fraction gives warmup = fraction x decay, which need not be whole: hence
// the double warm-up and decay lengths here.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

enum class LrDecayStyle { Constant, Linear, Cosine };
LrDecayStyle parse_lr_decay_style(const std::string& s);  // ConfigError naming --lr-decay-style
const char* lr_decay_style_name(LrDecayStyle s);           // "constant", "linear" or "cosine"

struct LrSchedule {
  double max_lr = 0, min_lr = 0;
  double init_lr = 0;  // the warm-up's first rate
  double warmup_samples = 0;  // may be fractional (--lr-warmup-fraction)
  double decay_samples = 0;   // end of the decay, counted from sample 0 (includes the warm-up)
  LrDecayStyle style = LrDecayStyle::Linear;
  // Learning rate after `samples` consumed samples (Megatron's OptimizerParamScheduler:
  // the step that starts at `samples` uses this rate, so iteration 1 of a warm-up uses
  // init_lr).
  double lr(uint64_t samples) const;
};

}  // namespace trident
