// The device side of philox.h's dropout_keep, shared by the dropout kernels
// (cuda_dropout.cu) and the kernels that fold a dropout into another pass (the residual
// add in front of a LayerNorm, cuda_layernorm.cu): element `index` of sample `sample` is
// kept when the top 24 bits of word index & 3 of Philox block (index >> 2, sample) reach
// the threshold, and a kept value is multiplied by 1 / (1 - p) in fp32. Every user draws
// one block per 4 elements, so the masks agree bit for bit with the CPU twin.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/philox.h"
#include "kernels/cuda/cuda_common.cuh"

namespace trident::cuda {

// The parts of dropout_keep's Philox call that are the same for every element: its key
// words and the 24-bit keep threshold. Must mirror philox.h's dropout_keep exactly (the
// emulated and GPU tests compare the masks with the CPU twin, which calls dropout_keep).
struct DropoutParams {
  uint32_t k0 = 0, k1 = 0;   // Philox key
  uint32_t threshold = 0;    // keep when (word >> 8) >= threshold
  uint64_t sample_base = 0;  // global sample number of sample 0
  uint64_t block_base = 0;   // DropoutKey::index_base / 4: added to every block's counter
  float scale = 1.0f;        // 1 / (1 - p)
  bool enabled = false;
};

// The smallest integer m with m * 2^-24 >= p, capped at 2^24 (nothing kept): the keep
// threshold on the top 24 bits of a Philox word. p * 2^24 is exact in double.
inline uint32_t keep_threshold(float p) {
  if (!(p > 0.0f)) return 0;
  const double t = std::ceil(static_cast<double>(p) * 16777216.0);
  return t >= 16777216.0 ? 16777216u : static_cast<uint32_t>(t);
}

inline DropoutParams dropout_params(const DropoutKey& k) {
  DropoutParams d;
  d.k0 = static_cast<uint32_t>(k.seed) ^ 0xD1B54A32u;
  d.k1 = k.site ^ (static_cast<uint32_t>(k.seed >> 32) * 0x9E3779B9u);
  d.threshold = keep_threshold(k.p);
  d.sample_base = k.sample_base;
  TRIDENT_CHECK(k.index_base % 4 == 0, "dropout: index_base ", k.index_base, " is not a multiple of 4");
  d.block_base = k.index_base >> 2;
  d.enabled = k.enabled();
  d.scale = d.enabled ? 1.0f / (1.0f - k.p) : 1.0f;
  return d;
}

// The Philox block of elements 4 * block4 .. 4 * block4 + 3 of `sample` (dropout_keep's counter).
__device__ __forceinline__ Philox4 dropout_block(const DropoutParams& d, uint64_t sample, uint64_t block4) {
  block4 += d.block_base;
  return philox4x32_10(Philox4{{static_cast<uint32_t>(block4), static_cast<uint32_t>(block4 >> 32),
                                static_cast<uint32_t>(sample), static_cast<uint32_t>(sample >> 32)}},
                       d.k0, d.k1);
}

// Dropout of the kV values of v (kV a multiple of 4), elements index .. index + kV - 1 of
// `sample` (index a multiple of 4): kept ones times the scale in fp32, rounded to T.
template <typename T, int kV>
__device__ __forceinline__ void dropout_vec(Vec<T, kV>& v, const DropoutParams& d, uint64_t sample, uint64_t index) {
  static_assert(kV % 4 == 0, "whole Philox blocks");
#pragma unroll
  for (int b = 0; b < kV / 4; ++b) {
    const Philox4 r = dropout_block(d, sample, (index >> 2) + b);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v.v[4 * b + j] = from_f32<T>((r.v[j] >> 8) >= d.threshold ? to_f32(v.v[4 * b + j]) * d.scale : 0.0f);
  }
}

// One element's dropout (a whole Philox block for it: for the rare unvectorised paths).
__device__ __forceinline__ float dropout_one(float x, const DropoutParams& d, uint64_t sample, uint64_t index) {
  const Philox4 r = dropout_block(d, sample, index >> 2);
  const uint32_t w = (index & 3) == 0 ? r.v[0] : (index & 3) == 1 ? r.v[1] : (index & 3) == 2 ? r.v[2] : r.v[3];
  return (w >> 8) >= d.threshold ? x * d.scale : 0.0f;
}

}  // namespace trident::cuda
