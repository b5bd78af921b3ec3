// The backward's dQ pass on tensor cores (pass 3): one block a query tile, looping over
// the key tiles it sees; the mma.sync kernel and the wgmma kernel (sm_90a).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include "kernels/cuda/attention/attn_tiles.cuh"

namespace trident::cuda {
namespace {

// A dQ warp's two query rows row0 = wrow + lane / 4 and row1 = row0 + 8: their lse times
// log2(e) and delta (0 past T).
struct DqRows {
  int row0, row1;
  float ls0, ls1, dl0, dl1;
};
template <typename T>
__device__ __forceinline__ DqRows dq_rows(const AttnParams& p, const HeadView<T>& hv, int wrow, int lane) {
  const int T_ = p.T;
  DqRows r;
  r.row0 = wrow + (lane >> 2);
  r.row1 = r.row0 + 8;
  r.ls0 = r.row0 < T_ ? hv.lse[r.row0] * kLog2e : 0.f;
  r.ls1 = r.row1 < T_ ? hv.lse[r.row1] * kLog2e : 0.f;
  r.dl0 = r.row0 < T_ ? hv.delta[r.row0] : 0.f;
  r.dl1 = r.row1 < T_ ? hv.delta[r.row1] : 0.f;
  return r;
}

// One key tile of the dQ pass for a warp's 16 query rows [wrow, wrow + 16) (r: their
// statistics): s holds S = Q K^T, dp holds dP = dO V^T for keys [k0, k0 + 8 NT) in the C
// layout; keep: their dropout bits (bwd_keep_rows). Leaves dS = P (z dP - delta) in s (0
// for hidden keys). Shared by the mma.sync and wgmma dQ kernels.
template <typename T, int NT>
__device__ __forceinline__ void dq_tile_ds(const AttnParams& p, float (&s)[NT][4], const float (&dp)[NT][4], int wrow,
                                           int k0, int lane, const DqRows& r, const KeepBits<NT>& keep, int b) {
  const float ls0 = r.ls0, ls1 = r.ls1, dl0 = r.dl0, dl1 = r.dl1;
  mask_row_tile<NT>(p, s, b, wrow, k0, lane);  // hidden keys get score -inf, P 0
  branch_on_dropout(p.dropout, [&](auto with_dropout) {
    constexpr bool kDrop = decltype(with_dropout)::value;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp2_ftz(fmaf(s[nt][e], p.scale_log2, -(e < 2 ? ls0 : ls1)));
        const float z = kDrop ? keep.factor(p, nt, e) : 1.f;
        s[nt][e] = pe * (z * dp[nt][e] - (e < 2 ? dl0 : dl1));  // dS
      }
  });
}

template <int DP, int BK>
constexpr int dq_smem_bytes() {
  return (2 * 64 + 4 * BK) * (DP + 8) * 2;  // Q, dO; K and V double-buffered
}

// Backward pass 3: dQ. Grid (B*H, ceil(T/64)); block: 64 query rows (4 warps x 16), key
// tiles of BK rows up to the diagonal, double-buffered (tile kb+1 loads while kb is used).
// Per tile: S = Q K^T, dP = dO V^T, dS = P (z dP - delta), dQ += dS K; dQ * scale at the end.
// (Left to itself, ptxas for sm_80 held the D <= 64 kernels to 128 registers and spilled;
// 3 blocks an SM allow 168, which they fit in. 0: no minimum, ptxas's own choice.)
template <int DP>
constexpr int dq_mma_min_blocks() {
  return DP <= 64 ? 3 : 0;
}
template <typename T, int DP, int BK>
__global__ void __launch_bounds__(kThreads, dq_mma_min_blocks<DP>()) attn_bwd_dq_mma_kernel(const AttnParams p) {
  constexpr int BQ = 64, LDS = DP + 8, NT = BK / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sO = sQ + BQ * LDS;  // dO
  T* sK0 = sO + BQ * LDS;  // K, V of even tiles, then of odd tiles
  T* sV0 = sK0 + BK * LDS;
  T* sK1 = sV0 + BK * LDS;
  T* sV1 = sK1 + BK * LDS;

  const int T_ = p.T, D = p.D;
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wrow = q0 + warp * 16;
  const int nkb = (min(q0 + BQ, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, q0, BK);
  const DqRows rows = dq_rows(p, hv, wrow, lane);

  load_tile<T, BQ, DP>(sQ, gQ, p.qkv_tok, q0, T_, D);
  load_tile<T, BQ, DP>(sO, gdO, p.out_tok, q0, T_, D);
  load_tile<T, BK, DP>(kb_first & 1 ? sK1 : sK0, gK, p.qkv_tok, kb_first * BK, T_, D);  // the buffer of its parity
  load_tile<T, BK, DP>(kb_first & 1 ? sV1 : sV0, gV, p.qkv_tok, kb_first * BK, T_, D);
  cp_async_commit();

  float dq[DP / 8][4];
  zero_frags(dq);

  for (int kb = kb_first; kb < nkb; ++kb) {
    const int k0 = kb * BK;
    const bool odd = kb & 1;
    if (kb + 1 < nkb) {  // the other buffer was released by the barrier ending the last tile
      load_tile<T, BK, DP>(odd ? sK0 : sK1, gK, p.qkv_tok, k0 + BK, T_, D);
      load_tile<T, BK, DP>(odd ? sV0 : sV1, gV, p.qkv_tok, k0 + BK, T_, D);
      cp_async_commit();
      cp_async_wait<1>();  // this tile has landed (the next may be in flight)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (k0 <= wrow + 15) {  // warp-uniform: skip a tile entirely above the diagonal
      const T* sK = odd ? sK1 : sK0;
      const T* sV = odd ? sV1 : sV0;
      float s[NT][4], dp[NT][4];
      KeepBits<NT> keep;
      if (p.dropout) keep = bwd_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, k0, lane);
      mma_abt<T, DP, NT>(s, sQ, sK, warp, lane);
      mma_abt<T, DP, NT>(dp, sO, sV, warp, lane);
      dq_tile_ds<T, NT>(p, s, dp, wrow, k0, lane, rows, keep, b);
      uint32_t da[NT / 2][4];
      c_to_a<T, NT>(s, da);
      mma_ab_regs<T, DP, NT / 2>(dq, da, sK, lane);
    }
    __syncthreads();  // every warp is done with this tile's buffer
  }

  store_acc<T, DP>(hv.dq, p.qkv_tok, dq, wrow, T_, D, lane, p.scale, p.scale);
}

// ---- dQ with warpgroup MMA (sm_90a) -------------------------------------------------------
// The mma.sync pass (deterministic: no float atomics), with every product a wgmma on the
// swizzled tiles of the wgmma forward and the same per-warp elementwise code (dq_tile_ds).
// The streamed key tiles are double-buffered.

// The wgmma dQ kernels' score products of a key tile (64 query rows; BK keys): S = Q K^T and
// dP = dO V^T; K and V: BK rows at sK and sV in tiles of KV_ROWS rows (a part of taller
// tiles). Issued only: the caller fences before and commits after.
template <typename T, int DP, int BK, int KV_ROWS = BK>
__device__ __forceinline__ void dq_issue_scores(float (&s)[BK / 8][4], float (&dp)[BK / 8][4], const T* sQ,
                                                const T* sO, const T* sK, const T* sV) {
  wgmma_abt_pair<T, DP, BK, KV_ROWS>(s, dp, sQ, sK, sO, sV);
}

template <int DP, int BK, int WG = 1>
constexpr int wgmma_dq_smem_bytes() {
  return (WG * 2 * 64 + 4 * BK) * DP * 2 + kSwizzleSpan;  // Q, dO (a tile each a warpgroup); two K, two V; alignment
}

// dQ on sm_90a. Grid (B*H, ceil(T/(64 WG))); block: WG warpgroups of 64 query rows each;
// key tiles of BK rows up to the diagonal, shared by the warpgroups (WG 2,
// TRIDENT_ATTN_DQ_WG=2 while it is measured: each K and V tile loaded once for 128 rows).
// Per tile: S = Q K^T and dP = dO V^T (one wgmma group), dS in registers, dQ += dS K (K read
// MN-major from the same tile).
template <typename T, int DP, int BK, int WG = 1>
__global__ void __launch_bounds__(kThreads * WG, 1) attn_bwd_dq_wgmma_kernel(const AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(WG == 1 || WG == 2, "one or two warpgroups a block");
  constexpr int BQ = 64, NT = BK / 8, kBlockThreads = kThreads * WG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = swizzle_aligned<T>(smem_raw);  // WG Q tiles, then WG dO tiles
  T* sO = sQ + WG * BQ * DP;
  T* sK0 = sO + WG * BQ * DP;  // two K buffers, then two V buffers
  T* sV0 = sK0 + 2 * BK * DP;

  const int T_ = p.T, D = p.D;
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H;
  const int block_q0 = (gridDim.y - 1 - blockIdx.y) * BQ * WG;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  // This warpgroup's 64 rows and tiles; warp: within the warpgroup.
  const int wg = WG == 1 ? 0 : static_cast<int>(threadIdx.x) / kThreads;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int q0 = block_q0 + wg * BQ;
  const int wrow = q0 + warp * 16;
  const int nkb = (min(block_q0 + BQ * WG, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, block_q0, BK);
  const DqRows rows = dq_rows(p, hv, wrow, lane);
  const int tid = static_cast<int>(threadIdx.x), wtid = tid & (kThreads - 1);
  sQ += wg * BQ * DP;
  sO += wg * BQ * DP;

  load_tile_sw128<T, BQ, DP>(sQ, gQ, p.qkv_tok, q0, T_, D, wtid);
  load_tile_sw128<T, BQ, DP>(sO, gdO, p.out_tok, q0, T_, D, wtid);
  {  // the first key tile into the buffer of its parity
    const int first = (kb_first & 1) * BK * DP;
    load_tile_sw128<T, BK, DP, kBlockThreads>(sK0 + first, gK, p.qkv_tok, kb_first * BK, T_, D, tid);
    load_tile_sw128<T, BK, DP, kBlockThreads>(sV0 + first, gV, p.qkv_tok, kb_first * BK, T_, D, tid);
  }
  cp_async_commit();

  float dq[DP / 8][4];
  zero_frags(dq);

  for (int kb = kb_first; kb < nkb; ++kb) {
    const int k0 = kb * BK, buf = kb & 1;
    const T* sK = sK0 + buf * BK * DP;
    const T* sV = sV0 + buf * BK * DP;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // this tile is visible to wgmma; every product of the last one is done
    if (kb + 1 < nkb) {
      load_tile_sw128<T, BK, DP, kBlockThreads>(sK0 + (buf ^ 1) * BK * DP, gK, p.qkv_tok, k0 + BK, T_, D, tid);
      load_tile_sw128<T, BK, DP, kBlockThreads>(sV0 + (buf ^ 1) * BK * DP, gV, p.qkv_tok, k0 + BK, T_, D, tid);
      cp_async_commit();
    }
    if (WG == 2 && (k0 > q0 + BQ - 1 || q0 >= T_)) continue;  // past this warpgroup's rows (uniform in it)
    // Every warp computes every tile (wgmma is collective); keys a warp's rows do not see
    // get dS = 0.
    float s[NT][4], dp[NT][4];
    wgmma_fence();
    dq_issue_scores<T, DP, BK>(s, dp, sQ, sO, sK, sV);
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = bwd_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, k0, lane);
    wgmma_wait<0>();
    fence_acc(s);
    fence_acc(dp);
    dq_tile_ds<T, NT>(p, s, dp, wrow, k0, lane, rows, keep, b);
    uint32_t da[NT / 2][4];
    c_to_a<T, NT>(s, da);
    fence_acc(dq);
    fence_frag(da);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) wgmma_rs<T, DP>(dq, da[kk], mnmajor_desc<T, BK>(sK, kk));
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(dq);
    fence_frag(da);
  }

  store_acc<T, DP>(hv.dq, p.qkv_tok, dq, wrow, T_, D, lane, p.scale, p.scale);
}

}  // namespace
}  // namespace trident::cuda
