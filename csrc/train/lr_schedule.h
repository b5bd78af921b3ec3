// Megatron's learning-rate schedule, counted in samples: linear warm-up from init_lr
// (--lr-warmup-init, 0 by default) to max_lr, then constant, linear, cosine,
// inverse-square-root or warmup-stable-decay (WSD) decay to min_lr, then min_lr.
//
// The formulas follow Megatron-LM's OptimizerParamScheduler.get_lr
// (megatron/core/optimizer_param_scheduler.py):
//   step <= warmup (and warmup > 0):  lr = init_lr + (max_lr - init_lr) * step / warmup
//   constant style:                   lr = max_lr
//   step > decay:                     lr = min_lr
//   inverse-square-root:              lr = max(min_lr, max_lr sqrt(max(warmup, 1) / max(step, 1)))
//   otherwise lr = min_lr + coeff (max_lr - min_lr), with r = (step - warmup) / (decay - warmup):
//     linear: coeff = 1 - r
//     cosine: coeff = 0.5 (cos(pi r) + 1)
//     WSD:    coeff = 1 until step > decay - wsd_decay (the anneal's start), then with
//             a = (step - (decay - wsd_decay)) / wsd_decay the anneal's style:
//             linear 1 - a, cosine 0.5 (cos(pi a) + 1), exponential 2 x 0.5^a - 1,
//             minus_sqrt 1 - sqrt(a)
// Megatron's "steps" are samples (training.py's get_optimizer_param_scheduler multiplies
// iterations by the global batch; sample-based runs pass samples directly), and
// --lr-warmup-fraction gives warmup = fraction x decay, which need not be whole: hence
// the double warm-up and decay lengths here.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WarmupStableDecay };
LrDecayStyle parse_lr_decay_style(const std::string& s);  // ConfigError naming --lr-decay-style
const char* lr_decay_style_name(LrDecayStyle s);           // Megatron's names: "constant", ..., "WSD"

// The shape of WSD's final anneal (--lr-wsd-decay-style).
enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };
WsdDecayStyle parse_wsd_decay_style(const std::string& s);  // ConfigError naming --lr-wsd-decay-style
const char* wsd_decay_style_name(WsdDecayStyle s);          // "exponential", "linear", "cosine", "minus_sqrt"

struct LrSchedule {
  double max_lr = 0, min_lr = 0;
  double init_lr = 0;  // the warm-up's first rate
  double warmup_samples = 0;  // may be fractional (--lr-warmup-fraction)
  double decay_samples = 0;   // end of the decay, counted from sample 0 (includes the warm-up)
  LrDecayStyle style = LrDecayStyle::Linear;
  // WSD only: the anneal's length (it ends at decay_samples) and shape.
  double wsd_decay_samples = 0;
  WsdDecayStyle wsd_style = WsdDecayStyle::Exponential;
  // Learning rate after `samples` consumed samples (Megatron's OptimizerParamScheduler:
  // the step that starts at `samples` uses this rate, so iteration 1 of a warm-up uses
  // init_lr).
  double lr(uint64_t samples) const;
};

}  // namespace trident
