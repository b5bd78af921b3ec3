// Fused causal multi-head attention, forward and backward (FlashAttention-2 style).
//
// What is fused, and why: scores = Q K^T * scale, the causal mask, the softmax, the
// attention-probability dropout and P V run in one kernel over query x key tiles with an
// online softmax, so the T x T score matrix never reaches global memory (it would be
// B*H*T*T floats per layer). Only the output and the f32 row log-sum-exp are written.
// The backward recomputes P = exp(S * scale - lse) tile by tile instead of storing it:
//   1. delta_i = rowsum(dO_i * O_i)                        (small pre-kernel, f32 scratch)
//   2. dK, dV: one block per key tile, looping over the query tiles that see it
//   3. dQ:     one block per query tile, looping over the key tiles it sees
// Each output element is owned by exactly one thread and summed in a fixed order, so the
// backward is deterministic without float atomics (at the price of recomputing S and dP
// in pass 3). A variant under measurement (TRIDENT_ATTN_BWD_ATOMIC=1) drops pass 3 the
// flash-attention-2 way: pass 2 also adds dS K into an f32 dQ with float atomics, and dQ's
// last bits then vary from run to run (mma.sync, and with TRIDENT_ATTN_BWD_WGMMA=1 the wgmma
// dK/dV kernel: 5 tile products instead of 7; with TRIDENT_ATTN_BWD_WS=1 the warp-specialized
// one, whose dQ tiles the copy engine adds by bulk f32 reduces). Dropout masks are drawn in the kernels from philox.h's
// attn_dropout_keep (16-bit uniforms, a Philox block per 2 queries x 4 keys) with the same
// key, head (h_global), query and key of sample drop.sample_base + b as the CPU twin
// (kernels/cpu/cpu_attention.cpp), so both backends drop the same elements. With a saved
// mask (AttentionShape::dropout_mask, TRIDENT_ATTN_SAVE_MASK=1 in training) the forward
// kernels also write their bits there and the backward kernels read them instead of drawing;
// with TRIDENT_ATTN_MASK_AHEAD=1 too, a kernel of its own draws the mask before the forward,
// whose kernels then read it as well.
//
// Documents (AttentionShape::document_starts, Megatron's --reset-attention-mask): a query sees
// the keys of its own document only. The forward and dQ tiles hide the keys before the row's
// document (mask_row_tile), the dK/dV tiles the queries past the key's document, from the
// documents' ends (p.doc_end, derived once a backward: mask_key_tile). Tiles wholly in other
// documents are skipped (first_key_tile, query_tiles_end), so short documents cost less than
// one causal sequence (blocks that straddle a boundary still walk their first document).
//
// The forward's online softmax moves a row's reference maximum only when a score passes it
// by more than kMaxSlack, so that most key tiles skip rescaling the output (exact: the output
// and the row sum share the reference); exponentials are single ex2.approx.ftz instructions
// (exp2_ftz). kernels/cuda/PERFORMANCE.md counts what these save.
//
// Two implementations of the same math:
// - fp16/bf16 with D % 8 == 0: tensor-core tiles (mma.sync m16n8k16, fp32 accumulation,
//   ldmatrix from padded shared-memory tiles filled by cp.async). Templated on DP, the
//   head dim rounded up to 32/64/128 (columns D..DP are zero in shared memory). Each warp
//   owns 16 rows of a 64-row tile; fully masked key tiles are skipped (causal). On sm_90a
//   (H100/H200) the default kernels use warpgroup MMA (wgmma) reading Q, K, V and dO from
//   128-byte swizzled shared memory, with the same softmax, backward arithmetic and
//   epilogues (the forward and the backward for D > 32: measured fastest); the forward's
//   warpgroup there is fed by one producer thread's TMA loads through a ring of mbarrier
//   stages, and runs each tile's P V under the next tile's softmax. The
//   tile shapes have alternatives (AttnTiles, chosen by environment variables), all run
//   through the same launch plans as the defaults.
// - fp32 (and any other case: D % 8 != 0, unaligned views, TRIDENT_ATTN_SIMT=1 in the
//   environment): one warp per row with fp32 CUDA-core arithmetic, the reference path.
// Softmax statistics, delta and all accumulation are fp32 in both.
//
// Where it is (kernels/cuda/attention/, in the order they build on each other):
//   attn_params.cuh           AttnParams, the dropout draws
//   attn_ptx.cuh              inline-PTX primitives (cp.async, ldmatrix, mma.sync, wgmma, mbarriers)
//   attn_tiles.cuh            tile helpers shared by the tensor-core kernels, masks, swizzle
//   attn_forward.cuh          forward: mma.sync and wgmma kernels
//   attn_forward_ws.cuh       forward: the warp-specialized wgmma kernel (TMA producer, K/V ring)
//   attn_backward_dkdv.cuh    pass 2: mma.sync and wgmma kernels, atomic dQ
//   attn_backward_dkdv_ws.cuh pass 2: the warp-specialized wgmma kernel (TMA producer, Q/dO ring)
//   attn_backward_dkdv_ws2.cuh pass 2: FlashAttention-3's block (two consumer warpgroups, setmaxnreg)
//   attn_backward_dq.cuh      pass 3: mma.sync and wgmma kernels
//   attn_backward_dq_ws.cuh   pass 3: the warp-specialized wgmma kernel (TMA producer, K/V ring)
//   attn_backward_passes.cuh  pass 1 (delta), documents' ends, the atomic dQ's zero and store
//   attn_simt.cuh             the CUDA-core kernels
//   attn_mask_ahead.cuh       the saved dropout mask drawn by a kernel of its own before the forward
//   attn_plans.cuh            launch plans and the tile shapes beside the defaults (AttnTiles)
// and this file: the host launchers (checks, tile settings from the environment, launches).
// tests/cuda/test_cuda_attention_emulated.cpp runs all of the device code and the plans on
// the CPU (no GPU needed), wgmma included: tests/cuda/emulate_attention.cmake copies the
// headers but attn_ptx.cuh, whose primitives the test defines as emulated twins.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention/attn_plans.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"

namespace trident::cuda {
namespace {

template <typename Kernel>
void launch_mma(Kernel kernel, dim3 grid, int smem, const AttnParams& p, cudaStream_t s, int threads = kThreads) {
  if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, threads, smem, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

unsigned simt_grid(const AttnParams& p) {
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.T;
  return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
}

// An integer tile setting from the environment (0, the default, when unset, empty or 0).
int env_tile(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  TRIDENT_CHECK(*end == '\0' && x >= 0 && x <= 1024, "attention: ", name, "=", v, " is not a tile size");
  return static_cast<int>(x);
}

// A switch from the environment (env_switch.h): 1, 0, or -1 when unset.
int env_switch(const char* name) { return cuda::env_switch(name, "attention"); }
bool env_flag(const char* name) { return env_switch(name) == 1; }

// Whether this build's code for the current GPU has the wgmma instructions: 1 when it was
// compiled for sm_90a (the sm_90 build has traps in their place).
__global__ void wgmma_probe_kernel(int* has_wgmma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *has_wgmma = 1;
#else
  *has_wgmma = 0;
#endif
}

// Whether the current GPU has compute capability 9.0 and this build's code for it has the
// wgmma instructions (CMake's default CUDA architectures "80;90a"); probed once per process.
bool wgmma_available() {
  static int available = -1;
  if (available < 0) {
    int dev = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    available = 0;
    if (major == 9 && minor == 0) {
      int* flag = nullptr;
      CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
      wgmma_probe_kernel<<<1, 1>>>(flag);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaMemcpy(&available, flag, sizeof(int), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(flag));
    }
  }
  return available == 1;
}

// The tile shapes asked for in the environment (AttnTiles) for head dim D, read per call so
// that a benchmark or a test can time and check several in one process. Unset variables
// take the defaults measured fastest on an H200 (kernels/cuda/PERFORMANCE.md, 2026-11-30 and
// 2026-12-04 fourth task): where wgmma_available(), the wgmma forward and backward for D > 32,
// unless a tile variable of that direction is set (a forward key tile counts: the mma.sync
// kernels' 32 does not exist in wgmma; its 128 takes FWD_WGMMA=1; likewise the wgmma
// backward's other dK/dV tiles take BWD_WGMMA=1 DKDV_BQ=...); elsewhere the mma.sync
// kernels. The wgmma forward by default is the warp-specialized one (TMA loads); asking for
// it (TRIDENT_ATTN_FWD_WGMMA=1) or any of its tiles gives the one-warpgroup kernel unless
// TRIDENT_ATTN_FWD_WS=1, and TRIDENT_ATTN_FWD_WS=0 gives it too. TRIDENT_ATTN_FWD_WGMMA /
// TRIDENT_ATTN_BWD_WGMMA = 0 or 1 override the default; 1 where wgmma is not available is an
// error.
AttnTiles tiles_from_env(int D) {
  AttnTiles t;
  const int wm = env_tile("TRIDENT_ATTN_FWD_WM");
  t.fwd_wm = wm == 0 ? 1 : wm;
  t.fwd_bk = env_tile("TRIDENT_ATTN_FWD_BK");
  t.fwd_nb = env_flag("TRIDENT_ATTN_FWD_DB") ? 2 : 1;
  t.dkdv_nb = env_flag("TRIDENT_ATTN_BWD_DB") ? 2 : 1;
  t.dq_atomic = env_flag("TRIDENT_ATTN_BWD_ATOMIC");
  t.dkdv_bq = env_tile("TRIDENT_ATTN_DKDV_BQ");
  t.dq_bk = env_tile("TRIDENT_ATTN_DQ_BK");
  auto warpgroups = [](const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || v[0] == '\0') return 1;
    TRIDENT_CHECK(std::strcmp(v, "1") == 0 || std::strcmp(v, "2") == 0, "attention: ", name, "=", v,
                  " is not a warpgroup count (1 or 2)");
    return v[0] - '0';
  };
  t.fwd_wg = warpgroups("TRIDENT_ATTN_FWD_WG");
  t.dkdv_wg = warpgroups("TRIDENT_ATTN_BWD_WG");
  t.dq_wg = warpgroups("TRIDENT_ATTN_DQ_WG");
  const int fwd = env_switch("TRIDENT_ATTN_FWD_WGMMA"), bwd = env_switch("TRIDENT_ATTN_BWD_WGMMA");
  const bool mma_fwd_asked = t.fwd_wm != 1 || t.fwd_bk != 0 || t.fwd_nb != 1;  // wgmma's 128 keys: FWD_WGMMA=1
  const bool mma_bwd_asked = t.dkdv_nb != 1 || t.dq_atomic || t.dkdv_bq != 0 || t.dq_bk != 0;
  const int ws = env_switch("TRIDENT_ATTN_FWD_WS");  // a wgmma kernel: 1 implies FWD_WGMMA=1
  t.fwd_wgmma = fwd == 1 || ws == 1 || (fwd < 0 && D > 32 && !mma_fwd_asked && wgmma_available());
  t.fwd_ws = ws == 1 || (ws < 0 && fwd < 0 && t.fwd_wgmma && t.fwd_wg == 1);
  t.dkdv_ws = env_flag("TRIDENT_ATTN_BWD_WS");  // wgmma kernels: each implies BWD_WGMMA=1
  t.dq_ws = env_flag("TRIDENT_ATTN_DQ_WS");
  t.bwd_wgmma = bwd == 1 || t.dkdv_ws || t.dq_ws || (bwd < 0 && D > 32 && !mma_bwd_asked && wgmma_available());
  TRIDENT_CHECK((fwd != 1 && bwd != 1 && ws != 1 && !t.dkdv_ws && !t.dq_ws) || wgmma_available(),
                "attention: TRIDENT_ATTN_FWD_WGMMA / TRIDENT_ATTN_BWD_WGMMA / TRIDENT_ATTN_FWD_WS / "
                "TRIDENT_ATTN_BWD_WS / TRIDENT_ATTN_DQ_WS need a compute capability 9.0 GPU and a build for "
                "sm_90a (CMAKE_CUDA_ARCHITECTURES with 90a)");
  return t;
}

// The tile settings, for an error message.
std::string describe(const AttnTiles& t) {
  return "TRIDENT_ATTN_FWD_WM=" + std::to_string(t.fwd_wm) + " TRIDENT_ATTN_FWD_BK=" + std::to_string(t.fwd_bk) +
         " TRIDENT_ATTN_FWD_DB=" + std::to_string(t.fwd_nb == 2) +
         " TRIDENT_ATTN_BWD_DB=" + std::to_string(t.dkdv_nb == 2) +
         " TRIDENT_ATTN_DKDV_BQ=" + std::to_string(t.dkdv_bq) + " TRIDENT_ATTN_DQ_BK=" + std::to_string(t.dq_bk) +
         " TRIDENT_ATTN_BWD_ATOMIC=" + std::to_string(t.dq_atomic) +
         " TRIDENT_ATTN_FWD_WG=" + std::to_string(t.fwd_wg) + " TRIDENT_ATTN_BWD_WG=" + std::to_string(t.dkdv_wg) +
         " TRIDENT_ATTN_DQ_WG=" + std::to_string(t.dq_wg) +
         " TRIDENT_ATTN_FWD_WGMMA=" + std::to_string(t.fwd_wgmma) + " TRIDENT_ATTN_FWD_WS=" + std::to_string(t.fwd_ws) +
         " TRIDENT_ATTN_BWD_WS=" + std::to_string(t.dkdv_ws) + " TRIDENT_ATTN_DQ_WS=" + std::to_string(t.dq_ws) +
         " TRIDENT_ATTN_BWD_WGMMA=" + std::to_string(t.bwd_wgmma);
}

// A TMA map of `view` (qkv_tma_view, dout_tma_view) for the warp-specialized kernels, encoded by
// the driver's cuTensorMapEncodeTiled (looked up through the runtime, so that nothing links
// libcuda), with the 128-byte swizzle of the wgmma tiles and zeros past D and T. `off`: the
// variable that takes the one-warpgroup kernels instead.
void encode_heads_map(CUtensorMap& map, const HeadsTmaView& v, bool bf16, const AttnParams& p, const char* off) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    TRIDENT_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                  "attention: the warp-specialized kernels need cuTensorMapEncodeTiled, which this CUDA driver "
                  "lacks (TRIDENT_ATTN_FWD_WS=0 takes the one-warpgroup forward)");
    return reinterpret_cast<Encode>(fn);
  }();
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r =
      encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
             const_cast<void*>(v.base), v.dims, v.strides, v.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TRIDENT_CHECK(r == CUDA_SUCCESS, "attention: cuTensorMapEncodeTiled refused a view (error ", static_cast<int>(r),
                ") for B ", p.B, " T ", p.T, " H ", p.H, " D ", p.D, " (", off, " takes the one-warpgroup kernel)");
}

// Runs plan(p, t, launch) (plan_forward_mma or plan_backward_mma); tiles that this head dim
// has no kernel for are an error.
template <typename Plan>
void run_plan(const char* op, const AttnParams& p, const AttnTiles& t, cudaStream_t s, Plan&& plan) {
  const bool ok = plan(p, t, [&](auto kernel, unsigned gx, unsigned gy, int smem, int threads = kThreads) {
    launch_mma(kernel, dim3(gx, gy), smem, p, s, threads);
  });
  TRIDENT_CHECK(ok, op, ": head dim ", p.D, " has no kernels for ", describe(t),
                " (see AttnTiles in kernels/cuda/attention/attn_plans.cuh)");
}

struct Checked {
  AttnParams p;
  bool mma = false;  // tensor-core path
};

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// Shape, dtype and placement checks shared by both entry points.
Checked check(const char* op, const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
              const DropoutKey& drop) {
  TRIDENT_CHECK(is_float(qkv.dtype), op, ": qkv must be a float tensor, got ", dtype_name(qkv.dtype));
  TRIDENT_CHECK(out.dtype == qkv.dtype, op, ": out/dout dtype ", dtype_name(out.dtype), " differs from qkv ",
                dtype_name(qkv.dtype));
  TRIDENT_CHECK(lse.dtype == DType::F32, op, ": lse must be f32, got ", dtype_name(lse.dtype));
  TRIDENT_CHECK(s.B > 0 && s.T > 0 && s.H > 0 && s.D > 0, op, ": bad shape B=", s.B, " T=", s.T, " H=", s.H,
                " D=", s.D);
  TRIDENT_CHECK(s.D <= 128, op, ": head dim ", s.D, " > 128 is not supported by the CUDA kernels");
  TRIDENT_CHECK(s.head_offset >= 0, op, ": negative head_offset ", s.head_offset);
  const int64_t B = s.B, T = s.T, H = s.H, D = s.D;
  TRIDENT_CHECK(qkv.numel() == B * T * 3 * H * D, op, ": qkv ", qkv.shape.str(), " for B,T,H,D=", B, ",", T, ",",
                H, ",", D);
  TRIDENT_CHECK(out.numel() == B * T * H * D, op, ": out ", out.shape.str(), " for B,T,H,D=", B, ",", T, ",", H,
                ",", D);
  TRIDENT_CHECK(lse.numel() == B * H * T, op, ": lse ", lse.shape.str(), " expected B*H*T=", B * H * T);
  TRIDENT_CHECK(B * H <= 0x7fffffff, op, ": B*H too large");
  // The tensor-core kernels put query tiles (64 rows at least) on grid.y, at most 65535.
  TRIDENT_CHECK((T + 63) / 64 <= 65535, op, ": T=", T, " is past the kernels' ", 65535 * 64, " positions");
  Checked c;
  AttnParams& p = c.p;
  p.qkv = qkv.data;
  p.out = out.data;
  p.lse = lse.ptr<float>();
  p.B = s.B;
  p.T = s.T;
  p.H = s.H;
  p.D = s.D;
  p.head_offset = s.head_offset;
  p.qkv_tok = 3 * H * D;
  p.out_tok = H * D;
  if (!s.document_starts.empty()) {
    const Tensor& docs = s.document_starts;
    TRIDENT_CHECK(docs.dtype == DType::I32 && docs.numel() == B * T, op, ": document_starts must be int32 [B*T]=",
                  B * T, ", got ", dtype_name(docs.dtype), " ", docs.shape.str());
    p.doc = docs.ptr<int32_t>();
  }
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  p.scale_log2 = p.scale * kLog2e;
  set_attn_dropout(p, drop);
  if (!s.dropout_mask.empty() && p.dropout) {
    const Tensor& m = s.dropout_mask;
    const int64_t words = attn_mask_words(B, H, T);
    TRIDENT_CHECK(m.dtype == DType::I32 && m.numel() == words, op, ": dropout_mask must be int32 [", words,
                  "] for B,H,T=", B, ",", H, ",", T, ", got ", dtype_name(m.dtype), " ", m.shape.str());
    // The dK/dV kernels read it by 32-bit words, and the mask kernel ahead of the forward stores it so.
    TRIDENT_CHECK(reinterpret_cast<uintptr_t>(m.data) % 4 == 0, op, ": dropout_mask is not 4-byte aligned");
    p.mask = static_cast<uint16_t*>(m.data);
    p.mask_blocks = attn_mask_blocks(T);
  }
  const bool simt_forced = env_flag("TRIDENT_ATTN_SIMT");
  c.mma = qkv.dtype != DType::F32 && s.D % 8 == 0 && aligned16(qkv.data) && aligned16(out.data) && !simt_forced;
  return c;
}

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
                       const DropoutKey& drop, cudaStream_t st) {
  const char* op = "attention_forward";
  const Checked c = check(op, qkv, out, lse, s, drop);
  AttnParams p = c.p;
  // TRIDENT_ATTN_MASK_AHEAD=1, where the call passes a saved mask (training does with the
  // variable set): the mask drawn by its own kernel, then read by the forward's. Without one
  // the forward's kernels draw as they do without the variable.
  if (p.mask != nullptr && env_flag("TRIDENT_ATTN_MASK_AHEAD")) {
    TRIDENT_CHECK(mask_ahead_grid(p) <= 0x7fffffff, op, ": TRIDENT_ATTN_MASK_AHEAD=1: B*H=", s.B * s.H,
                  " heads of T=", s.T, " are past one grid of the mask's kernel");
    p.mask_drawn = true;
    plan_mask_ahead(p, [&](auto kernel, unsigned gx, unsigned gy, int smem) {
      launch_mma(kernel, dim3(gx, gy), smem, p, st);
    });
  }
  dispatch_float(qkv.dtype, op, [&](auto tag) {
    using Ty = decltype(tag);
    if constexpr (std::is_same_v<Ty, float>) {
      attn_fwd_simt_kernel<Ty><<<simt_grid(p), kThreads, 0, st>>>(p);
      CUDA_CHECK_LAUNCH();
    } else {
      if (c.mma) {
        const AttnTiles t = tiles_from_env(s.D);
        if (t.fwd_ws)  // the warp-specialized kernel loads qkv by TMA
          encode_heads_map(p.qkv_map, qkv_tma_view(p, 2), std::is_same_v<Ty, __nv_bfloat16>, p,
                           "TRIDENT_ATTN_FWD_WS=0");
        run_plan(op, p, t, st, [](auto&&... a) { return plan_forward_mma<Ty>(a...); });
      } else {
        attn_fwd_simt_kernel<Ty><<<simt_grid(p), kThreads, 0, st>>>(p);
        CUDA_CHECK_LAUNCH();
      }
    }
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        const Tensor& dqkv, const AttentionShape& s, const DropoutKey& drop,
                        CachingAllocator& scratch, cudaStream_t st) {
  const char* op = "attention_backward";
  Checked c = check(op, qkv, out, lse, s, drop);
  TRIDENT_CHECK(dout.dtype == qkv.dtype && dqkv.dtype == qkv.dtype, op, ": dout ", dtype_name(dout.dtype),
                " and dqkv ", dtype_name(dqkv.dtype), " must have qkv's dtype ", dtype_name(qkv.dtype));
  TRIDENT_CHECK(dout.numel() == out.numel(), op, ": dout ", dout.shape.str(), " vs out ", out.shape.str());
  TRIDENT_CHECK(dqkv.numel() == qkv.numel(), op, ": dqkv ", dqkv.shape.str(), " vs qkv ", qkv.shape.str());
  TRIDENT_CHECK(dqkv.data != qkv.data, op, ": dqkv must not alias qkv");
  Scratch delta(scratch, static_cast<size_t>(lse.numel()) * sizeof(float));
  AttnParams& p = c.p;
  p.dout = dout.data;
  p.dqkv = dqkv.data;
  p.delta = delta.as<float>();
  c.mma = c.mma && aligned16(dout.data) && aligned16(dqkv.data);
  // The documents' ends (B*T int32) for the tensor-core dK/dV kernels (the CUDA-core one reads the starts).
  std::optional<Scratch> doc_end;
  if (p.doc != nullptr && c.mma)
    p.doc_end = doc_end.emplace(scratch, static_cast<size_t>(s.B) * s.T * sizeof(int32_t)).as<int32_t>();
  // As the forward: the tile settings only where the tensor-core kernels run (the SIMT path
  // on any GPU ignores them).
  const AttnTiles tiles = c.mma ? tiles_from_env(s.D) : AttnTiles{};
  // The atomic-dQ variant's f32 accumulator (B*H*T*D floats), only when it runs.
  std::optional<Scratch> dq_acc;
  if (c.mma && tiles.dq_atomic) {
    TRIDENT_CHECK(atomic_dq_grid(p).y <= 65535, op, ": TRIDENT_ATTN_BWD_ATOMIC=1: B*H=", s.B * s.H,
                  " heads in groups of up to 2^16 need more than 65535 grid rows");
    p.dq_acc = dq_acc.emplace(scratch, static_cast<size_t>(out.numel()) * sizeof(float)).as<float>();
  }
  dispatch_float(qkv.dtype, op, [&](auto tag) {
    using Ty = decltype(tag);
    auto launch = [&](auto kernel, unsigned gx, unsigned gy, int smem) { launch_mma(kernel, dim3(gx, gy), smem, p, st); };
    plan_document_ends(p, launch);
    plan_delta<Ty>(p, c.mma, launch);
    bool done = false;
    if constexpr (!std::is_same_v<Ty, float>) {
      if (c.mma) {
        if (tiles.dkdv_ws || tiles.dq_ws) {  // the warp-specialized kernels load by TMA
          const bool bf16 = std::is_same_v<Ty, __nv_bfloat16>;
          const char* off = "unsetting TRIDENT_ATTN_BWD_WS and TRIDENT_ATTN_DQ_WS";
          encode_heads_map(p.qkv_map, qkv_tma_view(p, 2), bf16, p, off);
          encode_heads_map(p.dout_map, dout_tma_view(p, 2), bf16, p, off);
        }
        run_plan(op, p, tiles, st, [](auto&&... a) { return plan_backward_mma<Ty>(a...); });
        done = true;
      }
    }
    if (!done) {
      attn_bwd_dkdv_simt_kernel<Ty><<<simt_grid(p), kThreads, 0, st>>>(p);
      CUDA_CHECK_LAUNCH();
      attn_bwd_dq_simt_kernel<Ty><<<simt_grid(p), kThreads, 0, st>>>(p);
      CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace trident::cuda
