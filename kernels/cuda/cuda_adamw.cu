// AdamW on one flat fp32 shard (decoupled weight decay, bias correction), fused with the
// gradient unscale/clip factor and the copy of the new master weights into the model's
// dtype. One thread per element, fp32 math; the bias corrections 1 - beta^step are
// computed once on the host in double and passed as floats.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

template <typename G>
__global__ void adamw_kernel(float* master, const G* grad, float* m, float* v, AnyPtr model_param, bool has_model,
                             int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float g = to_f32(grad[i]) * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master[i];
    p -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + weight_decay * p);
    master[i] = p;
    if (has_model) store_any(model_param, i, p);
  }
}

}  // namespace

void adamw(const AdamWArgs& a, cudaStream_t s) {
  const char* op = "adamw";
  const int64_t n = a.master.numel();
  TRIDENT_CHECK(a.master.dtype == DType::F32 && a.m.dtype == DType::F32 && a.v.dtype == DType::F32, op,
                ": master, m and v must be f32");
  TRIDENT_CHECK(a.grad.numel() == n && a.m.numel() == n && a.v.numel() == n, op, ": sizes master ", n, " grad ",
                a.grad.numel(), " m ", a.m.numel(), " v ", a.v.numel());
  if (!a.model_param.empty())
    TRIDENT_CHECK(is_float(a.model_param.dtype) && a.model_param.numel() == n, op, ": model_param ",
                  a.model_param.shape.str(), " for ", n, " elements");
  TRIDENT_CHECK(a.step >= 1, op, ": step must be >= 1, got ", a.step);
  if (n == 0) return;
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step)));
  dispatch_float(a.grad.dtype, op, [&](auto tag) {
    using G = decltype(tag);
    adamw_kernel<G><<<grid_for(n, 256), 256, 0, s>>>(a.master.ptr<float>(), a.grad.ptr<G>(), a.m.ptr<float>(),
                                                     a.v.ptr<float>(), any_ptr(a.model_param), !a.model_param.empty(),
                                                     n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale,
                                                     bc1, bc2);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
