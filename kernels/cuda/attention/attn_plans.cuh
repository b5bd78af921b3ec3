// Launch plans: the kernel instances, grids and shared memory of one call, for the host
// launchers (cuda_attention.cu) and the CPU emulator's test alike, and the tile shapes
// beside the defaults (AttnTiles).
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/attn_backward_dkdv.cuh"
#include "kernels/cuda/attention/attn_backward_dkdv_ws.cuh"
#include "kernels/cuda/attention/attn_backward_dkdv_ws2.cuh"
#include "kernels/cuda/attention/attn_backward_dq.cuh"
#include "kernels/cuda/attention/attn_backward_dq_ws.cuh"
#include "kernels/cuda/attention/attn_backward_passes.cuh"
#include "kernels/cuda/attention/attn_forward.cuh"
#include "kernels/cuda/attention/attn_forward_ws.cuh"
#include "kernels/cuda/attention/attn_mask_ahead.cuh"
#include "kernels/cuda/attention/attn_simt.cuh"

namespace trident::cuda {
namespace {

// Runtime head dim -> template DP in one place: 32, 64 or 128.
template <typename F>
void dispatch_dp(int D, F&& f) {
  if (D <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (D <= 64) {
    f(std::integral_constant<int, 64>{});
  } else {
    f(std::integral_constant<int, 128>{});
  }
}

// Tile shapes beside the defaults, compiled so that one GPU run can time them all (the host
// launchers take them from the environment at each call; 0 = the default). Which is
// fastest depends on the GPU (occupancy against shared-memory traffic per product), so
// they stay selectable until measured:
//   fwd_wm   16-row query tiles per warp in the forward: 1 (64-row blocks) or 2 (128-row
//            blocks: each K/V fragment feeds two products; D 128 then has 16-key tiles)
//   fwd_bk   key rows per forward tile with fwd_wm 1: D <= 32: 64; D 64: 64 or 128;
//            D 128: 32 or 64 (fewer barriers per key, more registers)
//   fwd_nb   K/V buffers of the forward, with any of its shapes: 1, or 2 (the next key tile
//            loads during all of this one's work; one barrier per key tile instead of four)
//   dkdv_nb  Q/dO buffers of the dK/dV kernel: 1, or 2 for D > 32 (D <= 32 keeps 1: its
//            two-buffer build spilled on sm_80)
//   dkdv_bq  query rows per dK/dV tile with one buffer: D <= 32: 64; D 64: 32 (default:
//            3 blocks an SM) or 64 (the only one with two buffers); D 128: 32 or 16
//   dq_bk    key rows per dQ tile: D <= 64: 64; D 128: 32 or 64
//   dq_atomic dQ added by the dK/dV kernel with float atomics (5 tile products, not 7; dQ's
//            last bits vary run to run), with any mma.sync dK/dV tiles, and with bwd_wgmma
//            its 64-query tiles at D 64 (dq_bk does not apply)
//   fwd_wgmma the forward by warpgroup MMA (sm_90a; attn_fwd_wgmma_kernel), D > 32, with
//            fwd_wm 1 and fwd_nb 1 (it has two K/V buffers of its own); fwd_bk 64 (default)
//            or 128. The default where wgmma_available() (tiles_from_env)
//   bwd_wgmma the backward's dK/dV and dQ passes by warpgroup MMA (sm_90a), D > 32, with 64-row
//            tiles and two buffers of their own; dkdv_bq 64 (default) or, for D 64, 32 (3
//            blocks an SM), or with dq_atomic: no other backward setting applies. The
//            default for D > 32 where wgmma_available()
//   fwd_wg / dkdv_wg / dq_wg  warpgroups a block of the wgmma forward, dK/dV and dQ kernels:
//            1 (64 rows), or 2 (128 rows, 256 threads: each streamed tile is loaded once for
//            both; with dq_atomic the dK/dV kernel's two warpgroups sum their dQ partials
//            before the atomics, half as many); dkdv_wg 2 for D 64 only (with dkdv_ws: D 64
//            and 128, see there). With any fwd_wgmma / bwd_wgmma tiles. (The launches' block
//            size: the plans' launch callbacks take it as a fifth argument, default kThreads.)
//   fwd_ws   the warp-specialized wgmma forward (attn_fwd_ws_kernel: one thread loads by TMA
//            into a ring of K/V stages, P V runs under the next tile's softmax), with fwd_wgmma,
//            fwd_wg 1 and 64-key tiles, or for D 64 also 128 (fwd_bk). The default where
//            wgmma_available() (tiles_from_env); its AttnParams carry the TMA map of qkv
//   dkdv_ws  the warp-specialized wgmma dK/dV kernel (attn_bwd_dkdv_ws_kernel: Q and dO by TMA
//            into a ring), with bwd_wgmma, D 64, one warpgroup, no atomic dQ; dkdv_bq 64
//            (default: a stage a step) or 32 (each stage by halves, the next half's S^T and
//            dP^T issued with this one's dV and dK products); the dQ kernel as bwd_wgmma's
//            (dq_wg 1 or 2, or dq_ws), or with dq_atomic and 64-query steps none: the kernel
//            computes dQ = dS K too and the copy engine adds it to p.dq_acc (bulk f32
//            reduces, FlashAttention-3's way). Its AttnParams carry the TMA maps of qkv and dout.
//            With dkdv_wg 2: FlashAttention-3's block (attn_bwd_dkdv_ws2_kernel: 128 keys, two
//            consumer warpgroups with 240 registers a thread, a producer warpgroup), D 64 (the
//            next step's S^T and dP^T under this one's products) and 128, 64-query steps
//            (dkdv_bq 0 or 64); then the dQ kernel as above, or at D 64 with dq_atomic none
//            (dQ by bulk f32 reduces, as with one warpgroup)
//   dq_ws    the warp-specialized wgmma dQ kernel (attn_bwd_dq_ws_kernel: K and V by TMA into a
//            ring, each step's dS K under the next step's elementwise step; D 128 by half
//            tiles), with bwd_wgmma, D 64 and 128, dq_wg 1, no atomic dQ; after any wgmma dK/dV
//            kernel (dkdv_ws included).
//            Its AttnParams carry the TMA maps of qkv and dout
struct AttnTiles {
  int fwd_wm = 1, fwd_bk = 0, fwd_nb = 1, dkdv_nb = 1, dkdv_bq = 0, dq_bk = 0;
  int fwd_wg = 1, dkdv_wg = 1, dq_wg = 1;
  bool dq_atomic = false, fwd_wgmma = false, bwd_wgmma = false, fwd_ws = false, dkdv_ws = false, dq_ws = false;
};

template <int DP>
constexpr int kDefaultTile = DP == 128 ? 32 : 64;  // key / query rows per tile by default

// The wgmma forward's part of plan_forward_mma (t.fwd_wgmma).
template <typename T, typename Launch>
bool plan_forward_wgmma(const AttnParams& p, const AttnTiles& t, Launch&& launch) {
  if (p.D <= 32 || t.fwd_wm != 1 || t.fwd_nb != 1 || (t.fwd_wg != 1 && t.fwd_wg != 2)) return false;
  const unsigned bh = static_cast<unsigned>(p.B * p.H);
  bool ok = false;
  auto with_warpgroups = [&](auto dp, auto wg) {
    constexpr int DP = decltype(dp)::value, WG = decltype(wg)::value;
    const unsigned tiles = static_cast<unsigned>((p.T + 64 * WG - 1) / (64 * WG));
    const int bk = t.fwd_bk != 0 ? t.fwd_bk : 64;
    if (t.fwd_ws) {
      if (WG != 1) return;
      if (bk == 64) {
        launch(attn_fwd_ws_kernel<T, DP, 64>, bh, tiles, ws_fwd_smem_bytes<DP, 64>(), kWsThreads);
        ok = true;
      } else if constexpr (DP == 64) {
        if (bk == 128) {
          launch(attn_fwd_ws_kernel<T, DP, 128>, bh, tiles, ws_fwd_smem_bytes<DP, 128>(), kWsThreads);
          ok = true;
        }
      }
      return;
    }
    if (bk == 64) {
      launch(attn_fwd_wgmma_kernel<T, DP, 64, WG>, bh, tiles, wgmma_fwd_smem_bytes<DP, 64, WG>(), kThreads * WG);
      ok = true;
    } else if (bk == 128) {
      launch(attn_fwd_wgmma_kernel<T, DP, 128, WG>, bh, tiles, wgmma_fwd_smem_bytes<DP, 128, WG>(), kThreads * WG);
      ok = true;
    }
  };
  dispatch_dp(p.D, [&](auto dp) {
    if constexpr (decltype(dp)::value >= 64) {
      if (t.fwd_wg == 2) {
        with_warpgroups(dp, std::integral_constant<int, 2>{});
      } else {
        with_warpgroups(dp, std::integral_constant<int, 1>{});
      }
    }
  });
  return ok;
}

// Forward: launch(kernel, grid_x, grid_y, smem_bytes) once; false (nothing launched) when
// `t` asks for a tile this head dim has no instance of. The K/V buffer count (t.fwd_nb)
// combines with every mma.sync tile shape.
template <typename T, typename Launch>
bool plan_forward_mma(const AttnParams& p, const AttnTiles& t, Launch&& launch) {
  if (t.fwd_wgmma) return plan_forward_wgmma<T>(p, t, launch);
  if (t.fwd_ws) return false;  // a wgmma kernel
  if (t.fwd_wg != 1) return false;  // the mma.sync kernels' 128-row blocks are fwd_wm 2
  const unsigned bh = static_cast<unsigned>(p.B * p.H);
  bool ok = false;
  auto shaped = [&](auto nb) {
    constexpr int NB = decltype(nb)::value;
    dispatch_dp(p.D, [&](auto dp) {
      constexpr int DP = decltype(dp)::value, BK = kDefaultTile<DP>;
      const unsigned tiles64 = static_cast<unsigned>((p.T + 63) / 64);
      const unsigned tiles128 = static_cast<unsigned>((p.T + 127) / 128);
      if (t.fwd_wm == 2 && t.fwd_bk == 0) {
        // D = 128 holds two 16 x 128 output tiles per warp: 16-key tiles keep it unspilled.
        constexpr int BK2 = DP == 128 ? 16 : 64;
        launch(attn_fwd_mma_kernel<T, DP, BK2, 2, NB>, bh, tiles128, fwd_smem_bytes<DP, BK2, 2, NB>());
        ok = true;
      } else if (t.fwd_wm == 1 && (t.fwd_bk == 0 || t.fwd_bk == BK)) {
        launch(attn_fwd_mma_kernel<T, DP, BK, 1, NB>, bh, tiles64, fwd_smem_bytes<DP, BK, 1, NB>());
        ok = true;
      } else if constexpr (DP >= 64) {
        if (t.fwd_wm == 1 && t.fwd_bk == 2 * BK) {
          launch(attn_fwd_mma_kernel<T, DP, 2 * BK, 1, NB>, bh, tiles64, fwd_smem_bytes<DP, 2 * BK, 1, NB>());
          ok = true;
        }
      }
    });
  };
  if (t.fwd_nb == 2) {
    shaped(std::integral_constant<int, 2>{});
  } else if (t.fwd_nb == 1) {
    shaped(std::integral_constant<int, 1>{});
  }
  return ok;
}

// The atomic-dQ dK/dV kernels' grid (dkdv_block) for blocks of key_rows keys:
// (key tiles << g, ceil(B*H / 2^g)).
struct GridXY {
  unsigned x, y;
};
GridXY atomic_dq_grid(const AttnParams& p, int key_rows = 64) {
  const int heads = p.B * p.H, g = atomic_dq_group_log2(heads, p.T, p.D);
  const unsigned key_tiles = static_cast<unsigned>((p.T + key_rows - 1) / key_rows);
  return {key_tiles << g, static_cast<unsigned>(((heads - 1) >> g) + 1)};
}

// The atomic-dQ backward: p.dq_acc zeroed, the dK/dV kernel that adds dQ into it
// (launch_dkdv(grid), on atomic_dq_grid's grid for its blocks of key_rows keys:
// dkdv_block), then dQ stored. Grid-stride passes over dq_acc: at most 2048 blocks (~16 an
// SM on an H100).
template <typename T, typename Launch, typename LaunchDkdv>
void launch_atomic_dq(const AttnParams& p, Launch&& launch, LaunchDkdv&& launch_dkdv, int key_rows = 64) {
  const int64_t n4 = static_cast<int64_t>(p.B) * p.H * p.T * p.D / 4;
  const unsigned flat = static_cast<unsigned>(std::min<int64_t>((n4 + kThreads - 1) / kThreads, 2048));
  launch(attn_dq_zero_kernel, flat, 1u, 0);
  launch_dkdv(atomic_dq_grid(p, key_rows));
  launch(attn_dq_store_kernel<T>, flat, 1u, 0);
}

// Backward passes 2 and 3 (dK/dV, then dQ; the delta pre-kernel is the caller's): false
// (nothing launched) when `t` asks for a tile this head dim has no instance of. With
// t.dq_atomic, pass 3 is the dK/dV kernel's own (p.dq_acc zeroed before it, stored after).
template <typename T, typename Launch>
bool plan_backward_mma(const AttnParams& p, const AttnTiles& t, Launch&& launch) {
  const unsigned bh = static_cast<unsigned>(p.B * p.H), tiles = static_cast<unsigned>((p.T + 63) / 64);
  bool ok = false;
  if (t.bwd_wgmma) {  // 64-query dK/dV tiles (D 64: or 32) and 64-key dQ tiles, or atomic dQ (D 64, 64 queries)
    if (p.D <= 32 || t.dkdv_nb != 1 || t.dq_bk != 0) return false;
    if (t.dq_wg != 1 && t.dq_wg != 2) return false;
    if (t.dq_atomic && (t.dq_wg != 1 || t.dq_ws)) return false;  // no dQ kernel
    if (t.dq_ws && t.dq_wg != 1) return false;  // the warp-specialized dQ kernel has one warpgroup
    // The dQ pass of a head dim: warp-specialized, or of t.dq_wg warpgroups.
    auto launch_dq = [&](auto dp) {
      constexpr int DP = decltype(dp)::value;
      if (t.dq_ws) {
        launch(attn_bwd_dq_ws_kernel<T, DP>, bh, tiles, ws_dq_smem_bytes<DP>(), kWsThreads);
      } else if (t.dq_wg == 2) {
        launch(attn_bwd_dq_wgmma_kernel<T, DP, 64, 2>, bh, static_cast<unsigned>((p.T + 127) / 128),
               wgmma_dq_smem_bytes<DP, 64, 2>(), 2 * kThreads);
      } else {
        launch(attn_bwd_dq_wgmma_kernel<T, DP, 64>, bh, tiles, wgmma_dq_smem_bytes<DP, 64>());
      }
    };
    if (t.dkdv_ws && t.dkdv_wg == 2) {  // two consumer warpgroups: D 64 and 128, then a wgmma dQ kernel
      if (t.dq_atomic) {  // D 64, dQ added by the copy engine
        if (p.D > 64 || (t.dkdv_bq != 0 && t.dkdv_bq != 64)) return false;
        launch_atomic_dq<T>(
            p, launch,
            [&](GridXY grid) {
              launch(attn_bwd_dkdv_ws2_kernel<T, 64, true>, grid.x, grid.y, ws2_dkdv_smem_bytes<64, true>(),
                     kWs2Threads);
            },
            kWs2Keys);
        return true;
      }
      const unsigned key_blocks = static_cast<unsigned>((p.T + kWs2Keys - 1) / kWs2Keys);
      dispatch_dp(p.D, [&](auto dp) {
        constexpr int DP = decltype(dp)::value;
        if constexpr (DP >= 64) {
          if (t.dkdv_bq != 0 && t.dkdv_bq != 64) return;
          launch(attn_bwd_dkdv_ws2_kernel<T, DP>, bh, key_blocks, ws2_dkdv_smem_bytes<DP>(), kWs2Threads);
          launch_dq(dp);
          ok = true;
        }
      });
      return ok;
    }
    if (t.dkdv_ws) {  // D 64, 64- or 32-query steps, one warpgroup, then a wgmma dQ kernel or atomic dQ
      if (p.D > 64 || (t.dkdv_bq != 0 && t.dkdv_bq != 64 && t.dkdv_bq != 32) || t.dkdv_wg != 1) return false;
      if (t.dq_atomic) {  // 64-query steps, dQ added by the copy engine
        if (t.dkdv_bq == 32) return false;
        launch_atomic_dq<T>(p, launch, [&](GridXY grid) {
          launch(attn_bwd_dkdv_ws_kernel<T, 64, true>, grid.x, grid.y, ws_dkdv_smem_bytes<true>(), kWsThreads);
        });
        return true;
      }
      if (t.dkdv_bq == 32) {
        launch(attn_bwd_dkdv_ws_kernel<T, 32>, bh, tiles, ws_dkdv_smem_bytes(), kWsThreads);
      } else {
        launch(attn_bwd_dkdv_ws_kernel<T, 64>, bh, tiles, ws_dkdv_smem_bytes(), kWsThreads);
      }
      launch_dq(std::integral_constant<int, 64>{});
      return true;
    }
    if (t.dq_atomic && t.dkdv_bq != 0 && t.dkdv_bq != 64) return false;
    if (t.dkdv_wg != 1 && t.dkdv_wg != 2) return false;
    // The dK/dV kernel of WG warpgroups (64 keys each) a block.
    auto with_warpgroups = [&](auto dp, auto wg) {
      constexpr int DP = decltype(dp)::value, WG = decltype(wg)::value, kKeys = 64 * WG;
      const int threads = kThreads * WG;
      const unsigned key_tiles = static_cast<unsigned>((p.T + kKeys - 1) / kKeys);
      if (t.dq_atomic) {  // D 64 only: D 128's kernel uses 255 registers without dQ, and spilled with it
        if constexpr (DP == 64) {
          launch_atomic_dq<T>(
              p, launch,
              [&](GridXY grid) {
                launch(attn_bwd_dkdv_wgmma_kernel<T, DP, 64, true, WG>, grid.x, grid.y,
                       wgmma_dkdv_smem_bytes<DP, 64, true, WG>(), threads);
              },
              kKeys);
          ok = true;
        }
        return;
      }
      // 64-query dK/dV tiles by default; D 64 also has 32 (3 blocks an SM instead of 2, which
      // was 21% faster until one branch a tile on the dropout cut the kernels' instruction
      // fetch stalls; since then 64 is 5% faster on an H200, B16 T1024 H32).
      const int bq = t.dkdv_bq != 0 ? t.dkdv_bq : 64;
      if (bq == 64) {
        launch(attn_bwd_dkdv_wgmma_kernel<T, DP, 64, false, WG>, bh, key_tiles,
               wgmma_dkdv_smem_bytes<DP, 64, false, WG>(), threads);
      } else if constexpr (DP == 64) {
        if (bq != 32) return;
        launch(attn_bwd_dkdv_wgmma_kernel<T, DP, 32, false, WG>, bh, key_tiles,
               wgmma_dkdv_smem_bytes<DP, 32, false, WG>(), threads);
      } else {
        return;
      }
      launch_dq(dp);
      ok = true;
    };
    dispatch_dp(p.D, [&](auto dp) {
      if constexpr (decltype(dp)::value >= 64) {
        if (t.dkdv_wg == 2) {
          // D 64 only: D 128's kernel (255 registers with one warpgroup) spilled 16 bytes.
          if constexpr (decltype(dp)::value == 64) with_warpgroups(dp, std::integral_constant<int, 2>{});
        } else {
          with_warpgroups(dp, std::integral_constant<int, 1>{});
        }
      }
    });
    return ok;
  }
  if (t.dkdv_wg != 1 || t.dq_wg != 1 || t.dkdv_ws || t.dq_ws) return false;  // the mma.sync kernels have one block shape
  dispatch_dp(p.D, [&](auto dp) {
    constexpr int DP = decltype(dp)::value, BK = kDefaultTile<DP>;
    const bool two_buffers = t.dkdv_nb == 2 && DP >= 64;
    // D 64: 32-query dK/dV tiles by default (3 blocks an SM instead of 2: 22% faster on an
    // H200 before the dropout branch moved out of the tile loop; since then the H200 prefers
    // two buffers, but it runs the wgmma kernels: kept until a GPU without them is timed);
    // two buffers exist for 64-query tiles only.
    const int bq_default = DP == 64 && !two_buffers ? BK / 2 : BK;
    const int bq = t.dkdv_bq == 0 ? bq_default : t.dkdv_bq, dq_bk = t.dq_bk == 0 ? BK : t.dq_bk;
    const bool dkdv_ok = bq == BK || (bq == BK / 2 && DP >= 64 && !two_buffers);
    const bool dq_ok = dq_bk == BK || (dq_bk == 2 * BK && DP == 128 && !t.dq_atomic);
    if (!dkdv_ok || !dq_ok) return;
    // The dK/dV kernel of the asked-for tiles; DQ: with atomic dQ.
    auto launch_dkdv = [&](auto dq, GridXY grid) {
      constexpr bool DQ = decltype(dq)::value;
      if (bq != BK) {
        if constexpr (DP >= 64)
          launch(attn_bwd_dkdv_mma_kernel<T, DP, BK / 2, 1, DQ>, grid.x, grid.y, dkdv_smem_bytes<DP, BK / 2, 1, DQ>());
      } else if (two_buffers) {
        if constexpr (DP >= 64)
          launch(attn_bwd_dkdv_mma_kernel<T, DP, BK, 2, DQ>, grid.x, grid.y, dkdv_smem_bytes<DP, BK, 2, DQ>());
      } else {
        launch(attn_bwd_dkdv_mma_kernel<T, DP, BK, 1, DQ>, grid.x, grid.y, dkdv_smem_bytes<DP, BK, 1, DQ>());
      }
    };
    ok = true;
    if (t.dq_atomic) {
      launch_atomic_dq<T>(p, launch, [&](GridXY grid) { launch_dkdv(std::true_type{}, grid); });
      return;
    }
    launch_dkdv(std::false_type{}, GridXY{bh, tiles});
    if (dq_bk != BK) {
      if constexpr (DP == 128) launch(attn_bwd_dq_mma_kernel<T, DP, 2 * BK>, bh, tiles, dq_smem_bytes<DP, 2 * BK>());
    } else {
      launch(attn_bwd_dq_mma_kernel<T, DP, BK>, bh, tiles, dq_smem_bytes<DP, BK>());
    }
  });
  return ok;
}

}  // namespace
}  // namespace trident::cuda
