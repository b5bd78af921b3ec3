// The saved dropout mask drawn ahead of the forward by a kernel of its own
// (TRIDENT_ATTN_MASK_AHEAD=1, opt-in until timed: kernels/cuda/PERFORMANCE.md, 2026-12-06
// second task). The forward kernels then read their keep bits from the mask as the backward
// kernels do (AttnParams::mask_drawn), so that no attention kernel runs Philox under its
// products; this kernel runs the draws alone, at the integer pipes' rate.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_params.cuh"

namespace trident::cuda {
namespace {

// Mask blocks (16 x 16 elements, core/attn_dropout_mask.h) a warp draws, one after the
// other in the layout's order (their Philox chains interleave), and a 128-thread block.
constexpr int kMaskBlocksPerWarp = 4;
constexpr int kMaskBlocksPerCta = kThreads / 32 * kMaskBlocksPerWarp;

// One warp a mask block at a time, one Philox block a lane: lane l draws queries 2 (l / 4) and
// + 1 of the block by its keys 4 (l % 4) .. + 3 (philox.h's 2 x 4 blocks), so the warp's 32
// draws are the block's 256 elements. The four lanes of a query pair OR their nibbles into
// the pair's 32-bit word (rows 2 (l / 4) and + 1), which the first of them stores. Elements
// past the diagonal or past T are drawn too (their bits are undefined in the layout).
__global__ void __launch_bounds__(kThreads) attn_mask_ahead_kernel(const AttnParams p) {
  const int64_t total = static_cast<int64_t>(p.B) * p.H * p.mask_blocks;
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * kMaskBlocksPerWarp;
  if (first >= total) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x & 31), pair = lane >> 2, quad = lane & 3;
  int64_t bh = first / p.mask_blocks;
  const int64_t r = first - bh * p.mask_blocks;
  // Block r of a head's triangle is (qb, kb) with r = qb (qb + 1) / 2 + kb, kb <= qb.
  int64_t qb = static_cast<int64_t>((sqrt(8.0 * static_cast<double>(r) + 1.0) - 1.0) * 0.5);
  while (qb * (qb + 1) / 2 > r) --qb;
  while ((qb + 1) * (qb + 2) / 2 <= r) ++qb;
  int64_t kb = r - qb * (qb + 1) / 2;
#pragma unroll
  for (int n = 0; n < kMaskBlocksPerWarp; ++n) {
    if (first + n >= total) break;  // warp-uniform
    const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh - static_cast<int64_t>(b) * p.H);
    const Philox4 x = attn_block(p, p.drop.sample_base + static_cast<uint64_t>(b),
                                 static_cast<uint64_t>(p.head_offset + h), static_cast<int>(16 * qb) + 2 * pair,
                                 static_cast<int>(16 * kb) + 4 * quad);
    uint32_t word = 0;  // the even query's keys in the low half, the odd query's in the high
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t u = philox_word(x, static_cast<uint32_t>(k));
      word |= (static_cast<uint32_t>(attn_kept(p, u & 0xffffu)) << k) |
              (static_cast<uint32_t>(attn_kept(p, u >> 16)) << (16 + k));
    }
    word <<= 4 * quad;
    word |= __shfl_xor_sync(0xffffffffu, word, 1);
    word |= __shfl_xor_sync(0xffffffffu, word, 2);
    if (quad == 0) attn_mask_store_word(p.mask + attn_mask_block_row(p.mask_blocks, bh, qb, kb), pair, word);
    if (++kb > qb) {  // the next block in the layout: the next query block's row, or the next head
      kb = 0;
      if (16 * ++qb >= p.T) {
        qb = 0;
        ++bh;
      }
    }
  }
}

// The kernel's grid.x: the mask's B H attn_mask_blocks(T) blocks by kMaskBlocksPerCta (the
// host launcher checks that it fits).
inline int64_t mask_ahead_grid(const AttnParams& p) {
  return (static_cast<int64_t>(p.B) * p.H * p.mask_blocks + kMaskBlocksPerCta - 1) / kMaskBlocksPerCta;
}

// Launches the kernel before the forward where the forward reads a mask drawn ahead
// (p.mask_drawn): launch(kernel, grid_x, 1, 0). Shared by the host launcher and the CPU
// emulator's test.
template <typename Launch>
void plan_mask_ahead(const AttnParams& p, Launch&& launch) {
  if (p.mask_drawn) launch(attn_mask_ahead_kernel, static_cast<unsigned>(mask_ahead_grid(p)), 1u, 0);
}

}  // namespace
}  // namespace trident::cuda
