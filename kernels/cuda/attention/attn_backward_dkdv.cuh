// The backward's dK/dV pass on tensor cores (pass 2): one block a key tile, looping over
// the query tiles that see it; the mma.sync kernel and the wgmma kernel (sm_90a), each
// with the opt-in atomic dQ (dS K added to an f32 dQ by float atomics, pass 3 not run).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_tiles.cuh"

namespace trident::cuda {
namespace {

// One query tile of the dK/dV pass for a warp's 16 keys [wkey, wkey + 16) (keys key0 = wkey
// + lane / 4 and key0 + 8): st holds S^T = K Q^T, dpt holds dP^T = V dO^T for queries
// [i0, i0 + 8 NT) in the C layout (rows = keys); sL, sDl: the queries' lse and delta (any
// finite value or +inf for queries >= T); keep: the dropout bits (bwd_keep_keys). Leaves
// (P z)^T in st and dS^T = (P (z dP - delta))^T in dpt (0 for hidden pairs). Shared by the
// mma.sync and wgmma dK/dV kernels.
template <typename T, int NT>
__device__ __forceinline__ void dkdv_tile_p_ds(const AttnParams& p, float (&st)[NT][4], float (&dpt)[NT][4], int wkey,
                                               int i0, int lane, const float* sL, const float* sDl,
                                               const KeepBits<NT>& keep, int b) {
  const int tq = lane & 3;
  mask_key_tile<NT>(p, st, b, wkey, i0, lane);  // hidden pairs get score -inf, P 0
  // One branch a tile on the dropout. Its draws inlined into every 8-query step, each behind
  // its own branch, made the executed code of a tile sparse in a large loop: ncu counted ~2
  // cycles per issued instruction of the D 128 wgmma dK/dV kernel stalled on instruction
  // fetch ("no instruction", 0.2 in the dQ kernel). The draws now run before this step.
  branch_on_dropout(p.dropout, [&](auto with_dropout) {
    constexpr bool kDrop = decltype(with_dropout)::value;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int q = nt * 8 + tq * 2;  // the thread's first query in the n8 tile
      const float l2[2] = {sL[q] * kLog2e, sL[q + 1] * kLog2e};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pe = exp2_ftz(fmaf(st[nt][e], p.scale_log2, -l2[e & 1]));  // 0 where hidden
        const float z = kDrop ? keep.factor(p, nt, e) : 1.f;
        const float ds = pe * (z * dpt[nt][e] - sDl[q + (e & 1)]);
        pe *= z;
        st[nt][e] = pe;  // P z
        dpt[nt][e] = ds;
      }
    }
  });
}

template <int DP, int BQ, int NB, bool DQ>
constexpr int dkdv_smem_bytes() {
  return (2 * 64 + NB * 2 * BQ) * (DP + 8) * 2 + NB * 2 * BQ * 4 + (DQ ? 64 * (BQ + 8) * 2 : 0);
}

// Adds a warp's 16 x 8NC accumulator tile (the C layout: rows row0 + g and + 8, columns
// col0 + 8 nt + 2q and + 1) to the f32 rows [T, D] by float-pair atomics, skipping rows >= T
// and columns >= D.
template <int NC>
__device__ __forceinline__ void add_acc_atomic(float* rows, const float (&acc)[NC][4], int row0, int col0, int T_,
                                               int D, int lane) {
  const int r0 = row0 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int nt = 0; nt < NC; ++nt) {
    const int c = col0 + nt * 8 + (lane & 3) * 2;
    if (c >= D) continue;
    if (r0 < T_) atomic_add_pair(rows + static_cast<int64_t>(r0) * D + c, acc[nt][0], acc[nt][1]);
    if (r1 < T_) atomic_add_pair(rows + static_cast<int64_t>(r1) * D + c, acc[nt][2], acc[nt][3]);
  }
}

// The atomic-dQ backward's share of one query tile: dQ[i0 + r][c] += sum over the block's 64
// keys of dS[r][key] K[key][c], from dS^T in sdS ([64 keys][BQ + 8]) and K in sK. The 4
// warps split dQ's columns (D 32: columns and rows) and add their products to dq_rows (the
// head's [T, D] rows of p.dq_acc) by float atomics: the order of the additions, and so the
// last bits of dQ, vary from run to run.
template <typename T, int DP, int BQ>
__device__ __forceinline__ void dq_tile_atomic(const T* sdS, const T* sK, float* dq_rows, int i0, int T_, int D,
                                               int warp, int lane) {
  constexpr int LDS = DP + 8, LDSS = BQ + 8;
  constexpr int WC = DP / 16 < 4 ? DP / 16 : 4, WR = 4 / WC;  // warps across columns x rows
  constexpr int CW = DP / WC, RW = BQ / WR, MT = RW / 16, NC = CW / 8;
  static_assert(RW % 16 == 0 && CW % 16 == 0, "whole 16 x 16 tiles per warp");
  const int col0 = (warp % WC) * CW, row0 = (warp / WC) * RW;
  float acc[MT][NC][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) zero_frags(acc[mt]);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {  // 64 keys, 16 per step
    uint32_t a[MT][4];  // dS rows (queries) from dS^T: transposed 8 x 8 loads
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldsm_x4_trans(a[mt], sdS + (ks * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * LDSS + row0 + mt * 16 +
                               ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int np = 0; np < NC / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b, sK + (ks * 16 + (lane & 15)) * LDS + col0 + np * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) add_acc_atomic(dq_rows, acc[mt], i0 + row0 + mt * 16, col0, T_, D, lane);
}

// The dK/dV kernels' block: its head (index into B*H) and its key tile. Their grid is (B*H,
// key tiles): in launch order (blockIdx.x fastest) every head's first key tile comes first;
// those see the most queries, so the longest blocks start first. With atomic dQ that order
// would put the T/64 blocks that add into one head's f32 dQ rows a wave apart, and where
// dq_acc outgrows the L2 (134 MB at B16 T1024 H32 D64, against 50-60 MB) each addition would
// miss it: a DRAM read and write of a 32-byte sector. So atomic-dQ blocks go by groups of
// 2^g heads whose dQ rows fill at most kAtomicDqGroupBytes, within a group key tile by key
// tile (the longest first), head by head: grid (key tiles << g, ceil(B*H / 2^g)), and a head's
// blocks run side by side, their additions meeting in L2. (Key tiles first for all heads
// would also do that, but its last heads' longest blocks start in the last wave: a list
// schedule of the bench's 8192 blocks on 264 slots ends 10 tile-times past the ideal 264,
// the groups 2 past.) Blocks past B*H in the last group exit at once.
constexpr int64_t kAtomicDqGroupBytes = 4 << 20;
// g: log2 of the heads a group takes: the most whose f32 dQ rows [T, D] fit
// kAtomicDqGroupBytes (at least one), up to 2^16 and to `heads` rounded up to a power of two.
__host__ __device__ inline int atomic_dq_group_log2(int heads, int T, int D) {
  const int64_t head_bytes = static_cast<int64_t>(T) * D * static_cast<int64_t>(sizeof(float));
  int g = 0;
  while (g < 16 && (1 << g) < heads && (head_bytes << (g + 1)) <= kAtomicDqGroupBytes) ++g;
  return g;
}
struct KeyBlock {
  int bh, kt;
};
// Block (bx, by) of the atomic-dQ grid.
__host__ __device__ inline KeyBlock atomic_dq_block(unsigned bx, unsigned by, int g) {
  return {static_cast<int>((by << g) + (bx & ((1u << g) - 1))), static_cast<int>(bx >> g)};
}
// The block's head and first key (key tiles of `rows`). The unsigned product is the one that
// ptxas saw before the atomic-dQ grid: a signed one cost the D 128 wgmma kernel (255
// registers) an 8-byte spill.
struct BlockKeys {
  int bh, k0;
};
template <bool DQ>
__device__ __forceinline__ BlockKeys dkdv_block(const AttnParams& p, unsigned rows) {
  if constexpr (DQ) {
    const KeyBlock k = atomic_dq_block(blockIdx.x, blockIdx.y, atomic_dq_group_log2(p.B * p.H, p.T, p.D));
    return {k.bh, static_cast<int>(static_cast<unsigned>(k.kt) * rows)};
  }
  return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y * rows)};
}

// Backward pass 2: dK and dV. Grid (B*H, ceil(T/64)), with DQ in head groups (dkdv_block);
// block: 64 keys (4 warps x 16), query
// tiles of BQ rows from the diagonal to the end. NB = 1: one Q/dO buffer, each tile loaded
// and waited for before its products. NB = 2: two buffers, the next tile's Q and dO (and
// its lse and delta, through registers) load while the current one is used; more shared
// memory and a few more registers (TRIDENT_ATTN_BWD_DB=1 selects it for D > 32 while it is
// measured).
// Everything is computed transposed (keys are rows), so the accumulators of S^T and dP^T
// are directly the A operands of
//   dV += (P z)^T dO,   dK += dS^T Q;   dK * scale written at the end.
// DQ (TRIDENT_ATTN_BWD_ATOMIC=1, while it is measured): the block also adds dS K to dQ
// (dq_tile_atomic, float atomics into p.dq_acc) and pass 3 is not run: 5 tile products
// instead of 7, as flash-attention-2 does, but dQ is no longer bitwise reproducible.
template <typename T, int DP, int BQ, int NB, bool DQ>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_mma_kernel(const AttnParams p) {
  constexpr int BKV = 64, LDS = DP + 8, NT = BQ / 8, LDSS = BQ + 8;
  constexpr int kTileElems = 2 * BQ * LDS;  // Q and dO of one query tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BKV * LDS;
  T* sQ0 = sV + BKV * LDS;  // buffer n: Q at sQ0 + n * kTileElems, dO BQ rows after it
  float* sL0 = reinterpret_cast<float*>(sQ0 + NB * kTileElems);  // buffer n: lse, then delta
  T* sdS = reinterpret_cast<T*>(sL0 + NB * 2 * BQ);  // DQ: dS^T of the tile, [64 keys][BQ + 8]

  const int T_ = p.T, D = p.D;
  const BlockKeys kb = dkdv_block<DQ>(p, BKV);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int k0 = kb.k0;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  const float *lse = hv.lse, *delta = hv.delta;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int wkey = k0 + warp * 16;
  const uint64_t sample = hv.sample, hg = hv.hg;

  load_tile<T, BKV, DP>(sK, gK, p.qkv_tok, k0, T_, D);
  load_tile<T, BKV, DP>(sV, gV, p.qkv_tok, k0, T_, D);
  cp_async_commit();

  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);

  // Query tile qt into buffer n: Q and dO by cp.async (the caller commits), lse and delta
  // of its rows returned for the caller to store into sL0 (after the buffer is free).
  auto load_query_tile = [&](int qt, int n, float& l, float& d) {
    T* q = sQ0 + n * kTileElems;
    load_tile<T, BQ, DP>(q, gQ, p.qkv_tok, qt * BQ, T_, D);
    load_tile<T, BQ, DP>(q + BQ * LDS, gdO, p.out_tok, qt * BQ, T_, D);
    const int i = qt * BQ + static_cast<int>(threadIdx.x);
    const bool row = threadIdx.x < BQ && i < T_;
    l = row ? lse[i] : INFINITY;
    d = row ? delta[i] : 0.f;
  };
  auto store_stats = [&](int n, float l, float d) {
    if (threadIdx.x < BQ) {
      sL0[n * 2 * BQ + threadIdx.x] = l;
      sL0[n * 2 * BQ + BQ + threadIdx.x] = d;
    }
  };

  const int qt_first = k0 / BQ, nqt = query_tiles_end(p, b, k0 + BKV - 1, BQ);
  if constexpr (NB == 2) {
    float l, d;
    load_query_tile(qt_first, 0, l, d);
    cp_async_commit();
    store_stats(0, l, d);
  }
  for (int qt = qt_first; qt < nqt; ++qt) {
    const int i0 = qt * BQ;
    const int n = NB == 2 ? (qt - qt_first) & 1 : 0;
    float next_l = INFINITY, next_d = 0.f;  // the next tile's stats (NB = 2)
    if constexpr (NB == 1) {
      __syncthreads();  // every warp is done with the previous Q, dO, lse, delta
      float l, d;
      load_query_tile(qt, 0, l, d);
      cp_async_commit();
      store_stats(0, l, d);
      cp_async_wait<0>();
    } else {
      // The other buffer was released by the barrier that ended the previous tile.
      if (qt + 1 < nqt) {
        load_query_tile(qt + 1, n ^ 1, next_l, next_d);
        cp_async_commit();
        cp_async_wait<1>();  // this tile has landed (the next may be in flight)
      } else {
        cp_async_wait<0>();
      }
    }
    __syncthreads();
    const T* sQ = sQ0 + n * kTileElems;
    const T* sO = sQ + BQ * LDS;  // dO
    const float* sL = sL0 + n * 2 * BQ;
    const float* sDl = sL + BQ;
    if (i0 + BQ - 1 >= wkey) {  // warp-uniform: skip a tile whose queries all precede the keys
      float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
      KeepBits<NT> keep;
      if (p.dropout) keep = bwd_keep_keys<NT>(p, sample, hg, wkey + (lane >> 2), i0, lane);
      mma_abt<T, DP, NT>(st, sK, sQ, warp, lane);
      mma_abt<T, DP, NT>(dpt, sV, sO, warp, lane);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, sL, sDl, keep, b);
      uint32_t pa[NT / 2][4];
      c_to_a<T, NT>(st, pa);
      mma_ab_regs<T, DP, NT / 2>(dv, pa, sO, lane);
      c_to_a<T, NT>(dpt, pa);
      if constexpr (DQ) {  // dS^T rows key0, key1 (pa's A layout: columns 16 kk + 2 tq, + 8)
        T* r0 = sdS + (warp * 16 + (lane >> 2)) * LDSS + tq * 2;
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
          *reinterpret_cast<uint32_t*>(r0 + kk * 16) = pa[kk][0];
          *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + kk * 16) = pa[kk][1];
          *reinterpret_cast<uint32_t*>(r0 + kk * 16 + 8) = pa[kk][2];
          *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + kk * 16 + 8) = pa[kk][3];
        }
      }
      mma_ab_regs<T, DP, NT / 2>(dk, pa, sQ, lane);
    } else if constexpr (DQ) {  // no visible pair: the warp's dS^T rows are zero
      T* r0 = sdS + (warp * 16 + (lane >> 2)) * LDSS + tq * 2;
#pragma unroll
      for (int c = 0; c < BQ; c += 8) {
        *reinterpret_cast<uint32_t*>(r0 + c) = 0u;
        *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + c) = 0u;
      }
    }
    if constexpr (DQ) {
      __syncthreads();  // every warp's dS^T rows are in sdS
      dq_tile_atomic<T, DP, BQ>(sdS, sK, p.dq_acc + static_cast<int64_t>(bh) * T_ * D, i0, T_, D, warp, lane);
    }
    if constexpr (NB == 2) {
      if (qt + 1 < nqt) store_stats(n ^ 1, next_l, next_d);
      __syncthreads();  // every warp is done with buffer n; the next stats are visible
    }
  }

  T* gdK = hv.dq + HD;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, T_, D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + HD, p.qkv_tok, dv, wkey, T_, D, lane, 1.f, 1.f);
}

// ---- dK/dV with warpgroup MMA (sm_90a) ----------------------------------------------------
// The mma.sync pass with every product a wgmma on the swizzled tiles of the wgmma forward and
// the same per-warp elementwise code (dkdv_tile_p_ds); the streamed query tiles are
// double-buffered.

template <int DP, int BQ, bool DQ = false, int WG = 1>
constexpr int wgmma_dkdv_smem_bytes() {
  // K, V (a 64-key tile each per warpgroup); two buffers of Q and dO; DQ: the dS^T tiles
  // [64 keys][BQ queries], one per warpgroup, and with two warpgroups the halves of dQ they
  // exchange (exchange_add_dq); alignment; two buffers of lse and delta
  return (WG * 2 * 64 + 4 * BQ) * DP * 2 + (DQ ? WG * 64 * BQ * 2 : 0) +
         (DQ && WG == 2 ? 2 * 64 * DP / 2 * 4 : 0) + kSwizzleSpan + 2 * 2 * BQ * 4;
}
// Blocks an SM that ptxas must leave registers for: D 64 with 32-query tiles fits 3 (at most
// 168 registers: the S^T and dP^T tiles are half those of 64-query tiles), as the mma.sync
// kernel of that shape does; the others take what they need (2 blocks an SM).
template <int DP, int BQ>
constexpr int wgmma_dkdv_min_blocks() {
  return DP == 64 && BQ == 32 ? 3 : 1;
}

// The wgmma dK/dV kernels' two product groups of a query tile (64 keys; BQ queries): S^T = K
// Q^T and dP^T = V dO^T, then dV += (P z)^T dO and dK += dS^T Q (A fragments pa and da, dO and
// Q read MN-major from the same tiles), the two products of each step issued side by side.
// Issued only: the caller fences before and commits after.
template <typename T, int DP, int BQ>
__device__ __forceinline__ void dkdv_issue_scores(float (&st)[BQ / 8][4], float (&dpt)[BQ / 8][4], const T* sK,
                                                  const T* sV, const T* sQ, const T* sO) {
  wgmma_abt_pair<T, DP, BQ>(st, dpt, sK, sQ, sV, sO);
}
template <typename T, int DP, int BQ>
__device__ __forceinline__ void dkdv_issue_grads(float (&dv)[DP / 8][4], float (&dk)[DP / 8][4],
                                                 const uint32_t (&pa)[BQ / 16][4], const uint32_t (&da)[BQ / 16][4],
                                                 const T* sQ, const T* sO) {
#pragma unroll
  for (int kk = 0; kk < BQ / 16; ++kk) {
    wgmma_rs<T, DP>(dv, pa[kk], mnmajor_desc<T, BQ>(sO, kk));
    wgmma_rs<T, DP>(dk, da[kk], mnmajor_desc<T, BQ>(sQ, kk));
  }
}

// dQ (64 queries x DP) = dS K over the block's 64 keys: dS from the dS^T tile sdS and K from
// sK, both read MN-major (store_frags_sw128's layout). Issued and waited for (with every
// product issued before it): dq is ready on return.
template <typename T, int DP>
__device__ __forceinline__ void dkdv_dq_product(float (&dq)[DP / 8][4], const T* sdS, const T* sK) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 64 / 16; ++kk)
    wgmma_ss_mn<T, DP>(dq, mnmajor_desc<T, 64>(sdS, kk), mnmajor_desc<T, 64>(sK, kk), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dq);
}

// The dV and dK accumulators and their A fragments pinned around a group of products (see
// fence_acc).
template <int NC, int KK>
__device__ __forceinline__ void fence_grads(float (&dv)[NC][4], float (&dk)[NC][4], uint32_t (&pa)[KK][4],
                                            uint32_t (&da)[KK][4]) {
  fence_acc(dv);
  fence_acc(dk);
  fence_frag(pa);
  fence_frag(da);
}

// dS^T, the A fragments of dK += dS^T Q (warp w: keys 16w + g and + 8; k: 16 queries a
// step), into the swizzled tile [64 keys][64 queries] (the layout of load_tile_sw128), from
// which dQ = dS K reads dS MN-major. Each 32-bit pair of queries stays in one 16-byte chunk;
// the swizzle puts the 8 rows of a store on 8 different chunks: no bank conflicts.
template <typename T, int KK>
__device__ __forceinline__ void store_frags_sw128(T* tile, const uint32_t (&a)[KK][4], int warp, int lane) {
  static_assert(KK == 4, "64 queries: one 64-column block");
  const int r0 = warp * 16 + (lane >> 2), c = (lane & 3) * 2, sw = r0 & 7;  // rows r0 and r0 + 8 share r & 7
#pragma unroll
  for (int kk = 0; kk < KK; ++kk)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // A registers 2h (row g) and 2h + 1 (row g + 8): queries 16 kk + 8 h + c
      T* chunk = tile + r0 * 64 + (((2 * kk + h) ^ sw) << 3) + c;
      *reinterpret_cast<uint32_t*>(chunk) = a[kk][2 * h];
      *reinterpret_cast<uint32_t*>(chunk + 8 * 64) = a[kk][2 * h + 1];
    }
}

// With two warpgroups (WG 2), both have computed dQ partials for the same 64 query rows,
// each over its own 64 keys, in the same C layout (a thread and its twin, 128 threads on,
// hold the same positions). Warpgroup w keeps columns [w DP/2, (w + 1) DP/2): it hands the
// other half to its twin through shared memory (sX: [2][DP/16][128] float4, conflict-free),
// adds the half it receives and adds the sum to dQ by float atomics. Half the atomics of two
// one-warpgroup blocks, for DP/16 float4 shared stores and loads a thread and one barrier.
template <int DP>
__device__ __forceinline__ void exchange_add_dq(const float (&dq)[DP / 8][4], float4* sX, float* dq_rows, int row0,
                                                int T_, int D, int lane) {
  constexpr int H = DP / 16;  // n8 tiles a half
  const int t = threadIdx.x & (kThreads - 1), wg = threadIdx.x >> 7;
  // Each choice between two registers is a select of values with compile-time indices (a
  // runtime index into dq, or a reference chosen at run time, would put dq in local memory).
  const bool first = wg == 0;
#pragma unroll
  for (int j = 0; j < H; ++j) {
    float4 give;
    give.x = first ? dq[H + j][0] : dq[j][0];
    give.y = first ? dq[H + j][1] : dq[j][1];
    give.z = first ? dq[H + j][2] : dq[j][2];
    give.w = first ? dq[H + j][3] : dq[j][3];
    sX[(wg * H + j) * kThreads + t] = give;
  }
  __syncthreads();
  float sum[H][4];
#pragma unroll
  for (int j = 0; j < H; ++j) {
    const float4 v = sX[((wg ^ 1) * H + j) * kThreads + t];
    sum[j][0] = (first ? dq[j][0] : dq[H + j][0]) + v.x;
    sum[j][1] = (first ? dq[j][1] : dq[H + j][1]) + v.y;
    sum[j][2] = (first ? dq[j][2] : dq[H + j][2]) + v.z;
    sum[j][3] = (first ? dq[j][3] : dq[H + j][3]) + v.w;
  }
  add_acc_atomic<H>(dq_rows, sum, row0, wg * DP / 2, T_, D, lane);
}

// dK and dV on sm_90a. Grid (B*H, ceil(T/(64 WG))), with DQ in head groups (dkdv_block);
// block: WG warpgroups, 64 keys each (warp w of warpgroup g: keys 64g + 16w..+15), one K
// and V tile each; query tiles of BQ rows from the diagonal to the end, shared by the
// warpgroups (WG 2 loads each Q and dO tile once for 128 keys, as FlashAttention-2's and
// -3's 128-key backward blocks do), double-buffered with their lse and delta. Per tile,
// transposed (keys are rows): S^T = K Q^T and dP^T = V dO^T (one wgmma group), P z and dS in
// registers, then dV += (P z)^T dO and dK += dS^T Q (dO and Q read MN-major from the same
// tiles). dK * scale at the end. BQ: 64, or 32 (fewer registers).
// DQ (D 64, BQ 64; TRIDENT_ATTN_BWD_ATOMIC=1 with TRIDENT_ATTN_BWD_WGMMA=1): the block also adds
// this tile's dS K to dQ, the flash-attention-2 way, and the dQ pass does not run. dS^T goes
// to shared memory before dV and dK are issued; dQ (queries are rows) = dS K reads it and K both
// MN-major, into the registers S^T and dP^T held; float atomics add it to p.dq_acc (WG 2:
// the two warpgroups' sums, exchange_add_dq).
// WG 2 (TRIDENT_ATTN_BWD_WG=2, while it is measured; D 64): two warpgroups a block, 128 keys.
template <typename T, int DP, int BQ, bool DQ = false, int WG = 1>
__global__ void __launch_bounds__(kThreads * WG, WG == 1 ? wgmma_dkdv_min_blocks<DP, BQ>() : 1)
    attn_bwd_dkdv_wgmma_kernel(const AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(BQ == 32 || BQ == 64, "wgmma N of S^T and dP^T; k16 steps of dV and dK");
  static_assert(!DQ || (BQ == 64 && DP == 64), "dQ = dS K: wgmma M is 64 queries; D 128 has no registers for it");
  static_assert(WG == 1 || (WG == 2 && DP == 64), "two warpgroups: D 64 (D 128's kernel spilled at 255 registers)");
  constexpr int BKV = 64, NT = BQ / 8, kBlockThreads = kThreads * WG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = swizzle_aligned<T>(smem_raw);  // WG K tiles, then WG V tiles
  T* sV = sK + WG * BKV * DP;
  T* sQ0 = sV + WG * BKV * DP;  // two Q buffers, then two dO buffers
  T* sO0 = sQ0 + 2 * BQ * DP;
  T* sdS = sO0 + 2 * BQ * DP;  // DQ: WG tiles dS^T [64 keys][64 queries] (1024-byte aligned: whole tiles before)
  float4* sX = reinterpret_cast<float4*>(sdS + (DQ ? WG * BKV * BQ : 0));  // DQ, WG 2: exchange_add_dq
  float* sL0 = reinterpret_cast<float*>(sX + (DQ && WG == 2 ? 2 * (DP / 16) * kThreads : 0));  // lse, delta

  const int T_ = p.T, D = p.D;
  const BlockKeys kb = dkdv_block<DQ>(p, BKV * WG);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  const float *lse = hv.lse, *delta = hv.delta;
  // This warpgroup's 64 keys and tiles; warp: within the warpgroup.
  const int wg = WG == 1 ? 0 : static_cast<int>(threadIdx.x) / kThreads;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int k0 = kb.k0 + wg * BKV;
  const int wkey = k0 + warp * 16;
  sK += wg * BKV * DP;
  sV += wg * BKV * DP;
  sdS += wg * BKV * BQ;
  const uint64_t sample = hv.sample, hg = hv.hg;

  // Query tile qt into buffer n, all by cp.async (the caller commits): Q, dO, and lse and
  // delta (zeros past T). A plain load of lse would hold its warp, and with it the whole
  // warpgroup's next wgmma, for a global-memory latency every tile.
  auto load_query_tile = [&](int qt, int n) {
    const int tid = static_cast<int>(threadIdx.x);
    load_tile_sw128<T, BQ, DP, kBlockThreads>(sQ0 + n * BQ * DP, gQ, p.qkv_tok, qt * BQ, T_, D, tid);
    load_tile_sw128<T, BQ, DP, kBlockThreads>(sO0 + n * BQ * DP, gdO, p.out_tok, qt * BQ, T_, D, tid);
    const int i = qt * BQ + static_cast<int>(threadIdx.x);
    if (threadIdx.x < BQ) {  // past T: zeros, from the row base (nothing is read)
      const bool valid = i < T_;
      cp_async4(sL0 + n * 2 * BQ + threadIdx.x, valid ? lse + i : lse, valid);
      cp_async4(sL0 + n * 2 * BQ + BQ + threadIdx.x, valid ? delta + i : delta, valid);
    }
  };

  // The block's first query tile is its first warpgroup's diagonal one (with WG 2 the second
  // warpgroup's keys hide all of that tile's queries: its P and dS are zero there).
  const int qt_first = kb.k0 / BQ, nqt = query_tiles_end(p, b, kb.k0 + BKV * WG - 1, BQ);
  const int wtid = static_cast<int>(threadIdx.x) & (kThreads - 1);
  load_tile_sw128<T, BKV, DP>(sK, gK, p.qkv_tok, k0, T_, D, wtid);
  load_tile_sw128<T, BKV, DP>(sV, gV, p.qkv_tok, k0, T_, D, wtid);
  load_query_tile(qt_first, 0);
  cp_async_commit();

  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);

  for (int qt = qt_first; qt < nqt; ++qt) {
    const int i0 = qt * BQ, n = (qt - qt_first) & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // this tile is visible to wgmma; every product of the last one is done
    if (qt + 1 < nqt) {
      load_query_tile(qt + 1, n ^ 1);
      cp_async_commit();
    }
    // With two warpgroups, the second one's keys hide all of the first tile's queries, and
    // keys all past T see nothing. With DQ it still takes part (its zero dQ half goes
    // through exchange_add_dq's barrier).
    if (WG == 2 && !DQ && (i0 + BQ - 1 < k0 || k0 >= T_)) continue;
    const T* sQ = sQ0 + n * BQ * DP;
    const T* sO = sO0 + n * BQ * DP;
    const float* sL = sL0 + n * 2 * BQ;
    float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
    wgmma_fence();
    dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, sQ, sO);
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = bwd_keep_keys<NT>(p, sample, hg, wkey + (lane >> 2), i0, lane);
    wgmma_wait<0>();
    fence_acc(st);
    fence_acc(dpt);
    dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, sL, sL + BQ, keep, b);
    uint32_t pa[NT / 2][4], da[NT / 2][4];
    c_to_a<T, NT>(st, pa);
    c_to_a<T, NT>(dpt, da);
    if constexpr (DQ) {
      // dS^T to shared memory before the dK product takes da (the PTX ISA leaves reading a
      // wgmma's A registers before its wait_group undefined). The last tile's dQ product
      // was waited for before the barrier at the top of this one.
      store_frags_sw128<T, NT / 2>(sdS, da, warp, lane);
      fence_proxy_async();
    }
    fence_grads(dv, dk, pa, da);
    wgmma_fence();
    dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, sQ, sO);
    wgmma_commit();
    if constexpr (DQ) {
      __syncthreads();  // every warp's dS^T rows are visible to wgmma (while dV and dK run)
      float dq[DP / 8][4];  // queries i0 + 16w + g and + 8 (the C layout)
      dkdv_dq_product<T, DP>(dq, sdS, sK);
      float* dq_rows = p.dq_acc + static_cast<int64_t>(bh) * T_ * D;
      if constexpr (WG == 1) {
        add_acc_atomic(dq_rows, dq, i0 + warp * 16, 0, T_, D, lane);
      } else {
        exchange_add_dq<DP>(dq, sX, dq_rows, i0 + warp * 16, T_, D, lane);
      }
    } else {
      wgmma_wait<0>();
    }
    fence_grads(dv, dk, pa, da);
  }

  T* gdK = hv.dq + HD;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, T_, D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + HD, p.qkv_tok, dv, wkey, T_, D, lane, 1.f, 1.f);
}

}  // namespace
}  // namespace trident::cuda
