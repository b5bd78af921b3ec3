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

  // Global L2 norm of the gradients, times `grad_scale` (squares summed in double).
  double grad_norm(float grad_scale = 1.0f) const;
  // One update with learning rate `lr`; `grad_scale` multiplies the gradients first
  // (loss-scale unscaling). `norm` is the global gradient norm times grad_scale when the
  // caller computed it across ranks; negative: computed here from the local gradients.
  // Returns the gradient norm before clipping.
  double step(double lr, float grad_scale = 1.0f, double norm = -1.0);
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
