#include "train/deepspeed_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "ckpt/atomic_file.h"
#include "core/error.h"

namespace trident {
namespace {

using nlohmann::json;

// DeepSpeed's keys that tune only how it runs (logging, profiling, communication, I/O).
// "optimizer": Megatron-DeepSpeed passes its own optimizer, which DeepSpeed uses instead.
const char* const kImplementationKeys[] = {
    "steps_per_print", "wall_clock_breakdown", "dump_state", "memory_breakdown", "prescale_gradients",
    "gradient_predivide_factor", "communication_data_type", "seq_parallel_communication_data_type",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "activation_checkpointing", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "aio", "checkpoint", "pipeline", "data_types",
    "autotuning", "nebula", "sparse_gradients", "timers", "graph_harvesting", "disable_allgather", "optimizer",
    "fp32_allreduce", "vocabulary_size", "dataloader_drop_last", "compile"};

// Sections that change the training when their "enabled" is true.
const std::pair<const char*, const char*> kFeatureSections[] = {
    {"amp", "NVIDIA Apex AMP; precision comes from the \"fp16\" or \"bf16\" section"},
    {"curriculum_learning", "DeepSpeed's curriculum learning (a growing sequence length) is not supported"},
    {"data_efficiency", "DeepSpeed's data efficiency (curriculum, random layer-token drop) is not supported"},
    {"elasticity", "DeepSpeed's elastic batch sizes are not supported"},
    {"progressive_layer_drop", "DeepSpeed's progressive layer drop is not supported"},
    {"eigenvalue", "DeepSpeed's eigenvalue computation (for quantization) is not supported"},
    {"quantize_training", "DeepSpeed's quantized training is not supported"},
    {"hybrid_engine", "DeepSpeed's hybrid engine (RLHF) is not supported"},
    {"torch_autocast", "torch autocast; precision comes from the \"fp16\" or \"bf16\" section"},
};

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError("--deepspeed_config " + path_ + ": \"" + key + "\": " + what);
  }

  // DeepSpeed's Hugging Face integration fills "auto"; here nothing does.
  void no_auto(const json& v, const std::string& key) const {
    if (v.is_string() && v.get<std::string>() == "auto")
      fail(key, "\"auto\" is filled in by the Hugging Face Trainer; give the value");
  }

  // An integer in [min, max] (a float with an integral value too, as Python's int() takes it).
  int64_t integer(const json& v, const std::string& key, int64_t min, int64_t max = INT32_MAX) const {
    no_auto(v, key);
    const bool integral = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                    v.get<double>() == std::floor(v.get<double>()));
    if (!integral) fail(key, "expected an integer, got " + v.dump());
    const double d = v.get<double>();
    if (d < static_cast<double>(min) || d > static_cast<double>(max))
      fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v.dump());
    return static_cast<int64_t>(d);
  }

  double number(const json& v, const std::string& key, double min) const {
    no_auto(v, key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < min)
      fail(key, "expected a number >= " + json(min).dump() + ", got " + v.dump());
    return v.get<double>();
  }

  bool boolean(const json& v, const std::string& key) const {
    no_auto(v, key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }

  const json& object(const json& v, const std::string& key) const {
    if (!v.is_object()) fail(key, "expected an object, got " + v.dump());
    return v;
  }

 private:
  std::string path_;
};

void read_fp16(const Reader& r, const json& section, DeepSpeedConfig& c) {
  bool scaler_keys = false;  // DeepSpeed's get_dynamic_loss_scale_args: any of these, or none at all
  for (const auto& [key, v] : r.object(section, "fp16").items()) {
    scaler_keys |= key == "initial_scale_power" || key == "loss_scale_window" || key == "hysteresis" ||
                   key == "min_loss_scale" || key == "consecutive_hysteresis";
    const std::string name = "fp16." + key;
    if (key == "enabled") c.fp16 = r.boolean(v, name);
    else if (key == "loss_scale") c.loss_scale = r.number(v, name, 0);
    else if (key == "initial_scale_power") c.initial_scale_power = r.integer(v, name, 0);
    else if (key == "loss_scale_window") c.loss_scale_window = r.integer(v, name, 1);
    else if (key == "hysteresis") c.hysteresis = r.integer(v, name, 1);
    else if (key == "min_loss_scale") {
      c.min_loss_scale = r.number(v, name, 0);
      if (c.min_loss_scale <= 0) r.fail(name, "must be positive (the scale halves down to it)");
    }
    else if (key == "consecutive_hysteresis" && r.boolean(v, name))
      r.fail(name, "not supported: the hysteresis restarts when the scale grows, as Megatron's and DeepSpeed's default");
    else if (key == "fp16_master_weights_and_grads" && r.boolean(v, name))
      r.fail(name, "not supported: the master weights and their gradients stay fp32");
    else if (key == "auto_cast" || key == "raise_error_at_min_scale" || key == "consecutive_hysteresis" ||
             key == "fp16_master_weights_and_grads")
      c.without_effect.push_back(name);
    else
      r.fail(name, "not a DeepSpeed fp16 setting");
  }
  if (c.initial_scale_power > 126) r.fail("fp16.initial_scale_power", "must be at most 126 (2^127 overflows fp32)");
  if (!scaler_keys) {  // DynamicLossScaler's own defaults
    c.initial_scale_power = 32;
    c.hysteresis = 1;
  }
}

void read_bf16(const Reader& r, const json& section, const std::string& name, DeepSpeedConfig& c) {
  for (const auto& [key, v] : r.object(section, name).items()) {
    if (key == "enabled") c.bf16 = r.boolean(v, name + ".enabled");
    else if (key == "immediate_grad_update" || key == "check_grad_overflow")
      c.without_effect.push_back(name + "." + key);
    else
      r.fail(name + "." + key, "not a DeepSpeed bf16 setting");
  }
}

void read_zero(const Reader& r, const json& section, DeepSpeedConfig& c) {
  if (section.is_boolean()) {  // DeepSpeed's old form: true is stage 1
    c.zero_stage = section.get<bool>() ? 1 : 0;
    return;
  }
  for (const auto& [key, v] : r.object(section, "zero_optimization").items()) {
    const std::string name = "zero_optimization." + key;
    if (key == "stage") {
      c.zero_stage = r.integer(v, name, 0);
      if (*c.zero_stage > 3) r.fail(name, "DeepSpeed's stages are 0 to 3, got " + v.dump());
      if (*c.zero_stage == 3)
        r.fail(name, "ZeRO stage 3 (parameters sharded) is not supported; stages 0, 1 (--zero-stage 1: optimizer "
                     "state sharded) and 2 (gradients too) are");
    } else {  // bucket sizes, overlap, offload: how DeepSpeed runs the stage
      c.without_effect.push_back(name);
    }
  }
}

}  // namespace

void check_deepspeed_batch(const DeepSpeedBatch& b, int64_t micro_batch_size, int64_t data_parallel_size,
                           const std::string& file) {
  const std::string prefix = "--deepspeed_config " + file + ": ";
  const int64_t dp = data_parallel_size;
  int64_t train = b.train_batch_size.value_or(0), micro = b.train_micro_batch_size_per_gpu.value_or(0),
          steps = b.gradient_accumulation_steps.value_or(0);
  // DeepSpeed's derivation, case by case, then its assertion.
  if (train && micro && !steps) steps = train / micro / dp;
  else if (train && steps && !micro) micro = train / steps / dp;
  else if (micro && steps && !train) train = micro * steps * dp;
  else if (train && !micro && !steps) steps = 1, micro = train / dp;
  else if (micro && !train && !steps) steps = 1, train = micro * dp;
  else if (!train && !micro)
    throw ConfigError(prefix + "DeepSpeed needs \"train_batch_size\" or \"train_micro_batch_size_per_gpu\"");
  int64_t product = 0;  // each factor is below 2^31: the product fits when it is checked step by step
  const bool overflow = __builtin_mul_overflow(micro, steps, &product) || __builtin_mul_overflow(product, dp, &product);
  if (micro <= 0 || steps <= 0 || overflow || train != product)
    throw ConfigError(prefix + "\"train_batch_size\" " + std::to_string(train) +
                      " must be \"train_micro_batch_size_per_gpu\" " + std::to_string(micro) +
                      " x \"gradient_accumulation_steps\" " + std::to_string(steps) + " x the data-parallel size " +
                      std::to_string(dp) + " (DeepSpeed's check)");
  if (micro != micro_batch_size)
    throw ConfigError(prefix + "DeepSpeed's micro batch " + std::to_string(micro) +
                      (b.train_micro_batch_size_per_gpu ? " (\"train_micro_batch_size_per_gpu\")"
                                                         : " (\"train_batch_size\" / \"gradient_accumulation_steps\" / "
                                                           "the data-parallel size)") +
                      " differs from --micro-batch-size " + std::to_string(micro_batch_size));
}

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  const std::string prefix = "--deepspeed_config " + path + ": ";
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const IoError& e) {
    throw ConfigError("--deepspeed_config " + std::string(e.what()));
  } catch (const json::parse_error& e) {
    throw ConfigError(prefix + "not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ConfigError(prefix + "expected a JSON object of DeepSpeed's settings");
  const Reader r(path);
  if (j.contains("bf16") && j.contains("bfloat16")) r.fail("bfloat16", "give one of \"bf16\" and \"bfloat16\" (the same section)");
  DeepSpeedConfig c;
  for (const auto& [key, v] : j.items()) {
    if (key == "train_batch_size") {
      c.batch.train_batch_size = r.integer(v, key, 1);
    } else if (key == "train_micro_batch_size_per_gpu") {
      c.batch.train_micro_batch_size_per_gpu = r.integer(v, key, 1);
    } else if (key == "gradient_accumulation_steps") {
      c.batch.gradient_accumulation_steps = r.integer(v, key, 1);
    } else if (key == "gradient_clipping") {
      c.gradient_clipping = r.number(v, key, 0);
    } else if (key == "fp16") {
      read_fp16(r, v, c);
    } else if (key == "bf16" || key == "bfloat16") {
      read_bf16(r, v, key, c);
    } else if (key == "zero_optimization") {
      read_zero(r, v, c);
    } else if (key == "scheduler") {
      r.fail(key, "DeepSpeed's learning-rate schedulers are not supported (some DeepSpeed versions run the "
                  "section's instead of Megatron's); the schedule is Megatron's (--lr-decay-style, "
                  "--lr-warmup-iters, ...): remove the section");
    } else if (key == "sparse_attention" || key == "compression_training") {
      r.fail(key, "not supported (it changes the model)");
    } else if (std::find(std::begin(kImplementationKeys), std::end(kImplementationKeys), key) !=
               std::end(kImplementationKeys)) {
      c.without_effect.push_back(key);
    } else {
      const auto feature = std::find_if(std::begin(kFeatureSections), std::end(kFeatureSections),
                                        [&](const auto& s) { return key == s.first; });
      if (feature == std::end(kFeatureSections)) r.fail(key, "not a DeepSpeed setting trident knows");
      const auto enabled = v.is_object() ? v.find("enabled") : v.end();
      if (enabled != v.end() && r.boolean(*enabled, key + ".enabled")) r.fail(key + ".enabled", feature->second);
      c.without_effect.push_back(key);
    }
  }
  if (c.fp16 && c.bf16) r.fail("bf16.enabled", "fp16 and bf16 are both enabled");
  return c;
}

}  // namespace trident
