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

// K and V (64 keys each), then per stage Q and dO (64 queries each, D 64) and the 64 queries'
// lse and delta; alignment; barriers. 67 KB: two blocks an SM, as the one-warpgroup kernel.
constexpr int ws_dkdv_smem_bytes() {
  return (2 * 64 + kWsDkdvStages * 2 * 64) * 64 * 2 + kWsDkdvStages * 2 * 64 * 4 + kSwizzleSpan +
         kWsDkdvBarriers * 8;
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
template <typename T, int BQ>
__global__ void __launch_bounds__(kWsThreads, 2) attn_bwd_dkdv_ws_kernel(const __grid_constant__ AttnParams p) {
  static_assert(BQ == 64 || BQ == 32, "a stage's 64 queries whole or by halves");
  constexpr int DP = 64, BS = 64, BKV = 64, NT = BQ / 8, S = kWsDkdvStages;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = swizzle_aligned<T>(smem_raw);
  T* sV = sK + BKV * DP;
  T* sQ0 = sV + BKV * DP;       // S stages of Q (BS queries)
  T* sO0 = sQ0 + S * BS * DP;   // S stages of dO
  float* sL0 = reinterpret_cast<float*>(sO0 + S * BS * DP);  // per stage: lse [BS], then delta [BS]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(sL0 + S * 2 * BS);
  uint64_t* q_full = kv_full + 1;
  uint64_t* released = q_full + S;

  const int T_ = p.T;
  const int bh = static_cast<int>(blockIdx.x), b = bh / p.H, h = bh - b * p.H;
  const int k0 = static_cast<int>(blockIdx.y) * BKV;
  const int qt_first = k0 / BS, nqt = query_tiles_end(p, b, k0 + BKV - 1, BS);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbar_init(kv_full, 1);  // the producer thread's arrival with its TMA bytes
    for (int s = 0; s < S; ++s) {
      mbar_init(q_full + s, 1 + 32);  // ... and the producer warp's lanes, their lse and delta stored
      mbar_init(released + s, kThreads / 32);  // the consumer warps
    }
    fence_mbar_init();
  }
  __syncthreads();  // the only block-wide barrier
  const HeadView<T> hv = head_view<T>(p, b, h);

  // The role by warp, through a shuffle so that ptxas sees it warp-uniform (as CUTLASS does).
  if (__shfl_sync(0xffffffffu, tid / 32, 0) == kThreads / 32) {  // the producer warp
    const int lane = tid - kThreads;
    constexpr uint32_t kTileBytes = 64 * DP * 2;  // whole boxes, zeros included
    if (lane == 0) {
      mbar_arrive_expect_tx(kv_full, 2 * kTileBytes);
      tma_load_tile<T, BKV, DP>(sK, &p.qkv_map, p.H + h, k0, b, kv_full);
      tma_load_tile<T, BKV, DP>(sV, &p.qkv_map, 2 * p.H + h, k0, b, kv_full);
    }
    for (int qt = qt_first, s = 0, use = 0; qt < nqt; ++qt) {
      if (use > 0) mbar_wait(released + s, (use - 1) & 1);  // the consumers are done with its last tile
      const int i0 = qt * BS;
      if (lane == 0) {
        mbar_arrive_expect_tx(q_full + s, 2 * kTileBytes);
        tma_load_tile<T, BS, DP>(sQ0 + s * BS * DP, &p.qkv_map, h, i0, b, q_full + s);
        tma_load_tile<T, BS, DP>(sO0 + s * BS * DP, &p.dout_map, h, i0, b, q_full + s);
      }
      float* sL = sL0 + s * 2 * BS;
#pragma unroll
      for (int r = lane; r < BS; r += 32) {
        const int i = i0 + r;
        sL[r] = i < T_ ? hv.lse[i] : 0.f;
        sL[BS + r] = i < T_ ? hv.delta[i] : 0.f;
      }
      mbar_arrive(q_full + s);  // releases the stores above to the consumers' wait
      if (++s == S) {
        s = 0;
        ++use;
      }
    }
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
    if (p.dropout) keep = attn_keep_keys<NT>(p, hv.sample, hv.hg, wkey + (lane >> 2), t.i0, lane);
    return keep;
  };
  if constexpr (BQ == 64) {
    int s = 0;
    uint32_t parity = 0;
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
      fence_acc(dv);
      fence_acc(dk);
      fence_frag(pa);
      fence_frag(da);
      wgmma_fence();
      dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, t.q, t.o);
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(dv);
      fence_acc(dk);
      fence_frag(pa);
      fence_frag(da);
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
      fence_acc(dv);  // the last packing of pa and da happens before the products
      fence_acc(dk);
      fence_frag(pa);
      fence_frag(da);
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
      fence_acc(dv);
      fence_acc(dk);
      fence_frag(pa);
      fence_frag(da);
      // The previous step was its stage's second half: no product reads that stage any more.
      if (half == 0 && lane == 0) mbar_arrive(released + prev_s);
      c_to_a<T, NT>(st, pa);
      c_to_a<T, NT>(dpt, da);
      prev = t;
    }
    // The last step's products (its stage is never reused: no release).
    fence_acc(dv);
    fence_acc(dk);
    fence_frag(pa);
    fence_frag(da);
    wgmma_fence();
    dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, prev.q, prev.o);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(dv);
    fence_acc(dk);
    fence_frag(pa);
    fence_frag(da);
  }

  T* gdK = hv.dq + static_cast<int64_t>(p.H) * p.D;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, T_, p.D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + static_cast<int64_t>(p.H) * p.D, p.qkv_tok, dv, wkey, T_, p.D, lane, 1.f, 1.f);
}

}  // namespace
}  // namespace trident::cuda
