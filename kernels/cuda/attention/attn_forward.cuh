// The forward's tensor-core kernels: the online softmax of a key tile and the rows' end
// (shared), the mma.sync kernel (sm_80 on) and the wgmma kernel (sm_90a).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include "kernels/cuda/attention/attn_tiles.cuh"

namespace trident::cuda {
namespace {

// One key tile of the forward's online softmax for a warp's 16 query rows [wrow, wrow + 16),
// all but the output: s holds their raw scores against keys [k0, k0 + 8 NT) in the C layout
// of m16n8 tiles. Masks hidden keys, moves the rows' reference maxima m when a score passes
// them by more than kMaxSlack (rescaling the partial sums l), turns s into P (times the
// dropout factors of keep, fwd_keep_rows' bits) and adds P's row sums to l. Returns whether
// m moved (warp-uniform); then the output rows must be multiplied by al (rescale_rows)
// before P V is added to them. b: the sample (its documents' first keys).
template <typename T, int NT>
__device__ __forceinline__ bool fwd_softmax_scores(const AttnParams& p, float (&s)[NT][4], float (&m)[2],
                                                   float (&l)[2], float (&al)[2], int wrow, int k0, int lane,
                                                   const KeepBits<NT>& keep, int b) {
  mask_row_tile<NT>(p, s, b, wrow, k0, lane);
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
    mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  mx0 *= p.scale_log2;
  mx1 *= p.scale_log2;
  // The warp rescales its output and sums only when some row's maximum passes the
  // reference m by more than kMaxSlack (the FlashAttention-4 way); otherwise m stays,
  // and P = 2^(s - m) <= 2^kMaxSlack. O and l share m, so the result is the same.
  const bool moved = __any_sync(0xffffffffu, mx0 > m[0] + kMaxSlack || mx1 > m[1] + kMaxSlack);
  al[0] = al[1] = 1.f;
  if (moved) {
    const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
    // A row with nothing visible yet keeps m = -inf (and O = l = 0).
    al[0] = mn0 == -INFINITY ? 1.f : exp2_ftz(m[0] - mn0);
    al[1] = mn1 == -INFINITY ? 1.f : exp2_ftz(m[1] - mn1);
    m[0] = mn0;
    m[1] = mn1;
    l[0] *= al[0];
    l[1] *= al[1];
  }
  // P = 2^(s scale_log2 - m): one FFMA and one MUFU an element. m = -inf: subtract 0.
  const float ms0 = m[0] == -INFINITY ? 0.f : m[0], ms1 = m[1] == -INFINITY ? 0.f : m[1];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    s[nt][0] = exp2_ftz(fmaf(s[nt][0], p.scale_log2, -ms0));
    s[nt][1] = exp2_ftz(fmaf(s[nt][1], p.scale_log2, -ms0));
    s[nt][2] = exp2_ftz(fmaf(s[nt][2], p.scale_log2, -ms1));
    s[nt][3] = exp2_ftz(fmaf(s[nt][3], p.scale_log2, -ms1));
    l[0] += s[nt][0] + s[nt][1];
    l[1] += s[nt][2] + s[nt][3];
  }
  if (p.dropout) {  // rows and keys past T get factors too: their values are never stored
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= keep.factor(p, nt, e);
  }
  return moved;
}

// A warp's output rows g (times al[0]) and g + 8 (times al[1]).
template <int DP>
__device__ __forceinline__ void rescale_rows(float (&o)[DP / 8][4], const float (&al)[2]) {
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    o[nt][0] *= al[0];
    o[nt][1] *= al[0];
    o[nt][2] *= al[1];
    o[nt][3] *= al[1];
  }
}

// fwd_softmax_scores with the output rescaled at once: for kernels whose P V of the previous
// tile has completed (the caller turns s into the A operand of this tile's P V). Shared by
// the mma.sync and the wgmma kernels: a warp's accumulator fragments have the same layout in
// both.
template <typename T, int NT, int DP>
__device__ __forceinline__ void fwd_softmax_tile(const AttnParams& p, float (&s)[NT][4], float (&o)[DP / 8][4],
                                                 float (&m)[2], float (&l)[2], int wrow, int k0, int lane,
                                                 const KeepBits<NT>& keep, int b) {
  float al[2];
  if (fwd_softmax_scores<T, NT>(p, s, m, l, al, wrow, k0, lane, keep, b)) rescale_rows<DP>(o, al);
}

// The forward's end for a warp's 16 rows [wrow, wrow + 16) of head h of sample b: O / l to
// p.out and the log-sum-exp (natural log) to p.lse; rows >= T are not written.
template <typename T, int DP>
__device__ __forceinline__ void fwd_store_rows(const AttnParams& p, const float (&o)[DP / 8][4], const float (&m)[2],
                                               const float (&l)[2], int b, int h, int wrow, int lane) {
  const int T_ = p.T;
  float l0 = l[0], l1 = l[1];
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  // Every row sees its own key, so l > 0 for rows < T.
  T* gO = static_cast<T*>(p.out) + static_cast<int64_t>(b) * T_ * p.out_tok + static_cast<int64_t>(h) * p.D;
  store_acc<T, DP>(gO, p.out_tok, o, wrow, T_, p.D, lane, 1.f / l0, 1.f / l1);
  if ((lane & 3) == 0) {
    const int row0 = wrow + (lane >> 2), row1 = row0 + 8;
    float* lse = p.lse + (static_cast<int64_t>(b) * p.H + h) * T_;
    if (row0 < T_) lse[row0] = (m[0] + log2f(l0)) * kLn2;
    if (row1 < T_) lse[row1] = (m[1] + log2f(l1)) * kLn2;
  }
}

template <int DP, int BK, int WM, int NB>
constexpr int fwd_smem_bytes() {
  return (64 * WM + 2 * NB * BK) * (DP + 8) * 2;
}

// Forward. Grid (B*H, ceil(T/(64 WM))); block: 64 WM query rows, each of the 4 warps owning
// WM tiles of 16 rows (64 rows apart, so that every warp has work near the diagonal). Key
// tiles of BK rows stream through shared memory:
// - NB = 1 (one K and one V buffer): K of the next tile loads while P V runs, V of the next
//   tile while the next S runs; four barriers per key tile.
// - NB = 2 (two of each): the whole next tile (K and V) loads while this one is used; one
//   barrier per key tile (TRIDENT_ATTN_FWD_DB=1 selects it while it is measured).
// (The minimum of 1 block per SM in the launch bounds lets ptxas use the registers it
// needs: left to itself it aimed at 3 blocks for D = 128 with 64-key tiles on sm_80, and
// spilled. fwd_min_blocks names the one shape that asks for more.)
template <int DP, int BK, int WM, int NB>
constexpr int fwd_min_blocks() {
  // D = 128, 64-row blocks, two 32-key buffers: left to itself ptxas takes 172 registers (2
  // blocks an SM where the one-buffer kernel's 160 give 3); asked for 3 it fits in 166.
  return DP == 128 && BK == 32 && WM == 1 && NB == 2 ? 3 : 1;
}
template <typename T, int DP, int BK, int WM, int NB>
__global__ void __launch_bounds__(kThreads, fwd_min_blocks<DP, BK, WM, NB>())
    attn_fwd_mma_kernel(const AttnParams p) {
  static_assert(NB == 1 || NB == 2, "one or two K/V buffers");
  constexpr int BQ = 64 * WM, LDS = DP + 8, NT = BK / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK0 = sQ + BQ * LDS;       // NB K buffers, then NB V buffers
  T* sV0 = sK0 + NB * BK * LDS;

  const int T_ = p.T, D = p.D;
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;  // the longest rows start first
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int last_wrow = q0 + (WM - 1) * 64 + warp * 16;  // the warp's last row tile
  const int nkb = (min(q0 + BQ, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, q0, BK);
  const uint64_t sample = hv.sample, hg = hv.hg;

  {  // the first key tile into its buffer (NB = 2: the tile's parity)
    const int first = NB == 2 ? (kb_first & 1) * BK * LDS : 0;
    load_tile<T, BQ, DP>(sQ, gQ, p.qkv_tok, q0, T_, D);
    load_tile<T, BK, DP>(sK0 + first, gK, p.qkv_tok, kb_first * BK, T_, D);
    if constexpr (NB == 1) cp_async_commit();  // NB = 1 waits for K before V
    load_tile<T, BK, DP>(sV0 + first, gV, p.qkv_tok, kb_first * BK, T_, D);
    cp_async_commit();
  }

  float o[WM][DP / 8][4];
  float m[WM][2], l[WM][2];  // per row tile, rows g and g + 8: exp2-domain max, partial sums
#pragma unroll
  for (int mt = 0; mt < WM; ++mt) {
    zero_frags(o[mt]);
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  for (int kb = kb_first; kb < nkb; ++kb) {
    const int k0 = kb * BK;
    const int buf = NB == 2 ? kb & 1 : 0;
    T* sK = sK0 + buf * BK * LDS;
    T* sV = sV0 + buf * BK * LDS;
    if constexpr (NB == 1) {
      cp_async_wait<1>();  // Q and K of this tile have landed (V may be in flight)
      __syncthreads();
    } else {
      cp_async_wait<0>();  // this tile (and Q) has landed
      __syncthreads();     // ... for every warp, and every warp is done with the other buffers
      if (kb + 1 < nkb) {
        load_tile<T, BK, DP>(sK0 + (buf ^ 1) * BK * LDS, gK, p.qkv_tok, k0 + BK, T_, D);
        load_tile<T, BK, DP>(sV0 + (buf ^ 1) * BK * LDS, gV, p.qkv_tok, k0 + BK, T_, D);
        cp_async_commit();
      }
    }
    // Warp-uniform: some key of the tile is visible to the warp's last (lowest) row tile.
    // Its other row tiles may see none of it: their scores are all -inf and add nothing.
    const bool active = k0 <= last_wrow + 15;
    uint32_t pa[WM][NT / 2][4];
    if (active) {
      float s[WM][NT][4];
      mma_abt_wm<T, DP, NT, WM>(s, sQ, sK, warp, lane);
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        const int wrow = q0 + mt * 64 + warp * 16;
        KeepBits<NT> keep;
        if (p.dropout) keep = fwd_keep_rows<NT>(p, sample, hg, wrow + (lane >> 2), k0, lane);
        fwd_softmax_tile<T, NT, DP>(p, s[mt], o[mt], m[mt], l[mt], wrow, k0, lane, keep, b);
        c_to_a<T, NT>(s[mt], pa[mt]);
      }
    }
    if constexpr (NB == 1) {
      __syncthreads();  // every warp is done with sK
      if (kb + 1 < nkb) {
        load_tile<T, BK, DP>(sK, gK, p.qkv_tok, k0 + BK, T_, D);
        cp_async_commit();
        cp_async_wait<1>();  // V of this tile has landed (the next K may be in flight)
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    }
    if (active) mma_ab_regs_wm<T, DP, NT / 2, WM>(o, pa, sV, lane);
    if constexpr (NB == 1) {
      __syncthreads();  // every warp is done with sV
      if (kb + 1 < nkb) {
        load_tile<T, BK, DP>(sV, gV, p.qkv_tok, k0 + BK, T_, D);
        cp_async_commit();
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < WM; ++mt) fwd_store_rows<T, DP>(p, o[mt], m[mt], l[mt], b, h, q0 + mt * 64 + warp * 16, lane);
}

template <int DP, int BK, int WG = 1>
constexpr int wgmma_fwd_smem_bytes() {
  return (64 * WG + 4 * BK) * DP * 2 + kSwizzleSpan;  // Q (a tile a warpgroup), two K and two V buffers; alignment
}
// Blocks an SM the two-warpgroup forward asks ptxas to leave registers for (the second
// argument of its launch bounds): at D 64 with 64-key tiles two (122 registers with one
// warpgroup, under the 128 that two 256-thread blocks allow; 128-key tiles need 196, and
// spilled under 128); the others take what they need.
template <int DP, int BK, int WG>
constexpr int wgmma_fwd_min_blocks() {
  return WG == 2 && DP == 64 && BK == 64 ? 2 : 1;
}

// Forward on sm_90a. Grid (B*H, ceil(T/(64 WG))); block: WG warpgroups of 64 query rows
// each (warp w of warpgroup g: rows 64g + 16w..+15, as in the mma.sync kernel, whose
// softmax and epilogue it shares). Key tiles of BK rows are double-buffered (the next K and
// V load during this tile) and, with two warpgroups (TRIDENT_ATTN_FWD_WG=2, while it is
// measured), shared by both: each K and V tile is loaded once for 128 query rows, as in
// FlashAttention-2's and -3's 128-row blocks, halving what the forward reads from L2. Per
// tile: S = Q K^T by DP/16 wgmma from shared memory, the online softmax in registers, then
// O += P V by BK/16 wgmma with P from registers. Each product is waited for before its
// result is used: the overlap of tensor-core work with the softmax comes from the other
// warpgroups on the SM (2-4).
template <typename T, int DP, int BK, int WG = 1>
__global__ void __launch_bounds__(kThreads * WG, wgmma_fwd_min_blocks<DP, BK, WG>())
    attn_fwd_wgmma_kernel(const AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(BK % 16 == 0 && BK <= 256, "wgmma N and k16 steps");
  static_assert(WG == 1 || WG == 2, "one or two warpgroups a block");
  constexpr int BQ = 64, NT = BK / 8, kBlockThreads = kThreads * WG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = swizzle_aligned<T>(smem_raw);  // WG Q tiles
  T* sK0 = sQ + WG * BQ * DP;            // two K buffers, then two V buffers
  T* sV0 = sK0 + 2 * BK * DP;

  const int T_ = p.T, D = p.D;
  const int bh = blockIdx.x, b = bh / p.H, h = bh - b * p.H;
  const int block_q0 = (gridDim.y - 1 - blockIdx.y) * BQ * WG;  // the longest rows start first
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v;
  // This warpgroup's 64 rows and Q tile; warp: within the warpgroup.
  const int wg = WG == 1 ? 0 : static_cast<int>(threadIdx.x) / kThreads;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int q0 = block_q0 + wg * BQ;
  const int wrow = q0 + warp * 16;
  const int nkb = (min(block_q0 + BQ * WG, T_) + BK - 1) / BK, kb_first = first_key_tile(p, b, block_q0, BK);
  const uint64_t sample = hv.sample, hg = hv.hg;
  const int tid = static_cast<int>(threadIdx.x);
  sQ += wg * BQ * DP;

  load_tile_sw128<T, BQ, DP>(sQ, gQ, p.qkv_tok, q0, T_, D, tid & (kThreads - 1));
  {  // the first key tile into the buffer of its parity
    const int first = (kb_first & 1) * BK * DP;
    load_tile_sw128<T, BK, DP, kBlockThreads>(sK0 + first, gK, p.qkv_tok, kb_first * BK, T_, D, tid);
    load_tile_sw128<T, BK, DP, kBlockThreads>(sV0 + first, gV, p.qkv_tok, kb_first * BK, T_, D, tid);
  }
  cp_async_commit();

  float o[DP / 8][4];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  zero_frags(o);

  for (int kb = kb_first; kb < nkb; ++kb) {
    const int k0 = kb * BK, buf = kb & 1;
    const T* sK = sK0 + buf * BK * DP;
    const T* sV = sV0 + buf * BK * DP;
    cp_async_wait<0>();   // this tile (and Q) has landed
    fence_proxy_async();  // ... where wgmma can see it
    __syncthreads();      // ... for every warp; every wgmma of the previous tile has completed
    if (kb + 1 < nkb) {
      load_tile_sw128<T, BK, DP, kBlockThreads>(sK0 + (buf ^ 1) * BK * DP, gK, p.qkv_tok, k0 + BK, T_, D, tid);
      load_tile_sw128<T, BK, DP, kBlockThreads>(sV0 + (buf ^ 1) * BK * DP, gV, p.qkv_tok, k0 + BK, T_, D, tid);
      cp_async_commit();
    }
    // Tiles past this warpgroup's last row (the second warpgroup's diagonal tiles, with
    // two), or a warpgroup whose rows are all past T: nothing to add. The condition is the
    // same for the whole warpgroup, whose wgmma are collective.
    if (WG == 2 && (k0 > q0 + BQ - 1 || q0 >= T_)) continue;
    // The whole warpgroup computes every tile (wgmma is collective): a warp whose rows see
    // none of its keys gets all -inf scores, P = 0, and adds nothing.
    float s[NT][4];
    wgmma_fence();
    wgmma_abt<T, DP, BQ, BK>(s, sQ, sK);
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = fwd_keep_rows<NT>(p, sample, hg, wrow + (lane >> 2), k0, lane);
    wgmma_wait<0>();
    fence_acc(s);
    fwd_softmax_tile<T, NT, DP>(p, s, o, m, l, wrow, k0, lane, keep, b);
    uint32_t pa[NT / 2][4];
    c_to_a<T, NT>(s, pa);
    fence_acc(o);  // the softmax's rescale of o happens before the products that add to it
    fence_frag(pa);
    wgmma_fence();
    wgmma_ab_regs<T, DP, NT / 2>(o, pa, sV);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(o);
    fence_frag(pa);
  }
  fwd_store_rows<T, DP>(p, o, m, l, b, h, wrow, lane);
}

}  // namespace
}  // namespace trident::cuda
