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
// dK/dV kernel: 5 tile products instead of 7). Dropout masks are drawn in the kernels from philox.h's
// attn_dropout_keep (16-bit uniforms, a Philox block per 2 queries x 4 keys) with the same
// key, head (h_global), query and key of sample drop.sample_base + b as the CPU twin
// (kernels/cpu/cpu_attention.cpp), so both backends drop the same elements.
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
//   epilogues (the forward and the backward for D > 32: measured fastest). The
//   tile shapes have alternatives (AttnTiles, chosen by environment variables), all run
//   through the same launch plans as the defaults.
// - fp32 (and any other case: D % 8 != 0, unaligned views, TRIDENT_ATTN_SIMT=1 in the
//   environment): one warp per row with fp32 CUDA-core arithmetic, the reference path.
// Softmax statistics, delta and all accumulation are fp32 in both.
//
// tests/cuda/test_cuda_attention_emulated.cpp runs the device code below on the CPU (no
// GPU needed), wgmma included. Its extraction, tests/cuda/emulate_attention.cmake, relies on
// the inline-PTX primitives sitting between smem_addr and pack2 and on the "Host launchers"
// banner.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/env_switch.h"

namespace trident::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps per block in every kernel of this file
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// How far (log2 units) a forward row's score may pass the row's reference maximum before
// the output is rescaled: P <= 2^8 = 256, well inside fp32 and fp16 (and 16-bit P rounds
// relative to its size).
constexpr float kMaxSlack = 8.f;

struct AttnParams {
  const void* qkv = nullptr;   // [B, T, 3, H, D]
  void* out = nullptr;         // [B, T, H, D] (forward output; backward input)
  float* lse = nullptr;        // [B, H, T]
  const void* dout = nullptr;  // [B, T, H, D]
  void* dqkv = nullptr;        // [B, T, 3, H, D]
  float* delta = nullptr;      // [B, H, T] scratch: rowsum(dO * O)
  float* dq_acc = nullptr;     // [B, H, T, D] f32 scratch of the atomic-dQ backward (else unused)
  const int32_t* doc = nullptr;  // [B, T] first key of each query's document, or null (AttentionShape)
  int32_t* doc_end = nullptr;    // [B, T] tensor-core backward scratch with doc: one past each key's document
  int B = 0, T = 0, H = 0, D = 0;
  int head_offset = 0;
  int64_t qkv_tok = 0;  // elements between consecutive tokens of qkv: 3 * H * D
  int64_t out_tok = 0;  // elements between consecutive tokens of out/dout: H * D
  float scale = 1.f;       // 1 / sqrt(D)
  float scale_log2 = 1.f;  // scale * log2(e): scores in the exp2 domain
  float inv_keep = 1.f;    // attn_drop_scale(p): a kept probability's factor
  uint32_t drop_thr = 0;   // attn_drop_threshold(p), at most 65535 (set_attn_dropout)
  bool dropout = false;
  DropoutKey drop{};
};

// ---- dropout -----------------------------------------------------------------------------
// philox.h's attn_dropout_keep: element (query i, key j) of head hg is the 16-bit half
// i & 1 of word j & 3 of the Philox block with counter attn_drop_counter(hg, T, i, j),
// kept when the half reaches the threshold. Restated here with the word selected without
// a dynamically indexed array (which would live in local memory); tests/cuda checks the
// masks against the CPU twin, which calls attn_dropout_keep.
__host__ __device__ __forceinline__ uint32_t philox_word(const Philox4& r, uint32_t w) {
  return w == 0 ? r.v[0] : w == 1 ? r.v[1] : w == 2 ? r.v[2] : r.v[3];
}
__host__ __device__ __forceinline__ Philox4 attn_block(const AttnParams& p, uint64_t sample, uint64_t hg, int i,
                                                       int j) {
  return dropout_philox(p.drop, sample,
                        attn_drop_counter(hg, static_cast<uint64_t>(p.T), static_cast<uint64_t>(i),
                                          static_cast<uint64_t>(j)));
}
// Whether a 16-bit uniform u keeps its element.
__host__ __device__ __forceinline__ bool attn_kept(const AttnParams& p, uint32_t u) { return u >= p.drop_thr; }

// Dropout factor of one element (a whole Philox block for it: the SIMT kernels).
__host__ __device__ __forceinline__ float attn_drop_one(const AttnParams& p, uint64_t sample, uint64_t hg, int i,
                                                        int j) {
  const uint32_t w = philox_word(attn_block(p, sample, hg, i, j), static_cast<uint32_t>(j & 3));
  return attn_kept(p, attn_drop_uniform(w, static_cast<uint64_t>(i))) ? p.inv_keep : 0.f;
}

// The dropout fields of the kernels' parameters (check() and the emulated tests). A
// threshold of 65536 keeps nothing: the device compares with 65535 and scales by 0.
inline void set_attn_dropout(AttnParams& p, const DropoutKey& drop) {
  p.drop = drop;
  p.dropout = drop.enabled();
  p.inv_keep = p.dropout ? attn_drop_scale(drop.p) : 1.0f;
  p.drop_thr = std::min(attn_drop_threshold(drop.p), 65535u);
}

// The tensor-core kernels draw each block once: the four lanes that hold parts of the same
// four blocks draw one block each and pass each other the words by three shuffles (a 4 x 4
// transpose). A block costs ~60 integer operations, about as much as an element's share of
// the tensor-core products, so these draws are most of what dropout adds to the kernels.
// Every lane of the warp must call them. Both take two n8 tiles of the m16n8 C layout
// (columns c and c + 8) and return the thread's 8 keep bits: bit 4 t + e for tile t and
// the layout's element e (rows r and r + 8 for e < 2 and e >= 2, columns c + (e & 1)).
// Bits, not factors: 8 live floats pushed the D 128 dK/dV kernel into spills.

// The keep bits of the two uniforms packed in w (low half: bit 0), placed at bit `at`.
__device__ __forceinline__ uint32_t attn_keep_bits2(const AttnParams& p, uint32_t w, int at) {
  const uint32_t bits = static_cast<uint32_t>(attn_kept(p, w & 0xffffu)) |
                        (static_cast<uint32_t>(attn_kept(p, w >> 16)) << 1);
  return bits << at;
}
// The bit offset 4 t + e of block b's first element (b = 2 x element pair + tile).
__device__ __forceinline__ int attn_block_bit(int b) { return 4 * (b & 1) + 2 * (b >> 1); }

// Forward and dQ (rows = queries): the thread's rows are row0 = wrow + lane / 4 and row0 + 8,
// its columns col and col + 1 (col = c0 + 2 (lane & 3), c0 a multiple of 8) and 8 further.
// The lanes lane ^ {0, 1, 4, 5} hold both queries of row0's and row1's pairs and both column
// pairs of the key quads col & ~3 and col & ~3 + 8: four blocks. Lane m = (lane & 1) |
// ((lane >> 1) & 2) draws block m (row pair m >> 1, tile m & 1); lane n needs half
// (n >> 1) (its row's parity) of words 2 (n & 1) and 2 (n & 1) + 1 (its columns) of each.
__device__ __forceinline__ uint32_t attn_drop_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                   int col, int lane) {
  const int m = (lane & 1) | ((lane >> 1) & 2);
  const Philox4 r = attn_block(p, sample, hg, (m & 2) ? row0 + 8 : row0, (col & ~3) + (m & 1) * 8);
  const auto part = [&](int n) {  // lane n's 32 bits of this block: its two columns, its row
    const uint32_t lo = (n & 1) ? r.v[2] : r.v[0], hi = (n & 1) ? r.v[3] : r.v[1];
    return (n & 2) ? (lo >> 16) | (hi & 0xffff0000u) : (lo & 0xffffu) | (hi << 16);
  };
  uint32_t keep = attn_keep_bits2(p, part(m), attn_block_bit(m));
#pragma unroll
  for (int k = 1; k < 4; ++k) {  // this lane's part of block m ^ k, from lane position m ^ k
    const uint32_t got = __shfl_xor_sync(0xffffffffu, part(m ^ k), (k & 1) | ((k & 2) << 1));
    keep |= attn_keep_bits2(p, got, attn_block_bit(m ^ k));
  }
  return keep;
}

// dK/dV (rows = keys): the thread's keys are key0 = wkey + lane / 4 and key0 + 8, its
// queries i and i + 1 (i = i0 + 2 (lane & 3), i0 a multiple of 8) and 8 further: word
// key0 & 3 of each of the four blocks (key quad of key0 or key1) x (tile), whose two
// halves are its queries i, i + 1. The lanes with the same lane & 3 and lane >> 4 share the
// blocks; lane m = (lane >> 2) & 3 draws block m (key quad m >> 1, tile m & 1).
__device__ __forceinline__ uint32_t attn_drop_keys(const AttnParams& p, uint64_t sample, uint64_t hg, int key0, int i,
                                                   int lane) {
  const int m = (lane >> 2) & 3;
  const Philox4 r = attn_block(p, sample, hg, i + (m & 1) * 8, key0 - m + (m >> 1) * 8);
  uint32_t keep = attn_keep_bits2(p, philox_word(r, static_cast<uint32_t>(m)), attn_block_bit(m));
#pragma unroll
  for (int k = 1; k < 4; ++k) {  // word m of block m ^ k, from lane position m ^ k
    const uint32_t got = __shfl_xor_sync(0xffffffffu, philox_word(r, static_cast<uint32_t>(m ^ k)), k << 2);
    keep |= attn_keep_bits2(p, got, attn_block_bit(m ^ k));
  }
  return keep;
}

// The keep bits of a warp tile's NT n8 tiles (all lanes draw them together): element e of
// n8 tile nt at bit 4 (nt % 8) + e of word nt / 8 (attn_drop_rows/keys' bits, pair by
// pair). The wgmma kernels draw them while the tile's score products run on the tensor
// cores, and the elementwise step reads one bit an element.
template <int NT>
struct KeepBits {
  static_assert(NT % 2 == 0, "dropout draws take n8 tiles in pairs");
  uint32_t w[(NT + 7) / 8] = {};
  __device__ __forceinline__ float factor(const AttnParams& p, int nt, int e) const {
    return (w[nt / 8] >> (4 * (nt % 8) + e)) & 1u ? p.inv_keep : 0.f;
  }
  // Pair by pair from draw(c), the 8 bits of the n8 tiles at columns c and c + 8 (c: this
  // lane's first column of the pair; the tile's columns start at c0).
  template <typename Draw>
  __device__ __forceinline__ static KeepBits drawn(int c0, int lane, Draw&& draw) {
    KeepBits keep;
#pragma unroll
    for (int q = 0; q < NT / 2; ++q) keep.w[q / 4] |= draw(c0 + q * 16 + (lane & 3) * 2) << (8 * (q % 4));
    return keep;
  }
};
// Rows = queries (forward, dQ): the warp's rows row0 = wrow + lane / 4 and row0 + 8 against
// keys k0 .. k0 + 8 NT - 1.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_keep_rows(const AttnParams& p, uint64_t sample, uint64_t hg, int row0,
                                                       int k0, int lane) {
  return KeepBits<NT>::drawn(k0, lane, [&](int col) { return attn_drop_rows(p, sample, hg, row0, col, lane); });
}
// Rows = keys (dK/dV): the warp's keys key0 = wkey + lane / 4 and key0 + 8 against queries
// i0 .. i0 + 8 NT - 1.
template <int NT>
__device__ __forceinline__ KeepBits<NT> attn_keep_keys(const AttnParams& p, uint64_t sample, uint64_t hg, int key0,
                                                       int i0, int lane) {
  return KeepBits<NT>::drawn(i0, lane, [&](int i) { return attn_drop_keys(p, sample, hg, key0, i, lane); });
}

// =========================================================================================
// Kernels: tensor-core path (fp16 / bf16)
// =========================================================================================

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; when !valid the 16 bytes are zero-filled (nothing read).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(n)
               : "memory");
}
// 4-byte global -> shared copy (zero-filled when !valid): a tile's lse and delta, so that no
// thread waits for them before the warpgroup's next wgmma.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(n)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8. Without .trans
// lane t receives row t/4, columns 2(t%4), 2(t%4)+1 of each matrix; with .trans rows
// 2(t%4), 2(t%4)+1 of column t/4 (the transposed fragment).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// D = A B + D, m16n8k16, fp32 accumulators. With g = lane / 4, q = lane % 4:
// A regs: (row g, k 2q..), (row g+8, k 2q..), (row g, k 2q+8..), (row g+8, k 2q+8..);
// B regs: (k 2q.., n g), (k 2q+8.., n g); C: (row g, n 2q, 2q+1), (row g+8, n 2q, 2q+1).
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// *p += a, p[1] += b by float atomics (p 8-byte aligned): one vector atomic on sm_90.
__device__ __forceinline__ void atomic_add_pair(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// 2^x with subnormal results flushed to zero: one MUFU.EX2. exp2f without -ftz adds three
// instructions per call to get subnormal results right (a compare and two predicated
// multiplies, counted in the cubin), and nothing here needs them: a probability below
// 2^-126 next to at least one of ~1 is lost to the fp32 sum (and to the 16-bit P) anyway.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- sm_90a warpgroup MMA (wgmma) -----------------------------------------------------------
// All 128 threads (one warpgroup) issue each wgmma together. The instructions exist only on
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets compile a trap in their place, and the
// host launches the wgmma kernels only on compute capability 9.0 (wgmma_available).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TRIDENT_SM90A_ASM(...) asm volatile(__VA_ARGS__)
#else
#define TRIDENT_SM90A_ASM(...) __trap()
#endif

// Makes this thread's generic-proxy shared-memory writes (stores, cp.async) visible to the
// async proxy that wgmma reads shared memory through; a barrier then publishes them.
__device__ __forceinline__ void fence_proxy_async() {
  TRIDENT_SM90A_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_fence() { TRIDENT_SM90A_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { TRIDENT_SM90A_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  TRIDENT_SM90A_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator registers at this point of the instruction stream: the compiler does not
// know that wgmma writes them asynchronously, so reads after wgmma_wait (and writes before
// wgmma_fence) must not move across it.
template <int NT>
__device__ __forceinline__ void fence_acc(float (&d)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[nt][e])::"memory");
}
// The same for A fragments that wgmma reads from registers: packed before wgmma_fence, kept
// until wgmma_wait.
template <int KK>
__device__ __forceinline__ void fence_frag(uint32_t (&a)[KK][4]) {
#pragma unroll
  for (int kk = 0; kk < KK; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[kk][e])::"memory");
}

// d (64 x N, f32; warp w holds rows 16w..16w+15 in the C layout of N/8 m16n8 tiles)
// = A B (+ d when `accumulate`), one k16 step: A (64 x 16) and B (N x 16) both K-major in
// shared memory, given by descriptors (sw128_desc).
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int accumulate);
// d (64 x N) += A B, one k16 step: A (64 x 16) from registers (each warp its 16 rows in the
// m16n8k16 A layout), B (16 x N) MN-major in shared memory (rows = k, N contiguous).
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b);
// wgmma_ss with both operands MN-major (transposed): A's 16 k rows each hold its 64 M
// elements contiguous, B's its N (the wgmma dK/dV kernel's dQ = dS K, from dS^T and K tiles).
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss_mn(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int accumulate);

// The accumulators d[N / 8][4] as "+f" operands in register order, and the matching
// register list of the instruction (N / 2 registers, %0 up).
#define TRIDENT_ACC8(d, i)                                                                     \
  "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3]), "+f"(d[i + 1][0]), "+f"(d[i + 1][1]), \
      "+f"(d[i + 1][2]), "+f"(d[i + 1][3])
#define TRIDENT_ACC_N32(d) TRIDENT_ACC8(d, 0), TRIDENT_ACC8(d, 2)
#define TRIDENT_ACC_N64(d) TRIDENT_ACC_N32(d), TRIDENT_ACC8(d, 4), TRIDENT_ACC8(d, 6)
#define TRIDENT_ACC_N128(d) \
  TRIDENT_ACC_N64(d), TRIDENT_ACC8(d, 8), TRIDENT_ACC8(d, 10), TRIDENT_ACC8(d, 12), TRIDENT_ACC8(d, 14)
#define TRIDENT_REGS_N32 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" "}"
#define TRIDENT_REGS_N64 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"
#define TRIDENT_REGS_N128 \
  "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" "}"
// wgmma_ss and wgmma_rs for element type TYPE (PTX name PTX) and N; the operands after the
// N / 2 accumulators are numbered from K = N / 2: desc_a %K, desc_b %K+1, accumulate %K+2
// (ss); a %K..%K+3, desc_b %K+4, 1 %K+5 (rs; scale-d is a predicate, always set).
// NAME: wgmma_ss (both operands K-major, TRANS "0, 0") or wgmma_ss_mn ("1, 1").
#define TRIDENT_DEFINE_WGMMA_SS_AS(NAME, TRANS, TYPE, PTX, N, K0, K1, K2)                              \
  template <>                                                                                          \
  __device__ __forceinline__ void NAME<TYPE, N>(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b,   \
                                                int accumulate) {                                      \
    TRIDENT_SM90A_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #K2 ", 0;\n"                                 \
                      "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " " TRIDENT_REGS_N##N \
                      ", %" #K0 ", %" #K1 ", p, 1, 1, " TRANS ";\n}\n"                                  \
                      : TRIDENT_ACC_N##N(d)                                                            \
                      : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                    \
  }
#define TRIDENT_DEFINE_WGMMA_SS(TYPE, PTX, N, K0, K1, K2) \
  TRIDENT_DEFINE_WGMMA_SS_AS(wgmma_ss, "0, 0", TYPE, PTX, N, K0, K1, K2)
#define TRIDENT_DEFINE_WGMMA_RS(TYPE, PTX, N, K0, K1, K2, K3, K4, K5)                                     \
  template <>                                                                                          \
  __device__ __forceinline__ void wgmma_rs<TYPE, N>(float (&d)[N / 8][4], const uint32_t (&a)[4],       \
                                                    uint64_t desc_b) {                                 \
    TRIDENT_SM90A_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #K5 ", 0;\n"                                 \
                      "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " " TRIDENT_REGS_N##N \
                      ", {%" #K0 ", %" #K1 ", %" #K2 ", %" #K3 "}, %" #K4 ", p, 1, 1, 1;\n}\n"           \
                      : TRIDENT_ACC_N##N(d)                                                            \
                      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));              \
  }
// N 32 (S^T and dP^T of 32-query dK/dV tiles) from shared memory only.
TRIDENT_DEFINE_WGMMA_SS(__half, "f16", 32, 16, 17, 18)
TRIDENT_DEFINE_WGMMA_SS(__nv_bfloat16, "bf16", 32, 16, 17, 18)
#define TRIDENT_DEFINE_WGMMA(TYPE, PTX, N, K0, K1, K2, K3, K4, K5) \
  TRIDENT_DEFINE_WGMMA_SS(TYPE, PTX, N, K0, K1, K2)                \
  TRIDENT_DEFINE_WGMMA_RS(TYPE, PTX, N, K0, K1, K2, K3, K4, K5)
TRIDENT_DEFINE_WGMMA(__half, "f16", 64, 32, 33, 34, 35, 36, 37)
TRIDENT_DEFINE_WGMMA(__half, "f16", 128, 64, 65, 66, 67, 68, 69)
TRIDENT_DEFINE_WGMMA(__nv_bfloat16, "bf16", 64, 32, 33, 34, 35, 36, 37)
TRIDENT_DEFINE_WGMMA(__nv_bfloat16, "bf16", 128, 64, 65, 66, 67, 68, 69)
// Both operands MN-major: N 64 only (the D 64 dQ product of the atomic-dQ dK/dV kernel).
TRIDENT_DEFINE_WGMMA_SS_AS(wgmma_ss_mn, "1, 1", __half, "f16", 64, 32, 33, 34)
TRIDENT_DEFINE_WGMMA_SS_AS(wgmma_ss_mn, "1, 1", __nv_bfloat16, "bf16", 64, 32, 33, 34)

// Two floats -> one register of two 16-bit values, `lo` in the low half (lower index).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t r;
  memcpy(&r, &v, 4);
  return r;
}

// Accumulator tiles c[2kk], c[2kk+1] (16 x 16 block kk, C layout) as the A operand of the
// next product: the C layout of two n-tiles is exactly the A layout of one k-step.
template <typename T, int NT>
__device__ __forceinline__ void c_to_a(const float (&c)[NT][4], uint32_t (&a)[NT / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// Zeroes accumulator fragments (N tiles of 4 floats).
template <int N>
__device__ __forceinline__ void zero_frags(float (&d)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) d[n][0] = d[n][1] = d[n][2] = d[n][3] = 0.f;
}

// Rows [row0, row0 + ROWS) of a [T, D] head view (row stride ld elements) into a shared
// tile [ROWS][DP + 8]; rows >= T and columns >= D are zero. D % 8 == 0 and 16-byte aligned
// rows are the caller's guarantee. Issues cp.async only (the caller commits and waits).
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void load_tile(T* smem, const T* g, int64_t ld, int row0, int T_, int D) {
  constexpr int LDS = DP + 8, CH = DP / 8;
  for (int idx = threadIdx.x; idx < ROWS * CH; idx += kThreads) {
    const int r = idx / CH, c = idx - r * CH;
    const bool valid = row0 + r < T_ && c * 8 < D;
    const T* src = valid ? g + static_cast<int64_t>(row0 + r) * ld + c * 8 : g;
    cp_async16(smem + r * LDS + c * 8, src, valid);
  }
}

// The two tile products of every kernel, for WM row tiles per warp: warp w owns rows
// [64 mt + 16 w, +16) of sA for mt < WM; each B fragment read from shared memory feeds WM
// tensor-core products (fewer ldmatrix per mma when WM > 1).
// mma_abt_wm: acc[mt] = (16 rows of sA) times the first 8 * NT rows of sB transposed, over
// k in [0, DP) (acc zeroed here). mma_ab_regs_wm: acc[mt][16 x DP] += a[mt] (16 x 16 KK, A
// layout, registers) times sB [16 KK rows][DP] (rows = k).
template <typename T, int DP, int NT, int WM>
__device__ __forceinline__ void mma_abt_wm(float (&acc)[WM][NT][4], const T* sA, const T* sB, int warp, int lane) {
  constexpr int LDS = DP + 8;
#pragma unroll
  for (int mt = 0; mt < WM; ++mt) zero_frags(acc[mt]);
#pragma unroll
  for (int ks = 0; ks < DP / 16; ++ks) {
    uint32_t a[WM][4];
#pragma unroll
    for (int mt = 0; mt < WM; ++mt)
      ldsm_x4(a[mt], sA + (mt * 64 + warp * 16 + (lane & 15)) * LDS + ks * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4(b, sB + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LDS + ks * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        mma16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}
template <typename T, int DP, int KK, int WM>
__device__ __forceinline__ void mma_ab_regs_wm(float (&acc)[WM][DP / 8][4], const uint32_t (&a)[WM][KK][4],
                                               const T* sB, int lane) {
  constexpr int LDS = DP + 8;
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
#pragma unroll
    for (int dp = 0; dp < DP / 16; ++dp) {
      uint32_t b[4];
      ldsm_x4_trans(b, sB + (kk * 16 + (lane & 15)) * LDS + dp * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < WM; ++mt) {
        mma16816<T>(acc[mt][2 * dp], a[mt][kk], b[0], b[1]);
        mma16816<T>(acc[mt][2 * dp + 1], a[mt][kk], b[2], b[3]);
      }
    }
  }
}

// The single-tile (WM = 1) forms the backward kernels use: rows [16 w, 16 w + 16).
template <typename T, int DP, int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const T* sA, const T* sB, int warp, int lane) {
  mma_abt_wm<T, DP, NT, 1>(reinterpret_cast<float(&)[1][NT][4]>(acc), sA, sB, warp, lane);
}
template <typename T, int DP, int KK>
__device__ __forceinline__ void mma_ab_regs(float (&acc)[DP / 8][4], const uint32_t (&a)[KK][4], const T* sB,
                                            int lane) {
  mma_ab_regs_wm<T, DP, KK, 1>(reinterpret_cast<float(&)[1][DP / 8][4]>(acc),
                               reinterpret_cast<const uint32_t(&)[1][KK][4]>(a), sB, lane);
}

// Rows [row0, row0 + 16) x [0, D) of a warp's accumulator (C layout, times `mul`) to a
// [T, D] head view with row stride ld; rows >= T are not written.
template <typename T, int DP>
__device__ __forceinline__ void store_acc(T* g, int64_t ld, const float (&acc)[DP / 8][4], int row0, int T_, int D,
                                          int lane, float mul0, float mul1) {
  const int r0 = row0 + (lane >> 2), r1 = r0 + 8, c = (lane & 3) * 2;
#pragma unroll
  for (int nt = 0; nt < DP / 8; ++nt) {
    if (nt * 8 >= D) break;
    if (r0 < T_)
      *reinterpret_cast<uint32_t*>(g + static_cast<int64_t>(r0) * ld + nt * 8 + c) =
          pack2<T>(acc[nt][0] * mul0, acc[nt][1] * mul0);
    if (r1 < T_)
      *reinterpret_cast<uint32_t*>(g + static_cast<int64_t>(r1) * ld + nt * 8 + c) =
          pack2<T>(acc[nt][2] * mul1, acc[nt][3] * mul1);
  }
}

// Block (b, h)'s part of the kernels' tensors: head h of sample b. Rows of q, k, v and of
// the gradient dq (dk, dv: dq + H D, + 2 H D) are p.qkv_tok elements apart, rows of dout
// p.out_tok; lse and delta hold the head's T rows (dout, dq and delta: the backward's, null
// in the forward). sample and hg key its dropout masks.
template <typename T>
struct HeadView {
  const T *q, *k, *v, *dout;
  T* dq;
  const float *lse, *delta;
  uint64_t sample, hg;
};
template <typename T>
__device__ __forceinline__ HeadView<T> head_view(const AttnParams& p, int b, int h) {
  const int64_t HD = static_cast<int64_t>(p.H) * p.D, head = static_cast<int64_t>(h) * p.D;
  const int64_t rows = (static_cast<int64_t>(b) * p.H + h) * p.T;
  HeadView<T> v;
  v.q = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * p.T * p.qkv_tok + head;
  v.k = v.q + HD;
  v.v = v.q + 2 * HD;
  v.dout = p.dout ? static_cast<const T*>(p.dout) + static_cast<int64_t>(b) * p.T * p.out_tok + head : nullptr;
  v.dq = p.dqkv ? static_cast<T*>(p.dqkv) + static_cast<int64_t>(b) * p.T * p.qkv_tok + head : nullptr;
  v.lse = p.lse + rows;
  v.delta = p.delta ? p.delta + rows : nullptr;
  v.sample = p.drop.sample_base + static_cast<uint64_t>(b);
  v.hg = static_cast<uint64_t>(p.head_offset + h);
  return v;
}

// Sample b's first keys (AttnParams::doc), or null. Read from the kernel's parameters where
// it is used, so that no register holds the pointer through the tile loops (attention without
// documents keeps the registers it had without them).
__device__ __forceinline__ const int32_t* sample_docs(const AttnParams& p, int b) {
  return p.doc != nullptr ? p.doc + static_cast<int64_t>(b) * p.T : nullptr;
}

// Whole tiles of other documents are skipped: a block of rows from q0 on starts at the key
// tile (BK keys) of row q0's document start, as no later row of a sample sees an earlier key
// (starts do not decrease along it); without documents, tile 0. (A block that straddles a
// document boundary still walks the tiles of its first row's document for all its rows:
// FlashAttention's varlen kernels, whose blocks never straddle, skip more.) The start is
// clamped to [0, q0], so that starts breaking the contract cannot send a load before the
// tensor or skip the diagonal tile.
__device__ __forceinline__ int first_key_tile(const AttnParams& p, int b, int q0, int BK) {
  const int32_t* doc = sample_docs(p, b);
  q0 = min(q0, p.T - 1);
  return doc != nullptr ? min(max(doc[q0], 0), q0) / BK : 0;
}
// ... and a block of keys up to last_key ends at the query tile (BQ queries) holding the last
// query of last_key's document, p.doc_end - 1 (ends do not decrease along the keys; p.doc_end
// is set with documents wherever the tensor-core dK/dV kernels run); without documents, T.
__device__ __forceinline__ int query_tiles_end(const AttnParams& p, int b, int last_key, int BQ) {
  const int end = p.doc_end != nullptr ? p.doc_end[static_cast<int64_t>(b) * p.T + min(last_key, p.T - 1)] : p.T;
  return (end + BQ - 1) / BQ;
}

// Hides the keys a warp's 16 query rows [wrow, wrow + 16) of sample b do not see in s, their
// raw scores against keys [k0, k0 + 8 NT) in the C layout of m16n8 tiles: keys past the row
// (causal), past T, and with documents before the row's document (its first key `first`:
// hidden when col - first > row - first as unsigned, one test for both ends). Warp-uniform
// test first: only tiles on the diagonal, past T or (documents being contiguous) starting
// before the document of the warp's last row hide keys. Hidden scores become -inf (scale > 0:
// raw and scaled scores have the same order).
template <int NT>
__device__ __forceinline__ void mask_row_tile(const AttnParams& p, float (&s)[NT][4], int b, int wrow, int k0,
                                              int lane) {
  constexpr int BK = 8 * NT;
  const int T_ = p.T;
  const int32_t* doc = sample_docs(p, b);
  const bool before_doc = doc != nullptr && k0 < doc[min(wrow + 15, T_ - 1)];
  if (k0 + BK - 1 > wrow || k0 + BK > T_ || before_doc) {
    const int tq = lane & 3, row0 = wrow + (lane >> 2), row1 = row0 + 8;
    const int first0 = before_doc ? doc[min(row0, T_ - 1)] : 0;
    const int first1 = before_doc ? doc[min(row1, T_ - 1)] : 0;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = k0 + nt * 8 + tq * 2 + (e & 1), row = e < 2 ? row0 : row1, first = e < 2 ? first0 : first1;
        if (static_cast<unsigned>(col - first) > static_cast<unsigned>(row - first) || col >= T_)
          s[nt][e] = -INFINITY;
      }
  }
}

// The same for the transposed tiles of the dK/dV pass: st holds the scores of a warp's 16
// keys [wkey, wkey + 16) (rows) against queries [i0, i0 + 8 NT) (columns). With documents
// a key is hidden from the queries past its document's end (p.doc_end), which the tile's
// queries pass only when its last one passes the end of the warp's first key's document. The
// documents' test is a second pass holding one register (both keys' cuts in 16-bit halves):
// the D 128 dK/dV kernel has none to spare.
template <int NT>
__device__ __forceinline__ void mask_key_tile(const AttnParams& p, float (&st)[NT][4], int b, int wkey, int i0,
                                              int lane) {
  constexpr int BQ = 8 * NT;
  const int T_ = p.T, tq = lane & 3, key0 = wkey + (lane >> 2);
  if (wkey + 15 > i0 || i0 + BQ > T_) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = i0 + nt * 8 + tq * 2 + (e & 1), j = e < 2 ? key0 : key0 + 8;
        if (i < j || i >= T_) st[nt][e] = -INFINITY;
      }
  }
  if (p.doc_end == nullptr) return;
  const int32_t* end = p.doc_end + static_cast<int64_t>(b) * T_;
  if (i0 + BQ - 1 < end[min(wkey, T_ - 1)]) return;  // warp-uniform: ends do not decrease along the keys
  // Query i0 + c sees the thread's key only if c < its cut (clamped to [0, BQ]).
  const uint32_t cuts = static_cast<uint32_t>(min(max(end[min(key0, T_ - 1)] - i0, 0), BQ)) |
                        static_cast<uint32_t>(min(max(end[min(key0 + 8, T_ - 1)] - i0, 0), BQ)) << 16;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = nt * 8 + tq * 2 + (e & 1);
      if (c >= static_cast<int>(e < 2 ? cuts & 0xffffu : cuts >> 16)) st[nt][e] = -INFINITY;
    }
}

// One key tile of the forward's online softmax for a warp's 16 query rows [wrow, wrow + 16):
// s holds their raw scores against keys [k0, k0 + 8 NT) in the C layout of m16n8 tiles.
// Masks hidden keys, moves the rows' reference maxima m when a score passes them by more
// than kMaxSlack (rescaling the output o and the partial sums l), turns s into P (times the
// dropout factors of keep, attn_keep_rows' bits) and adds P's row sums to l. The caller
// turns s into the A operand of P V. b: the sample (its documents' first keys). Shared by
// the mma.sync and the wgmma kernels: a warp's accumulator fragments have the same layout in
// both.
template <typename T, int NT, int DP>
__device__ __forceinline__ void fwd_softmax_tile(const AttnParams& p, float (&s)[NT][4], float (&o)[DP / 8][4],
                                                 float (&m)[2], float (&l)[2], int wrow, int k0, int lane,
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
  if (__any_sync(0xffffffffu, mx0 > m[0] + kMaxSlack || mx1 > m[1] + kMaxSlack)) {
    const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
    // A row with nothing visible yet keeps m = -inf (and O = l = 0).
    const float al0 = mn0 == -INFINITY ? 1.f : exp2_ftz(m[0] - mn0);
    const float al1 = mn1 == -INFINITY ? 1.f : exp2_ftz(m[1] - mn1);
    m[0] = mn0;
    m[1] = mn1;
    l[0] *= al0;
    l[1] *= al1;
#pragma unroll
    for (int nt = 0; nt < DP / 8; ++nt) {
      o[nt][0] *= al0;
      o[nt][1] *= al0;
      o[nt][2] *= al1;
      o[nt][3] *= al1;
    }
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
        if (p.dropout) keep = attn_keep_rows<NT>(p, sample, hg, wrow + (lane >> 2), k0, lane);
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

// ---- Forward with warpgroup MMA (sm_90a) ----------------------------------------------------
// wgmma reads its shared-memory operands in the canonical layouts of the PTX ISA. Here every
// tile (Q, K, V) is stored as DP / 64 column blocks of [ROWS][64] 16-bit values, rows of 128
// bytes, the 16-byte chunk c of row r at chunk position c ^ (r % 8) (the 128-byte swizzle,
// which spreads the 8 rows of a core matrix over all shared-memory banks). The swizzle is
// a function of address bits 4-9, so each block starts on a 1024-byte boundary.
// - Q and K are K-major operands (the head dim is the reduction): a k16 step is 32 bytes
//   along a row, rows 128 bytes apart, 8-row groups 1024 bytes apart (SBO).
// - V is an MN-major operand of P V (rows = keys = the reduction, the head dim contiguous):
//   8-key groups 1024 bytes apart (SBO), 64-column blocks ROWS x 128 bytes apart (LBO).
constexpr uint32_t kSwizzleSpan = 1024;

// Rows [row0, row0 + ROWS) of a [T, D] head view into a swizzled tile (layout above); rows
// >= T and columns >= D are zero. Issues cp.async only (the caller commits and waits).
// Loaded by THREADS threads, of which the caller is thread `tid` (by default the block's
// 128 threads; a two-warpgroup block loads shared tiles with all 256 and a warpgroup's
// own tiles with its 128).
template <typename T, int ROWS, int DP, int THREADS = kThreads>
__device__ __forceinline__ void load_tile_sw128(T* tile, const T* g, int64_t ld, int row0, int T_, int D,
                                                int tid) {
  constexpr int CH = DP / 8;
  for (int idx = tid; idx < ROWS * CH; idx += THREADS) {
    const int r = idx / CH, c = idx - r * CH;
    const bool valid = row0 + r < T_ && c * 8 < D;
    const T* src = valid ? g + static_cast<int64_t>(row0 + r) * ld + c * 8 : g;
    cp_async16(tile + (c >> 3) * ROWS * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3), src, valid);
  }
}
template <typename T, int ROWS, int DP>
__device__ __forceinline__ void load_tile_sw128(T* tile, const T* g, int64_t ld, int row0, int T_, int D) {
  load_tile_sw128<T, ROWS, DP>(tile, g, ld, row0, T_, D, static_cast<int>(threadIdx.x));
}

// A wgmma shared-memory descriptor with the 128-byte swizzle: start address, leading and
// stride byte offsets (all in 16-byte units, 14 bits each), layout type 1 in bits 62-63.
__device__ __forceinline__ uint64_t sw128_desc(const void* start, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr(start) >> 4) & 0x3FFF) |
         static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32 | 1ull << 62;
}
// k16 step ks of a K-major tile of ROWS rows (the leading offset is unused: a step stays
// inside one 128-byte row). The step's offset is added to the tile's descriptor (in 16-byte
// units; the start field cannot carry: shared addresses stay below 2^18), so that unrolled
// steps share one descriptor computation.
template <typename T, int ROWS>
__device__ __forceinline__ uint64_t kmajor_desc(const T* tile, int ks) {
  return sw128_desc(tile, 16, 8 * 128) + static_cast<uint64_t>(((ks >> 2) * ROWS * 128 + (ks & 3) * 32) >> 4);
}
// k16 step kk (keys 16 kk.., 2048 bytes a step) of an MN-major tile of ROWS rows.
template <typename T, int ROWS>
__device__ __forceinline__ uint64_t mnmajor_desc(const T* tile, int kk) {
  return sw128_desc(tile, ROWS * 128, 8 * 128) + static_cast<uint64_t>(kk * 16 * 128 >> 4);
}

// The swizzled tiles of a kernel, from the first 1024-byte boundary of dynamic shared memory.
template <typename T>
__device__ __forceinline__ T* swizzle_aligned(unsigned char* raw) {
  return reinterpret_cast<T*>(raw + ((kSwizzleSpan - (smem_addr(raw) & (kSwizzleSpan - 1))) & (kSwizzleSpan - 1)));
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
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks)
      wgmma_ss<T, BK>(s, kmajor_desc<T, BQ>(sQ, ks), kmajor_desc<T, BK>(sK, ks), ks > 0);
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = attn_keep_rows<NT>(p, sample, hg, wrow + (lane >> 2), k0, lane);
    wgmma_wait<0>();
    fence_acc(s);
    fwd_softmax_tile<T, NT, DP>(p, s, o, m, l, wrow, k0, lane, keep, b);
    uint32_t pa[NT / 2][4];
    c_to_a<T, NT>(s, pa);
    fence_acc(o);  // the softmax's rescale of o happens before the products that add to it
    fence_frag(pa);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) wgmma_rs<T, DP>(o, pa[kk], mnmajor_desc<T, BK>(sV, kk));
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(o);
    fence_frag(pa);
  }
  fwd_store_rows<T, DP>(p, o, m, l, b, h, wrow, lane);
}

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

// f(std::true_type) with dropout, else f(std::false_type): the backward's elementwise steps
// branch once a tile on p.dropout (not once per unrolled 8-key step: see dkdv_tile_p_ds).
template <typename F>
__device__ __forceinline__ void branch_on_dropout(bool dropout, F&& f) {
  if (dropout)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// One key tile of the dQ pass for a warp's 16 query rows [wrow, wrow + 16) (r: their
// statistics): s holds S = Q K^T, dp holds dP = dO V^T for keys [k0, k0 + 8 NT) in the C
// layout; keep: their dropout bits (attn_keep_rows). Leaves dS = P (z dP - delta) in s (0
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
      if (p.dropout) keep = attn_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, k0, lane);
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

// One query tile of the dK/dV pass for a warp's 16 keys [wkey, wkey + 16) (keys key0 = wkey
// + lane / 4 and key0 + 8): st holds S^T = K Q^T, dpt holds dP^T = V dO^T for queries
// [i0, i0 + 8 NT) in the C layout (rows = keys); sL, sDl: the queries' lse and delta (any
// finite value or +inf for queries >= T); keep: the dropout bits (attn_keep_keys). Leaves
// (P z)^T in st and dS^T = (P (z dP - delta))^T in dpt (0 for hidden pairs). Shared by the
// mma.sync and wgmma dK/dV kernels.
template <typename T, int NT>
__device__ __forceinline__ void dkdv_tile_p_ds(const AttnParams& p, float (&st)[NT][4], float (&dpt)[NT][4], int wkey,
                                               int i0, int lane, const float* sL, const float* sDl,
                                               const KeepBits<NT>& keep, int b) {
  const int tq = lane & 3;
  mask_key_tile<NT>(p, st, b, wkey, i0, lane);  // hidden pairs get score -inf, P 0
  // One branch a tile on the dropout. Its draws inlined into every 8-query step, each behind
  // its own branch, made the executed code of a tile sparse in a large loop: ncu counted ~2
  // cycles per issued instruction of the D 128 wgmma dK/dV kernel stalled on instruction
  // fetch ("no instruction", 0.2 in the dQ kernel). The draws now run before this step.
  branch_on_dropout(p.dropout, [&](auto with_dropout) {
    constexpr bool kDrop = decltype(with_dropout)::value;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int q = nt * 8 + tq * 2;  // the thread's first query in the n8 tile
      const float l2[2] = {sL[q] * kLog2e, sL[q + 1] * kLog2e};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pe = exp2_ftz(fmaf(st[nt][e], p.scale_log2, -l2[e & 1]));  // 0 where hidden
        const float z = kDrop ? keep.factor(p, nt, e) : 1.f;
        const float ds = pe * (z * dpt[nt][e] - sDl[q + (e & 1)]);
        pe *= z;
        st[nt][e] = pe;  // P z
        dpt[nt][e] = ds;
      }
    }
  });
}

template <int DP, int BQ, int NB, bool DQ>
constexpr int dkdv_smem_bytes() {
  return (2 * 64 + NB * 2 * BQ) * (DP + 8) * 2 + NB * 2 * BQ * 4 + (DQ ? 64 * (BQ + 8) * 2 : 0);
}

// Adds a warp's 16 x 8NC accumulator tile (the C layout: rows row0 + g and + 8, columns
// col0 + 8 nt + 2q and + 1) to the f32 rows [T, D] by float-pair atomics, skipping rows >= T
// and columns >= D.
template <int NC>
__device__ __forceinline__ void add_acc_atomic(float* rows, const float (&acc)[NC][4], int row0, int col0, int T_,
                                               int D, int lane) {
  const int r0 = row0 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int nt = 0; nt < NC; ++nt) {
    const int c = col0 + nt * 8 + (lane & 3) * 2;
    if (c >= D) continue;
    if (r0 < T_) atomic_add_pair(rows + static_cast<int64_t>(r0) * D + c, acc[nt][0], acc[nt][1]);
    if (r1 < T_) atomic_add_pair(rows + static_cast<int64_t>(r1) * D + c, acc[nt][2], acc[nt][3]);
  }
}

// The atomic-dQ backward's share of one query tile: dQ[i0 + r][c] += sum over the block's 64
// keys of dS[r][key] K[key][c], from dS^T in sdS ([64 keys][BQ + 8]) and K in sK. The 4
// warps split dQ's columns (D 32: columns and rows) and add their products to dq_rows (the
// head's [T, D] rows of p.dq_acc) by float atomics: the order of the additions, and so the
// last bits of dQ, vary from run to run.
template <typename T, int DP, int BQ>
__device__ __forceinline__ void dq_tile_atomic(const T* sdS, const T* sK, float* dq_rows, int i0, int T_, int D,
                                               int warp, int lane) {
  constexpr int LDS = DP + 8, LDSS = BQ + 8;
  constexpr int WC = DP / 16 < 4 ? DP / 16 : 4, WR = 4 / WC;  // warps across columns x rows
  constexpr int CW = DP / WC, RW = BQ / WR, MT = RW / 16, NC = CW / 8;
  static_assert(RW % 16 == 0 && CW % 16 == 0, "whole 16 x 16 tiles per warp");
  const int col0 = (warp % WC) * CW, row0 = (warp / WC) * RW;
  float acc[MT][NC][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) zero_frags(acc[mt]);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {  // 64 keys, 16 per step
    uint32_t a[MT][4];  // dS rows (queries) from dS^T: transposed 8 x 8 loads
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldsm_x4_trans(a[mt], sdS + (ks * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * LDSS + row0 + mt * 16 +
                               ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int np = 0; np < NC / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b, sK + (ks * 16 + (lane & 15)) * LDS + col0 + np * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) add_acc_atomic(dq_rows, acc[mt], i0 + row0 + mt * 16, col0, T_, D, lane);
}

// The dK/dV kernels' block: its head (index into B*H) and its key tile. Their grid is (B*H,
// key tiles): in launch order (blockIdx.x fastest) every head's first key tile comes first;
// those see the most queries, so the longest blocks start first. With atomic dQ that order
// would put the T/64 blocks that add into one head's f32 dQ rows a wave apart, and where
// dq_acc outgrows the L2 (134 MB at B16 T1024 H32 D64, against 50-60 MB) each addition would
// miss it: a DRAM read and write of a 32-byte sector. So atomic-dQ blocks go by groups of
// 2^g heads whose dQ rows fill at most kAtomicDqGroupBytes, within a group key tile by key
// tile (the longest first), head by head: grid (key tiles << g, ceil(B*H / 2^g)), and a head's
// blocks run side by side, their additions meeting in L2. (Key tiles first for all heads
// would also do that, but its last heads' longest blocks start in the last wave: a list
// schedule of the bench's 8192 blocks on 264 slots ends 10 tile-times past the ideal 264,
// the groups 2 past.) Blocks past B*H in the last group exit at once.
constexpr int64_t kAtomicDqGroupBytes = 4 << 20;
// g: log2 of the heads a group takes: the most whose f32 dQ rows [T, D] fit
// kAtomicDqGroupBytes (at least one), up to 2^16 and to `heads` rounded up to a power of two.
__host__ __device__ inline int atomic_dq_group_log2(int heads, int T, int D) {
  const int64_t head_bytes = static_cast<int64_t>(T) * D * static_cast<int64_t>(sizeof(float));
  int g = 0;
  while (g < 16 && (1 << g) < heads && (head_bytes << (g + 1)) <= kAtomicDqGroupBytes) ++g;
  return g;
}
struct KeyBlock {
  int bh, kt;
};
// Block (bx, by) of the atomic-dQ grid.
__host__ __device__ inline KeyBlock atomic_dq_block(unsigned bx, unsigned by, int g) {
  return {static_cast<int>((by << g) + (bx & ((1u << g) - 1))), static_cast<int>(bx >> g)};
}
// The block's head and first key (key tiles of `rows`). The unsigned product is the one that
// ptxas saw before the atomic-dQ grid: a signed one cost the D 128 wgmma kernel (255
// registers) an 8-byte spill.
struct BlockKeys {
  int bh, k0;
};
template <bool DQ>
__device__ __forceinline__ BlockKeys dkdv_block(const AttnParams& p, unsigned rows) {
  if constexpr (DQ) {
    const KeyBlock k = atomic_dq_block(blockIdx.x, blockIdx.y, atomic_dq_group_log2(p.B * p.H, p.T, p.D));
    return {k.bh, static_cast<int>(static_cast<unsigned>(k.kt) * rows)};
  }
  return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y * rows)};
}

// Backward pass 2: dK and dV. Grid (B*H, ceil(T/64)), with DQ in head groups (dkdv_block);
// block: 64 keys (4 warps x 16), query
// tiles of BQ rows from the diagonal to the end. NB = 1: one Q/dO buffer, each tile loaded
// and waited for before its products. NB = 2: two buffers, the next tile's Q and dO (and
// its lse and delta, through registers) load while the current one is used; more shared
// memory and a few more registers (TRIDENT_ATTN_BWD_DB=1 selects it for D > 32 while it is
// measured).
// Everything is computed transposed (keys are rows), so the accumulators of S^T and dP^T
// are directly the A operands of
//   dV += (P z)^T dO,   dK += dS^T Q;   dK * scale written at the end.
// DQ (TRIDENT_ATTN_BWD_ATOMIC=1, while it is measured): the block also adds dS K to dQ
// (dq_tile_atomic, float atomics into p.dq_acc) and pass 3 is not run: 5 tile products
// instead of 7, as flash-attention-2 does, but dQ is no longer bitwise reproducible.
template <typename T, int DP, int BQ, int NB, bool DQ>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_mma_kernel(const AttnParams p) {
  constexpr int BKV = 64, LDS = DP + 8, NT = BQ / 8, LDSS = BQ + 8;
  constexpr int kTileElems = 2 * BQ * LDS;  // Q and dO of one query tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BKV * LDS;
  T* sQ0 = sV + BKV * LDS;  // buffer n: Q at sQ0 + n * kTileElems, dO BQ rows after it
  float* sL0 = reinterpret_cast<float*>(sQ0 + NB * kTileElems);  // buffer n: lse, then delta
  T* sdS = reinterpret_cast<T*>(sL0 + NB * 2 * BQ);  // DQ: dS^T of the tile, [64 keys][BQ + 8]

  const int T_ = p.T, D = p.D;
  const BlockKeys kb = dkdv_block<DQ>(p, BKV);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int k0 = kb.k0;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  const float *lse = hv.lse, *delta = hv.delta;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int wkey = k0 + warp * 16;
  const uint64_t sample = hv.sample, hg = hv.hg;

  load_tile<T, BKV, DP>(sK, gK, p.qkv_tok, k0, T_, D);
  load_tile<T, BKV, DP>(sV, gV, p.qkv_tok, k0, T_, D);
  cp_async_commit();

  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);

  // Query tile qt into buffer n: Q and dO by cp.async (the caller commits), lse and delta
  // of its rows returned for the caller to store into sL0 (after the buffer is free).
  auto load_query_tile = [&](int qt, int n, float& l, float& d) {
    T* q = sQ0 + n * kTileElems;
    load_tile<T, BQ, DP>(q, gQ, p.qkv_tok, qt * BQ, T_, D);
    load_tile<T, BQ, DP>(q + BQ * LDS, gdO, p.out_tok, qt * BQ, T_, D);
    const int i = qt * BQ + static_cast<int>(threadIdx.x);
    const bool row = threadIdx.x < BQ && i < T_;
    l = row ? lse[i] : INFINITY;
    d = row ? delta[i] : 0.f;
  };
  auto store_stats = [&](int n, float l, float d) {
    if (threadIdx.x < BQ) {
      sL0[n * 2 * BQ + threadIdx.x] = l;
      sL0[n * 2 * BQ + BQ + threadIdx.x] = d;
    }
  };

  const int qt_first = k0 / BQ, nqt = query_tiles_end(p, b, k0 + BKV - 1, BQ);
  if constexpr (NB == 2) {
    float l, d;
    load_query_tile(qt_first, 0, l, d);
    cp_async_commit();
    store_stats(0, l, d);
  }
  for (int qt = qt_first; qt < nqt; ++qt) {
    const int i0 = qt * BQ;
    const int n = NB == 2 ? (qt - qt_first) & 1 : 0;
    float next_l = INFINITY, next_d = 0.f;  // the next tile's stats (NB = 2)
    if constexpr (NB == 1) {
      __syncthreads();  // every warp is done with the previous Q, dO, lse, delta
      float l, d;
      load_query_tile(qt, 0, l, d);
      cp_async_commit();
      store_stats(0, l, d);
      cp_async_wait<0>();
    } else {
      // The other buffer was released by the barrier that ended the previous tile.
      if (qt + 1 < nqt) {
        load_query_tile(qt + 1, n ^ 1, next_l, next_d);
        cp_async_commit();
        cp_async_wait<1>();  // this tile has landed (the next may be in flight)
      } else {
        cp_async_wait<0>();
      }
    }
    __syncthreads();
    const T* sQ = sQ0 + n * kTileElems;
    const T* sO = sQ + BQ * LDS;  // dO
    const float* sL = sL0 + n * 2 * BQ;
    const float* sDl = sL + BQ;
    if (i0 + BQ - 1 >= wkey) {  // warp-uniform: skip a tile whose queries all precede the keys
      float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
      KeepBits<NT> keep;
      if (p.dropout) keep = attn_keep_keys<NT>(p, sample, hg, wkey + (lane >> 2), i0, lane);
      mma_abt<T, DP, NT>(st, sK, sQ, warp, lane);
      mma_abt<T, DP, NT>(dpt, sV, sO, warp, lane);
      dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, sL, sDl, keep, b);
      uint32_t pa[NT / 2][4];
      c_to_a<T, NT>(st, pa);
      mma_ab_regs<T, DP, NT / 2>(dv, pa, sO, lane);
      c_to_a<T, NT>(dpt, pa);
      if constexpr (DQ) {  // dS^T rows key0, key1 (pa's A layout: columns 16 kk + 2 tq, + 8)
        T* r0 = sdS + (warp * 16 + (lane >> 2)) * LDSS + tq * 2;
#pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
          *reinterpret_cast<uint32_t*>(r0 + kk * 16) = pa[kk][0];
          *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + kk * 16) = pa[kk][1];
          *reinterpret_cast<uint32_t*>(r0 + kk * 16 + 8) = pa[kk][2];
          *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + kk * 16 + 8) = pa[kk][3];
        }
      }
      mma_ab_regs<T, DP, NT / 2>(dk, pa, sQ, lane);
    } else if constexpr (DQ) {  // no visible pair: the warp's dS^T rows are zero
      T* r0 = sdS + (warp * 16 + (lane >> 2)) * LDSS + tq * 2;
#pragma unroll
      for (int c = 0; c < BQ; c += 8) {
        *reinterpret_cast<uint32_t*>(r0 + c) = 0u;
        *reinterpret_cast<uint32_t*>(r0 + 8 * LDSS + c) = 0u;
      }
    }
    if constexpr (DQ) {
      __syncthreads();  // every warp's dS^T rows are in sdS
      dq_tile_atomic<T, DP, BQ>(sdS, sK, p.dq_acc + static_cast<int64_t>(bh) * T_ * D, i0, T_, D, warp, lane);
    }
    if constexpr (NB == 2) {
      if (qt + 1 < nqt) store_stats(n ^ 1, next_l, next_d);
      __syncthreads();  // every warp is done with buffer n; the next stats are visible
    }
  }

  T* gdK = hv.dq + HD;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, T_, D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + HD, p.qkv_tok, dv, wkey, T_, D, lane, 1.f, 1.f);
}

// ---- Backward with warpgroup MMA (sm_90a) -------------------------------------------------
// The two passes of the mma.sync backward (deterministic: no float atomics), with every
// product a wgmma on the swizzled tiles of the wgmma forward and the same per-warp
// elementwise code (dq_tile_ds, dkdv_tile_p_ds). Both double-buffer the streamed tiles.

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
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks) {
      wgmma_ss<T, BK>(s, kmajor_desc<T, BQ>(sQ, ks), kmajor_desc<T, BK>(sK, ks), ks > 0);
      wgmma_ss<T, BK>(dp, kmajor_desc<T, BQ>(sO, ks), kmajor_desc<T, BK>(sV, ks), ks > 0);
    }
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = attn_keep_rows<NT>(p, hv.sample, hv.hg, rows.row0, k0, lane);
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

template <int DP, int BQ, bool DQ = false, int WG = 1>
constexpr int wgmma_dkdv_smem_bytes() {
  // K, V (a 64-key tile each per warpgroup); two buffers of Q and dO; DQ: the dS^T tiles
  // [64 keys][BQ queries], one per warpgroup, and with two warpgroups the halves of dQ they
  // exchange (exchange_add_dq); alignment; two buffers of lse and delta
  return (WG * 2 * 64 + 4 * BQ) * DP * 2 + (DQ ? WG * 64 * BQ * 2 : 0) +
         (DQ && WG == 2 ? 2 * 64 * DP / 2 * 4 : 0) + kSwizzleSpan + 2 * 2 * BQ * 4;
}
// Blocks an SM that ptxas must leave registers for: D 64 with 32-query tiles fits 3 (at most
// 168 registers: the S^T and dP^T tiles are half those of 64-query tiles), as the mma.sync
// kernel of that shape does; the others take what they need (2 blocks an SM).
template <int DP, int BQ>
constexpr int wgmma_dkdv_min_blocks() {
  return DP == 64 && BQ == 32 ? 3 : 1;
}

// dS^T, the A fragments of dK += dS^T Q (warp w: keys 16w + g and + 8; k: 16 queries a
// step), into the swizzled tile [64 keys][64 queries] (the layout of load_tile_sw128), from
// which dQ = dS K reads dS MN-major. Each 32-bit pair of queries stays in one 16-byte chunk;
// the swizzle puts the 8 rows of a store on 8 different chunks: no bank conflicts.
template <typename T, int KK>
__device__ __forceinline__ void store_frags_sw128(T* tile, const uint32_t (&a)[KK][4], int warp, int lane) {
  static_assert(KK == 4, "64 queries: one 64-column block");
  const int r0 = warp * 16 + (lane >> 2), c = (lane & 3) * 2, sw = r0 & 7;  // rows r0 and r0 + 8 share r & 7
#pragma unroll
  for (int kk = 0; kk < KK; ++kk)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // A registers 2h (row g) and 2h + 1 (row g + 8): queries 16 kk + 8 h + c
      T* chunk = tile + r0 * 64 + (((2 * kk + h) ^ sw) << 3) + c;
      *reinterpret_cast<uint32_t*>(chunk) = a[kk][2 * h];
      *reinterpret_cast<uint32_t*>(chunk + 8 * 64) = a[kk][2 * h + 1];
    }
}

// With two warpgroups (WG 2), both have computed dQ partials for the same 64 query rows,
// each over its own 64 keys, in the same C layout (a thread and its twin, 128 threads on,
// hold the same positions). Warpgroup w keeps columns [w DP/2, (w + 1) DP/2): it hands the
// other half to its twin through shared memory (sX: [2][DP/16][128] float4, conflict-free),
// adds the half it receives and adds the sum to dQ by float atomics. Half the atomics of two
// one-warpgroup blocks, for DP/16 float4 shared stores and loads a thread and one barrier.
template <int DP>
__device__ __forceinline__ void exchange_add_dq(const float (&dq)[DP / 8][4], float4* sX, float* dq_rows, int row0,
                                                int T_, int D, int lane) {
  constexpr int H = DP / 16;  // n8 tiles a half
  const int t = threadIdx.x & (kThreads - 1), wg = threadIdx.x >> 7;
  // Each choice between two registers is a select of values with compile-time indices (a
  // runtime index into dq, or a reference chosen at run time, would put dq in local memory).
  const bool first = wg == 0;
#pragma unroll
  for (int j = 0; j < H; ++j) {
    float4 give;
    give.x = first ? dq[H + j][0] : dq[j][0];
    give.y = first ? dq[H + j][1] : dq[j][1];
    give.z = first ? dq[H + j][2] : dq[j][2];
    give.w = first ? dq[H + j][3] : dq[j][3];
    sX[(wg * H + j) * kThreads + t] = give;
  }
  __syncthreads();
  float sum[H][4];
#pragma unroll
  for (int j = 0; j < H; ++j) {
    const float4 v = sX[((wg ^ 1) * H + j) * kThreads + t];
    sum[j][0] = (first ? dq[j][0] : dq[H + j][0]) + v.x;
    sum[j][1] = (first ? dq[j][1] : dq[H + j][1]) + v.y;
    sum[j][2] = (first ? dq[j][2] : dq[H + j][2]) + v.z;
    sum[j][3] = (first ? dq[j][3] : dq[H + j][3]) + v.w;
  }
  add_acc_atomic<H>(dq_rows, sum, row0, wg * DP / 2, T_, D, lane);
}

// dK and dV on sm_90a. Grid (B*H, ceil(T/(64 WG))), with DQ in head groups (dkdv_block);
// block: WG warpgroups, 64 keys each (warp w of warpgroup g: keys 64g + 16w..+15), one K
// and V tile each; query tiles of BQ rows from the diagonal to the end, shared by the
// warpgroups (WG 2 loads each Q and dO tile once for 128 keys, as FlashAttention-2's and
// -3's 128-key backward blocks do), double-buffered with their lse and delta. Per tile,
// transposed (keys are rows): S^T = K Q^T and dP^T = V dO^T (one wgmma group), P z and dS in
// registers, then dV += (P z)^T dO and dK += dS^T Q (dO and Q read MN-major from the same
// tiles). dK * scale at the end. BQ: 64, or 32 (fewer registers).
// DQ (D 64, BQ 64; TRIDENT_ATTN_BWD_ATOMIC=1 with TRIDENT_ATTN_BWD_WGMMA=1): the block also adds
// this tile's dS K to dQ, the flash-attention-2 way, and the dQ pass does not run. dS^T goes
// to shared memory before dV and dK are issued; dQ (queries are rows) = dS K reads it and K both
// MN-major, into the registers S^T and dP^T held; float atomics add it to p.dq_acc (WG 2:
// the two warpgroups' sums, exchange_add_dq).
// WG 2 (TRIDENT_ATTN_BWD_WG=2, while it is measured; D 64): two warpgroups a block, 128 keys.
template <typename T, int DP, int BQ, bool DQ = false, int WG = 1>
__global__ void __launch_bounds__(kThreads * WG, WG == 1 ? wgmma_dkdv_min_blocks<DP, BQ>() : 1)
    attn_bwd_dkdv_wgmma_kernel(const AttnParams p) {
  static_assert(DP == 64 || DP == 128, "the 128-byte swizzle needs 64-column blocks");
  static_assert(BQ == 32 || BQ == 64, "wgmma N of S^T and dP^T; k16 steps of dV and dK");
  static_assert(!DQ || (BQ == 64 && DP == 64), "dQ = dS K: wgmma M is 64 queries; D 128 has no registers for it");
  static_assert(WG == 1 || (WG == 2 && DP == 64), "two warpgroups: D 64 (D 128's kernel spilled at 255 registers)");
  constexpr int BKV = 64, NT = BQ / 8, kBlockThreads = kThreads * WG;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = swizzle_aligned<T>(smem_raw);  // WG K tiles, then WG V tiles
  T* sV = sK + WG * BKV * DP;
  T* sQ0 = sV + WG * BKV * DP;  // two Q buffers, then two dO buffers
  T* sO0 = sQ0 + 2 * BQ * DP;
  T* sdS = sO0 + 2 * BQ * DP;  // DQ: WG tiles dS^T [64 keys][64 queries] (1024-byte aligned: whole tiles before)
  float4* sX = reinterpret_cast<float4*>(sdS + (DQ ? WG * BKV * BQ : 0));  // DQ, WG 2: exchange_add_dq
  float* sL0 = reinterpret_cast<float*>(sX + (DQ && WG == 2 ? 2 * (DP / 16) * kThreads : 0));  // lse, delta

  const int T_ = p.T, D = p.D;
  const BlockKeys kb = dkdv_block<DQ>(p, BKV * WG);
  if (DQ && kb.bh >= p.B * p.H) return;  // past the last head group's heads (the whole block)
  const int bh = kb.bh, b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const HeadView<T> hv = head_view<T>(p, b, h);
  const T *gQ = hv.q, *gK = hv.k, *gV = hv.v, *gdO = hv.dout;
  const float *lse = hv.lse, *delta = hv.delta;
  // This warpgroup's 64 keys and tiles; warp: within the warpgroup.
  const int wg = WG == 1 ? 0 : static_cast<int>(threadIdx.x) / kThreads;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int k0 = kb.k0 + wg * BKV;
  const int wkey = k0 + warp * 16;
  sK += wg * BKV * DP;
  sV += wg * BKV * DP;
  sdS += wg * BKV * BQ;
  const uint64_t sample = hv.sample, hg = hv.hg;

  // Query tile qt into buffer n, all by cp.async (the caller commits): Q, dO, and lse and
  // delta (zeros past T). A plain load of lse would hold its warp, and with it the whole
  // warpgroup's next wgmma, for a global-memory latency every tile.
  auto load_query_tile = [&](int qt, int n) {
    const int tid = static_cast<int>(threadIdx.x);
    load_tile_sw128<T, BQ, DP, kBlockThreads>(sQ0 + n * BQ * DP, gQ, p.qkv_tok, qt * BQ, T_, D, tid);
    load_tile_sw128<T, BQ, DP, kBlockThreads>(sO0 + n * BQ * DP, gdO, p.out_tok, qt * BQ, T_, D, tid);
    const int i = qt * BQ + static_cast<int>(threadIdx.x);
    if (threadIdx.x < BQ) {  // past T: zeros, from the row base (nothing is read)
      const bool valid = i < T_;
      cp_async4(sL0 + n * 2 * BQ + threadIdx.x, valid ? lse + i : lse, valid);
      cp_async4(sL0 + n * 2 * BQ + BQ + threadIdx.x, valid ? delta + i : delta, valid);
    }
  };

  // The block's first query tile is its first warpgroup's diagonal one (with WG 2 the second
  // warpgroup's keys hide all of that tile's queries: its P and dS are zero there).
  const int qt_first = kb.k0 / BQ, nqt = query_tiles_end(p, b, kb.k0 + BKV * WG - 1, BQ);
  const int wtid = static_cast<int>(threadIdx.x) & (kThreads - 1);
  load_tile_sw128<T, BKV, DP>(sK, gK, p.qkv_tok, k0, T_, D, wtid);
  load_tile_sw128<T, BKV, DP>(sV, gV, p.qkv_tok, k0, T_, D, wtid);
  load_query_tile(qt_first, 0);
  cp_async_commit();

  float dk[DP / 8][4], dv[DP / 8][4];
  zero_frags(dk);
  zero_frags(dv);

  for (int qt = qt_first; qt < nqt; ++qt) {
    const int i0 = qt * BQ, n = (qt - qt_first) & 1;
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // this tile is visible to wgmma; every product of the last one is done
    if (qt + 1 < nqt) {
      load_query_tile(qt + 1, n ^ 1);
      cp_async_commit();
    }
    // With two warpgroups, the second one's keys hide all of the first tile's queries, and
    // keys all past T see nothing. With DQ it still takes part (its zero dQ half goes
    // through exchange_add_dq's barrier).
    if (WG == 2 && !DQ && (i0 + BQ - 1 < k0 || k0 >= T_)) continue;
    const T* sQ = sQ0 + n * BQ * DP;
    const T* sO = sO0 + n * BQ * DP;
    const float* sL = sL0 + n * 2 * BQ;
    float st[NT][4], dpt[NT][4];  // S^T and dP^T: rows = keys, columns = queries
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < DP / 16; ++ks) {
      wgmma_ss<T, BQ>(st, kmajor_desc<T, BKV>(sK, ks), kmajor_desc<T, BQ>(sQ, ks), ks > 0);
      wgmma_ss<T, BQ>(dpt, kmajor_desc<T, BKV>(sV, ks), kmajor_desc<T, BQ>(sO, ks), ks > 0);
    }
    wgmma_commit();
    KeepBits<NT> keep;  // drawn while the products run
    if (p.dropout) keep = attn_keep_keys<NT>(p, sample, hg, wkey + (lane >> 2), i0, lane);
    wgmma_wait<0>();
    fence_acc(st);
    fence_acc(dpt);
    dkdv_tile_p_ds<T, NT>(p, st, dpt, wkey, i0, lane, sL, sL + BQ, keep, b);
    uint32_t pa[NT / 2][4], da[NT / 2][4];
    c_to_a<T, NT>(st, pa);
    c_to_a<T, NT>(dpt, da);
    if constexpr (DQ) {
      // dS^T to shared memory before the dK product takes da (the PTX ISA leaves reading a
      // wgmma's A registers before its wait_group undefined). The last tile's dQ product
      // was waited for before the barrier at the top of this one.
      store_frags_sw128<T, NT / 2>(sdS, da, warp, lane);
      fence_proxy_async();
    }
    fence_acc(dv);
    fence_acc(dk);
    fence_frag(pa);
    fence_frag(da);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk) {
      wgmma_rs<T, DP>(dv, pa[kk], mnmajor_desc<T, BQ>(sO, kk));
      wgmma_rs<T, DP>(dk, da[kk], mnmajor_desc<T, BQ>(sQ, kk));
    }
    wgmma_commit();
    if constexpr (DQ) {
      __syncthreads();  // every warp's dS^T rows are visible to wgmma (while dV and dK run)
      float dq[DP / 8][4];  // queries i0 + 16w + g and + 8 (the C layout)
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BKV / 16; ++kk)
        wgmma_ss_mn<T, DP>(dq, mnmajor_desc<T, BKV>(sdS, kk), mnmajor_desc<T, BKV>(sK, kk), kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(dq);
      float* dq_rows = p.dq_acc + static_cast<int64_t>(bh) * T_ * D;
      if constexpr (WG == 1) {
        add_acc_atomic(dq_rows, dq, i0 + warp * 16, 0, T_, D, lane);
      } else {
        exchange_add_dq<DP>(dq, sX, dq_rows, i0 + warp * 16, T_, D, lane);
      }
    } else {
      wgmma_wait<0>();
    }
    fence_acc(dv);
    fence_acc(dk);
    fence_frag(pa);
    fence_frag(da);
  }

  T* gdK = hv.dq + HD;
  store_acc<T, DP>(gdK, p.qkv_tok, dk, wkey, T_, D, lane, p.scale, p.scale);
  store_acc<T, DP>(gdK + HD, p.qkv_tok, dv, wkey, T_, D, lane, 1.f, 1.f);
}

// =========================================================================================
// Kernels: CUDA-core path (any dtype, any D <= 128), one warp per row
// =========================================================================================
// Lane l holds head dims l, l + 32, l + 64, l + 96 (those < D); dot products are warp sums
// in a fixed order.

constexpr int kSimtDims = 4;  // D <= 128

template <typename T>
__device__ __forceinline__ void load_row(float (&x)[kSimtDims], const T* row, int D, int lane) {
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) {
    const int d = lane + 32 * c;
    x[c] = d < D ? to_f32(row[d]) : 0.f;
  }
}
__device__ __forceinline__ float dot_part(const float (&a)[kSimtDims], const float (&b)[kSimtDims]) {
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) s += a[c] * b[c];
  return s;
}
template <typename T>
__device__ __forceinline__ void store_row(T* row, const float (&x)[kSimtDims], float mul, int D, int lane) {
#pragma unroll
  for (int c = 0; c < kSimtDims; ++c) {
    const int d = lane + 32 * c;
    if (d < D) row[d] = from_f32<T>(x[c] * mul);
  }
}

// The first key query i of sample b sees: its document's start, 0 without documents.
__device__ __forceinline__ int simt_first_key(const AttnParams& p, int b, int i) {
  const int32_t* doc = sample_docs(p, b);
  return doc != nullptr ? doc[i] : 0;
}

// Forward: warp w handles row i of head (b, h); online softmax over keys first..i.
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_fwd_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = T_ - 1 - static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + static_cast<int64_t>(h) * D;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  float q[kSimtDims], acc[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
  float m = -INFINITY, l = 0.f;
  for (int j = simt_first_key(p, b, i); j <= i; ++j) {
    const T* kj = base + static_cast<int64_t>(j) * p.qkv_tok + HD;
    float k[kSimtDims], v[kSimtDims];
    load_row(k, kj, D, lane);
    load_row(v, kj + HD, D, lane);
    const float s = warp_sum(dot_part(q, k)) * p.scale;
    const float mn = fmaxf(m, s);
    const float al = expf(m - mn);  // 0 on the first key (m = -inf)
    const float pe = expf(s - mn);
    l = l * al + pe;
    const float w_ = p.dropout ? pe * attn_drop_one(p, sample, hg, i, j) : pe;
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) acc[c] = acc[c] * al + w_ * v[c];
    m = mn;
  }
  T* orow = static_cast<T*>(p.out) + (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D;
  store_row(orow, acc, 1.f / l, D, lane);
  if (lane == 0) p.lse[static_cast<int64_t>(bh) * T_ + i] = m + logf(l);
}

// delta_i = rowsum(dO_i * O_i), f32, one warp per row (shared by both paths).
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_delta_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t off = (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D;
  const T* o = static_cast<const T*>(p.out) + off;
  const T* g = static_cast<const T*>(p.dout) + off;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += to_f32(o[d]) * to_f32(g[d]);
  s = warp_sum(s);
  if (lane == 0) p.delta[w] = s;
}

// The same with 16-byte vectors (the tensor-core paths' operands: D % 8 == 0, 16-byte aligned
// rows): G lanes a row (G, a power of two, covers its D / 8 vectors: 8 at D 64, 16 at D 128),
// 32 / G rows a warp, the lane's products summed in order, then the G lanes' sums by
// shuffles. The scalar kernel's 64-bit index arithmetic and 2-byte loads a row took about as
// long as a memory-bound pass over O and dO takes.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads) attn_delta_vec_kernel(const AttnParams p) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  const int lane = threadIdx.x & 31, gl = lane % G;
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.T;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * (32 / G) + lane / G;
  float s = 0.f;
  if (w < rows && gl * kV < p.D) {
    const int T_ = p.T, D = p.D;
    const int bh = static_cast<int>(w / T_), i = static_cast<int>(w - static_cast<int64_t>(bh) * T_);
    const int b = bh / p.H, h = bh - b * p.H;
    const int64_t off = (static_cast<int64_t>(b) * T_ + i) * p.out_tok + static_cast<int64_t>(h) * D + gl * kV;
    const uint4 ov = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.out) + off);
    const uint4 gv = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + off);
    T o[kV], g[kV];  // the vectors' elements (memcpy: no aliasing of the uint4 through T)
    memcpy(static_cast<void*>(o), &ov, sizeof(ov));
    memcpy(static_cast<void*>(g), &gv, sizeof(gv));
#pragma unroll
    for (int j = 0; j < kV; ++j) s += to_f32(o[j]) * to_f32(g[j]);
  }
#pragma unroll
  for (int m = G / 2; m >= 1; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
  if (gl == 0 && w < rows) p.delta[w] = s;
}

// p.doc_end from p.doc, a thread a position: the end of position t's document is the first
// later position whose document starts after t (starts do not decrease: a binary search of
// log2 T loads), or T.
__global__ void __launch_bounds__(kThreads) attn_doc_ends_kernel(const AttnParams p) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (n >= static_cast<int64_t>(p.B) * p.T) return;
  const int64_t b = n / p.T;
  const int t = static_cast<int>(n - b * p.T);
  const int32_t* start = p.doc + b * p.T;
  int lo = t + 1, hi = p.T;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (start[mid] > t) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  p.doc_end[n] = lo;
}

// The backward's document ends (the tensor-core dK/dV kernels' mask_key_tile reads them):
// launch(kernel, grid_x, 1, 0) once when they have a buffer (documents, tensor-core path).
// Shared by the host launcher and the CPU emulator's test.
template <typename Launch>
void plan_document_ends(const AttnParams& p, Launch&& launch) {
  const int64_t n = static_cast<int64_t>(p.B) * p.T;
  if (p.doc_end != nullptr) launch(attn_doc_ends_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), 1u, 0);
}

// The delta pass: launch(kernel, grid_x, 1, 0) once, the vector kernel when `vectors` (the
// tensor-core paths: D % 8 == 0, aligned rows), else the scalar one. Shared by the host
// launcher and the CPU emulator's test.
template <typename T, typename Launch>
void plan_delta(const AttnParams& p, bool vectors, Launch&& launch) {
  const int64_t rows = static_cast<int64_t>(p.B) * p.H * p.T;
  if constexpr (!std::is_same_v<T, float>) {
    if (vectors) {
      constexpr int kV = static_cast<int>(16 / sizeof(T));
      const int vecs = (p.D + kV - 1) / kV;  // at most 16 (D <= 128)
      auto go = [&](auto g) {
        constexpr int G = decltype(g)::value;
        const int64_t per_block = (kThreads / 32) * (32 / G);
        launch(attn_delta_vec_kernel<T, G>, static_cast<unsigned>((rows + per_block - 1) / per_block), 1u, 0);
      };
      if (vecs <= 1)
        go(std::integral_constant<int, 1>{});
      else if (vecs <= 2)
        go(std::integral_constant<int, 2>{});
      else if (vecs <= 4)
        go(std::integral_constant<int, 4>{});
      else if (vecs <= 8)
        go(std::integral_constant<int, 8>{});
      else
        go(std::integral_constant<int, 16>{});
      return;
    }
  }
  launch(attn_delta_kernel<T>, static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)), 1u, 0);
}

// The atomic-dQ backward's f32 accumulator p.dq_acc ([B*H*T, D]): zeroed before the dK/dV
// kernel, then dQ = dq_acc * scale stored into dqkv's Q slots. Grid-stride, 4 floats a step.
__global__ void __launch_bounds__(kThreads) attn_dq_zero_kernel(const AttnParams p) {
  const int64_t n4 = static_cast<int64_t>(p.B) * p.H * p.T * p.D / 4;  // D % 8 == 0
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < n4;
       k += static_cast<int64_t>(gridDim.x) * kThreads)
    reinterpret_cast<float4*>(p.dq_acc)[k] = make_float4(0.f, 0.f, 0.f, 0.f);
}
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_dq_store_kernel(const AttnParams p) {
  const int D = p.D, T_ = p.T;
  const int64_t n4 = static_cast<int64_t>(p.B) * p.H * T_ * D / 4;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; k < n4;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = k * 4 / D;  // (b h) T + t
    const int c = static_cast<int>(k * 4 - row * D);
    const int64_t bh = row / T_;
    const int t = static_cast<int>(row - bh * T_);
    const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh - static_cast<int64_t>(b) * p.H);
    const float4 v = reinterpret_cast<const float4*>(p.dq_acc)[k];
    T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + t) * p.qkv_tok + static_cast<int64_t>(h) * D + c;
    uint2 packed;
    packed.x = pack2<T>(v.x * p.scale, v.y * p.scale);
    packed.y = pack2<T>(v.z * p.scale, v.w * p.scale);
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

// dQ: warp per query row i, keys first..i.
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_bwd_dq_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), i = T_ - 1 - static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D, head = static_cast<int64_t>(h) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + head;
  const T* gdo = static_cast<const T*>(p.dout) + (static_cast<int64_t>(b) * T_ + i) * p.out_tok + head;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  const float li = p.lse[static_cast<int64_t>(bh) * T_ + i];
  const float di = p.delta[static_cast<int64_t>(bh) * T_ + i];
  float q[kSimtDims], g[kSimtDims], dq[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
  load_row(g, gdo, D, lane);
  for (int j = simt_first_key(p, b, i); j <= i; ++j) {
    const T* kj = base + static_cast<int64_t>(j) * p.qkv_tok + HD;
    float k[kSimtDims], v[kSimtDims];
    load_row(k, kj, D, lane);
    load_row(v, kj + HD, D, lane);
    const float pe = expf(warp_sum(dot_part(q, k)) * p.scale - li);
    const float z = p.dropout ? attn_drop_one(p, sample, hg, i, j) : 1.f;
    const float ds = pe * (z * warp_sum(dot_part(g, v)) - di);
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) dq[c] += ds * k[c];
  }
  T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + i) * p.qkv_tok + head;
  store_row(dst, dq, p.scale, D, lane);
}

// dK, dV: warp per key row j, queries j.. up to the end of its document (T - 1 without).
template <typename T>
__global__ void __launch_bounds__(kThreads) attn_bwd_dkdv_simt_kernel(const AttnParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  const int T_ = p.T, D = p.D;
  if (w >= static_cast<int64_t>(p.B) * p.H * T_) return;
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(w / T_), j = static_cast<int>(w % T_);
  const int b = bh / p.H, h = bh - b * p.H;
  const int64_t HD = static_cast<int64_t>(p.H) * D, head = static_cast<int64_t>(h) * D;
  const T* base = static_cast<const T*>(p.qkv) + static_cast<int64_t>(b) * T_ * p.qkv_tok + head;
  const T* gdo = static_cast<const T*>(p.dout) + static_cast<int64_t>(b) * T_ * p.out_tok + head;
  const float* lse = p.lse + static_cast<int64_t>(bh) * T_;
  const float* delta = p.delta + static_cast<int64_t>(bh) * T_;
  const uint64_t sample = p.drop.sample_base + static_cast<uint64_t>(b);
  const uint64_t hg = static_cast<uint64_t>(p.head_offset + h);
  float k[kSimtDims], v[kSimtDims], dk[kSimtDims] = {0.f, 0.f, 0.f, 0.f}, dv[kSimtDims] = {0.f, 0.f, 0.f, 0.f};
  load_row(k, base + static_cast<int64_t>(j) * p.qkv_tok + HD, D, lane);
  load_row(v, base + static_cast<int64_t>(j) * p.qkv_tok + 2 * HD, D, lane);
  for (int i = j; i < T_ && simt_first_key(p, b, i) <= j; ++i) {  // documents are contiguous
    float q[kSimtDims], g[kSimtDims];
    load_row(q, base + static_cast<int64_t>(i) * p.qkv_tok, D, lane);
    load_row(g, gdo + static_cast<int64_t>(i) * p.out_tok, D, lane);
    const float pe = expf(warp_sum(dot_part(q, k)) * p.scale - lse[i]);
    const float z = p.dropout ? attn_drop_one(p, sample, hg, i, j) : 1.f;
    const float ds = pe * (z * warp_sum(dot_part(g, v)) - delta[i]);
    const float pz = pe * z;
#pragma unroll
    for (int c = 0; c < kSimtDims; ++c) {
      dv[c] += pz * g[c];
      dk[c] += ds * q[c];
    }
  }
  T* dst = static_cast<T*>(p.dqkv) + (static_cast<int64_t>(b) * T_ + j) * p.qkv_tok + head;
  store_row(dst + HD, dk, p.scale, D, lane);
  store_row(dst + 2 * HD, dv, 1.f, D, lane);
}

// =========================================================================================
// Launch plans: the kernel instances, grids and shared memory of one call (before the host
// launchers so that the CPU emulator's test runs the same plans)
// =========================================================================================

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
//            before the atomics, half as many); dkdv_wg 2 for D 64 only. With any fwd_wgmma /
//            bwd_wgmma tiles. (The launches' block size: the plans' launch callbacks take it
//            as a fifth argument, default kThreads.)
struct AttnTiles {
  int fwd_wm = 1, fwd_bk = 0, fwd_nb = 1, dkdv_nb = 1, dkdv_bq = 0, dq_bk = 0;
  int fwd_wg = 1, dkdv_wg = 1, dq_wg = 1;
  bool dq_atomic = false, fwd_wgmma = false, bwd_wgmma = false;
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
    if (t.dq_atomic && t.dkdv_bq != 0 && t.dkdv_bq != 64) return false;
    if ((t.dkdv_wg != 1 && t.dkdv_wg != 2) || (t.dq_wg != 1 && t.dq_wg != 2)) return false;
    if (t.dq_atomic && t.dq_wg != 1) return false;  // no dQ kernel
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
      if (t.dq_wg == 2) {
        launch(attn_bwd_dq_wgmma_kernel<T, DP, 64, 2>, bh, static_cast<unsigned>((p.T + 127) / 128),
               wgmma_dq_smem_bytes<DP, 64, 2>(), 2 * kThreads);
      } else {
        launch(attn_bwd_dq_wgmma_kernel<T, DP, 64>, bh, tiles, wgmma_dq_smem_bytes<DP, 64>());
      }
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
  if (t.dkdv_wg != 1 || t.dq_wg != 1) return false;  // the mma.sync kernels have one block shape
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

// =========================================================================================
// Host launchers
// =========================================================================================

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
// take the defaults measured fastest on an H200 (kernels/cuda/PERFORMANCE.md, 2026-11-30):
// where wgmma_available(), the wgmma forward and backward for D > 32, unless a tile variable
// of that direction is set (a forward key tile counts: the mma.sync kernels' 32 does not
// exist in wgmma; its 128 takes FWD_WGMMA=1; likewise the wgmma backward's other dK/dV tiles
// take BWD_WGMMA=1 DKDV_BQ=...); elsewhere the mma.sync kernels. TRIDENT_ATTN_FWD_WGMMA /
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
  t.fwd_wgmma = fwd == 1 || (fwd < 0 && D > 32 && !mma_fwd_asked && wgmma_available());
  t.bwd_wgmma = bwd == 1 || (bwd < 0 && D > 32 && !mma_bwd_asked && wgmma_available());
  TRIDENT_CHECK((fwd != 1 && bwd != 1) || wgmma_available(),
                "attention: TRIDENT_ATTN_FWD_WGMMA / TRIDENT_ATTN_BWD_WGMMA need a compute capability 9.0 GPU "
                "and a build for sm_90a (CMAKE_CUDA_ARCHITECTURES with 90a)");
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
         " TRIDENT_ATTN_FWD_WGMMA=" + std::to_string(t.fwd_wgmma) +
         " TRIDENT_ATTN_BWD_WGMMA=" + std::to_string(t.bwd_wgmma);
}

// Runs plan(p, t, launch) (plan_forward_mma or plan_backward_mma); tiles that this head dim
// has no kernel for are an error.
template <typename Plan>
void run_plan(const char* op, const AttnParams& p, const AttnTiles& t, cudaStream_t s, Plan&& plan) {
  const bool ok = plan(p, t, [&](auto kernel, unsigned gx, unsigned gy, int smem, int threads = kThreads) {
    launch_mma(kernel, dim3(gx, gy), smem, p, s, threads);
  });
  TRIDENT_CHECK(ok, op, ": head dim ", p.D, " has no kernels for ", describe(t),
                " (see AttnTiles in kernels/cuda/cuda_attention.cu)");
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
  const bool simt_forced = env_flag("TRIDENT_ATTN_SIMT");
  c.mma = qkv.dtype != DType::F32 && s.D % 8 == 0 && aligned16(qkv.data) && aligned16(out.data) && !simt_forced;
  return c;
}

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const AttentionShape& s,
                       const DropoutKey& drop, cudaStream_t st) {
  const Checked c = check("attention_forward", qkv, out, lse, s, drop);
  dispatch_float(qkv.dtype, "attention_forward", [&](auto tag) {
    using Ty = decltype(tag);
    if constexpr (std::is_same_v<Ty, float>) {
      attn_fwd_simt_kernel<Ty><<<simt_grid(c.p), kThreads, 0, st>>>(c.p);
      CUDA_CHECK_LAUNCH();
    } else {
      if (c.mma) {
        run_plan("attention_forward", c.p, tiles_from_env(s.D), st,
                 [](auto&&... a) { return plan_forward_mma<Ty>(a...); });
      } else {
        attn_fwd_simt_kernel<Ty><<<simt_grid(c.p), kThreads, 0, st>>>(c.p);
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
