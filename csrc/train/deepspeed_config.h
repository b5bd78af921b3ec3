// DeepSpeed's JSON config, as Megatron-DeepSpeed's scripts pass it (--deepspeed
// --deepspeed_config FILE): Megatron-DeepSpeed hands it to deepspeed.initialize, whose engine
// then sets the batch sizes, the precision, the fp16 loss scaler, the gradient clipping and
// the ZeRO stage, overriding Megatron's own flags for them. read_deepspeed_config reads what
// of it shapes a run; parse_train_options maps that onto trident-train's flags
// (options.cpp).
//
// Keys that only tune DeepSpeed's implementation (bucket sizes, communication overlap, CPU
// offload, logging, profiling) are listed in `without_effect`; keys that would change the
// training (ZeRO stage 3, a DeepSpeed optimizer or LR scheduler, which would replace
// Megatron's, curriculum learning, ...) and keys DeepSpeed does not have are errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

struct DeepSpeedConfig {
  std::optional<int64_t> train_batch_size;                // the global batch
  std::optional<int64_t> train_micro_batch_size_per_gpu;  // the micro batch
  std::optional<int64_t> gradient_accumulation_steps;     // micro-batches per iteration and rank
  std::optional<int64_t> zero_stage;                      // zero_optimization.stage: 0, 1 or 2
  bool fp16 = false, bf16 = false;                        // fp16.enabled, bf16.enabled
  // fp16's loss scaler, DeepSpeed's names and defaults: loss_scale 0 is dynamic, starting at
  // 2^initial_scale_power.
  double loss_scale = 0;
  int64_t initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  double min_loss_scale = 1;
  // The global gradient-norm clip; absent: DeepSpeed's default 0, no clipping.
  std::optional<double> gradient_clipping;
  std::vector<std::string> without_effect;  // "steps_per_print", "zero_optimization.overlap_comm", ...
};

// ConfigError "--deepspeed_config PATH: ..." naming the key for anything unreadable, of the
// wrong type, or refused.
DeepSpeedConfig read_deepspeed_config(const std::string& path);

}  // namespace trident
