// AdamW on one flat fp32 shard, exactly the formula of AdamWArgs (backend.h).
// Bias corrections are computed once in double; the per-element update is fp32.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace trident::cpu {

void adamw(const AdamWArgs& a) {
  const char* op = "adamw";
  check_f32(op, a.master);
  check_f32(op, a.m);
  check_f32(op, a.v);
  check_float(op, a.grad);
  const int64_t n = a.master.numel();
  CPU_CHECK(op, a.grad.numel() == n && a.m.numel() == n && a.v.numel() == n, "sizes differ: master ",
            n, " grad ", a.grad.numel(), " m ", a.m.numel(), " v ", a.v.numel());
  CPU_CHECK(op, a.step >= 1, "step must be >= 1, got ", a.step);
  if (!a.model_param.empty()) {
    check_float(op, a.model_param);
    CPU_CHECK(op, a.model_param.numel() == n, "model_param ", a.model_param.numel(), " vs ", n);
  }
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step)));
  float* p = a.master.ptr<float>();
  float* m = a.m.ptr<float>();
  float* v = a.v.ptr<float>();
  constexpr int64_t kChunk = 1024;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const int64_t off = ci * kChunk, w = std::min(kChunk, n - off);
    float g[kChunk];
    load_f32(a.grad, off, w, g);
    // Vectorised (the sqrt and divisions stay correctly rounded, so the same bits as one
    // element at a time); p, m, v and g do not overlap.
#pragma omp simd
    for (int64_t i = 0; i < w; ++i) {
      const int64_t k = off + i;
      const float gi = g[i] * a.grad_scale;
      m[k] = a.beta1 * m[k] + (1.0f - a.beta1) * gi;
      v[k] = a.beta2 * v[k] + (1.0f - a.beta2) * gi * gi;
      const float update = (m[k] / bc1) / (std::sqrt(v[k] / bc2) + a.eps) + a.weight_decay * p[k];
      p[k] -= a.lr * update;
    }
    if (!a.model_param.empty()) store_f32(a.model_param, off, w, p + off);
  }
}

}  // namespace trident::cpu
