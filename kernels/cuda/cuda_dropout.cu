// Dropout on [B*T, row] activations, forward and backward (both "=").
// Element (n, c) has index (n % T) * row + c within sample drop.sample_base + n / T, and
// is kept when philox.h's dropout_keep says so: the same host/device function the CPU
// twin calls, so the masks agree bit for bit and nothing is stored between the passes
// (the backward recomputes the mask from the key). With p = 0 it is a copy/cast.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(const T* in, AnyPtr out, int64_t N, int64_t row, int T_, DropoutKey key,
                               float scale, bool enabled) {
  const int64_t total = N * row;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float v = to_f32(in[i]);
    if (enabled) {
      const int64_t n = i / row, c = i - n * row;
      const uint64_t sample = key.sample_base + static_cast<uint64_t>(n / T_);
      const uint64_t index = static_cast<uint64_t>(n % T_) * static_cast<uint64_t>(row) + static_cast<uint64_t>(c);
      v = dropout_keep(key, sample, index) ? v * scale : 0.0f;
    }
    store_any(out, i, v);
  }
}

void apply(const char* op, const Tensor& in, const Tensor& out, int T, const DropoutKey& drop, cudaStream_t s) {
  TRIDENT_CHECK(is_float(in.dtype) && is_float(out.dtype), op, ": float tensors expected");
  TRIDENT_CHECK(in.numel() == out.numel(), op, ": ", in.shape.str(), " vs ", out.shape.str());
  const int64_t N = in.rows(), row = in.cols();
  TRIDENT_CHECK(T > 0 && N % T == 0, op, ": rows ", N, " not a multiple of T=", T);
  if (N * row == 0) return;
  const float scale = drop.enabled() ? 1.0f / (1.0f - drop.p) : 1.0f;
  dispatch_float(in.dtype, op, [&](auto tag) {
    using Ty = decltype(tag);
    dropout_kernel<Ty><<<grid_for(N * row, 256), 256, 0, s>>>(in.ptr<Ty>(), any_ptr(out), N, row, T, drop, scale,
                                                               drop.enabled());
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& out, int T, const DropoutKey& drop, cudaStream_t s) {
  apply("dropout_forward", x, out, T, drop, s);
}

void dropout_backward(const Tensor& dout, const Tensor& dx, int T, const DropoutKey& drop, cudaStream_t s) {
  apply("dropout_backward", dout, dx, T, drop, s);
}

}  // namespace trident::cuda
