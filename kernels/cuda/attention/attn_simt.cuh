// The CUDA-core attention kernels (any dtype, any D <= 128; fp32, and every case the
// tensor-core kernels do not take): one warp a row, forward, dQ and dK/dV.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include "kernels/cuda/attention/attn_params.cuh"

namespace trident::cuda {
namespace {

// Lane l holds head dims l, l + 32, l + 64, l + 96 (those < D); dot products are warp sums
// in a fixed order.

constexpr int kSimtDims = 4;  // D <= 128

template <typename T>
__device__ __forceinline__ void load_row(float (&x)[kSimtDims], const T* row, int D, int lane) {
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) {
    const int d = lane + 32 * c;
    x[c] = d < D ? to_f32(row[d]) : 0.f;
  }
}
__device__ __forceinline__ float dot_part(const float (&a)[kSimtDims], const float (&b)[kSimtDims]) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) s += a[c] * b[c];
  return s;
}
template <typename T>
__device__ __forceinline__ void store_row(T* row, const float (&x)[kSimtDims], float mul, int D, int lane) {
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) {
    const int d = lane + 32 * c;
    if (d < D) row[d] = from_f32<T>(x[c] * mul);
  }
}

// The first key query i of sample b sees: its document's start, 0 without documents.
__device__ __forceinline__ int simt_first_key(const AttnParams& p, int b, int i) {
  const int32_t* doc = sample_docs(p, b);
  return doc != nullptr ? doc[i] : 0;
}

// Forward: warp w handles row i of head (b, h); online softmax over keys first..i.
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_fwd_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = T_ - 1 - static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + static_cast<int64_t>(h) * D;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  float q[kSimtDims], acc[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
  float m = -INFINITY, l = 0.f;
  // With a saved mask (p.mask) not drawn ahead, the row's keep bits of the current 16-key
  // block, written when the block or the row ends (the bits of keys before the row's first
  // are undefined).
  uint16_t* mask_row = nullptr;
  uint32_t bits = 0;
  if (p.dropout && p.mask != nullptr && !p.mask_drawn) mask_row = p.mask + attn_mask_row(p.mask_blocks, bh, i, 0);
  for (int j = simt_first_key(p, b, i); j <= i; ++j) {
    const T* kj = base + static_cast<int64_t>(j) * p.qkv_tok + HD;
    float k[kSimtDims], v[kSimtDims];
    load_row(k, kj, D, lane);
    load_row(v, kj + HD, D, lane);
    const float s = warp_sum(dot_part(q, k)) * p.scale;
    const float mn = fmaxf(m, s);
    const float al = expf(m - mn);  // 0 on the first key (m = -inf)
    const float pe = expf(s - mn);
    l = l * al + pe;
    const bool keep = !p.dropout || attn_keep_elem(p, p.mask_drawn, sample, hg, i, j);
    const float w_ = keep ? pe * p.inv_keep : 0.f;  // inv_keep is 1 without dropout
    if (mask_row != nullptr) {
      bits |= static_cast<uint32_t>(keep) << (j & 15);
      if (((j & 15) == 15 || j == i) && lane == 0) mask_row[(j >> 4) * 16] = static_cast<uint16_t>(bits);
      if ((j & 15) == 15) bits = 0;
    }
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) acc[c] = acc[c] * al + w_ * v[c];
    m = mn;
  }
  T* orow = static_cast<T*>(p.out) + (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D;
  store_row(orow, acc, 1.f / l, D, lane);
  if (lane == 0) p.lse[static_cast<int64_t>(bh) * T_ + i] = m + logf(l);
}

// dQ: warp per query row i, keys first..i.
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = T_ - 1 - static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D, head = static_cast<int64_t>(h) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + head;
  const T* gdo = static_cast<const T*>(p.dout) + (static_cast<int64_t>(b) * T_ + i) * p.out_tok + head;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  const float li = p.lse[static_cast<int64_t>(bh) * T_ + i];
  const float di = p.delta[static_cast<int64_t>(bh) * T_ + i];
  float q[kSimtDims], g[kSimtDims], dq[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
  load_row(g, gdo, D, lane);
  for (int j = simt_first_key(p, b, i); j <= i; ++j) {
    const T* kj = base + static_cast<int64_t>(j) * p.qkv_tok + HD;
    float k[kSimtDims], v[kSimtDims];
    load_row(k, kj, D, lane);
    load_row(v, kj + HD, D, lane);
    const float pe = expf(warp_sum(dot_part(q, k)) * p.scale - li);
    const float z = p.dropout ? attn_drop_bwd(p, sample, hg, i, j) : 1.f;
    const float ds = pe * (z * warp_sum(dot_part(g, v)) - di);
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) dq[c] += ds * k[c];
  }
  T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + i) * p.qkv_tok + head;
  store_row(dst, dq, p.scale, D, lane);
}

// dK, dV: warp per key row j, queries j.. up to the end of its document (T - 1 without).
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), j = static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D, head = static_cast<int64_t>(h) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + head;
  const T* gdo = static_cast<const T*>(p.dout) + static_cast<int64_t>(b) * T_ * p.out_tok + head;
  const float* lse = p.lse + static_cast<int64_t>(bh) * T_;
  const float* delta = p.delta + static_cast<int64_t>(bh) * T_;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  float k[kSimtDims], v[kSimtDims], dk[kSimtDims] = {0.f, 0.f, 0.f, 0.f}, dv[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(k, base + static_cast<int64_t>(j) * p.qkv_tok + HD, D, lane);
  load_row(v, base + static_cast<int64_t>(j) * p.qkv_tok + 2 * HD, D, lane);
  for (int i = j; i < T_ && simt_first_key(p, b, i) <= j; ++i) {  // documents are contiguous
    float q[kSimtDims], g[kSimtDims];
    load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
    load_row(g, gdo + static_cast<int64_t>(i) * p.out_tok, D, lane);
    const float pe = expf(warp_sum(dot_part(q, k)) * p.scale - lse[i]);
    const float z = p.dropout ? attn_drop_bwd(p, sample, hg, i, j) : 1.f;
    const float ds = pe * (z * warp_sum(dot_part(g, v)) - delta[i]);
    const float pz = pe * z;
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) {
      dv[c] += pz * g[c];
      dk[c] += ds * q[c];
    }
  }
  T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + j) * p.qkv_tok + head;
  store_row(dst + HD, dk, p.scale, D, lane);
  store_row(dst + 2 * HD, dv, 1.f, D, lane);
}

}  // namespace
}  // namespace trident::cuda
