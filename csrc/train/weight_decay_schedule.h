// Megatron's weight-decay schedule, counted in samples like the learning rate: from
// start_wd (--start-weight-decay) to end_wd (--end-weight-decay) over the whole run
// (train iterations x global batch, or --train-samples), then end_wd.
//
// The formulas follow Megatron-LM's OptimizerParamScheduler.get_wd
// (megatron/core/optimizer_param_scheduler.py), whose "steps" are samples here too:
//   step > incr:      wd = end_wd
//   constant style:   wd = end_wd (start_wd == end_wd)
//   otherwise, with r = step / incr:
//     linear: wd = start_wd + r (end_wd - start_wd)
//     cosine: wd = start_wd + 0.5 (cos(pi (1 - r)) + 1) (end_wd - start_wd)
// The rate applies to the parameters that take weight decay (ParamSpec::weight_decay).
#pragma once

#include <cstdint>
#include <string>

namespace trident {

enum class WdIncrStyle { Constant, Linear, Cosine };
WdIncrStyle parse_wd_incr_style(const std::string& s);  // ConfigError naming --weight-decay-incr-style
const char* wd_incr_style_name(WdIncrStyle s);          // "constant", "linear" or "cosine"

struct WeightDecaySchedule {
  double start_wd = 0, end_wd = 0;
  double incr_samples = 0;  // samples over which the decay rises (Megatron's wd_incr_steps)
  WdIncrStyle style = WdIncrStyle::Constant;
  // The weight decay of the step that starts after `samples` samples of successful updates.
  double weight_decay(uint64_t samples) const;
};

}  // namespace trident
