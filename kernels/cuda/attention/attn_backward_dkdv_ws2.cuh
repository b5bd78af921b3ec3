// The backward's dK/dV pass in FlashAttention-3's block (sm_90a, head dims 64 and 128): 128
// keys a block, two consumer warpgroups of 64 keys each, and a producer warpgroup that hands
// its registers to them (setmaxnreg), so that a consumer thread has 240 registers where the
// one-consumer kernel of attn_backward_dkdv_ws.cuh has 168. That is room for what 168 did not
// hold: at D 64 the next 64-query step's S^T and dP^T under this step's dV and dK products
// (160 accumulator registers), and a warp-specialized kernel at D 128 (192; its one-warpgroup
// wgmma kernel sits at 255 registers). (128-query steps at D 64, as FlashAttention-3's
// 128 x 128 blocks, hold 192 too, but ptxas spilled 24-64 bytes of their dropout path however
// the draws were placed.)
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/attn_backward_dkdv_ws.cuh"

namespace trident::cuda {
namespace {

constexpr int kWs2Consumers = 2;  // consumer warpgroups a block, 64 keys each
constexpr int kWs2Keys = kWs2Consumers * 64;  // keys a block
constexpr int kWs2Threads = (kWs2Consumers + 1) * kThreads;  // and the producer warpgroup: 384
constexpr int kWs2Stages = 2;  // query tiles in flight (as FlashAttention-3's backward)
// Registers a thread after the hand-over. __launch_bounds__(384, 1) gives every thread 168
// (65536 / 384, down to a multiple of 8); the producer warpgroup's 4 x 32 x (168 - 24) make
// the consumers' 8 x 32 x (240 - 168).
constexpr int kWs2ProducerRegs = 24, kWs2ConsumerRegs = 240;
static_assert(kThreads * kWs2ProducerRegs + kWs2Consumers * kThreads * kWs2ConsumerRegs <= kWs2Threads * 168,
              "the hand-over stays inside the block's registers");

// K and V per consumer warpgroup (64 keys each); per stage Q and dO (64 queries); with DQ per
// consumer warpgroup a dS^T tile [64 keys][64 queries]; per stage lse and delta; with DQ per
// consumer warpgroup two f32 dQ tiles [64][D]; alignment; barriers. D 64: 68 KB, with DQ 148
// KB; D 128: 133 KB (its f32 dQ tiles would not fit beside it).
template <int DP, bool DQ = false>
constexpr int ws2_dkdv_smem_bytes() {
  constexpr int BQ = 64;
  return (kWs2Consumers * 2 * 64 + kWs2Stages * 2 * BQ + (DQ ? kWs2Consumers * 64 : 0)) * DP * 2 +
         kWs2Stages * 2 * BQ * 4 + (DQ ? kWs2Consumers * 2 * BQ * DP * 4 : 0) + kSwizzleSpan +
         (1 + 2 * kWs2Stages) * 8;
}

// dK and dV on sm_90a, warp-specialized with two consumer warpgroups. Grid (B*H, ceil(T/128)),
// with DQ in head groups (dkdv_block); block: warpgroups 0 and 1 consumers (warpgroup c, warp w: keys k0 + 64c + 16w..+15), warpgroup
// 2 the producer. The producer's first warp keeps 24 registers a thread and the other three
// exit; its first thread loads both consumers' K and V, then query tile after query tile (64
// queries) Q and dO into stage i % 2 of the ring by TMA; its 32 lanes load the tile's lse and
// delta (zeros past T) and arrive on the stage's barrier with the TMA bytes. Each consumer
// warpgroup runs the one-consumer kernel's products on its own keys, and the two take turns
// on the tensor cores as they fall out of step; a stage is released once all 8 consumer
// warps are done with it. A warpgroup whose keys see none of a tile's queries (the second
// one's, on the block's first tile) waits for the stage and releases it unread; one whose
// keys lie past T still runs the last tile (its scores all hidden), so that no wgmma sits
// under a branch. Steps:
//   D 64, pipelined as the one-consumer kernel's 32-query halves, with whole stages: step j
//     issues S^T_j and dP^T_j with step j-1's dV and dK products and computes P_j and dS_j
//     under the latter, then releases step j-1's stage;
//   D 128, and D 64 with DQ, plain: S^T = K Q^T and dP^T = V dO^T, P z and dS in registers,
//     dV += (P z)^T dO and dK += dS^T Q, then release the stage.
// DQ (D 64; TRIDENT_ATTN_BWD_ATOMIC=1 with it): FlashAttention-3's whole backward pass, dQ
// too, as the one-consumer kernel's DQ: each warpgroup stores its dS^T to its tile, meets at
// its named barrier (1 + c) while the dV and dK products run, computes dQ = dS K over its 64
// keys, and hands the f32 product to the copy engine (add_dq_tile_bulk: one bulk add a
// warpgroup and step into p.dq_acc, whose order varies from run to run). The grid is the
// atomic-dQ one (dkdv_block). (A barrier id in a register makes ptxas reserve all 16 named
// barriers: no matter at one block an SM.)
template <typename T, int DP, bool DQ = false>
__global__ void __launch_bounds__(kWs2Threads, 1) attn_bwd_dkdv_ws2_kernel(const __grid_constant__ AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(!DQ || DP == 64, "D 128's f32 dQ tiles do not fit beside its ring");
  // D 128's two steps would need 256 accumulator registers; with DQ, dQ = dS K takes the place
  // of the next step's scores.
  constexpr bool kPipelined = DP == 64 && !DQ;
  constexpr int BQ = 64, BKV = 64, NT = BQ / 8, S = kWs2Stages;
  constexpr int kConsumerWarps = kWs2Consumers * kThreads / 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sKV = swizzle_aligned<T>(smem_raw);       // per consumer warpgroup: K [64 keys][DP], then V
  T* sQ0 = sKV + kWs2Consumers * 2 * BKV * DP;  // S stages of Q (BQ queries)
  T* sO0 = sQ0 + S * BQ * DP;                   // S stages of dO
  T* sdS0 = sO0 + S * BQ * DP;                  // DQ: per consumer warpgroup dS^T [64 keys][BQ queries]
  float* sL0 = reinterpret_cast<float*>(sdS0 + (DQ ? kWs2Consumers * BKV * BQ : 0));  // per stage: lse, delta
  float* sdQ0 = sL0 + S * 2 * BQ;  // DQ: per consumer warpgroup two f32 dQ tiles [BQ][DP]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(sdQ0 + (DQ ? kWs2Consumers * 2 * BQ * DP : 0));
  uint64_t* q_full = kv_full + 1;
  uint64_t* released = q_full + S;

  const int T_ = p.T;
  const BlockKeys kb = dkdv_block<DQ>(p, kWs2Keys);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int k0 = kb.k0;
  const int qt_first = k0 / BQ, nqt = query_tiles_end(p, b, k0 + kWs2Keys - 1, BQ);
  const int tid = static_cast<int>(threadIdx.x);
  init_query_ring<S>(kv_full, q_full, released, kConsumerWarps);
  __syncthreads();  // the only block-wide barrier
  const HeadView<T> hv = head_view<T>(p, b, h);
  const int warp_id = __shfl_sync(0xffffffffu, tid / 32, 0);  // warp-uniform to ptxas (as CUTLASS does)

  if (warp_id >= kConsumerWarps) {  // the producer warpgroup
    regs_release_to<kWs2ProducerRegs>();
    if (warp_id != kConsumerWarps) return;
    const int lane = tid & 31;
    if (lane == 0) {
      mbar_arrive_expect_tx(kv_full, 2 * kWs2Consumers * BKV * DP * 2);  // whole boxes, zeros included
      for (int c = 0; c < kWs2Consumers; ++c) {  // keys past T: zeros
        tma_load_tile<T, BKV, DP>(sKV + 2 * c * BKV * DP, &p.qkv_map, p.H + h, k0 + c * BKV, b, kv_full);
        tma_load_tile<T, BKV, DP>(sKV + (2 * c + 1) * BKV * DP, &p.qkv_map, 2 * p.H + h, k0 + c * BKV, b, kv_full);
      }
    }
    produce_query_tiles<T, BQ, DP, S>(p, hv, h, b, qt_first, nqt, sQ0, sO0, sL0, q_full, released, lane);
    return;
  }

  regs_claim_to<kWs2ConsumerRegs>();
  const int wg = warp_id / 4, warp = warp_id & 3, lane = tid & 31;
  const int kc = k0 + wg * BKV, wkey = kc + warp * 16;  // the warpgroup's and the warp's first keys
  const T* sK = sKV + 2 * wg * BKV * DP;
  const T* sV = sK + BKV * DP;
  [[maybe_unused]] T* sdS = sdS0 + wg * BKV * BQ;
  [[maybe_unused]] float* sdQ = sdQ0 + wg * 2 * BQ * DP;
  [[maybe_unused]] float* dq_rows = DQ ? p.dq_acc + static_cast<int64_t>(bh) * T_ * p.D : nullptr;
  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);
  int s = 0;
  uint32_t parity = 0;
  auto next_stage = [&] {
    if (++s == S) {
      s = 0;
      parity ^= 1u;
    }
  };
  // Tiles wholly before the warpgroup's first key: waited for and released unread. The
  // warpgroup's first tile is its diagonal one, or with its keys past T the block's last.
  const int qt_own = min(max(qt_first, kc / BQ), nqt - 1);
  int qt = qt_first;
  for (; qt < qt_own; ++qt) {
    mbar_wait(q_full + s, parity);
    if (lane == 0) mbar_arrive(released + s);
    next_stage();
  }
  mbar_wait(kv_full, 0);
  auto stage_q = [&](int st) { return sQ0 + st * BQ * DP; };
  auto stage_o = [&](int st) { return sO0 + st * BQ * DP; };
  auto stage_l = [&](int st) { return sL0 + st * 2 * BQ; };  // lse, then delta BQ floats on
  // The tile's dropout bits, drawn while its products run.
  auto draw_keep = [&](int i0) {
    KeepBits<NT> keep;
    if (p.dropout) keep = bwd_keep_keys<NT>(p, hv.sample, hv.hg, wkey + (lane >> 2), i0, lane);
    return keep;
  };
  // A step's scores alone: S^T and dP^T of the tile in stage `at` (queries from i0), then P z
  // and dS, packed as the A operands of the step's dV and dK products.
  auto scores_to_frags = [&](int at, int i0, uint32_t(&pa)[NT / 2][4], uint32_t(&da)[NT / 2][4]) {
    float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
    wgmma_fence();
    dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, stage_q(at), stage_o(at));
    wgmma_commit();
    const KeepBits<NT> keep = draw_keep(i0);
    wgmma_wait<0>();
    fence_acc(st);
    fence_acc(dpt);
    dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, stage_l(at), stage_l(at) + BQ, keep, b);
    c_to_a<T, NT>(st, pa);
    c_to_a<T, NT>(dpt, da);
  };
  if constexpr (!kPipelined) {
    for (; qt < nqt; ++qt) {
      mbar_wait(q_full + s, parity);
      fence_proxy_async();
      const int i0 = qt * BQ;
      uint32_t pa[NT / 2][4], da[NT / 2][4];
      scores_to_frags(s, i0, pa, da);
      if constexpr (DQ) {
        // dS^T into the tile before the dK product takes da (as the one-consumer kernel: the
        // last step's dQ product was waited for before the barrier in its add_dq_tile_bulk).
        store_frags_sw128<T, NT / 2>(sdS, da, warp, lane);
        fence_proxy_async();
      }
      fence_grads(dv, dk, pa, da);
      wgmma_fence();
      dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, stage_q(s), stage_o(s));
      wgmma_commit();
      if constexpr (DQ) {
        consumer_sync(1 + wg);  // the warpgroup's dS^T rows are visible to wgmma (while dV and dK run)
        float dq[DP / 8][4];  // queries i0 + 16 warp + g and + 8 (the C layout)
        dkdv_dq_product<T, DP>(dq, sdS, sK);
        add_dq_tile_bulk<DP>(sdQ + ((qt - qt_own) & 1) * BQ * DP, dq, dq_rows, i0, min(BQ, T_ - i0), p.D, warp,
                             lane, 1 + wg);
      } else {
        wgmma_wait<0>();
      }
      fence_grads(dv, dk, pa, da);
      if (lane == 0) mbar_arrive(released + s);  // the warp's products no longer read the stage
      next_stage();
    }
  } else {
    uint32_t pa[NT / 2][4], da[NT / 2][4];  // the previous step's P z and dS: A operands of its products
    mbar_wait(q_full + s, parity);
    fence_proxy_async();
    int prev_s = s;
    scores_to_frags(s, qt * BQ, pa, da);  // the first step
    for (++qt; qt < nqt; ++qt) {
      next_stage();
      mbar_wait(q_full + s, parity);  // every wait before the warpgroup's wgmma_fence
      fence_proxy_async();
      const int i0 = qt * BQ;
      float st[NT][4], dpt[NT][4];
      fence_grads(dv, dk, pa, da);  // the last packing of pa and da happens before the products
      wgmma_fence();
      dkdv_issue_scores<T, DP, BQ>(st, dpt, sK, sV, stage_q(s), stage_o(s));
      wgmma_commit();
      dkdv_issue_grads<T, DP, BQ>(dv, dk, pa, da, stage_q(prev_s), stage_o(prev_s));  // under this step's P and dS
      wgmma_commit();
      const KeepBits<NT> keep = draw_keep(i0);
      wgmma_wait<1>();  // S^T and dP^T (the previous step's products may still run)
      fence_acc(st);
      fence_acc(dpt);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, stage_l(s), stage_l(s) + BQ, keep, b);
      wgmma_wait<0>();  // the previous step's dV and dK products are done
      fence_grads(dv, dk, pa, da);
      if (lane == 0) mbar_arrive(released + prev_s);  // no product reads the previous step's stage
      c_to_a<T, NT>(st, pa);
      c_to_a<T, NT>(dpt, da);
      prev_s = s;
    }
    dkdv_last_grads<T, DP, BQ>(dv, dk, pa, da, stage_q(prev_s), stage_o(prev_s));
  }
  finish_dkdv<T, DP, DQ>(p, hv, dk, dv, wkey, warp, lane);
}

}  // namespace
}  // namespace trident::cuda
