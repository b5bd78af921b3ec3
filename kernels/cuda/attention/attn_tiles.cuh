// Tile helpers shared by the tensor-core kernels (mma.sync and wgmma): fragment packing,
// tile loads and products, a block's view of its head, the documents' tile ranges and the
// causal and document masks, and the 128-byte swizzled tiles that wgmma reads.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_ptx.cuh"

namespace trident::cuda {
namespace {

// Two floats -> one register of two 16-bit values, `lo` in the low half (lower index).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}

// Accumulator tiles c[2kk], c[2kk+1] (16 x 16 block kk, C layout) as the A operand of the
// next product: the C layout of two n-tiles is exactly the A layout of one k-step.
template <typename T, int NT>
__device__ __forceinline__ void c_to_a(const float (&c)[NT][4], uint32_t (&a)[NT / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// Zeroes accumulator fragments (N tiles of 4 floats).
template <int N>
__device__ __forceinline__ void zero_frags(float (&d)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) d[n][0] = d[n][1] = d[n][2] = d[n][3] = 0.f;
}

// Rows [row0, row0 + ROWS) of a [T, D] head view (row stride ld elements) into a shared
// tile [ROWS][DP + 8]; rows >= T and columns >= D are zero. D % 8 == 0 and 16-byte aligned
// rows are the caller's guarantee. Issues cp.async only (the caller commits and waits).
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void load_tile(T* smem, const T* g, int64_t ld, int row0, int T_, int D) {
  constexpr int LDS = DP + 8, CH = DP / 8;
  for (int idx = threadIdx.x; idx < ROWS * CH; idx += kThreads) {
    const int r = idx / CH, c = idx - r * CH;
    const bool valid = row0 + r < T_ && c * 8 < D;
    const T* src = valid ? g + static_cast<int64_t>(row0 + r) * ld + c * 8 : g;
    cp_async16(smem + r * LDS + c * 8, src, valid);
  }
}

// The two tile products of every kernel, for WM row tiles per warp: warp w owns rows
// [64 mt + 16 w, +16) of sA for mt < WM; each B fragment read from shared memory feeds WM
// tensor-core products (fewer ldmatrix per mma when WM > 1).
// mma_abt_wm: acc[mt] = (16 rows of sA) times the first 8 * NT rows of sB transposed, over
// k in [0, DP) (acc zeroed here). mma_ab_regs_wm: acc[mt][16 x DP] += a[mt] (16 x 16 KK, A
// layout, registers) times sB [16 KK rows][DP] (rows = k).
template <typename T, int DP, int NT, int WM>
__device__ __forceinline__ void mma_abt_wm(float (&acc)[WM][NT][4], const T* sA, const T* sB, int warp, int lane) {
  constexpr int LDS = DP + 8;
#pragma unroll
  for (int mt = 0; mt < WM; ++mt) zero_frags(acc[mt]);
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[WM][4];
#pragma unroll
    for (int mt = 0; mt < WM; ++mt)
      ldsm_x4(a[mt], sA + (mt * 64 + warp * 16 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, sB + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        mma16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}
template <typename T, int DP, int KK, int WM>
__device__ __forceinline__ void mma_ab_regs_wm(float (&acc)[WM][DP / 8][4], const uint32_t (&a)[WM][KK][4],
                                               const T* sB, int lane) {
  constexpr int LDS = DP + 8;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
    for (int dp = 0; dp < DP / 16; ++dp) {
      uint32_t b[4];
      ldsm_x4_trans(b, sB + (kk * 16 + (lane & 15)) * LDS + dp * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        mma16816<T>(acc[mt][2 * dp], a[mt][kk], b[0], b[1]);
        mma16816<T>(acc[mt][2 * dp + 1], a[mt][kk], b[2], b[3]);
      }
    }
  }
}

// The single-tile (WM = 1) forms the backward kernels use: rows [16 w, 16 w + 16).
template <typename T, int DP, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const T* sA, const T* sB, int warp, int lane) {
  mma_abt_wm<T, DP, NT, 1>(reinterpret_cast<float(&)[1][NT][4]>(acc), sA, sB, warp, lane);
}
template <typename T, int DP, int KK>
__device__ __forceinline__ void mma_ab_regs(float (&acc)[DP / 8][4], const uint32_t (&a)[KK][4], const T* sB,
                                            int lane) {
  mma_ab_regs_wm<T, DP, KK, 1>(reinterpret_cast<float(&)[1][DP / 8][4]>(acc),
                               reinterpret_cast<const uint32_t(&)[1][KK][4]>(a), sB, lane);
}

// Rows [row0, row0 + 16) x [0, D) of a warp's accumulator (C layout, times `mul`) to a
// [T, D] head view with row stride ld; rows >= T are not written.
template <typename T, int DP>
__device__ __forceinline__ void store_acc(T* g, int64_t ld, const float (&acc)[DP / 8][4], int row0, int T_, int D,
                                          int lane, float mul0, float mul1) {
  const int r0 = row0 + (lane >> 2), r1 = r0 + 8, c = (lane & 3) * 2;
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    if (nt * 8 >= D) break;
    if (r0 < T_)
      *reinterpret_cast<uint32_t*>(g + static_cast<int64_t>(r0) * ld + nt * 8 + c) =
          pack2<T>(acc[nt][0] * mul0, acc[nt][1] * mul0);
    if (r1 < T_)
      *reinterpret_cast<uint32_t*>(g + static_cast<int64_t>(r1) * ld + nt * 8 + c) =
          pack2<T>(acc[nt][2] * mul1, acc[nt][3] * mul1);
  }
}

// Block (b, h)'s part of the kernels' tensors: head h of sample b. Rows of q, k, v and of
// the gradient dq (dk, dv: dq + H D, + 2 H D) are p.qkv_tok elements apart, rows of dout
// p.out_tok; lse and delta hold the head's T rows (dout, dq and delta: the backward's, null
// in the forward). sample and hg key its dropout masks.
template <typename T>
struct HeadView {
  const T *q, *k, *v, *dout;
  T* dq;
  const float *lse, *delta;
  uint64_t sample, hg;
};
template <typename T>
__device__ __forceinline__ HeadView<T> head_view(const AttnParams& p, int b, int h) {
  const int64_t HD = static_cast<int64_t>(p.H) * p.D, head = static_cast<int64_t>(h) * p.D;
  const int64_t rows = (static_cast<int64_t>(b) * p.H + h) * p.T;
  HeadView<T> v;
  v.q = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * p.T * p.qkv_tok + head;
  v.k = v.q + HD;
  v.v = v.q + 2 * HD;
  v.dout = p.dout ? static_cast<const T*>(p.dout) + static_cast<int64_t>(b) * p.T * p.out_tok + head : nullptr;
  v.dq = p.dqkv ? static_cast<T*>(p.dqkv) + static_cast<int64_t>(b) * p.T * p.qkv_tok + head : nullptr;
  v.lse = p.lse + rows;
  v.delta = p.delta ? p.delta + rows : nullptr;
  v.sample = p.drop.sample_base + static_cast<uint64_t>(b);
  v.hg = static_cast<uint64_t>(p.head_offset + h);
  return v;
}

// Sample b's first keys (AttnParams::doc), or null. Read from the kernel's parameters where
// it is used, so that no register holds the pointer through the tile loops (attention without
// documents keeps the registers it had without them).
__device__ __forceinline__ const int32_t* sample_docs(const AttnParams& p, int b) {
  return p.doc != nullptr ? p.doc + static_cast<int64_t>(b) * p.T : nullptr;
}

// Whole tiles of other documents are skipped: a block of rows from q0 on starts at the key
// tile (BK keys) of row q0's document start, as no later row of a sample sees an earlier key
// (starts do not decrease along it); without documents, tile 0. (A block that straddles a
// document boundary still walks the tiles of its first row's document for all its rows:
// FlashAttention's varlen kernels, whose blocks never straddle, skip more.) The start is
// clamped to [0, q0], so that starts breaking the contract cannot send a load before the
// tensor or skip the diagonal tile.
__device__ __forceinline__ int first_key_tile(const AttnParams& p, int b, int q0, int BK) {
  const int32_t* doc = sample_docs(p, b);
  q0 = min(q0, p.T - 1);
  return doc != nullptr ? min(max(doc[q0], 0), q0) / BK : 0;
}
// ... and a block of keys up to last_key ends at the query tile (BQ queries) holding the last
// query of last_key's document, p.doc_end - 1 (ends do not decrease along the keys; p.doc_end
// is set with documents wherever the tensor-core dK/dV kernels run); without documents, T.
__device__ __forceinline__ int query_tiles_end(const AttnParams& p, int b, int last_key, int BQ) {
  const int end = p.doc_end != nullptr ? p.doc_end[static_cast<int64_t>(b) * p.T + min(last_key, p.T - 1)] : p.T;
  return (end + BQ - 1) / BQ;
}

// Hides the keys a warp's 16 query rows [wrow, wrow + 16) of sample b do not see in s, their
// raw scores against keys [k0, k0 + 8 NT) in the C layout of m16n8 tiles: keys past the row
// (causal), past T, and with documents before the row's document (its first key `first`:
// hidden when col - first > row - first as unsigned, one test for both ends). Warp-uniform
// test first: only tiles on the diagonal, past T or (documents being contiguous) starting
// before the document of the warp's last row hide keys. Hidden scores become -inf (scale > 0:
// raw and scaled scores have the same order).
template <int NT>
__device__ __forceinline__ void mask_row_tile(const AttnParams& p, float (&s)[NT][4], int b, int wrow, int k0,
                                              int lane) {
  constexpr int BK = 8 * NT;
  const int T_ = p.T;
  const int32_t* doc = sample_docs(p, b);
  const bool before_doc = doc != nullptr && k0 < doc[min(wrow + 15, T_ - 1)];
  if (k0 + BK - 1 > wrow || k0 + BK > T_ || before_doc) {
    const int tq = lane & 3, row0 = wrow + (lane >> 2), row1 = row0 + 8;
    const int first0 = before_doc ? doc[min(row0, T_ - 1)] : 0;
    const int first1 = before_doc ? doc[min(row1, T_ - 1)] : 0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = k0 + nt * 8 + tq * 2 + (e & 1), row = e < 2 ? row0 : row1, first = e < 2 ? first0 : first1;
        if (static_cast<unsigned>(col - first) > static_cast<unsigned>(row - first) || col >= T_)
          s[nt][e] = -INFINITY;
      }
  }
}

// The same for the transposed tiles of the dK/dV pass: st holds the scores of a warp's 16
// keys [wkey, wkey + 16) (rows) against queries [i0, i0 + 8 NT) (columns). With documents
// a key is hidden from the queries past its document's end (p.doc_end), which the tile's
// queries pass only when its last one passes the end of the warp's first key's document. The
// documents' test is a second pass holding one register (both keys' cuts in 16-bit halves):
// the D 128 dK/dV kernel has none to spare.
template <int NT>
__device__ __forceinline__ void mask_key_tile(const AttnParams& p, float (&st)[NT][4], int b, int wkey, int i0,
                                              int lane) {
  constexpr int BQ = 8 * NT;
  const int T_ = p.T, tq = lane & 3, key0 = wkey + (lane >> 2);
  if (wkey + 15 > i0 || i0 + BQ > T_) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + nt * 8 + tq * 2 + (e & 1), j = e < 2 ? key0 : key0 + 8;
        if (i < j || i >= T_) st[nt][e] = -INFINITY;
      }
  }
  if (p.doc_end == nullptr) return;
  const int32_t* end = p.doc_end + static_cast<int64_t>(b) * T_;
  if (i0 + BQ - 1 < end[min(wkey, T_ - 1)]) return;  // warp-uniform: ends do not decrease along the keys
  // Query i0 + c sees the thread's key only if c < its cut (clamped to [0, BQ]).
  const uint32_t cuts = static_cast<uint32_t>(min(max(end[min(key0, T_ - 1)] - i0, 0), BQ)) |
                        static_cast<uint32_t>(min(max(end[min(key0 + 8, T_ - 1)] - i0, 0), BQ)) << 16;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = nt * 8 + tq * 2 + (e & 1);
      if (c >= static_cast<int>(e < 2 ? cuts & 0xffffu : cuts >> 16)) st[nt][e] = -INFINITY;
    }
}

// f(std::true_type) with dropout, else f(std::false_type): the backward's elementwise steps
// branch once a tile on p.dropout (not once per unrolled 8-key step: see dkdv_tile_p_ds).
template <typename F>
__device__ __forceinline__ void branch_on_dropout(bool dropout, F&& f) {
  if (dropout)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// ---- Swizzled tiles for warpgroup MMA (sm_90a) ----------------------------------------------
// wgmma reads its shared-memory operands in the canonical layouts of the PTX ISA. Here every
// tile (Q, K, V) is stored as DP / 64 column blocks of [ROWS][64] 16-bit values, rows of 128
// bytes, the 16-byte chunk c of row r at chunk position c ^ (r % 8) (the 128-byte swizzle,
// which spreads the 8 rows of a core matrix over all shared-memory banks). The swizzle is
// a function of address bits 4-9, so each block starts on a 1024-byte boundary.
// - Q and K are K-major operands (the head dim is the reduction): a k16 step is 32 bytes
//   along a row, rows 128 bytes apart, 8-row groups 1024 bytes apart (SBO).
// - V is an MN-major operand of P V (rows = keys = the reduction, the head dim contiguous):
//   8-key groups 1024 bytes apart (SBO), 64-column blocks ROWS x 128 bytes apart (LBO).
constexpr uint32_t kSwizzleSpan = 1024;

// Rows [row0, row0 + ROWS) of a [T, D] head view into a swizzled tile (layout above); rows
// >= T and columns >= D are zero. Issues cp.async only (the caller commits and waits).
// Loaded by THREADS threads, of which the caller is thread `tid` (by default the block's
// 128 threads; a two-warpgroup block loads shared tiles with all 256 and a warpgroup's
// own tiles with its 128).
template <typename T, int ROWS, int DP, int THREADS = kThreads>
__device__ __forceinline__ void load_tile_sw128(T* tile, const T* g, int64_t ld, int row0, int T_, int D,
                                                int tid) {
  constexpr int CH = DP / 8;
  for (int idx = tid; idx < ROWS * CH; idx += THREADS) {
    const int r = idx / CH, c = idx - r * CH;
    const bool valid = row0 + r < T_ && c * 8 < D;
    const T* src = valid ? g + static_cast<int64_t>(row0 + r) * ld + c * 8 : g;
    cp_async16(tile + (c >> 3) * ROWS * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3), src, valid);
  }
}
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void load_tile_sw128(T* tile, const T* g, int64_t ld, int row0, int T_, int D) {
  load_tile_sw128<T, ROWS, DP>(tile, g, ld, row0, T_, D, static_cast<int>(threadIdx.x));
}

// ---- The warp-specialized kernels (sm_90a): TMA loads into the same tiles ------------------
// A block: one consumer warpgroup and one producer warp (of which one thread issues the TMA
// loads).
constexpr int kWsThreads = kThreads + 32;

// Rows [row0, row0 + ROWS) of head slot `slot` of sample b of a heads map (AttnParams'
// qkv_map or dout_map: heads_tma_view) into a swizzled tile (load_tile_sw128's layout) by TMA:
// DP / 64 column blocks of ROWS / 64 boxes, their bytes counted on bar. Issued by one thread.
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void tma_load_tile(T* tile, const CUtensorMap* map, int slot, int row0, int b,
                                              uint64_t* bar) {
  static_assert(ROWS % kTmaBoxRows == 0 && DP % kTmaBoxCols == 0, "whole boxes");
#pragma unroll
  for (int cb = 0; cb < DP / kTmaBoxCols; ++cb)
#pragma unroll
    for (int rb = 0; rb < ROWS / kTmaBoxRows; ++rb)
      tma_load_box(tile + (cb * ROWS + rb * kTmaBoxRows) * kTmaBoxCols, map, cb * kTmaBoxCols, slot,
                   row0 + rb * kTmaBoxRows, b, bar);
}

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading and
// stride byte offsets (all in 16-byte units, 14 bits each), layout type 1 in bits 62-63.
__device__ __forceinline__ uint64_t sw128_desc(const void* start, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr(start) >> 4) & 0x3FFF) |
         static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
// k16 step ks of a K-major tile of ROWS rows (the leading offset is unused: a step stays
// inside one 128-byte row). The step's offset is added to the tile's descriptor (in 16-byte
// units; the start field cannot carry: shared addresses stay below 2^18), so that unrolled
// steps share one descriptor computation.
template <typename T, int ROWS>
__device__ __forceinline__ uint64_t kmajor_desc(const T* tile, int ks) {
  return sw128_desc(tile, 16, 8 * 128) + static_cast<uint64_t>(((ks >> 2) * ROWS * 128 + (ks & 3) * 32) >> 4);
}
// k16 step kk (keys 16 kk.., 2048 bytes a step) of an MN-major tile of ROWS rows.
template <typename T, int ROWS>
__device__ __forceinline__ uint64_t mnmajor_desc(const T* tile, int kk) {
  return sw128_desc(tile, ROWS * 128, 8 * 128) + static_cast<uint64_t>(kk * 16 * 128 >> 4);
}

// acc (64 x N) = A B^T over the head dim: DP / 16 k16 steps of wgmma from two K-major tiles,
// A's 64 rows at sA (in a tile of A_ROWS rows), B's N rows at sB. Issued only: the caller
// fences before and commits after.
template <typename T, int DP, int A_ROWS, int N>
__device__ __forceinline__ void wgmma_abt(float (&acc)[N / 8][4], const T* sA, const T* sB) {
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks)
    wgmma_ss<T, N>(acc, kmajor_desc<T, A_ROWS>(sA, ks), kmajor_desc<T, N>(sB, ks), ks > 0);
}
// The backward's score pairs: acc0 = A0 B0^T and acc1 = A1 B1^T over the head dim (A: 64
// rows of K-major tiles of 64 rows; B: N rows at sB0 / sB1 in K-major tiles of B_ROWS rows),
// the two products of each k16 step issued side by side. Issued only, as wgmma_abt.
template <typename T, int DP, int N, int B_ROWS = N>
__device__ __forceinline__ void wgmma_abt_pair(float (&acc0)[N / 8][4], float (&acc1)[N / 8][4], const T* sA0,
                                               const T* sB0, const T* sA1, const T* sB1) {
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    wgmma_ss<T, N>(acc0, kmajor_desc<T, 64>(sA0, ks), kmajor_desc<T, B_ROWS>(sB0, ks), ks > 0);
    wgmma_ss<T, N>(acc1, kmajor_desc<T, 64>(sA1, ks), kmajor_desc<T, B_ROWS>(sB1, ks), ks > 0);
  }
}
// acc (64 x DP) += A B: KK k16 steps, A from registers (the C-to-A packed fragments), B
// MN-major: KK * 16 rows (rows = k) at sB in a tile of B_ROWS rows (a part of a taller tile:
// its 64-column blocks lie B_ROWS rows apart). Issued only, as wgmma_abt.
template <typename T, int DP, int KK, int B_ROWS = KK * 16>
__device__ __forceinline__ void wgmma_ab_regs(float (&acc)[DP / 8][4], const uint32_t (&a)[KK][4], const T* sB) {
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) wgmma_rs<T, DP>(acc, a[kk], mnmajor_desc<T, B_ROWS>(sB, kk));
}

// The swizzled tiles of a kernel, from the first 1024-byte boundary of dynamic shared memory.
template <typename T>
__device__ __forceinline__ T* swizzle_aligned(unsigned char* raw) {
  return reinterpret_cast<T*>(raw + ((kSwizzleSpan - (smem_addr(raw) & (kSwizzleSpan - 1))) & (kSwizzleSpan - 1)));
}

}  // namespace
}  // namespace trident::cuda
