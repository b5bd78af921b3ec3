// DeepSpeed's JSON config, as Megatron-DeepSpeed's scripts pass it (--deepspeed
// --deepspeed_config FILE): Megatron-DeepSpeed hands it to deepspeed.initialize, whose engine
// then sets the precision, the fp16 loss scaler, the gradient clipping and the ZeRO stage,
// over Megatron's own flags for them. The batch stays Megatron's (its loop sets DeepSpeed's
// train batch to --global-batch-size before every iteration); the file's batch keys must only
// pass DeepSpeed's check at the start. read_deepspeed_config reads what of it shapes a run;
// parse_train_options maps that onto trident-train's flags (options_deepspeed.cpp).
//
// Keys that only tune DeepSpeed's implementation (bucket sizes, communication overlap, CPU
// offload, logging, profiling) and the "optimizer" section (Megatron-DeepSpeed passes its own
// optimizer, which DeepSpeed uses instead) are listed in `without_effect`; keys that would
// change the training (ZeRO stage 3, an LR scheduler, which some DeepSpeed versions prefer to
// Megatron's, curriculum learning, ...) and keys DeepSpeed does not have are errors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

// The batch keys: DeepSpeed derives the missing ones (its _set_batch_related_parameters).
struct DeepSpeedBatch {
  std::optional<int64_t> train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
};

// DeepSpeed's start-up check of the batch keys at `data_parallel_size` ranks, with the micro
// batch the model runs (--micro-batch-size), which DeepSpeed's must equal: ConfigError naming
// `file` and the keys otherwise.
void check_deepspeed_batch(const DeepSpeedBatch& b, int64_t micro_batch_size, int64_t data_parallel_size,
                           const std::string& file);

struct DeepSpeedConfig {
  DeepSpeedBatch batch;
  std::optional<int64_t> zero_stage;  // zero_optimization.stage: 0, 1 or 2 (absent: 0)
  bool fp16 = false, bf16 = false;    // fp16.enabled, bf16.enabled (or bfloat16.enabled)
  // fp16's loss scaler: loss_scale 0 is dynamic. DeepSpeed's dynamic scaler at ZeRO stages 1
  // and 2 is Megatron's rule (growth after loss_scale_window clean steps, hysteresis reset when
  // it grows); when the section sets none of its keys it is DynamicLossScaler's defaults
  // (2^32, hysteresis 1), otherwise the config's defaults (2^16, hysteresis 2). Here the values
  // that apply either way.
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
