// Megatron-DeepSpeed's --deepspeed with its --deepspeed_config file (train/deepspeed_config.h):
// the file's precision, loss scaling, clipping and ZeRO stage over Megatron's flags for them.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"
#include "train/deepspeed_config.h"
#include "train/options_internal.h"

namespace trident::options_internal {

// Megatron-DeepSpeed's --deepspeed --deepspeed_config FILE: DeepSpeed's engine takes the
// precision, the fp16 loss scaler, the clipping and the ZeRO stage from the file, over
// Megatron's flags for them. Here a flag that is given must agree with the file (one line
// naming both otherwise); the file fills the rest. The batch stays Megatron's
// (resolve_global_batch_size runs DeepSpeed's check of the file's batch keys). Call after the
// batch and precision flags are read, before read_run_flags.
void apply_deepspeed_config(const Flags& f, TrainOptions& o) {
  if (!f.has("deepspeed")) {
    // Megatron-DeepSpeed reads the file only with --deepspeed.
    if (f.has("deepspeed_config")) o.flags_without_effect.push_back("--deepspeed_config (without --deepspeed)");
    return;
  }
  if (!f.has("deepspeed_config")) throw ConfigError("--deepspeed needs --deepspeed_config FILE (DeepSpeed's JSON config)");
  o.deepspeed_config = f.str("deepspeed_config");
  const DeepSpeedConfig c = read_deepspeed_config(o.deepspeed_config);
  const std::string file = "--deepspeed_config " + o.deepspeed_config;
  // A flag given with another value than the file's key.
  const auto agree = [&](const char* flag, const std::string& key, auto given, auto in_file) {
    if (f.has(flag) && given != in_file)
      throw ConfigError("--" + std::string(flag) + " " + detail::concat(given) + " differs from " + file + "'s \"" +
                        key + "\": " + detail::concat(in_file));
  };
  o.deepspeed_batch = c.batch;
  if (c.batch.train_micro_batch_size_per_gpu && !f.has("micro-batch-size"))
    o.micro_batch_size = static_cast<int>(*c.batch.train_micro_batch_size_per_gpu);
  // The engine casts the model to its precision: a precision flag must name the same one.
  const DType dtype = c.fp16 ? DType::F16 : c.bf16 ? DType::BF16 : DType::F32;
  for (const auto& [flag, flag_dtype] : {std::pair{"fp16", DType::F16}, std::pair{"bf16", DType::BF16}})
    if (f.has(flag) && dtype != flag_dtype)
      throw ConfigError("--" + std::string(flag) + " needs " + file + "'s \"" + flag + "\": {\"enabled\": true}" +
                        (dtype == DType::F32 ? "" : std::string(" (it enables ") + (c.fp16 ? "fp16" : "bf16") + ")"));
  if (f.has("loss-scale") && dtype != DType::F16)
    throw ConfigError("--loss-scale needs " + file + "'s \"fp16\": {\"enabled\": true} (DeepSpeed scales only fp16 "
                      "losses)");
  o.model.dtype = dtype;
  apply_bf16_gradient_rule(f, o);
  const int64_t stage = c.zero_stage.value_or(0);  // DeepSpeed's, whatever --zero-stage says
  if (dtype == DType::F16) {
    agree("loss-scale", "fp16.loss_scale", o.loss_scale, c.loss_scale);
    o.loss_scale = c.loss_scale;
    if (c.loss_scale == 0) {  // dynamic: at stages 1 and 2 DeepSpeed's scaler follows Megatron's rules
      const double initial = std::ldexp(1.0, static_cast<int>(c.initial_scale_power));
      agree("initial-loss-scale", "fp16.initial_scale_power", o.initial_loss_scale, initial);
      agree("loss-scale-window", "fp16.loss_scale_window", o.loss_scale_window, c.loss_scale_window);
      agree("min-loss-scale", "fp16.min_loss_scale", o.min_loss_scale, c.min_loss_scale);
      o.initial_loss_scale = initial;
      o.loss_scale_window = c.loss_scale_window;
      o.min_loss_scale = c.min_loss_scale;
      // At stage 0 the engine's FP16_Optimizer scales by its own rules, with no hysteresis.
      o.deepspeed_fp16_optimizer = stage == 0;
      if (stage == 0 && f.has("hysteresis"))
        o.flags_without_effect.push_back("--hysteresis (DeepSpeed's FP16_Optimizer, at ZeRO stage 0, has none)");
      if (stage != 0) {
        agree("hysteresis", "fp16.hysteresis", o.hysteresis, c.hysteresis);
        o.hysteresis = c.hysteresis;
      }
    }
  }
  // DeepSpeed clips by the file's value, 0 (none) when it has none, whatever --clip-grad says.
  const float clip = static_cast<float>(c.gradient_clipping.value_or(0.0));  // compared as trident keeps it
  if (c.gradient_clipping)
    agree("clip-grad", "gradient_clipping", o.clip_grad, clip);
  else if (f.has("clip-grad"))
    o.flags_without_effect.push_back("--clip-grad (" + file + " has no \"gradient_clipping\": DeepSpeed's default 0, "
                                     "no clipping)");
  o.clip_grad = clip;
  if (f.has("use-distributed-optimizer"))
    throw ConfigError("--use-distributed-optimizer is Megatron's optimizer sharding; with --deepspeed, " + file +
                      "'s \"zero_optimization\" shards");
  int given_stage = o.zero_stage;  // read_run_flags reads it next
  f.get("zero-stage", given_stage);
  if (c.zero_stage)
    agree("zero-stage", "zero_optimization.stage", int64_t{given_stage}, stage);
  else if (f.has("zero-stage") && given_stage != 0)  // Megatron-DeepSpeed only records the flag
    o.flags_without_effect.push_back("--zero-stage (" + file + " has no \"zero_optimization\": DeepSpeed's stage 0)");
  o.zero_stage = static_cast<int>(stage);
  if (!c.without_effect.empty()) {
    std::string keys;
    for (const std::string& k : c.without_effect) keys += (keys.empty() ? "" : ", ") + k;
    o.flags_without_effect.push_back(file + "'s " + keys);
  }
}

}  // namespace trident::options_internal
