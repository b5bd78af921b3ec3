// Element-wise ops: fill, cast, scale, add, accumulate and the row-bias add used by the
// GEMM when its bias cannot go through the cuBLASLt epilogue. All are memory bound: grid-
// stride loops with fp32 arithmetic. When every operand has one dtype per role and every
// pointer allows it, a thread moves kVec consecutive elements per access (16 bytes of
// fp32, 8 of a 16-bit type; scalar 2-byte accesses reach about a third of the copy
// bandwidth); the per-element arithmetic is the same on both paths, so are the results.
// Mixed dtypes take the runtime-typed scalar path.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace trident::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int kVec = 4;  // elements a thread moves per access on the vector path

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

template <typename T, int kV>
__global__ void fill_kernel(T* p, int64_t n, T value) {
  grid_stride_groups<kV>(n, [&](int64_t i, auto w) {
    constexpr int k = decltype(w)::value;
    Vec<T, k> v;
#pragma unroll
    for (int j = 0; j < k; ++j) v.v[j] = value;
    store_vec<T, k>(p + i, v);
  });
}

template <typename S, typename D, int kV>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  map_unary<kV>(src, dst, n, [](float x) { return x; });
}

__global__ void cast_any_kernel(AnyPtr src, AnyPtr dst, int64_t n) {
  GRID_STRIDE(i, n) store_any(dst, i, load_any(src, i));
}

template <typename T, int kV>
__global__ void scale_kernel(T* p, int64_t n, float alpha) {
  map_unary<kV>(p, p, n, [=](float x) { return x * alpha; });
}

// out = a + b; also accumulate (dst += src as out = dst + src).
template <typename T, int kV>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  map_binary<kV>(a, b, out, n, [](float x, float y) { return x + y; });
}

__global__ void add_any_kernel(AnyPtr a, AnyPtr b, AnyPtr out, int64_t n) {
  GRID_STRIDE(i, n) store_any(out, i, load_any(a, i) + load_any(b, i));
}

// dst += src with src of another float dtype (runtime-typed).
template <typename T>
__global__ void accumulate_mixed_kernel(T* dst, AnyPtr src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = from_f32<T>(to_f32(dst[i]) + load_any(src, i));
}

template <typename T>
__global__ void add_row_bias_kernel(T* out, AnyPtr bias, int64_t n, int64_t cols) {
  GRID_STRIDE(i, n) out[i] = from_f32<T>(to_f32(out[i]) + load_any(bias, i % cols));
}

// Every tensor starts on a kVec-element boundary of its own dtype: the vector path.
bool vector_ok(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!aligned_to({t->data}, kVec * dtype_size(t->dtype))) return false;
  return true;
}

// One typed kernel over n elements: its kVec instance (n / kVec threads' worth of grid)
// when `vector`, else its scalar one. Shared with the CPU emulator's test.
template <typename KernelVec, typename KernelOne, typename... Args>
void launch_typed(bool vector, int64_t n, cudaStream_t s, KernelVec kernel_vec, KernelOne kernel_one,
                  Args... args) {
  if (vector)
    kernel_vec<<<grid_for((n + kVec - 1) / kVec, kBlock), kBlock, 0, s>>>(args...);
  else
    kernel_one<<<grid_for(n, kBlock), kBlock, 0, s>>>(args...);
}

void check_cuda(const Tensor& t, const char* op, const char* what) {
  TRIDENT_CHECK(t.device == Device::Cuda && (t.data != nullptr || t.numel() == 0), op, ": ", what,
                " must be a CUDA tensor");
}

// The kernel choice of each launcher below (dtype dispatch, vector or scalar path, mixed
// dtypes), in the anonymous namespace so that the CPU emulator's test runs the same
// choices. Argument checks and the memset/memcpy shortcuts stay in the launchers.
void fill_typed(const Tensor& t, float value, cudaStream_t s) {
  const int64_t n = t.numel();
  const bool v = vector_ok({&t});
  switch (t.dtype) {
    case DType::F32: launch_typed(v, n, s, fill_kernel<float, kVec>, fill_kernel<float, 1>, t.ptr<float>(), n, value); break;
    case DType::F16:
      launch_typed(v, n, s, fill_kernel<__half, kVec>, fill_kernel<__half, 1>, t.ptr<__half>(), n,
                   __float2half_rn(value));
      break;
    case DType::BF16:
      launch_typed(v, n, s, fill_kernel<__nv_bfloat16, kVec>, fill_kernel<__nv_bfloat16, 1>,
                   t.ptr<__nv_bfloat16>(), n, __float2bfloat16_rn(value));
      break;
    case DType::I32:
      launch_typed(v, n, s, fill_kernel<int32_t, kVec>, fill_kernel<int32_t, 1>, t.ptr<int32_t>(), n,
                   static_cast<int32_t>(value));
      break;
  }
}

void cast_typed(const Tensor& src, const Tensor& dst, cudaStream_t s) {
  const int64_t n = src.numel();
  if (!is_float(src.dtype) || !is_float(dst.dtype)) {
    cast_any_kernel<<<grid_for(n, kBlock), kBlock, 0, s>>>(any_ptr(src), any_ptr(dst), n);
    return;
  }
  const bool v = vector_ok({&src, &dst});
  dispatch_float(src.dtype, "cast", [&](auto st) {
    using S = decltype(st);
    dispatch_float(dst.dtype, "cast", [&](auto dt) {
      using D = decltype(dt);
      launch_typed(v, n, s, cast_kernel<S, D, kVec>, cast_kernel<S, D, 1>, src.ptr<S>(), dst.ptr<D>(), n);
    });
  });
}

void scale_typed(const Tensor& t, float alpha, cudaStream_t s) {
  const int64_t n = t.numel();
  dispatch_float(t.dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    launch_typed(vector_ok({&t}), n, s, scale_kernel<T, kVec>, scale_kernel<T, 1>, t.ptr<T>(), n, alpha);
  });
}

void add_typed(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t s) {
  const int64_t n = out.numel();
  if (a.dtype != out.dtype || b.dtype != out.dtype) {
    add_any_kernel<<<grid_for(n, kBlock), kBlock, 0, s>>>(any_ptr(a), any_ptr(b), any_ptr(out), n);
    return;
  }
  dispatch_float(out.dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    launch_typed(vector_ok({&a, &b, &out}), n, s, add_kernel<T, kVec>, add_kernel<T, 1>, a.ptr<T>(), b.ptr<T>(),
                 out.ptr<T>(), n);
  });
}

void accumulate_typed(const Tensor& dst, const Tensor& src, cudaStream_t s) {
  const int64_t n = dst.numel();
  dispatch_float(dst.dtype, "accumulate", [&](auto tag) {
    using T = decltype(tag);
    if (src.dtype == dst.dtype)
      launch_typed(vector_ok({&dst, &src}), n, s, add_kernel<T, kVec>, add_kernel<T, 1>, dst.ptr<T>(), src.ptr<T>(),
                   dst.ptr<T>(), n);
    else
      accumulate_mixed_kernel<T><<<grid_for(n, kBlock), kBlock, 0, s>>>(dst.ptr<T>(), any_ptr(src), n);
  });
}

void add_row_bias_typed(const Tensor& out, const Tensor& bias, cudaStream_t s) {
  const int64_t n = out.numel();
  dispatch_float(out.dtype, "matmul", [&](auto tag) {
    using T = decltype(tag);
    add_row_bias_kernel<T><<<grid_for(n, kBlock), kBlock, 0, s>>>(out.ptr<T>(), any_ptr(bias), n, out.cols());
  });
}

}  // namespace

void fill(const Tensor& t, float value, cudaStream_t s) {
  check_cuda(t, "fill", "t");
  const int64_t n = t.numel();
  if (n == 0) return;
  // +0 is all-zero bytes in every dtype: the driver's memset runs at the write bandwidth
  // (the scalar kernel cleared a 1.3b model's bf16 gradients at ~1.3 TB/s).
  if (value == 0.0f && !std::signbit(value)) {
    CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), s));
    return;
  }
  fill_typed(t, value, s);
  CUDA_CHECK_LAUNCH();
}

void cast(const Tensor& src, const Tensor& dst, cudaStream_t s) {
  check_cuda(src, "cast", "src");
  check_cuda(dst, "cast", "dst");
  TRIDENT_CHECK(src.numel() == dst.numel(), "cast: numel ", src.shape.str(), " vs ", dst.shape.str());
  const int64_t n = src.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  cast_typed(src, dst, s);
  CUDA_CHECK_LAUNCH();
}

void scale(const Tensor& t, float alpha, cudaStream_t s) {
  check_cuda(t, "scale", "t");
  if (t.numel() == 0) return;
  scale_typed(t, alpha, s);
  CUDA_CHECK_LAUNCH();
}

void add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t s) {
  check_cuda(a, "add", "a");
  check_cuda(b, "add", "b");
  check_cuda(out, "add", "out");
  TRIDENT_CHECK(a.numel() == out.numel() && b.numel() == out.numel(), "add: shapes ", a.shape.str(), " + ",
                b.shape.str(), " -> ", out.shape.str());
  if (out.numel() == 0) return;
  add_typed(a, b, out, s);
  CUDA_CHECK_LAUNCH();
}

void accumulate(const Tensor& dst, const Tensor& src, cudaStream_t s) {
  check_cuda(dst, "accumulate", "dst");
  check_cuda(src, "accumulate", "src");
  TRIDENT_CHECK(dst.numel() == src.numel(), "accumulate: shapes ", dst.shape.str(), " += ", src.shape.str());
  if (dst.numel() == 0) return;
  accumulate_typed(dst, src, s);
  CUDA_CHECK_LAUNCH();
}

void add_row_bias(const Tensor& out, const Tensor& bias, cudaStream_t s) {
  TRIDENT_CHECK(bias.numel() == out.cols(), "matmul: bias ", bias.shape.str(), " for out ", out.shape.str());
  if (out.numel() == 0) return;
  add_row_bias_typed(out, bias, s);
  CUDA_CHECK_LAUNCH();
}

}  // namespace trident::cuda
