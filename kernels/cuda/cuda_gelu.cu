// GELU of either form (tanh approximation or exact erf: cuda_gelu.cuh), forward and
// backward. Element-wise, memory bound: grid-stride loops with fp32 math and full-precision
// tanhf / erff (the results stay within a few ulp of the CPU twin); the form is a template
// parameter, chosen once a launch. When the output (and dout) have x's dtype and every
// pointer is 16-byte aligned, a thread moves 16-byte vectors; other dtype mixes take the
// runtime-typed scalar path. Both outputs are "=".
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_gelu.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T, int kV, Gelu G>
__global__ void gelu_forward_kernel(const T* x, T* out, int64_t n) {
  map_unary<kV>(x, out, n, [](float v) { return gelu<G>(v); });
}

template <typename T, int kV, Gelu G>
__global__ void gelu_backward_kernel(const T* dout, const T* x, T* dx, int64_t n) {
  map_binary<kV>(dout, x, dx, n, [](float d, float v) { return gelu_grad<G>(d, v); });
}

// Outputs (and dout) of another dtype than x.
template <typename T, Gelu G>
__global__ void gelu_forward_any_kernel(const T* x, AnyPtr out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(out, i, gelu<G>(to_f32(x[i])));
}

template <typename T, Gelu G>
__global__ void gelu_backward_any_kernel(AnyPtr dout, const T* x, AnyPtr dx, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    store_any(dx, i, gelu_grad<G>(load_any(dout, i), to_f32(x[i])));
}

// The kernel choice of the launchers below (shared with the CPU emulator's test): the
// 16-byte vector kernel, its scalar instance for unaligned views, or the runtime-typed one.
void gelu_forward_typed(const Tensor& x, const Tensor& out, Gelu form, cudaStream_t s) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype, "gelu_forward", [&](auto tag) {
    dispatch_gelu(form, [&](auto g) {
      using T = decltype(tag);
      constexpr Gelu G = decltype(g)::value;
      constexpr int kV = kVec16<T>;
      if (out.dtype != x.dtype)
        gelu_forward_any_kernel<T, G><<<grid_for(n, kBlock), kBlock, 0, s>>>(x.ptr<T>(), any_ptr(out), n);
      else if (aligned_to({x.data, out.data}, 16))
        gelu_forward_kernel<T, kV, G><<<grid_for((n + kV - 1) / kV, kBlock), kBlock, 0, s>>>(x.ptr<T>(),
                                                                                             out.ptr<T>(), n);
      else
        gelu_forward_kernel<T, 1, G><<<grid_for(n, kBlock), kBlock, 0, s>>>(x.ptr<T>(), out.ptr<T>(), n);
    });
  });
}

void gelu_backward_typed(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form, cudaStream_t s) {
  const int64_t n = x.numel();
  dispatch_float(x.dtype, "gelu_backward", [&](auto tag) {
    dispatch_gelu(form, [&](auto g) {
      using T = decltype(tag);
      constexpr Gelu G = decltype(g)::value;
      constexpr int kV = kVec16<T>;
      if (dout.dtype != x.dtype || dx.dtype != x.dtype)
        gelu_backward_any_kernel<T, G><<<grid_for(n, kBlock), kBlock, 0, s>>>(any_ptr(dout), x.ptr<T>(), any_ptr(dx),
                                                                               n);
      else if (aligned_to({dout.data, x.data, dx.data}, 16))
        gelu_backward_kernel<T, kV, G><<<grid_for((n + kV - 1) / kV, kBlock), kBlock, 0, s>>>(
            dout.ptr<T>(), x.ptr<T>(), dx.ptr<T>(), n);
      else
        gelu_backward_kernel<T, 1, G><<<grid_for(n, kBlock), kBlock, 0, s>>>(dout.ptr<T>(), x.ptr<T>(), dx.ptr<T>(),
                                                                             n);
    });
  });
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  TRIDENT_CHECK(is_float(a.dtype) && is_float(b.dtype), op, ": float tensors expected");
  TRIDENT_CHECK(a.numel() == b.numel(), op, ": ", a.shape.str(), " vs ", b.shape.str());
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& out, Gelu form, cudaStream_t s) {
  check_same("gelu_forward", x, out);
  if (x.numel() == 0) return;
  gelu_forward_typed(x, out, form, s);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const Tensor& dout, const Tensor& x, const Tensor& dx, Gelu form, cudaStream_t s) {
  check_same("gelu_backward", x, dx);
  check_same("gelu_backward", x, dout);
  if (x.numel() == 0) return;
  gelu_backward_typed(dout, x, dx, form, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
