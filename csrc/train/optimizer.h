// AdamW over a ParamStore: fp32 master weights (the parameters themselves in fp32 runs),
// fp32 moments, weight decay only on 2-D weights, gradient clipping by global norm folded
// into the update's gradient scale.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "model/param_store.h"

namespace trident {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  float clip_grad = 1.0f;  // 0 disables clipping
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(Backend& backend, ParamStore& params, const AdamWConfig& cfg);

  // One update with learning rate `lr`. `grad_norm` is the global norm of the (unscaled)
  // gradients, computed by the caller across ranks; it sets the clipping factor.
  // `grad_scale` multiplies the gradients first (loss-scale unscaling).
  void step(double lr, double grad_norm, float grad_scale = 1.0f);
  int64_t steps_taken() const { return step_; }

 private:
  Backend& be_;
  ParamStore& params_;
  AdamWConfig cfg_;
  bool separate_master_;  // false: the fp32 parameters are the master weights
  Buffer master_, m_, v_;
  int64_t step_ = 0;
};

}  // namespace trident
