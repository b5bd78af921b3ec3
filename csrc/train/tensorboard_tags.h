// Megatron's training scalars under the tags of the framework a user compares against.
//
// Megatron-LM tags a metric by its name and writes it twice: "<name>" at the iteration and
// "<name> vs samples" at the consumed samples ("lm loss", "grad-norm", "learning-rate", ...).
// Megatron-DeepSpeed (and with it BigScience's runs and DeepSpeed's own plotting scripts)
// groups each metric into a panel and adds a token axis: "<panel>/<name>",
// "<panel>/<name> vs samples", "<panel>/<name> vs tokens", where the panel is the name,
// except the losses: "lm-loss-training/lm loss", "lm-loss-validation/lm loss validation"
// (and "... lm loss test"); it also writes the run's position,
// "steps-vs-samples/y=steps,x=samples" and the three others like it. The tags and axes are
// those of BigScience's fork, whose logs are the public reference (microsoft's later
// versions add a token axis to the batch size, and write the loss scale only for fp16).
//
// Scalars of one iteration only (the timers, memory, trident's throughput) keep their
// Megatron-LM tag in both layouts, as Megatron-DeepSpeed writes its timers.
#pragma once

#include <cstdint>
#include <string>

#include "train/tensorboard.h"

namespace trident {

enum class TensorBoardTags { kMegatron, kMegatronDeepSpeed };

// "megatron" or "megatron-deepspeed"; anything else throws ConfigError naming `flag`.
TensorBoardTags parse_tensorboard_tags(const std::string& value, const std::string& flag);

// Where the run stands when a scalar is written: Megatron's three x axes.
struct RunPosition {
  int64_t iteration = 0;
  int64_t samples = 0;  // consumed training samples
  int64_t tokens = 0;   // consumed training tokens
};

class MegatronScalars {
 public:
  MegatronScalars(TensorBoardWriter& writer, TensorBoardTags tags) : writer_(writer), tags_(tags) {}

  // The x axes besides the iteration that a metric has in each layout. Most have samples
  // in Megatron-LM and samples and tokens in Megatron-DeepSpeed; the exceptions are the
  // batch size (no tokens) and the iteration time (no samples in Megatron-LM).
  struct Axes {
    bool megatron_samples = true;
    bool deepspeed_tokens = true;
  };
  void metric(const std::string& name, double value, const RunPosition& at, Axes axes);
  void metric(const std::string& name, double value, const RunPosition& at) { metric(name, value, at, Axes{}); }
  // A loss of BigScience's weighted split group `group` ("lm loss validation", "lm loss test"):
  // its tags are BigScience's, "lm-loss-validation/<group>/<name>" with the samples and tokens
  // axes; Megatron-LM's layout, which has no groups, gets "<group>/<name>" and its samples axis.
  // (BigScience writes its test groups' losses as "lm loss validation" at step 0; trident names
  // them "lm loss test", at the iteration the run ended, as Megatron-DeepSpeed's test loss.)
  void group_metric(const std::string& group, const std::string& name, double value, const RunPosition& at);
  // A scalar of the iteration alone, under the same tag in both layouts.
  void at_iteration(const std::string& tag, double value, int64_t iteration);
  // One of Megatron-DeepSpeed's optimizer-state statistics, in either layout (Megatron-LM has
  // none): "optimizer/<name> vs tokens", then "optimizer/<name>" at the iteration.
  void optimizer_state(const std::string& name, double value, const RunPosition& at);
  // Megatron-DeepSpeed's steps-vs-samples and steps-vs-tokens panels; nothing for Megatron-LM.
  void position(const RunPosition& at);
  TensorBoardTags tags() const { return tags_; }

 private:
  TensorBoardWriter& writer_;
  TensorBoardTags tags_;
};

}  // namespace trident
