// The attention-probability dropout mask that a forward saves for its backward
// (AttentionShape::dropout_mask), on host and device: one bit an element of the causal
// triangle, so that the backward reads the keep decisions instead of drawing Philox blocks
// again (twice on the GPU: its dK/dV and dQ passes each need the mask).
//
// Layout, per local head bh = b * H + h (heads of this rank): the 16 x 16 blocks (query block
// qb, key block kb) with kb <= qb and 16 qb < T, in row order (qb(qb + 1)/2 + kb), 16 uint16
// rows each: row r of block (qb, kb) holds keys 16 kb .. 16 kb + 15 of query 16 qb + r, key
// 16 kb + c at bit c, set when philox.h's attn_dropout_keep keeps the element. Only bits of
// elements a query sees (its document's keys up to itself) are defined. A little-endian 32-bit
// word w of a block is rows 2w (low half) and 2w + 1, which the GPU's key-major reads use.
// About T^2 / 16 bytes a head: 8.5 MB a layer for gpt2-1.3b at B 8, T 1024 (the layer's
// activations: ~540 MB).
#pragma once

#include <cstdint>

#include "core/env_switch.h"
#include "core/error.h"
#include "core/philox.h"

namespace trident {

// Blocks of one head's triangle.
TRIDENT_HD int64_t attn_mask_blocks(int64_t T) {
  const int64_t n = (T + 15) / 16;
  return n * (n + 1) / 2;
}
// The mask's size in int32 words (AttentionShape::dropout_mask's numel) for B x H heads.
TRIDENT_HD int64_t attn_mask_words(int64_t B, int64_t H, int64_t T) { return B * H * attn_mask_blocks(T) * 8; }
// The first uint16 row of block (qb, kb) of head bh (kb <= qb, 16 qb < T).
TRIDENT_HD int64_t attn_mask_block_row(int64_t blocks, int64_t bh, int64_t qb, int64_t kb) {
  return (bh * blocks + qb * (qb + 1) / 2 + kb) * 16;
}
// The uint16 row holding element (query i, key j <= i) of head bh, and the element's bit.
TRIDENT_HD int64_t attn_mask_row(int64_t blocks, int64_t bh, int64_t i, int64_t j) {
  return attn_mask_block_row(blocks, bh, i / 16, j / 16) + i % 16;
}
TRIDENT_HD uint32_t attn_mask_bit(int64_t j) { return static_cast<uint32_t>(j % 16); }
// Whether the saved mask (its uint16 rows) keeps element (i, j <= i) of head bh.
TRIDENT_HD bool attn_mask_kept(const uint16_t* mask, int64_t blocks, int64_t bh, int64_t i, int64_t j) {
  return (mask[attn_mask_row(blocks, bh, i, j)] >> attn_mask_bit(j)) & 1u;
}

#if !defined(__CUDA_ARCH__)
// TRIDENT_ATTN_SAVE_MASK=1: training saves the mask (Backend::saves_attention_dropout_mask on
// every backend, so that trident-plan's dry run counts what trident-train allocates). Opt-in
// until a GPU run has timed it (kernels/cuda/PERFORMANCE.md). TRIDENT_ATTN_MASK_AHEAD=1 (the
// CUDA backend draws the saved mask by a kernel of its own before the forward) implies it.
inline bool attn_mask_save_requested() {
  const int save = env_switch("TRIDENT_ATTN_SAVE_MASK"), ahead = env_switch("TRIDENT_ATTN_MASK_AHEAD");
  if (ahead == 1 && save == 0)
    throw ConfigError(
        "TRIDENT_ATTN_MASK_AHEAD=1 draws into the saved dropout mask, which TRIDENT_ATTN_SAVE_MASK=0 turns off: "
        "unset it or set it to 1");
  return save == 1 || ahead == 1;
}
#endif

}  // namespace trident
