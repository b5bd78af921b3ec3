// Loss scaling for fp16 training, with Megatron-LM's semantics
// (megatron/core/optimizer/grad_scaler.py and the choice in megatron/core/optimizer):
//   - None:     fp32, or bf16 without --loss-scale. Scale 1, update() does nothing.
//   - Constant: --loss-scale S (fp16 or bf16). Scale S forever (ConstantGradScaler).
//   - Dynamic:  fp16 without --loss-scale (DynamicGradScaler): start at
//     --initial-loss-scale; on an overflow (inf/NaN in the gradients) reset the growth
//     tracker and count the hysteresis tracker down, and once it is <= 0 multiply the
//     scale by the backoff factor 0.5, never below --min-loss-scale (the tracker is not
//     reset there, so every further overflow halves again); after growth_interval
//     (--loss-scale-window) consecutive clean steps multiply the scale by the growth
//     factor 2 and reset both trackers.
//   - DeepSpeedFused: fp16 with dynamic scaling under --deepspeed at ZeRO stage 0, where
//     DeepSpeed's engine wraps Megatron-DeepSpeed's FusedAdam in its FP16_Optimizer, whose
//     _update_scale has other rules: an overflow halves the scale at once (no hysteresis;
//     never below the minimum), and a clean step grows it by 2 when the clean steps before
//     it since the last overflow (or the start) are a positive multiple of the window: one
//     step later than Megatron's (window + 1 clean steps, then every window). Its tracker
//     (growth_tracker) counts those clean steps and is not reset by a growth.
// The trainer multiplies the loss (or its gradient seed) by scale(), unscales the
// gradients by 1 / scale(), checks them for inf/NaN, skips the optimizer step when any
// rank found one (Constant and Dynamic alike, as Megatron), then calls update(found_inf)
// once per iteration. No backend dependency: it is host arithmetic only.
#pragma once

#include <cstdint>

namespace trident {

enum class LossScaleKind { None, Constant, Dynamic, DeepSpeedFused };

struct LossScalerConfig {
  LossScaleKind kind = LossScaleKind::None;
  double constant_scale = 1.0;        // Constant
  double initial_scale = 4294967296.0;  // Dynamic: 2^32 (--initial-loss-scale)
  double min_scale = 1.0;             // --min-loss-scale
  double growth_factor = 2.0;         // Megatron hard-codes 2 and 0.5
  double backoff_factor = 0.5;
  int64_t growth_interval = 1000;     // --loss-scale-window
  int64_t hysteresis = 2;             // --hysteresis (not DeepSpeedFused's)
};

// What a checkpoint keeps (Megatron's DynamicGradScaler.state_dict: scale,
// growth_tracker, hysteresis_tracker; DeepSpeedFused: its clean steps since the last
// overflow as growth_tracker, DeepSpeed's cur_iter - last_overflow_iter - 1).
struct LossScalerState {
  double scale = 1.0;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
};

class LossScaler {
 public:
  // Throws ConfigError naming the flag for an impossible configuration (scale <= 0,
  // min > initial, window or hysteresis < 1, factors out of range).
  explicit LossScaler(const LossScalerConfig& config = {});

  LossScaleKind kind() const { return config_.kind; }
  bool enabled() const { return config_.kind != LossScaleKind::None; }  // check for inf and skip
  bool dynamic() const {
    return config_.kind == LossScaleKind::Dynamic || config_.kind == LossScaleKind::DeepSpeedFused;
  }
  double scale() const { return scale_; }
  double inv_scale() const { return 1.0 / scale_; }
  // Once per iteration, after the gradients were checked (found_inf: any rank saw inf/NaN).
  void update(bool found_inf);

  LossScalerState state() const;
  // Restores a checkpoint's state; throws IoError when it is impossible (scale <= 0 or
  // not finite, negative growth tracker).
  void set_state(const LossScalerState& s);

 private:
  LossScalerConfig config_;
  double scale_ = 1.0;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_ = 0;
};

}  // namespace trident
