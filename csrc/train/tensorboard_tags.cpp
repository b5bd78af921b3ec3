#include "train/tensorboard_tags.h"

#include "core/error.h"

namespace trident {

TensorBoardTags parse_tensorboard_tags(const std::string& value, const std::string& flag) {
  if (value == "megatron") return TensorBoardTags::kMegatron;
  if (value == "megatron-deepspeed") return TensorBoardTags::kMegatronDeepSpeed;
  throw ConfigError(flag + " " + value + ": expected megatron or megatron-deepspeed");
}

namespace {

// Megatron-DeepSpeed's panel of a metric: the losses have their own, the rest their name.
std::string deepspeed_panel(const std::string& name) {
  if (name == "lm loss") return "lm-loss-training";
  if (name.rfind("lm loss validation", 0) == 0 || name.rfind("lm loss test", 0) == 0) return "lm-loss-validation";
  return name;
}

}  // namespace

void MegatronScalars::metric(const std::string& name, double value, const RunPosition& at, Axes axes) {
  if (tags_ == TensorBoardTags::kMegatron) {
    writer_.add_scalar(name, value, at.iteration);
    if (axes.megatron_samples) writer_.add_scalar(name + " vs samples", value, at.samples);
    return;
  }
  const std::string tag = deepspeed_panel(name) + "/" + name;
  writer_.add_scalar(tag, value, at.iteration);
  writer_.add_scalar(tag + " vs samples", value, at.samples);
  if (axes.deepspeed_tokens) writer_.add_scalar(tag + " vs tokens", value, at.tokens);
}

void MegatronScalars::group_metric(const std::string& group, const std::string& name, double value,
                                   const RunPosition& at) {
  if (tags_ == TensorBoardTags::kMegatron) {
    metric(group + "/" + name, value, at);
    return;
  }
  const std::string tag = "lm-loss-validation/" + group + "/" + name;
  writer_.add_scalar(tag, value, at.iteration);
  writer_.add_scalar(tag + " vs samples", value, at.samples);
  writer_.add_scalar(tag + " vs tokens", value, at.tokens);
}

void MegatronScalars::at_iteration(const std::string& tag, double value, int64_t iteration) {
  writer_.add_scalar(tag, value, iteration);
}

void MegatronScalars::optimizer_state(const std::string& name, double value, const RunPosition& at) {
  writer_.add_scalar("optimizer/" + name + " vs tokens", value, at.tokens);
  writer_.add_scalar("optimizer/" + name, value, at.iteration);
}

void MegatronScalars::position(const RunPosition& at) {
  if (tags_ == TensorBoardTags::kMegatron) return;
  writer_.add_scalar("steps-vs-samples/y=steps,x=samples", static_cast<double>(at.iteration), at.samples);
  writer_.add_scalar("steps-vs-samples/y=samples,x=steps", static_cast<double>(at.samples), at.iteration);
  writer_.add_scalar("steps-vs-tokens/y=steps,x=tokens", static_cast<double>(at.iteration), at.tokens);
  writer_.add_scalar("steps-vs-tokens/y=tokens,x=steps", static_cast<double>(at.tokens), at.iteration);
}

}  // namespace trident
