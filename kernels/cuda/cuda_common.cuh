// Shared device helpers for the CUDA kernels: fp32 conversion of the three storage types,
// runtime-typed pointers for secondary operands, warp/block reductions in a fixed order
// (so every reduction is deterministic) and the host-side dtype dispatch.
//
// Kernels are templated over the storage type of their main operand (float, __half,
// __nv_bfloat16) and compute in fp32. Secondary operands (parameters, their gradients,
// optional outputs) are passed as AnyPtr and converted with a uniform switch: that keeps
// the number of instantiations at three per kernel while still allowing any mix of
// dtypes (e.g. bf16 activations with fp32 gradients), which is what the CPU twin allows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_check.h"

namespace trident::cuda {

// ---- fp32 <-> storage type (round to nearest even, like dtype.h on the host) ----------
template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// ---- runtime-typed pointer ---------------------------------------------------------------
struct AnyPtr {
  void* p = nullptr;
  DType t = DType::F32;
};
inline AnyPtr any_ptr(const Tensor& t) { return AnyPtr{t.data, t.dtype}; }

__device__ __forceinline__ float load_any(AnyPtr a, int64_t i) {
  switch (a.t) {
    case DType::F32: return static_cast<const float*>(a.p)[i];
    case DType::F16: return __half2float(static_cast<const __half*>(a.p)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(a.p)[i]);
    case DType::I32: return static_cast<float>(static_cast<const int32_t*>(a.p)[i]);
  }
  return 0.f;
}
__device__ __forceinline__ void store_any(AnyPtr a, int64_t i, float v) {
  switch (a.t) {
    case DType::F32: static_cast<float*>(a.p)[i] = v; break;
    case DType::F16: static_cast<__half*>(a.p)[i] = __float2half_rn(v); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(a.p)[i] = __float2bfloat16_rn(v); break;
    case DType::I32: static_cast<int32_t*>(a.p)[i] = static_cast<int32_t>(v); break;
  }
}

// ---- vectors: kV consecutive elements moved as one load/store (16 bytes at most) ----------
// Memory-bound kernels reach the copy bandwidth only with 16-byte accesses; kVec16<T>
// elements of T fill one. A kernel templated on kV uses kV = 1 when a row length or a
// pointer does not allow vectors (vector_width below).
template <typename T, int kV>
struct alignas(sizeof(T) * kV) Vec {
  T v[kV];
};
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));
// The CPU emulator (tests/cuda/emulated) checks the alignment that a GPU would fault on.
#ifndef TRIDENT_EMU_CHECK_ALIGNED
#define TRIDENT_EMU_CHECK_ALIGNED(p, bytes) ((void)0)
#endif
template <typename T, int kV>
__device__ __forceinline__ Vec<T, kV> load_vec(const T* p) {
  TRIDENT_EMU_CHECK_ALIGNED(p, sizeof(Vec<T, kV>));
  return *reinterpret_cast<const Vec<T, kV>*>(p);
}
template <typename T, int kV>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kV>& v) {
  TRIDENT_EMU_CHECK_ALIGNED(p, sizeof(Vec<T, kV>));
  *reinterpret_cast<Vec<T, kV>*>(p) = v;
}
// Every pointer is a multiple of `bytes` (a vector access's size) apart from 0.
inline bool aligned_to(std::initializer_list<const void*> ptrs, size_t bytes) {
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}

// kVec16<T> when `cols` is a multiple of it and every pointer is 16-byte aligned, else 1.
template <typename T>
inline int vector_width(int64_t cols, std::initializer_list<const void*> ptrs) {
  return cols % kVec16<T> == 0 && aligned_to(ptrs, 16) ? kVec16<T> : 1;
}

// ---- asynchronous copies to shared memory (sm_80+) -------------------------------------
// 16 bytes from global to shared memory without a register (cp.async.cg: cached in L2 only),
// in flight until a cp_async_wait_groups that covers its commit group. A thread sees its own
// copies after that wait; other threads need a barrier too. Where the device code runs as
// host code (the CPU emulator of the kernels), the copy happens at once and the group calls
// do nothing: the same values, in the same places.
__device__ __forceinline__ void cp_async16_to_shared(void* smem, const void* gmem) {
#ifdef __CUDA_ARCH__
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
#else
  TRIDENT_EMU_CHECK_ALIGNED(smem, 16);
  TRIDENT_EMU_CHECK_ALIGNED(gmem, 16);
  memcpy(smem, gmem, 16);
#endif
}
// Closes the commit group of this thread's copies issued since the last one.
__device__ __forceinline__ void cp_async_commit_group() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most `pending` of this thread's newest commit groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait_groups() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

// ---- element-wise loops ---------------------------------------------------------------
template <int k>
using Width = std::integral_constant<int, k>;

// The grid-stride loop of element-wise kernels: body(i, Width<kV>) for the whole groups of
// kV elements (i a multiple of kV), then body(i, Width<1>) for the last n % kV elements.
template <int kV, typename Body>
__device__ __forceinline__ void grid_stride_groups(int64_t n, Body&& body) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t full = n / kV * kV;
  for (int64_t i = tid * kV; i < full; i += threads * kV) body(i, Width<kV>{});
  if constexpr (kV > 1)
    for (int64_t i = full + tid; i < n; i += threads) body(i, Width<1>{});
}

// k consecutive elements at p as floats (one vector access when k > 1), and back.
template <int k, typename T>
__device__ __forceinline__ void load_k(const T* p, float (&out)[k]) {
  const Vec<T, k> v = load_vec<T, k>(p);
#pragma unroll
  for (int j = 0; j < k; ++j) out[j] = to_f32(v.v[j]);
}
template <int k, typename T>
__device__ __forceinline__ void store_k(T* p, const float (&in)[k]) {
  Vec<T, k> v;
#pragma unroll
  for (int j = 0; j < k; ++j) v.v[j] = from_f32<T>(in[j]);
  store_vec<T, k>(p, v);
}

// The bodies of the typed element-wise kernels: out[i] = f(a[i]) or f(a[i], b[i]) in fp32
// for i < n, kV elements per vector access (grid_stride_groups). out may alias an input.
template <int kV, typename S, typename D, typename F>
__device__ __forceinline__ void map_unary(const S* a, D* out, int64_t n, F&& f) {
  grid_stride_groups<kV>(n, [&](int64_t i, auto w) {
    constexpr int k = decltype(w)::value;
    float x[k];
    load_k<k>(a + i, x);
#pragma unroll
    for (int j = 0; j < k; ++j) x[j] = f(x[j]);
    store_k<k>(out + i, x);
  });
}
template <int kV, typename T, typename F>
__device__ __forceinline__ void map_binary(const T* a, const T* b, T* out, int64_t n, F&& f) {
  grid_stride_groups<kV>(n, [&](int64_t i, auto w) {
    constexpr int k = decltype(w)::value;
    float x[k], y[k];
    load_k<k>(a + i, x);
    load_k<k>(b + i, y);
#pragma unroll
    for (int j = 0; j < k; ++j) x[j] = f(x[j], y[j]);
    store_k<k>(out + i, x);
  });
}

// ---- reductions (fixed order: results do not depend on scheduling) --------------------
template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a multiple of 32
// (at most 1024). `shared` holds at least 32 values. Ends with a barrier so `shared` can
// be reused right away.
template <typename V>
__device__ __forceinline__ V block_sum(V v, V* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  V r = lane < nwarps ? shared[lane] : V(0);
  r = warp_sum(r);
  __syncthreads();
  return r;
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? shared[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

// ---- launch helpers ------------------------------------------------------------------
inline unsigned grid_for(int64_t n, int block, int64_t max_blocks = 65535LL * 32) {
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  if (g > max_blocks) g = max_blocks;
  return static_cast<unsigned>(g);
}

// Calls f(T{}) with T the storage type of `t`; throws for I32 or anything unknown.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    default: break;
  }
  throw InternalError(std::string(op) + ": expected a float tensor, got " + dtype_name(t));
}

// Stream-ordered scratch memory from the backend's cache. Releasing it before the kernels
// that use it have run is safe: every op of a backend runs on its one compute stream, so
// the next user of the block is ordered after them.
class Scratch {
 public:
  Scratch(CachingAllocator& a, size_t bytes) : a_(a), p_(a.allocate(bytes == 0 ? 1 : bytes)) {}
  ~Scratch() { a_.release(p_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  CachingAllocator& a_;
  void* p_;
};

}  // namespace trident::cuda
