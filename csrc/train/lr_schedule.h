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
//
// Megatron-DeepSpeed counts the warm-up (--lr-warmup-tokens), the decay (--lr-decay-tokens)
// or both in tokens instead (its optimizer_param_scheduler.py): the same formulas with the
// scheduler's token count in place of its step, where
//   - the token count is the run's consumed tokens when the scheduler steps, which is before
//     the iteration just run is added (so it lags the samples by one global batch);
//   - a warm-up counted in samples under a decay counted in tokens starts the decay at the
//     token count of the step that lands on the warm-up's end (recorded then). When no step
//     lands on it exactly, Megatron-DeepSpeed's linear and cosine decays fail on the missing
//     start; here they start at the first step past it. Without a warm-up they start at
//     token 0 (Megatron-DeepSpeed fails there too);
//   - inverse-square-root uses the warm-up's tokens and the token count once the warm-up
//     is counted (or recorded) in tokens, the samples otherwise;
//   - the warm-up in tokens rises from init_lr (--lr-warmup-init; Megatron-DeepSpeed has 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trident {

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WarmupStableDecay };
LrDecayStyle parse_lr_decay_style(const std::string& s);  // ConfigError naming --lr-decay-style
const char* lr_decay_style_name(LrDecayStyle s);           // Megatron's names: "constant", ..., "WSD"

// The shape of WSD's final anneal (--lr-wsd-decay-style).
enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };
WsdDecayStyle parse_wsd_decay_style(const std::string& s);  // ConfigError naming --lr-wsd-decay-style
const char* wsd_decay_style_name(WsdDecayStyle s);          // "exponential", "linear", "cosine", "minus_sqrt"

// Where the schedule stands (Megatron's OptimizerParamScheduler state): the samples of the
// successful updates (num_steps), the token count of its last step (num_tokens) and, for a
// warm-up in samples under a decay in tokens, the token count when the warm-up ended.
struct LrPosition {
  uint64_t samples = 0;
  uint64_t tokens = 0;
  std::optional<uint64_t> warmup_end_tokens;
};

struct LrSchedule {
  double max_lr = 0, min_lr = 0;
  double init_lr = 0;  // the warm-up's first rate
  double warmup_samples = 0;  // may be fractional (--lr-warmup-fraction)
  double decay_samples = 0;   // end of the decay, counted from sample 0 (includes the warm-up)
  LrDecayStyle style = LrDecayStyle::Linear;
  // WSD only: the anneal's length (it ends at decay_samples) and shape.
  double wsd_decay_samples = 0;
  WsdDecayStyle wsd_style = WsdDecayStyle::Exponential;
  // Megatron-DeepSpeed's token counts (not WSD): the warm-up's and the decay's end, counted
  // from token 0; either replaces its count in samples.
  std::optional<uint64_t> warmup_tokens, decay_tokens;
  // Megatron-core's decoupled rates (--decoupled-lr, --decoupled-min-lr): the word
  // embedding's peak and final rate on this schedule (its warm-up from init_lr, its decay);
  // none: the embedding trains at lr().
  std::optional<double> decoupled_max_lr, decoupled_min_lr;
  // Learning rate at position `p` (Megatron's OptimizerParamScheduler: the step that starts
  // there uses this rate, so iteration 1 of a warm-up uses init_lr).
  double lr(const LrPosition& p) const;
  // A schedule counted in samples only (an internal error otherwise): the rate after `samples`.
  double lr(uint64_t samples) const;
  // The word embedding's rate at `p`: Megatron's get_lr for its param group, whose max_lr and
  // min_lr are the decoupled ones; lr(p) without them.
  double decoupled_lr(const LrPosition& p) const;
  bool has_decoupled_lr() const { return decoupled_max_lr.has_value(); }
  // Megatron's step(increment, token_num): `samples` more samples updated, `tokens` the token
  // count now; records the warm-up's end where the decay counts tokens from it. The
  // scheduler's start is step(0, 0) from LrPosition{}, a checkpoint's position step(its
  // samples, its tokens) from its recorded warm-up end, as Megatron's load_state_dict.
  LrPosition step(LrPosition p, uint64_t samples, uint64_t tokens) const;
  bool counts_tokens() const { return warmup_tokens.has_value() || decay_tokens.has_value(); }
};

}  // namespace trident
