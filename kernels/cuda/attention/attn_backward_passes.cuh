// The backward's small passes around its tile kernels: delta = rowsum(dO * O), the
// documents' ends, and the atomic-dQ accumulator's zeroing and store; with the plans
// that launch the first two.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/attn_tiles.cuh"

namespace trident::cuda {
namespace {

// delta_i = rowsum(dO_i * O_i), f32, one warp per row (shared by both paths).
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_delta_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t off = (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D;
  const T* o = static_cast<const T*>(p.out) + off;
  const T* g = static_cast<const T*>(p.dout) + off;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += to_f32(o[d]) * to_f32(g[d]);
  s = warp_sum(s);
  if (lane == 0) p.delta[w] = s;
}

// The same with 16-byte vectors (the tensor-core paths' operands: D % 8 == 0, 16-byte aligned
// rows): G lanes a row (G, a power of two, covers its D / 8 vectors: 8 at D 64, 16 at D 128),
// 32 / G rows a warp, the lane's products summed in order, then the G lanes' sums by
// shuffles. The scalar kernel's 64-bit index arithmetic and 2-byte loads a row took about as
// long as a memory-bound pass over O and dO takes.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads) attn_delta_vec_kernel(const AttnParams p) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  const int lane = threadIdx.x & 31, gl = lane % G;
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.T;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * (32 / G) + lane / G;
  float s = 0.f;
  if (w < rows && gl * kV < p.D) {
    const int T_ = p.T, D = p.D;
    const int bh = static_cast<int>(w / T_), i = static_cast<int>(w - static_cast<int64_t>(bh) * T_);
    const int b = bh / p.H, h = bh - b * p.H;
    const int64_t off = (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D + gl * kV;
    const uint4 ov = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.out) + off);
    const uint4 gv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + off);
    T o[kV], g[kV];  // the vectors' elements (memcpy: no aliasing of the uint4 through T)
    memcpy(static_cast<void*>(o), &ov, sizeof(ov));
    memcpy(static_cast<void*>(g), &gv, sizeof(gv));
#pragma unroll
    for (int j = 0; j < kV; ++j) s += to_f32(o[j]) * to_f32(g[j]);
  }
#pragma unroll
  for (int m = G / 2; m >= 1; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
  if (gl == 0 && w < rows) p.delta[w] = s;
}

// p.doc_end from p.doc, a thread a position: the end of position t's document is the first
// later position whose document starts after t (starts do not decrease: a binary search of
// log2 T loads), or T.
__global__ void __launch_bounds__(kThreads) attn_doc_ends_kernel(const AttnParams p) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (n >= static_cast<int64_t>(p.B) * p.T) return;
  const int64_t b = n / p.T;
  const int t = static_cast<int>(n - b * p.T);
  const int32_t* start = p.doc + b * p.T;
  int lo = t + 1, hi = p.T;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (start[mid] > t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  p.doc_end[n] = lo;
}

// The backward's document ends (the tensor-core dK/dV kernels' mask_key_tile reads them):
// launch(kernel, grid_x, 1, 0) once when they have a buffer (documents, tensor-core path).
// Shared by the host launcher and the CPU emulator's test.
template <typename Launch>
void plan_document_ends(const AttnParams& p, Launch&& launch) {
  const int64_t n = static_cast<int64_t>(p.B) * p.T;
  if (p.doc_end != nullptr) launch(attn_doc_ends_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), 1u, 0);
}

// The delta pass: launch(kernel, grid_x, 1, 0) once, the vector kernel when `vectors` (the
// tensor-core paths: D % 8 == 0, aligned rows), else the scalar one. Shared by the host
// launcher and the CPU emulator's test.
template <typename T, typename Launch>
void plan_delta(const AttnParams& p, bool vectors, Launch&& launch) {
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.T;
  if constexpr (!std::is_same_v<T, float>) {
    if (vectors) {
      constexpr int kV = static_cast<int>(16 / sizeof(T));
      const int vecs = (p.D + kV - 1) / kV;  // at most 16 (D <= 128)
      auto go = [&](auto g) {
        constexpr int G = decltype(g)::value;
        const int64_t per_block = (kThreads / 32) * (32 / G);
        launch(attn_delta_vec_kernel<T, G>, static_cast<unsigned>((rows + per_block - 1) / per_block), 1u, 0);
      };
      if (vecs <= 1)
        go(std::integral_constant<int, 1>{});
      else if (vecs <= 2)
        go(std::integral_constant<int, 2>{});
      else if (vecs <= 4)
        go(std::integral_constant<int, 4>{});
      else if (vecs <= 8)
        go(std::integral_constant<int, 8>{});
      else
        go(std::integral_constant<int, 16>{});
      return;
    }
  }
  launch(attn_delta_kernel<T>, static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)), 1u, 0);
}

// The atomic-dQ backward's f32 accumulator p.dq_acc ([B*H*T, D]): zeroed before the dK/dV
// kernel, then dQ = dq_acc * scale stored into dqkv's Q slots. Grid-stride, 4 floats a step.
__global__ void __launch_bounds__(kThreads) attn_dq_zero_kernel(const AttnParams p) {
  const int64_t n4 = static_cast<int64_t>(p.B) * p.H * p.T * p.D / 4;  // D % 8 == 0
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < n4;
       k += static_cast<int64_t>(gridDim.x) * kThreads)
    reinterpret_cast<float4*>(p.dq_acc)[k] = make_float4(0.f, 0.f, 0.f, 0.f);
}
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_dq_store_kernel(const AttnParams p) {
  const int D = p.D, T_ = p.T;
  const int64_t n4 = static_cast<int64_t>(p.B) * p.H * T_ * D / 4;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < n4;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = k * 4 / D;  // (b h) T + t
    const int c = static_cast<int>(k * 4 - row * D);
    const int64_t bh = row / T_;
    const int t = static_cast<int>(row - bh * T_);
    const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh - static_cast<int64_t>(b) * p.H);
    const float4 v = reinterpret_cast<const float4*>(p.dq_acc)[k];
    T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + t) * p.qkv_tok + static_cast<int64_t>(h) * D + c;
    uint2 packed;
    packed.x = pack2<T>(v.x * p.scale, v.y * p.scale);
    packed.y = pack2<T>(v.z * p.scale, v.w * p.scale);
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

}  // namespace
}  // namespace trident::cuda
