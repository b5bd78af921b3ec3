// The backward's warp-specialized dQ pass (sm_90a, head dim 64): one producer thread
// loads the block's Q and dO, then the key tiles (K and V) by TMA into a ring of
// shared-memory stages, and the consumer warpgroup runs each tile's dQ += dS K under the next
// tile's elementwise step: the forward's pipeline (attn_forward_ws.cuh) applied to pass 3,
// whose loop has the forward's shape (a block of queries over its key tiles).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_backward_dq.cuh"
#include "kernels/cuda/attention/attn_forward_ws.cuh"

namespace trident::cuda {
namespace {

// The ring's barriers after the tiles: Q and dO landed, then per stage K and V landed and the
// stage released by the consumers. The stages are the forward's (kWsStages: 3 at D 64).
constexpr int kWsDqBarriers = 1 + 2 * kWsStages<64>;

// Q and dO (64 rows each), the stages' K and V (64 keys each), alignment, barriers: 65 KB,
// two blocks an SM (as the registers allow).
constexpr int ws_dq_smem_bytes() {
  return (2 * 64 + 2 * kWsStages<64> * 64) * 64 * 2 + kSwizzleSpan + kWsDqBarriers * 8;
}

// dQ on sm_90a, warp-specialized. Grid (B*H, ceil(T/64)), the longest rows first; block:
// warps 0-3 the consumer warpgroup (warp w: query rows q0 + 16w..+15, as in
// attn_bwd_dq_wgmma_kernel, whose elementwise step dq_tile_ds it shares), warp 4 the
// producer, of which one thread works: Q and dO, then key tile after key tile K and V into
// stage i % S of the ring, each by TMA boxes whose bytes land on the stage's mbarrier; a
// stage is reused once the consumers have released it. The consumers, for key tile i:
//   issue S_i = Q K_i^T and dP_i = dO V_i^T;  issue dQ += dS_{i-1} K_{i-1};  wait for S_i, dP_i;
//   dS_i = P_i (z dP_i - delta) while the dQ product runs;  wait for it, release stage i-1.
// Live at once: dQ, S_i, dP_i and dS_{i-1}'s A fragments, 112 accumulator registers: 159
// registers. ptxas holds two 160-thread blocks an SM to 168 (as for the D 128 forward;
// consistent with 10 warps on 4 schedulers of 16K registers each, 3 warps on some). D 128
// would need 144 accumulators: its build spilled 164 bytes and serialized its wgmma, so D 128
// keeps the wgmma dQ kernel until a producer warpgroup with setmaxnreg (FlashAttention-3's)
// moves registers to the consumers.
template <typename T>
__global__ void __launch_bounds__(kWsThreads, 2) attn_bwd_dq_ws_kernel(const __grid_constant__ AttnParams p) {
  constexpr int DP = 64, BQ = 64, BK = 64, NT = BK / 8, S = kWsStages<DP>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = swizzle_aligned<T>(smem_raw);
  T* sO = sQ + BQ * DP;        // dO
  T* sK0 = sO + BQ * DP;       // S stages of K
  T* sV0 = sK0 + S * BK * DP;  // S stages of V
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV0 + S * BK * DP);
  uint64_t* kv_full = q_full + 1;
  uint64_t* released = kv_full + S;

  const int T_ = p.T;
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.H, h = bh - b * p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest rows start first
  const int nkb = (min(q0 + BQ, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, q0, BK);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbar_init(q_full, 1);  // one arrival (the producer's) with the bytes its TMA loads bring
    for (int s = 0; s < S; ++s) {
      mbar_init(kv_full + s, 1);
      mbar_init(released + s, kThreads / 32);  // the consumer warps
    }
    fence_mbar_init();
  }
  __syncthreads();  // the only block-wide barrier
  const HeadView<T> hv = head_view<T>(p, b, h);

  // The role by warp, through a shuffle so that ptxas sees it warp-uniform (as CUTLASS does).
  if (__shfl_sync(0xffffffffu, tid / 32, 0) == kThreads / 32) {  // the producer warp: one thread
    if (tid != kThreads) return;
    constexpr uint32_t kTileBytes = 64 * DP * 2;  // whole boxes, zeros included
    mbar_arrive_expect_tx(q_full, 2 * kTileBytes);
    tma_load_tile<T, BQ, DP>(sQ, &p.qkv_map, h, q0, b, q_full);
    tma_load_tile<T, BQ, DP>(sO, &p.dout_map, h, q0, b, q_full);
    for (int kb = kb_first, s = 0, use = 0; kb < nkb; ++kb) {
      if (use > 0) mbar_wait(released + s, (use - 1) & 1);  // the consumers are done with its last tile
      mbar_arrive_expect_tx(kv_full + s, 2 * kTileBytes);
      tma_load_tile<T, BK, DP>(sK0 + s * BK * DP, &p.qkv_map, p.H + h, kb * BK, b, kv_full + s);
      tma_load_tile<T, BK, DP>(sV0 + s * BK * DP, &p.qkv_map, 2 * p.H + h, kb * BK, b, kv_full + s);
      if (++s == S) {
        s = 0;
        ++use;
      }
    }
    return;
  }

  const int warp = tid >> 5, lane = tid & 31, wrow = q0 + warp * 16;
  const DqRows rows = dq_rows(p, hv, wrow, lane);  // plain loads, under the first tiles' TMA
  float dq[DP / 8][4];
  zero_frags(dq);
  uint32_t da[NT / 2][4];  // dS of the previous key tile: the A operand of its dQ product
  // Key tile kb's stage and phase parity, kept as counters; prev_s: the previous tile's stage.
  int s = 0, prev_s = 0;
  uint32_t parity = 0;
  auto advance = [&] {
    prev_s = s;
    if (++s == S) {
      s = 0;
      parity ^= 1u;
    }
  };
  // Every wait comes before the warpgroup's wgmma_fence and its products: a wgmma after a
  // spin loop (a divergent path to ptxas) is serialized.
  mbar_wait(q_full, 0);
  {  // the first key tile: its scores alone
    mbar_wait(kv_full + s, parity);
    // TMA writes and wgmma reads shared memory through the same (async) proxy.
    fence_proxy_async();
    float sc[NT][4], dp[NT][4];
    wgmma_fence();
    dq_issue_scores<T, DP, BK>(sc, dp, sQ, sO, sK0 + s * BK * DP, sV0 + s * BK * DP);
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = attn_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, kb_first * BK, lane);
    wgmma_wait<0>();
    fence_acc(sc);
    fence_acc(dp);
    dq_tile_ds<T, NT>(p, sc, dp, wrow, kb_first * BK, lane, rows, keep, b);
    c_to_a<T, NT>(sc, da);
    advance();
  }
  for (int kb = kb_first + 1; kb < nkb; ++kb) {
    const int k0 = kb * BK;
    mbar_wait(kv_full + s, parity);
    fence_proxy_async();
    float sc[NT][4], dp[NT][4];
    fence_acc(dq);  // the last packing of da happens before the products
    fence_frag(da);
    wgmma_fence();
    dq_issue_scores<T, DP, BK>(sc, dp, sQ, sO, sK0 + s * BK * DP, sV0 + s * BK * DP);
    wgmma_commit();
    wgmma_ab_regs<T, DP, NT / 2>(dq, da, sK0 + prev_s * BK * DP);  // under this tile's dS
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = attn_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, k0, lane);
    wgmma_wait<1>();  // S and dP (the dQ product may still run)
    fence_acc(sc);
    fence_acc(dp);
    dq_tile_ds<T, NT>(p, sc, dp, wrow, k0, lane, rows, keep, b);
    wgmma_wait<0>();  // the previous tile's dS K has been added to dq
    fence_acc(dq);
    fence_frag(da);
    if (lane == 0) mbar_arrive(released + prev_s);  // the warp's products no longer read the stage
    c_to_a<T, NT>(sc, da);
    advance();
  }
  // The last tile's dQ product (its stage is never reused: no release).
  fence_acc(dq);
  fence_frag(da);
  wgmma_fence();
  wgmma_ab_regs<T, DP, NT / 2>(dq, da, sK0 + prev_s * BK * DP);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dq);
  fence_frag(da);
  store_acc<T, DP>(hv.dq, p.qkv_tok, dq, wrow, T_, p.D, lane, p.scale, p.scale);
}

}  // namespace
}  // namespace trident::cuda
