// GELU with the tanh approximation ("gelu_fast" / "gelu_new"), forward and backward:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// Element-wise, memory bound: one grid-stride loop, fp32 math, full-precision tanhf so
// the results stay within a few ulp of the CPU twin. Both outputs are "=".
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoeff = 0.044715f;

template <typename T>
__global__ void gelu_forward_kernel(const T* x, AnyPtr out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = to_f32(x[i]);
    store_any(out, i, 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kCoeff * v * v * v))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(AnyPtr dout, const T* x, AnyPtr dx, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = to_f32(x[i]);
    const float t = tanhf(kSqrt2OverPi * (v + kCoeff * v * v * v));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoeff * v * v);
    store_any(dx, i, load_any(dout, i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
  }
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  TRIDENT_CHECK(is_float(a.dtype) && is_float(b.dtype), op, ": float tensors expected");
  TRIDENT_CHECK(a.numel() == b.numel(), op, ": ", a.shape.str(), " vs ", b.shape.str());
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, cudaStream_t s) {
  check_same("gelu_forward", x, out);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(x.ptr<T>(), any_ptr(out), n);
  });
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, cudaStream_t s) {
  check_same("gelu_backward", x, dx);
  check_same("gelu_backward", x, dout);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(any_ptr(dout), x.ptr<T>(), any_ptr(dx), n);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
