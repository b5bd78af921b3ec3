#include "train/optimizer.h"

#include <cmath>

namespace trident {

AdamWOptimizer::AdamWOptimizer(Backend& backend, ParamStore& params, const AdamWConfig& cfg)
    : be_(backend), params_(params), cfg_(cfg) {
  const int64_t n = params_.numel();
  separate_master_ = params_.flat_params().dtype != DType::F32;
  if (separate_master_) {
    master_ = be_.empty({n}, DType::F32);
    be_.cast(params_.flat_params(), master_);
  }
  m_ = be_.zeros({n}, DType::F32);
  v_ = be_.zeros({n}, DType::F32);
}

void AdamWOptimizer::step(double lr, double grad_norm, float grad_scale) {
  float scale = grad_scale;
  // Megatron: clip_coeff = max_norm / (norm + 1e-6), applied when below 1.
  if (cfg_.clip_grad > 0) {
    const double coeff = cfg_.clip_grad / (grad_norm + 1e-6);
    if (coeff < 1.0) scale = static_cast<float>(grad_scale * coeff);
  }
  ++step_;
  const Tensor& master_flat = separate_master_ ? master_.t() : params_.flat_params();
  for (const LocalParam& p : params_.list()) {
    AdamWArgs a;
    a.master = master_flat.flat_slice(p.offset, p.numel());
    a.grad = params_.flat_grads().flat_slice(p.offset, p.numel());
    a.m = m_.t().flat_slice(p.offset, p.numel());
    a.v = v_.t().flat_slice(p.offset, p.numel());
    if (separate_master_) a.model_param = params_.flat_params().flat_slice(p.offset, p.numel());
    a.lr = static_cast<float>(lr);
    a.beta1 = cfg_.beta1;
    a.beta2 = cfg_.beta2;
    a.eps = cfg_.eps;
    a.weight_decay = p.spec.weight_decay ? cfg_.weight_decay : 0.0f;
    a.grad_scale = scale;
    a.step = step_;
    be_.adamw(a);
  }
}

}  // namespace trident
