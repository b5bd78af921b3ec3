// The backward's warp-specialized dK/dV pass (sm_90a, head dim 64): one producer thread loads
// the query tiles (Q and dO) by TMA into a ring of shared-memory stages, its warp the tiles'
// lse and delta, and the consumer warpgroup runs the wgmma dK/dV kernel's products on them
// without a block barrier: the forward's pipeline (attn_forward_ws.cuh) applied to pass 2.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_backward_dkdv.cuh"

namespace trident::cuda {
namespace {

constexpr int kWsDkdvStages = 3;
// The ring's barriers after the tiles: K and V landed, then per stage the query tile landed
// and the stage released by the consumers.
constexpr int kWsDkdvBarriers = 1 + 2 * kWsDkdvStages;

// K and V (64 keys each), then per stage Q and dO (64 queries each, D 64), with DQ a dS^T
// tile [64 keys][64 queries]; the stages' lse and delta, with DQ two f32 dQ tiles [64][64];
// alignment; barriers. 67 KB, with DQ 107 KB: two blocks an SM either way (a second dS^T
// tile would make it 115 KB, two of which an SM's 228 KB do not hold).
template <bool DQ = false>
constexpr int ws_dkdv_smem_bytes() {
  return (2 * 64 + kWsDkdvStages * 2 * 64 + (DQ ? 64 : 0)) * 64 * 2 + kWsDkdvStages * 2 * 64 * 4 +
         (DQ ? 2 * 64 * 64 * 4 : 0) + kSwizzleSpan + kWsDkdvBarriers * 8;
}

// The warp-specialized dK/dV kernels' barriers, set up by the block's first thread before the
// block's only __syncthreads: K and V landed (the producer thread's arrival with its TMA
// bytes), and per stage of the ring the query tile landed (that arrival and the producer
// warp's 32, their lse and delta stored) and the stage released (`consumer_warps` arrivals).
template <int S>
__device__ __forceinline__ void init_query_ring(uint64_t* kv_full, uint64_t* q_full, uint64_t* released,
                                                int consumer_warps) {
  if (threadIdx.x != 0) return;
  mbar_init(kv_full, 1);
  for (int s = 0; s < S; ++s) {
    mbar_init(q_full + s, 1 + 32);
    mbar_init(released + s, consumer_warps);
  }
  fence_mbar_init();
}

// The warp-specialized dK/dV kernels' producer warp (attn_bwd_dkdv_ws_kernel and
// attn_bwd_dkdv_ws2_kernel): query tiles qt_first..nqt-1 of BQ queries into a ring of S
// stages (Q and dO at sQ0 and sO0, lse then delta at sL0, each stage after the other). A
// stage is refilled once its consumers have released it; lane 0 loads the tile's Q and dO by
// TMA, their bytes counted on the stage's q_full barrier, and every lane stores its share of
// the tile's lse and delta (zeros past T) and arrives on it.
template <typename T, int BQ, int DP, int S>
__device__ __forceinline__ void produce_query_tiles(const AttnParams& p, const HeadView<T>& hv, int h, int b,
                                                    int qt_first, int nqt, T* sQ0, T* sO0, float* sL0,
                                                    uint64_t* q_full, uint64_t* released, int lane) {
  constexpr uint32_t kTileBytes = BQ * DP * 2;  // whole boxes, zeros included
  for (int qt = qt_first, s = 0, use = 0; qt < nqt; ++qt) {
    if (use > 0) mbar_wait(released + s, (use - 1) & 1);  // the consumers are done with its last tile
    const int i0 = qt * BQ;
    if (lane == 0) {
      mbar_arrive_expect_tx(q_full + s, 2 * kTileBytes);
      tma_load_tile<T, BQ, DP>(sQ0 + s * BQ * DP, &p.qkv_map, h, i0, b, q_full + s);
      tma_load_tile<T, BQ, DP>(sO0 + s * BQ * DP, &p.dout_map, h, i0, b, q_full + s);
    }
    float* sL = sL0 + s * 2 * BQ;
#pragma unroll
    for (int r = lane; r < BQ; r += 32) {
      const int i = i0 + r;
      sL[r] = i < p.T ? hv.lse[i] : 0.f;
      sL[BQ + r] = i < p.T ? hv.delta[i] : 0.f;
    }
    mbar_arrive(q_full + s);  // releases the stores above to the consumers' wait
    if (++s == S) {
      s = 0;
      ++use;
    }
  }
}

// A step's dV and dK products alone, waited for (the warp-specialized dK/dV kernels' last
// step, whose stage is never reused: no release).
template <typename T, int DP, int BQ>
__device__ __forceinline__ void dkdv_last_grads(float (&dv)[DP / 8][4], float (&dk)[DP / 8][4],
                                                uint32_t (&pa)[BQ / 16][4], uint32_t (&da)[BQ / 16][4], const T* sQ,
                                                const T* sO) {
  fence_grads(dv, dk, pa, da);
  wgmma_fence();
  dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, sQ, sO);
  wgmma_commit();
  wgmma_wait<0>();
  fence_grads(dv, dk, pa, da);
}

// The end of a warp-specialized dK/dV kernel's consumer warp: with DQ its warpgroup's last
// bulk adds done (by the thread that issued them) before the block's shared memory goes,
// then its 16 keys' dK (times the scale) and dV stored.
template <typename T, int DP, bool DQ>
__device__ __forceinline__ void finish_dkdv(const AttnParams& p, const HeadView<T>& hv, const float (&dk)[DP / 8][4],
                                            const float (&dv)[DP / 8][4], int wkey, int warp, int lane) {
  if constexpr (DQ) {
    if (warp == 0 && lane == 0) bulk_wait<0>();
  }
  T* gdK = hv.dq + static_cast<int64_t>(p.H) * p.D;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, p.T, p.D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + static_cast<int64_t>(p.H) * p.D, p.qkv_tok, dv, wkey, p.T, p.D, lane, 1.f, 1.f);
}

// The dK/dV kernel's dQ = dS K of a 64-query step (DQ), as FlashAttention-3 adds it: each
// warp's rows of the f32 product (C layout: queries row0 + g and + 8, columns 8 nt + 2q and
// + 1) into `tile` ([64 queries][D], row-major, columns >= D left out), then once the
// consumers' barrier has the whole tile there, one thread hands its first `rows` rows to
// the copy engine, which adds them to dq_rows + i0 D (the head's f32 dQ rows) in L2: one
// bulk op a step instead of 2048 float-pair atomics. The order of the adds, so dQ's last
// bits, varies from run to run. The caller alternates two tiles: the op of the step before
// last has been read (bulk_wait_read<1>) before the barrier after which a tile is written.
// `barrier`: the warpgroup's named barrier (consumer_sync); warp: within the warpgroup.
template <int DP>
__device__ __forceinline__ void add_dq_tile_bulk(float* tile, const float (&dq)[DP / 8][4], float* dq_rows, int i0,
                                                 int rows, int D, int warp, int lane, int barrier = 1) {
  const int r0 = warp * 16 + (lane >> 2), c = (lane & 3) * 2;
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    if (nt * 8 + c >= D) continue;
    *reinterpret_cast<float2*>(tile + r0 * D + nt * 8 + c) = make_float2(dq[nt][0], dq[nt][1]);
    *reinterpret_cast<float2*>(tile + (r0 + 8) * D + nt * 8 + c) = make_float2(dq[nt][2], dq[nt][3]);
  }
  fence_proxy_async();  // the stores, to the copy engine's reads
  consumer_sync(barrier);
  if (warp == 0 && lane == 0) {  // rows > 0: a step's first query is below T
    bulk_reduce_add_f32(dq_rows + static_cast<int64_t>(i0) * D, tile, static_cast<uint32_t>(rows * D * 4));
    bulk_commit();
    bulk_wait_read<1>();  // the other tile (the step before's op) may be written again
  }
}

// dK and dV on sm_90a, warp-specialized; D 64 (D 128's one-warpgroup kernel needs 255
// registers, which a 160-thread block could hold once an SM). Grid (B*H, ceil(T/64)); block:
// warps 0-3 the consumer warpgroup (warp w: keys k0 + 16w..+15, as in
// attn_bwd_dkdv_wgmma_kernel, whose elementwise step it shares), warp 4 the producer. The
// producer's first thread loads the block's K and V, then query tile after query tile (64
// queries) Q and dO into stage i % S of the ring by TMA; its 32 lanes load the tile's lse and
// delta (zeros past T, as the one-warpgroup kernel's zero-filled cp.async) and arrive on the
// stage's barrier with the TMA bytes. The consumers take BQ queries a step:
//   BQ 64, a stage a step: S^T = K Q^T and dP^T = V dO^T, P z and dS in registers, dV += (P
//     z)^T dO and dK += dS^T Q, then release the stage (168 registers);
//   BQ 32 (TRIDENT_ATTN_DKDV_BQ=32), each stage's halves in turn, the products pipelined as
//     the forward's: step j issues S^T_j and dP^T_j with the previous step's dV and dK
//     products, computes P_j and dS_j under the latter, and releases a stage once both its
//     halves' products are done. Two 64-query steps' tiles at once would need 160
//     accumulator registers of the 168 that two 160-thread blocks an SM get; two 32-query
//     steps' need 112.
// DQ (TRIDENT_ATTN_BWD_ATOMIC=1 with it; 64-query steps): dQ by the dK/dV kernel, as
// FlashAttention-2 and -3 do (5 tile products instead of 7, pass 3 not run): each step's dS^T
// also goes to shared memory (one tile), and once the dV and dK products are
// issued, dQ = dS K (queries are rows) runs from it and K, into an f32 tile that the copy
// engine adds to p.dq_acc (add_dq_tile_bulk). The grid is the atomic-dQ one (dkdv_block).
template <typename T, int BQ, bool DQ = false>
__global__ void __launch_bounds__(kWsThreads, 2) attn_bwd_dkdv_ws_kernel(const __grid_constant__ AttnParams p) {
  static_assert(BQ == 64 || BQ == 32, "a stage's 64 queries whole or by halves");
  static_assert(!DQ || BQ == 64, "dQ = dS K: wgmma M is 64 queries");
  constexpr int DP = 64, BS = 64, BKV = 64, NT = BQ / 8, S = kWsDkdvStages;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = swizzle_aligned<T>(smem_raw);
  T* sV = sK + BKV * DP;
  T* sQ0 = sV + BKV * DP;       // S stages of Q (BS queries)
  T* sO0 = sQ0 + S * BS * DP;   // S stages of dO
  T* sdS = sO0 + S * BS * DP;  // DQ: the dS^T tile [BKV keys][BS queries] (1024-byte aligned: whole tiles before)
  float* sL0 = reinterpret_cast<float*>(sdS + (DQ ? BKV * BS : 0));  // per stage: lse [BS], then delta [BS]
  float* sdQ0 = sL0 + S * 2 * BS;  // DQ: two f32 dQ tiles [BS][D]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(sdQ0 + (DQ ? 2 * BS * DP : 0));
  uint64_t* q_full = kv_full + 1;
  uint64_t* released = q_full + S;

  const int T_ = p.T;
  const BlockKeys kb = dkdv_block<DQ>(p, BKV);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int k0 = kb.k0;
  const int qt_first = k0 / BS, nqt = query_tiles_end(p, b, k0 + BKV - 1, BS);
  const int tid = static_cast<int>(threadIdx.x);
  init_query_ring<S>(kv_full, q_full, released, kThreads / 32);
  __syncthreads();  // the only block-wide barrier
  const HeadView<T> hv = head_view<T>(p, b, h);

  // The role by warp, through a shuffle so that ptxas sees it warp-uniform (as CUTLASS does).
  if (__shfl_sync(0xffffffffu, tid / 32, 0) == kThreads / 32) {  // the producer warp
    const int lane = tid - kThreads;
    if (lane == 0) {
      mbar_arrive_expect_tx(kv_full, 2 * BKV * DP * 2);
      tma_load_tile<T, BKV, DP>(sK, &p.qkv_map, p.H + h, k0, b, kv_full);
      tma_load_tile<T, BKV, DP>(sV, &p.qkv_map, 2 * p.H + h, k0, b, kv_full);
    }
    produce_query_tiles<T, BS, DP, S>(p, hv, h, b, qt_first, nqt, sQ0, sO0, sL0, q_full, released, lane);
    return;
  }

  const int warp = tid >> 5, lane = tid & 31;
  const int wkey = k0 + warp * 16;
  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);
  mbar_wait(kv_full, 0);
  // A step: BQ queries from i0, their Q and dO rows in a stage (step_at: stage s from row
  // `row`, 0 or a second half's BQ) and their lse at l, delta BS floats on.
  struct Step {
    int i0;
    const T *q, *o;
    const float* l;
  };
  auto step_at = [&](int s, int row, int i0) {
    return Step{i0, sQ0 + (s * BS + row) * DP, sO0 + (s * BS + row) * DP, sL0 + s * 2 * BS + row};
  };
  // The step's dropout bits, drawn while its products run.
  auto draw_keep = [&](const Step& t) {
    KeepBits<NT> keep;
    if (p.dropout) keep = bwd_keep_keys<NT>(p, hv.sample, hv.hg, wkey + (lane >> 2), t.i0, lane);
    return keep;
  };
  if constexpr (BQ == 64) {
    int s = 0;
    uint32_t parity = 0;
    [[maybe_unused]] float* dq_rows = DQ ? p.dq_acc + static_cast<int64_t>(bh) * T_ * p.D : nullptr;
    for (int qt = qt_first; qt < nqt; ++qt) {
      mbar_wait(q_full + s, parity);
      fence_proxy_async();
      const Step t = step_at(s, 0, qt * BS);
      float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
      wgmma_fence();
      dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, t.q, t.o);
      wgmma_commit();
      const KeepBits<NT> keep = draw_keep(t);
      wgmma_wait<0>();
      fence_acc(st);
      fence_acc(dpt);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, t.i0, lane, t.l, t.l + BS, keep, b);
      uint32_t pa[NT / 2][4], da[NT / 2][4];
      c_to_a<T, NT>(st, pa);
      c_to_a<T, NT>(dpt, da);
      if constexpr (DQ) {
        // dS^T into the tile before the dK product takes da (reading a wgmma's A registers
        // before its wait is undefined). The last step's dQ product, which read the tile, was
        // waited for by every warp before the consumer_sync in its add_dq_tile_bulk.
        store_frags_sw128<T, NT / 2>(sdS, da, warp, lane);
        fence_proxy_async();
      }
      fence_grads(dv, dk, pa, da);
      wgmma_fence();
      dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, t.q, t.o);
      wgmma_commit();
      if constexpr (DQ) {
        consumer_sync();  // every warp's dS^T rows are visible to wgmma (while dV and dK run)
        float dq[DP / 8][4];  // queries t.i0 + 16 warp + g and + 8 (the C layout)
        dkdv_dq_product<T, DP>(dq, sdS, sK);
        add_dq_tile_bulk<DP>(sdQ0 + ((qt - qt_first) & 1) * BS * DP, dq, dq_rows, t.i0, min(BS, T_ - t.i0), p.D,
                             warp, lane);
      } else {
        wgmma_wait<0>();
      }
      fence_grads(dv, dk, pa, da);
      if (lane == 0) mbar_arrive(released + s);  // the warp's products no longer read the stage
      if (++s == S) {
        s = 0;
        parity ^= 1u;
      }
    }
  } else {
    // Step j is half j % 2 of the (j / 2)-th stage loaded: stage s, phase parity `parity`.
    int s = 0;
    uint32_t parity = 0;
    uint32_t pa[NT / 2][4], da[NT / 2][4];  // the previous step's P z and dS: A operands of its products
    mbar_wait(q_full + s, parity);
    fence_proxy_async();
    Step prev = step_at(s, 0, qt_first * BS);
    {  // the first step: its scores alone (no wgmma under a branch: ptxas would serialize them)
      float st[NT][4], dpt[NT][4];
      wgmma_fence();
      dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, prev.q, prev.o);
      wgmma_commit();
      const KeepBits<NT> keep = draw_keep(prev);
      wgmma_wait<0>();
      fence_acc(st);
      fence_acc(dpt);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, prev.i0, lane, prev.l, prev.l + BS, keep, b);
      c_to_a<T, NT>(st, pa);
      c_to_a<T, NT>(dpt, da);
    }
    const int steps = (nqt - qt_first) * (BS / BQ);
    for (int j = 1; j < steps; ++j) {
      const int half = j & 1, prev_s = s;
      if (half == 0) {  // a new stage (every wait before the warpgroup's wgmma_fence)
        if (++s == S) {
          s = 0;
          parity ^= 1u;
        }
        mbar_wait(q_full + s, parity);
        fence_proxy_async();
      }
      const Step t = step_at(s, half * BQ, qt_first * BS + j * BQ);
      float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
      fence_grads(dv, dk, pa, da);  // the last packing of pa and da happens before the products
      wgmma_fence();
      dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, t.q, t.o);
      wgmma_commit();
      dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, prev.q, prev.o);  // under this step's P and dS
      wgmma_commit();
      const KeepBits<NT> keep = draw_keep(t);
      wgmma_wait<1>();  // S^T and dP^T (the previous step's products may still run)
      fence_acc(st);
      fence_acc(dpt);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, t.i0, lane, t.l, t.l + BS, keep, b);
      wgmma_wait<0>();  // the previous step's dV and dK products are done
      fence_grads(dv, dk, pa, da);
      // The previous step was its stage's second half: no product reads that stage any more.
      if (half == 0 && lane == 0) mbar_arrive(released + prev_s);
      c_to_a<T, NT>(st, pa);
      c_to_a<T, NT>(dpt, da);
      prev = t;
    }
    dkdv_last_grads<T, DP, BQ>(dv, dk, pa, da, prev.q, prev.o);
  }
  finish_dkdv<T, DP, DQ>(p, hv, dk, dv, wkey, warp, lane);
}

}  // namespace
}  // namespace trident::cuda
