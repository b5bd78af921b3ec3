// The attention kernels' parameters (AttnParams) and their dropout draws: the Philox blocks
// of philox.h's attn_dropout_keep, drawn once a block and shared between lanes.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: trident does not link the driver)

#include <algorithm>
#include <cstdint>

#include "core/attn_dropout_mask.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_common.cuh"

namespace trident::cuda {
namespace {

constexpr int kThreads = 128;  // one warpgroup: the block of every attention kernel (two-warpgroup blocks: 2x)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// How far (log2 units) a forward row's score may pass the row's reference maximum before
// the output is rescaled: P <= 2^8 = 256, well inside fp32 and fp16 (and 16-bit P rounds
// relative to its size).
constexpr float kMaxSlack = 8.f;

struct AttnParams {
  const void* qkv = nullptr;   // [B, T, 3, H, D]
  void* out = nullptr;         // [B, T, H, D] (forward output; backward input)
  float* lse = nullptr;        // [B, H, T]
  const void* dout = nullptr;  // [B, T, H, D]
  void* dqkv = nullptr;        // [B, T, 3, H, D]
  float* delta = nullptr;      // [B, H, T] scratch: rowsum(dO * O)
  float* dq_acc = nullptr;     // [B, H, T, D] f32 scratch of the atomic-dQ backward (else unused)
  const int32_t* doc = nullptr;  // [B, T] first key of each query's document, or null (AttentionShape)
  int32_t* doc_end = nullptr;    // [B, T] tensor-core backward scratch with doc: one past each key's document
  int B = 0, T = 0, H = 0, D = 0;
  int head_offset = 0;
  int64_t qkv_tok = 0;  // elements between consecutive tokens of qkv: 3 * H * D
  int64_t out_tok = 0;  // elements between consecutive tokens of out/dout: H * D
  float scale = 1.f;       // 1 / sqrt(D)
  float scale_log2 = 1.f;  // scale * log2(e): scores in the exp2 domain
  float inv_keep = 1.f;    // attn_drop_scale(p): a kept probability's factor
  uint32_t drop_thr = 0;   // attn_drop_threshold(p), at most 65535 (set_attn_dropout)
  bool dropout = false;
  DropoutKey drop{};
  // The saved dropout mask (AttentionShape::dropout_mask, core/attn_dropout_mask.h's uint16
  // rows), or null: with dropout, the forward kernels write the bits they draw (unless
  // mask_drawn) and the backward kernels read them instead of drawing. mask_blocks:
  // attn_mask_blocks(T).
  uint16_t* mask = nullptr;
  int64_t mask_blocks = 0;
  // With a mask: it already holds this call's bits, drawn ahead by attn_mask_ahead_kernel
  // (TRIDENT_ATTN_MASK_AHEAD=1), and the forward kernels read them as the backward's do.
  bool mask_drawn = false;
  // The TMA views of qkv and dout (qkv_tma_view, dout_tma_view) for the warp-specialized
  // kernels, encoded by the host launcher for those only (zero otherwise); the kernels take
  // their parameters as __grid_constant__, so that the copy engine reads the maps where they lie.
  CUtensorMap qkv_map{}, dout_map{};
};

// A [B, T, slots, D] tensor of heads as the tensor memory accelerator sees it: elements
// (column d < D, head slot j, token t < T, sample b < B), strides in bytes, boxes of 64 columns
// x 64 tokens of one slot and sample. Coordinates past D or T read zeros, as
// load_tile_sw128's rows past T do. Shared by the host's cuTensorMapEncodeTiled call and the
// CPU emulator's copy engine.
constexpr int kTmaBoxCols = 64, kTmaBoxRows = 64;
struct HeadsTmaView {
  const void* base = nullptr;
  uint64_t dims[4] = {};     // D, slots, T, B
  uint64_t strides[3] = {};  // bytes between slots, tokens, samples
  uint32_t box[4] = {kTmaBoxCols, 1, kTmaBoxRows, 1};
  int elem_bytes = 2;
};
inline HeadsTmaView heads_tma_view(const void* base, const AttnParams& p, int slots, int64_t tok, int elem_bytes) {
  HeadsTmaView v;
  v.base = base;
  v.dims[0] = static_cast<uint64_t>(p.D);
  v.dims[1] = static_cast<uint64_t>(slots);
  v.dims[2] = static_cast<uint64_t>(p.T);
  v.dims[3] = static_cast<uint64_t>(p.B);
  v.strides[0] = static_cast<uint64_t>(p.D) * elem_bytes;
  v.strides[1] = static_cast<uint64_t>(tok) * elem_bytes;
  v.strides[2] = static_cast<uint64_t>(p.T) * tok * elem_bytes;
  v.elem_bytes = elem_bytes;
  return v;
}
// qkv: slots are the H query heads, then the key heads, then the value heads.
inline HeadsTmaView qkv_tma_view(const AttnParams& p, int elem_bytes) {
  return heads_tma_view(p.qkv, p, 3 * p.H, p.qkv_tok, elem_bytes);
}
// dout (the backward's): the H heads.
inline HeadsTmaView dout_tma_view(const AttnParams& p, int elem_bytes) {
  return heads_tma_view(p.dout, p, p.H, p.out_tok, elem_bytes);
}

// ---- dropout -----------------------------------------------------------------------------
// philox.h's attn_dropout_keep: element (query i, key j) of head hg is the 16-bit half
// i & 1 of word j & 3 of the Philox block with counter attn_drop_counter(hg, T, i, j),
// kept when the half reaches the threshold. Restated here with the word selected without
// a dynamically indexed array (which would live in local memory); tests/cuda checks the
// masks against the CPU twin, which calls attn_dropout_keep.
__host__ __device__ __forceinline__ uint32_t philox_word(const Philox4& r, uint32_t w) {
  return w == 0 ? r.v[0] : w == 1 ? r.v[1] : w == 2 ? r.v[2] : r.v[3];
}
__host__ __device__ __forceinline__ Philox4 attn_block(const AttnParams& p, uint64_t sample, uint64_t hg, int i,
                                                       int j) {
  return dropout_philox(p.drop, sample,
                        attn_drop_counter(hg, static_cast<uint64_t>(p.T), static_cast<uint64_t>(i),
                                          static_cast<uint64_t>(j)));
}
// Whether a 16-bit uniform u keeps its element.
__host__ __device__ __forceinline__ bool attn_kept(const AttnParams& p, uint32_t u) { return u >= p.drop_thr; }

// Whether element (i, j) is kept, drawn (a whole Philox block for it: the SIMT kernels).
__host__ __device__ __forceinline__ bool attn_keep_one(const AttnParams& p, uint64_t sample, uint64_t hg, int i,
                                                       int j) {
  const uint32_t w = philox_word(attn_block(p, sample, hg, i, j), static_cast<uint32_t>(j & 3));
  return attn_kept(p, attn_drop_uniform(w, static_cast<uint64_t>(i)));
}

// The saved mask's local head (b H + h) of (sample, hg).
__host__ __device__ __forceinline__ int64_t attn_mask_head(const AttnParams& p, uint64_t sample, uint64_t hg) {
  return static_cast<int64_t>(sample - p.drop.sample_base) * p.H +
         static_cast<int64_t>(hg - static_cast<uint64_t>(p.head_offset));
}
// The uint16 rows of block (query block qb, key block kb) of the saved mask of the head of
// (sample, hg) (core/attn_dropout_mask.h), or null where the layout has no block: above the
// diagonal or past T, where no element is visible. Warp-uniform when qb and kb are.
__host__ __device__ __forceinline__ uint16_t* attn_mask_rows(const AttnParams& p, uint64_t sample, uint64_t hg,
                                                              int qb, int kb) {
  if (kb > qb || qb * 16 >= p.T) return nullptr;
  return p.mask + attn_mask_block_row(p.mask_blocks, attn_mask_head(p, sample, hg), qb, kb);
}

// Whether element (i, j) is kept, for the SIMT kernels: read from the saved mask where
// `saved` (j <= i < T), else drawn.
__host__ __device__ __forceinline__ bool attn_keep_elem(const AttnParams& p, bool saved, uint64_t sample,
                                                        uint64_t hg, int i, int j) {
  return saved ? attn_mask_kept(p.mask, p.mask_blocks, attn_mask_head(p, sample, hg), i, j)
               : attn_keep_one(p, sample, hg, i, j);
}
// Dropout factor of one element for the SIMT backward kernels: from the saved mask where
// there is one, else drawn.
__host__ __device__ __forceinline__ float attn_drop_bwd(const AttnParams& p, uint64_t sample, uint64_t hg, int i,
                                                        int j) {
  return attn_keep_elem(p, p.mask != nullptr, sample, hg, i, j) ? p.inv_keep : 0.f;
}

// The dropout fields of the kernels' parameters (check() and the emulated tests). A
// threshold of 65536 keeps nothing: the device compares with 65535 and scales by 0.
inline void set_attn_dropout(AttnParams& p, const DropoutKey& drop) {
  p.drop = drop;
  p.dropout = drop.enabled();
  p.inv_keep = p.dropout ? attn_drop_scale(drop.p) : 1.0f;
  p.drop_thr = std::min(attn_drop_threshold(drop.p), 65535u);
}

// The tensor-core kernels draw each block once: the four lanes that hold parts of the same
// four blocks draw one block each and pass each other the words by three shuffles (a 4 x 4
// transpose). A block costs ~60 integer operations, about as much as an element's share of
// the tensor-core products, so these draws are most of what dropout adds to the kernels.
// Every lane of the warp must call them. Both take two n8 tiles of the m16n8 C layout
// (columns c and c + 8) and return the thread's 8 keep bits: bit 4 t + e for tile t and
// the layout's element e (rows r and r + 8 for e < 2 and e >= 2, columns c + (e & 1)).
// Bits, not factors: 8 live floats pushed the D 128 dK/dV kernel into spills.

// The keep bits of the two uniforms packed in w (low half: bit 0), placed at bit `at`.
__device__ __forceinline__ uint32_t attn_keep_bits2(const AttnParams& p, uint32_t w, int at) {
  const uint32_t bits = static_cast<uint32_t>(attn_kept(p, w & 0xffffu)) |
                        (static_cast<uint32_t>(attn_kept(p, w >> 16)) << 1);
  return bits << at;
}
// The bit offset 4 t + e of block b's first element (b = 2 x element pair + tile).
__device__ __forceinline__ int attn_block_bit(int b) { return 4 * (b & 1) + 2 * (b >> 1); }

// Forward and dQ (rows = queries): the thread's rows are row0 = wrow + lane / 4 and row0 + 8,
// its columns col and col + 1 (col = c0 + 2 (lane & 3), c0 a multiple of 8) and 8 further.
// The lanes lane ^ {0, 1, 4, 5} hold both queries of row0's and row1's pairs and both column
// pairs of the key quads col & ~3 and col & ~3 + 8: four blocks. Lane m = (lane & 1) |
// ((lane >> 1) & 2) draws block m (row pair m >> 1, tile m & 1); lane n needs half
// (n >> 1) (its row's parity) of words 2 (n & 1) and 2 (n & 1) + 1 (its columns) of each.
__device__ __forceinline__ uint32_t attn_drop_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                   int col, int lane) {
  const int m = (lane & 1) | ((lane >> 1) & 2);
  const Philox4 r = attn_block(p, sample, hg, (m & 2) ? row0 + 8 : row0, (col & ~3) + (m & 1) * 8);
  const auto part = [&](int n) {  // lane n's 32 bits of this block: its two columns, its row
    const uint32_t lo = (n & 1) ? r.v[2] : r.v[0], hi = (n & 1) ? r.v[3] : r.v[1];
    return (n & 2) ? (lo >> 16) | (hi & 0xffff0000u) : (lo & 0xffffu) | (hi << 16);
  };
  uint32_t keep = attn_keep_bits2(p, part(m), attn_block_bit(m));
#pragma unroll
  for (int k = 1; k < 4; ++k) {  // this lane's part of block m ^ k, from lane position m ^ k
    const uint32_t got = __shfl_xor_sync(0xffffffffu, part(m ^ k), (k & 1) | ((k & 2) << 1));
    keep |= attn_keep_bits2(p, got, attn_block_bit(m ^ k));
  }
  return keep;
}

// dK/dV (rows = keys): the thread's keys are key0 = wkey + lane / 4 and key0 + 8, its
// queries i and i + 1 (i = i0 + 2 (lane & 3), i0 a multiple of 8) and 8 further: word
// key0 & 3 of each of the four blocks (key quad of key0 or key1) x (tile), whose two
// halves are its queries i, i + 1. The lanes with the same lane & 3 and lane >> 4 share the
// blocks; lane m = (lane >> 2) & 3 draws block m (key quad m >> 1, tile m & 1).
__device__ __forceinline__ uint32_t attn_drop_keys(const AttnParams& p, uint64_t sample, uint64_t hg, int key0, int i,
                                                   int lane) {
  const int m = (lane >> 2) & 3;
  const Philox4 r = attn_block(p, sample, hg, i + (m & 1) * 8, key0 - m + (m >> 1) * 8);
  uint32_t keep = attn_keep_bits2(p, philox_word(r, static_cast<uint32_t>(m)), attn_block_bit(m));
#pragma unroll
  for (int k = 1; k < 4; ++k) {  // word m of block m ^ k, from lane position m ^ k
    const uint32_t got = __shfl_xor_sync(0xffffffffu, philox_word(r, static_cast<uint32_t>(m ^ k)), k << 2);
    keep |= attn_keep_bits2(p, got, attn_block_bit(m ^ k));
  }
  return keep;
}

// The keep bits of a warp tile's NT n8 tiles (all lanes draw them together): element e of
// n8 tile nt at bit 4 (nt % 8) + e of word nt / 8 (attn_drop_rows/keys' bits, pair by
// pair). The wgmma kernels draw them while the tile's score products run on the tensor
// cores, and the elementwise step reads one bit an element.
template <int NT>
struct KeepBits {
  static_assert(NT % 2 == 0, "dropout draws take n8 tiles in pairs");
  uint32_t w[(NT + 7) / 8] = {};
  __device__ __forceinline__ float factor(const AttnParams& p, int nt, int e) const {
    return (w[nt / 8] >> (4 * (nt % 8) + e)) & 1u ? p.inv_keep : 0.f;
  }
  // Pair by pair from draw(c), the 8 bits of the n8 tiles at columns c and c + 8 (c: this
  // lane's first column of the pair; the tile's columns start at c0).
  template <typename Draw>
  __device__ __forceinline__ static KeepBits drawn(int c0, int lane, Draw&& draw) {
    KeepBits keep;
#pragma unroll
    for (int q = 0; q < NT / 2; ++q) keep.w[q / 4] |= draw(c0 + q * 16 + (lane & 3) * 2) << (8 * (q % 4));
    return keep;
  }
};
// Rows = queries (forward, dQ): the warp's rows row0 = wrow + lane / 4 and row0 + 8 against
// keys k0 .. k0 + 8 NT - 1.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_keep_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                       int k0, int lane) {
  return KeepBits<NT>::drawn(k0, lane, [&](int col) { return attn_drop_rows(p, sample, hg, row0, col, lane); });
}
// Rows = keys (dK/dV): the warp's keys key0 = wkey + lane / 4 and key0 + 8 against queries
// i0 .. i0 + 8 NT - 1.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_keep_keys(const AttnParams& p, uint64_t sample, uint64_t hg, int key0,
                                                       int i0, int lane) {
  return KeepBits<NT>::drawn(i0, lane, [&](int i) { return attn_drop_keys(p, sample, hg, key0, i, lane); });
}

// ---- the saved mask in the tensor-core layouts -------------------------------------------
// Pair q of KeepBits<NT> (its byte q) covers the n8 tiles of keys (rows layout) or queries
// (keys layout) c0 + 16 q .. c0 + 16 q + 15: one 16 x 16 block of the saved mask, since warp
// tiles start at multiples of 16. Bit 4 t + e of the byte is tile t, element e of the C
// layout: e = 0, 1 the thread's first row, columns 2 (lane & 3) + 8 t + {0, 1}; e = 2, 3 its
// row + 8.

// Rows = queries (forward): writes the warp's bits of its 16 rows (row0 = wrow + lane / 4)
// against keys k0 .. k0 + 8 NT - 1, where the layout has blocks. All lanes call it. The
// four lanes of a row quad OR their bits together, then two of them write rows r and r + 8.
template <int NT>
__device__ __forceinline__ void attn_save_keep_rows(const AttnParams& p, const KeepBits<NT>& keep, uint64_t sample,
                                                    uint64_t hg, int row0, int k0, int lane) {
  const int sh = 2 * (lane & 3), r = row0 & 15;
#pragma unroll
  for (int q = 0; q < NT / 2; ++q) {
    const uint32_t x = (keep.w[q / 4] >> (8 * (q % 4))) & 0xffu;
    uint32_t v = ((x & 3u) << sh) | (((x >> 4) & 3u) << (8 + sh)) | (((x >> 2) & 3u) << (16 + sh)) |
                 (((x >> 6) & 3u) << (24 + sh));  // row r in the low half, row r + 8 in the high
    v |= __shfl_xor_sync(0xffffffffu, v, 1);
    v |= __shfl_xor_sync(0xffffffffu, v, 2);
    uint16_t* rows = attn_mask_rows(p, sample, hg, row0 >> 4, (k0 >> 4) + q);
    if (rows != nullptr && (lane & 3) < 2) rows[r + 8 * (lane & 1)] = static_cast<uint16_t>(v >> (16 * (lane & 1)));
  }
}

// Rows = queries (dQ, and the forward after attn_mask_ahead_kernel): the bits attn_keep_rows
// would draw, read from the saved mask.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_saved_keep_rows(const AttnParams& p, uint64_t sample, uint64_t hg,
                                                             int row0, int k0, int lane) {
  const int sh = 2 * (lane & 3), r = row0 & 15;
  KeepBits<NT> keep;
#pragma unroll
  for (int q = 0; q < NT / 2; ++q) {
    const uint16_t* rows = attn_mask_rows(p, sample, hg, row0 >> 4, (k0 >> 4) + q);
    const uint32_t a = rows != nullptr ? rows[r] : 0u, b = rows != nullptr ? rows[r + 8] : 0u;
    const uint32_t x = ((a >> sh) & 3u) | (((b >> sh) & 3u) << 2) | (((a >> (8 + sh)) & 3u) << 4) |
                       (((b >> (8 + sh)) & 3u) << 6);
    keep.w[q / 4] |= x << (8 * (q % 4));
  }
  return keep;
}

// Word w of a block's rows: rows 2w (low half) and 2w + 1. One 32-bit load on the GPU (a
// block's rows start 32-byte aligned in a 4-byte aligned mask: the host checks); the CPU
// emulator assembles it from the two halves.
__device__ __forceinline__ uint32_t attn_mask_word(const uint16_t* rows, int w) {
#if defined(__CUDA_ARCH__)
  return reinterpret_cast<const uint32_t*>(rows)[w];
#else
  return static_cast<uint32_t>(rows[2 * w]) | (static_cast<uint32_t>(rows[2 * w + 1]) << 16);
#endif
}

// Stores word w of a block's rows (attn_mask_word's inverse).
__device__ __forceinline__ void attn_mask_store_word(uint16_t* rows, int w, uint32_t v) {
#if defined(__CUDA_ARCH__)
  reinterpret_cast<uint32_t*>(rows)[w] = v;
#else
  rows[2 * w] = static_cast<uint16_t>(v);
  rows[2 * w + 1] = static_cast<uint16_t>(v >> 16);
#endif
}

// Rows = keys (dK/dV): key0 = wkey + lane / 4 and key0 + 8 against queries i0 .. i0 + 8 NT - 1.
// The thread's queries 2 (lane & 3) + {0, 1} of a block are its 32-bit word lane & 3, the
// next 8 queries word 4 + (lane & 3); its keys are bits key0 % 16 and + 8 of each half.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_saved_keep_keys(const AttnParams& p, uint64_t sample, uint64_t hg,
                                                             int key0, int i0, int lane) {
  const int kk = key0 & 15;
  // bits 0, 16, 8, 24 of s (key0's, the next query's, key0 + 8's, ...) as e = 0, 1, 2, 3
  const auto quad = [](uint32_t s) { return (s & 1u) | ((s >> 15) & 2u) | ((s >> 6) & 4u) | ((s >> 21) & 8u); };
  KeepBits<NT> keep;
#pragma unroll
  for (int q = 0; q < NT / 2; ++q) {
    const uint16_t* rows = attn_mask_rows(p, sample, hg, (i0 >> 4) + q, key0 >> 4);
    const uint32_t w0 = rows != nullptr ? attn_mask_word(rows, lane & 3) : 0u;
    const uint32_t w1 = rows != nullptr ? attn_mask_word(rows, 4 + (lane & 3)) : 0u;
    keep.w[q / 4] |= (quad(w0 >> kk) | (quad(w1 >> kk) << 4)) << (8 * (q % 4));
  }
  return keep;
}

// What the kernels call. The forward draws its bits and saves them where asked, or reads
// them where they were drawn ahead; the backward reads saved bits where there are some, else
// draws them as the forward did.
template <int NT>
__device__ __forceinline__ KeepBits<NT> fwd_keep_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                      int k0, int lane) {
  if (p.mask_drawn) return attn_saved_keep_rows<NT>(p, sample, hg, row0, k0, lane);
  const KeepBits<NT> keep = attn_keep_rows<NT>(p, sample, hg, row0, k0, lane);
  if (p.mask != nullptr) attn_save_keep_rows<NT>(p, keep, sample, hg, row0, k0, lane);
  return keep;
}
template <int NT>
__device__ __forceinline__ KeepBits<NT> bwd_keep_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                      int k0, int lane) {
  return p.mask != nullptr ? attn_saved_keep_rows<NT>(p, sample, hg, row0, k0, lane)
                           : attn_keep_rows<NT>(p, sample, hg, row0, k0, lane);
}
template <int NT>
__device__ __forceinline__ KeepBits<NT> bwd_keep_keys(const AttnParams& p, uint64_t sample, uint64_t hg, int key0,
                                                      int i0, int lane) {
  return p.mask != nullptr ? attn_saved_keep_keys<NT>(p, sample, hg, key0, i0, lane)
                           : attn_keep_keys<NT>(p, sample, hg, key0, i0, lane);
}

}  // namespace
}  // namespace trident::cuda
