// The backward's warp-specialized dQ pass (sm_90a, head dims 64 and 128): one producer thread
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
// stage released by the consumers. The stages are the forward's (kWsStages: 3 at D 64, 2 at
// D 128), of 64 keys.
template <int DP>
constexpr int kWsDqBarriers = 1 + 2 * kWsStages<DP>;

// Q and dO (64 rows each), the stages' K and V (64 keys each), alignment, barriers: 65 KB at
// D 64, 97 KB at D 128; two blocks an SM either way.
template <int DP>
constexpr int ws_dq_smem_bytes() {
  return (2 * 64 + 2 * kWsStages<DP> * 64) * DP * 2 + kSwizzleSpan + kWsDqBarriers<DP> * 8;
}

// Keys a step of the consumers: a stage's 64 at D 64; at D 128 its halves, 32 each (dQ, S, dP
// and the previous step's dS with 64 keys would need 144 accumulator registers, and ptxas
// holds two 160-thread blocks an SM to 168: that build spilled 164 bytes and serialized its
// wgmma; with 32 keys they need 104).
template <int DP>
constexpr int kWsDqStepKeys = DP == 64 ? 64 : 32;

// dQ on sm_90a, warp-specialized. Grid (B*H, ceil(T/64)), the longest rows first; block:
// warps 0-3 the consumer warpgroup (warp w: query rows q0 + 16w..+15, as in
// attn_bwd_dq_wgmma_kernel, whose elementwise step dq_tile_ds it shares), warp 4 the
// producer, of which one thread works: Q and dO, then key tile after key tile (64 keys) K and
// V into stage i % S of the ring, each by TMA boxes whose bytes land on the stage's mbarrier;
// a stage is reused once the consumers have released it. The consumers take BK keys a step
// (kWsDqStepKeys: a stage, or at D 128 each half of one in turn); for step j:
//   issue S_j = Q K_j^T and dP_j = dO V_j^T;  issue dQ += dS_{j-1} K_{j-1};  wait for S_j, dP_j;
//   dS_j = P_j (z dP_j - delta) while the dQ product runs;  wait for it, and release the stage
//   of step j-1 once no later step reads it.
// Live at once: dQ, S_j, dP_j and dS_{j-1}'s A fragments: 112 accumulator registers at D 64
// (157 registers), 104 at D 128 (163).
template <typename T, int DP>
__global__ void __launch_bounds__(kWsThreads, 2) attn_bwd_dq_ws_kernel(const __grid_constant__ AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  constexpr int BQ = 64, BS = 64, BK = kWsDqStepKeys<DP>, H = BS / BK, NT = BK / 8, S = kWsStages<DP>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = swizzle_aligned<T>(smem_raw);
  T* sO = sQ + BQ * DP;        // dO
  T* sK0 = sO + BQ * DP;       // S stages of K (BS keys)
  T* sV0 = sK0 + S * BS * DP;  // S stages of V
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV0 + S * BS * DP);
  uint64_t* kv_full = q_full + 1;
  uint64_t* released = kv_full + S;

  const int T_ = p.T;
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.H, h = bh - b * p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest rows start first
  const int nkb = (min(q0 + BQ, T_) + BS - 1) / BS, kb_first = first_key_tile(p, b, q0, BS);
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
      tma_load_tile<T, BS, DP>(sK0 + s * BS * DP, &p.qkv_map, p.H + h, kb * BS, b, kv_full + s);
      tma_load_tile<T, BS, DP>(sV0 + s * BS * DP, &p.qkv_map, 2 * p.H + h, kb * BS, b, kv_full + s);
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
  // A step: BK keys from k0, their K and V rows in a stage (step_at: stage s, part `half`; its
  // 64-column blocks lie BS rows apart).
  struct Step {
    int k0;
    const T *k, *v;
  };
  auto step_at = [&](int s, int half, int k0) {
    return Step{k0, sK0 + s * BS * DP + half * BK * 64, sV0 + s * BS * DP + half * BK * 64};
  };
  // The step's dropout bits, drawn while its products run.
  auto draw_keep = [&](const Step& t) {
    KeepBits<NT> keep;
    if (p.dropout) keep = bwd_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, t.k0, lane);
    return keep;
  };
  uint32_t da[NT / 2][4];  // dS of the previous step: the A operand of its dQ product
  // Step j is part j % H of the (j / H)-th stage loaded: stage s, phase parity `parity`.
  int s = 0;
  uint32_t parity = 0;
  // Every wait comes before the warpgroup's wgmma_fence and its products: a wgmma after a
  // spin loop (a divergent path to ptxas) is serialized.
  mbar_wait(q_full, 0);
  mbar_wait(kv_full + s, parity);
  // TMA writes and wgmma reads shared memory through the same (async) proxy.
  fence_proxy_async();
  Step prev = step_at(s, 0, kb_first * BS);
  {  // the first step: its scores alone
    float sc[NT][4], dp[NT][4];
    wgmma_fence();
    dq_issue_scores<T, DP, BK, BS>(sc, dp, sQ, sO, prev.k, prev.v);
    wgmma_commit();
    const KeepBits<NT> keep = draw_keep(prev);
    wgmma_wait<0>();
    fence_acc(sc);
    fence_acc(dp);
    dq_tile_ds<T, NT>(p, sc, dp, wrow, prev.k0, lane, rows, keep, b);
    c_to_a<T, NT>(sc, da);
  }
  const int steps = (nkb - kb_first) * H;
  for (int j = 1; j < steps; ++j) {
    const int half = j % H, prev_s = s;
    if (half == 0) {  // a new stage
      if (++s == S) {
        s = 0;
        parity ^= 1u;
      }
      mbar_wait(kv_full + s, parity);
      fence_proxy_async();
    }
    const Step t = step_at(s, half, kb_first * BS + j * BK);
    float sc[NT][4], dp[NT][4];
    fence_acc(dq);  // the last packing of da happens before the products
    fence_frag(da);
    wgmma_fence();
    dq_issue_scores<T, DP, BK, BS>(sc, dp, sQ, sO, t.k, t.v);
    wgmma_commit();
    wgmma_ab_regs<T, DP, NT / 2, BS>(dq, da, prev.k);  // under this step's dS
    wgmma_commit();
    const KeepBits<NT> keep = draw_keep(t);
    wgmma_wait<1>();  // S and dP (the dQ product may still run)
    fence_acc(sc);
    fence_acc(dp);
    dq_tile_ds<T, NT>(p, sc, dp, wrow, t.k0, lane, rows, keep, b);
    wgmma_wait<0>();  // the previous step's dS K has been added to dq
    fence_acc(dq);
    fence_frag(da);
    // The previous step was its stage's last part: no product reads that stage any more.
    if (half == 0 && lane == 0) mbar_arrive(released + prev_s);
    c_to_a<T, NT>(sc, da);
    prev = t;
  }
  // The last step's dQ product (its stage is never reused: no release).
  fence_acc(dq);
  fence_frag(da);
  wgmma_fence();
  wgmma_ab_regs<T, DP, NT / 2, BS>(dq, da, prev.k);
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dq);
  fence_frag(da);
  store_acc<T, DP>(hv.dq, p.qkv_tok, dq, wrow, T_, p.D, lane, p.scale, p.scale);
}

}  // namespace
}  // namespace trident::cuda
