// The warp-specialized forward (sm_90a): one producer thread streams the key tiles by TMA into
// a ring of shared-memory stages, and a consumer warpgroup overlaps each tile's softmax with
// the previous tile's P V product, FlashAttention-3's pipeline (its intra-warpgroup overlap).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_forward.cuh"

namespace trident::cuda {
namespace {

// Ring stages of K and V tiles: three at D 64 (57 KB a block with 64-key tiles, three blocks
// an SM; 105 KB with 128-key tiles, two), two at D 128 (81 KB, two blocks).
template <int DP>
constexpr int kWsStages = DP == 64 ? 3 : 2;

// The ring's barriers after the tiles: Q landed, then per stage K landed, V landed, and the
// stage released by the consumers.
template <int DP>
constexpr int kWsBarriers = 1 + 3 * kWsStages<DP>;

template <int DP, int BK>
constexpr int ws_fwd_smem_bytes() {
  return (64 + 2 * kWsStages<DP> * BK) * DP * 2 + kSwizzleSpan + kWsBarriers<DP> * 8;
}

// Blocks an SM that ptxas must leave registers for (160 threads each): three with 64-key
// tiles at D 64 (the S, P and O fragments of two tiles fit in 136 registers), else two.
template <int DP, int BK>
constexpr int ws_fwd_min_blocks() {
  return DP == 64 && BK == 64 ? 3 : 2;
}

// Forward on sm_90a, warp-specialized. Grid (B*H, ceil(T/64)); block: warps 0-3 are the
// consumer warpgroup (warp w: rows q0 + 16w..+15, as in attn_fwd_wgmma_kernel, whose
// softmax and epilogue it shares), warp 4 the producer, of which one thread works. It loads
// Q, then key tile after key tile K and V into stage i % S of the ring, each by TMA boxes
// (tma_load_tile) whose bytes land on an mbarrier (no block barrier after the set-up; a
// first version loaded by the warp's 32 lanes with cp.async, and its consumers waited on the
// ring: PERFORMANCE.md, 2026-12-04 fourth task); a stage is reused once the consumers have
// released it. The consumers, for key tile i:
//   issue S_i = Q K_i^T;  issue O += P_{i-1} V_{i-1};  wait for S_i;
//   softmax of S_i (P_i, the new maxima) while P V runs;  wait for P V, release stage i-1;
//   rescale O if the maxima moved.
// So the tensor cores run P V under the softmax instead of waiting for it; the price is the
// registers of two tiles' P and S at once, which the one-warpgroup kernel could not afford
// at 2-4 blocks an SM (PERFORMANCE.md, 2026-11-30) and this block's 160 threads can.
template <typename T, int DP, int BK>
__global__ void __launch_bounds__(kWsThreads, ws_fwd_min_blocks<DP, BK>())
    attn_fwd_ws_kernel(const __grid_constant__ AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(BK == 64 || (BK == 128 && DP == 64), "wgmma N of S; D 128's 128-key ring would hold one block an SM");
  constexpr int BQ = 64, NT = BK / 8, S = kWsStages<DP>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = swizzle_aligned<T>(smem_raw);
  T* sK0 = sQ + BQ * DP;       // S stages of K
  T* sV0 = sK0 + S * BK * DP;  // S stages of V
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV0 + S * BK * DP);
  uint64_t* k_full = q_full + 1;
  uint64_t* v_full = k_full + S;
  uint64_t* released = v_full + S;

  const int T_ = p.T;
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest rows start first
  const int nkb = (min(q0 + BQ, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, q0, BK);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    mbar_init(q_full, 1);  // one arrival (the producer's) with the bytes its TMA loads bring
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full + s, 1);
      mbar_init(v_full + s, 1);
      mbar_init(released + s, kThreads / 32);  // the consumer warps
    }
    fence_mbar_init();
  }
  __syncthreads();  // the only block-wide barrier
  const HeadView<T> hv = head_view<T>(p, b, h);

  // The role by warp, through a shuffle so that ptxas sees it warp-uniform (as CUTLASS does).
  if (__shfl_sync(0xffffffffu, tid / 32, 0) == kThreads / 32) {  // the producer warp: one thread
    if (tid != kThreads) return;
    constexpr uint32_t kQBytes = BQ * DP * 2, kTileBytes = BK * DP * 2;  // whole boxes, zeros included
    mbar_arrive_expect_tx(q_full, kQBytes);
    tma_load_tile<T, BQ, DP>(sQ, &p.qkv_map, h, q0, b, q_full);
    for (int kb = kb_first, s = 0, use = 0; kb < nkb; ++kb) {
      if (use > 0) mbar_wait(released + s, (use - 1) & 1);  // the consumers are done with its last tile
      mbar_arrive_expect_tx(k_full + s, kTileBytes);
      tma_load_tile<T, BK, DP>(sK0 + s * BK * DP, &p.qkv_map, p.H + h, kb * BK, b, k_full + s);
      mbar_arrive_expect_tx(v_full + s, kTileBytes);
      tma_load_tile<T, BK, DP>(sV0 + s * BK * DP, &p.qkv_map, 2 * p.H + h, kb * BK, b, v_full + s);
      if (++s == S) {
        s = 0;
        ++use;
      }
    }
    return;
  }

  const int warp = tid >> 5, lane = tid & 31, wrow = q0 + warp * 16;
  float o[DP / 8][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  zero_frags(o);
  uint32_t pa[NT / 2][4];  // P of the previous key tile: the A operand of its P V
  // Key tile kb's stage and phase parity: (kb - kb_first) % S and ((kb - kb_first) / S) & 1,
  // kept as counters; prev_*: the previous tile's.
  int s = 0, prev_s = 0;
  uint32_t parity = 0, prev_parity = 0;
  auto advance = [&] {
    prev_s = s;
    prev_parity = parity;
    if (++s == S) {
      s = 0;
      parity ^= 1u;
    }
  };
  // S = Q K^T for the key tile in stage s, issued as one wgmma group.
  auto issue_scores = [&](float (&sc)[NT][4]) {
    wgmma_abt<T, DP, BQ, BK>(sc, sQ, sK0 + s * BK * DP);
    wgmma_commit();
  };
  // O += P V for the previous key tile (P in pa, V in stage prev_s), one wgmma group.
  auto issue_pv = [&] {
    wgmma_ab_regs<T, DP, NT / 2>(o, pa, sV0 + prev_s * BK * DP);
    wgmma_commit();
  };
  // Every wait comes before the warpgroup's wgmma_fence and its products: a wgmma after a
  // spin loop (a divergent path to ptxas) is serialized.
  mbar_wait(q_full, 0);
  {  // the first key tile: its scores alone
    mbar_wait(k_full + s, parity);
    // TMA writes and wgmma reads shared memory through the same (async) proxy; the fence
    // (one instruction a tile, from the cp.async producer) was in every measured version.
    fence_proxy_async();
    float sc[NT][4];
    wgmma_fence();
    issue_scores(sc);
    KeepBits<NT> keep;
    if (p.dropout) keep = fwd_keep_rows<NT>(p, hv.sample, hv.hg, wrow + (lane >> 2), kb_first * BK, lane);
    wgmma_wait<0>();
    fence_acc(sc);
    float al[2];
    fwd_softmax_scores<T, NT>(p, sc, m, l, al, wrow, kb_first * BK, lane, keep, b);  // o is zero: nothing to rescale
    c_to_a<T, NT>(sc, pa);
    advance();
  }
  for (int kb = kb_first + 1; kb < nkb; ++kb) {
    const int k0 = kb * BK;
    mbar_wait(k_full + s, parity);
    mbar_wait(v_full + prev_s, prev_parity);
    fence_proxy_async();
    float sc[NT][4];
    fence_acc(o);  // the last rescale of o and packing of pa happen before the products
    fence_frag(pa);
    wgmma_fence();
    issue_scores(sc);
    issue_pv();  // under this tile's softmax
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = fwd_keep_rows<NT>(p, hv.sample, hv.hg, wrow + (lane >> 2), k0, lane);
    wgmma_wait<1>();  // S (P V may still run)
    fence_acc(sc);
    float al[2];
    const bool moved = fwd_softmax_scores<T, NT>(p, sc, m, l, al, wrow, k0, lane, keep, b);
    wgmma_wait<0>();  // the previous tile's P V has been added to o
    fence_acc(o);
    fence_frag(pa);
    if (lane == 0) mbar_arrive(released + prev_s);  // the warp's products no longer read the stage
    if (moved) rescale_rows<DP>(o, al);
    c_to_a<T, NT>(sc, pa);
    advance();
  }
  // The last tile's P V (its stage is never reused: no release).
  mbar_wait(v_full + prev_s, prev_parity);
  fence_proxy_async();
  fence_acc(o);
  fence_frag(pa);
  wgmma_fence();
  issue_pv();
  wgmma_wait<0>();
  fence_acc(o);
  fence_frag(pa);
  fwd_store_rows<T, DP>(p, o, m, l, b, h, wrow, lane);
}

}  // namespace
}  // namespace trident::cuda
