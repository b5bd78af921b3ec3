// The inline-PTX primitives of the tensor-core kernels: cp.async, ldmatrix, mma.sync,
// ex2.approx, float-pair atomics, sm_90a warpgroup MMA (wgmma), mbarriers and TMA loads. The
// CPU emulator's test (tests/cuda/test_cuda_attention_emulated.cpp) defines emulated twins
// with the same signatures in place of this file.
//
// Part of the fused attention of kernels/cuda/cuda_attention.cu (its header says what is fused
// and why; the files of kernels/cuda/attention/ are included by it alone, and, as host code,
// by the CPU emulator's test through tests/cuda/emulate_attention.cmake).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"

namespace trident::cuda {
namespace {

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

// ---- mbarriers: the warp-specialized forward's pipeline (sm_90a) ----------------------------
// A 64-bit barrier object in shared memory that completes a phase when its pending count
// (set by mbar_init) reaches zero, then starts the next phase with the same count. Arrivals
// release this thread's earlier shared-memory writes; a wait on a phase acquires them.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  TRIDENT_SM90A_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (cp.async's arrivals); a
// __syncthreads then publishes them to the block.
__device__ __forceinline__ void fence_mbar_init() {
  TRIDENT_SM90A_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  TRIDENT_SM90A_ASM("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar))
                    : "memory");
}
// Spins until the phase of parity `parity` (0 for the barrier's first phase, then 1, 0, ...)
// has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  TRIDENT_SM90A_ASM(
      "{\n.reg .pred done;\nWAIT_PHASE:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_PHASE;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// One arrival on `bar` that also expects `bytes` more to land on it (a TMA load's): the phase
// completes when every arrival is in and every expected byte has landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  TRIDENT_SM90A_ASM("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                        smem_addr(bar)),
                    "r"(bytes)
                    : "memory");
}
// A TMA load: the box of `map` at coordinates (c0, c1, c2, c3) into shared memory at `smem`
// (1024-byte aligned for the 128-byte swizzle), its bytes counted on `bar`. `map` lies in a
// __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_box(void* smem, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                             uint64_t* bar) {
  TRIDENT_SM90A_ASM(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// Makes this thread's generic-proxy shared-memory writes (stores, cp.async) visible to the
// async proxy that wgmma and the bulk copies read shared memory through; a barrier then
// publishes them.
__device__ __forceinline__ void fence_proxy_async() {
  TRIDENT_SM90A_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A consumer warpgroup of a warp-specialized block meets at named barrier `id`, without the
// producer (__syncthreads is barrier 0, the whole block): 1 for the one-consumer kernels'
// threads 0-127, 1 + c for consumer warpgroup c of a two-consumer block.
__device__ __forceinline__ void consumer_sync(int id = 1) {
  TRIDENT_SM90A_ASM("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

// ---- register reallocation between warpgroups (sm_90a setmaxnreg) ---------------------------
// Executed by every thread of a warpgroup together: a producer warpgroup gives its registers
// back to the block's pool down to N a thread, consumer warpgroups take up to N a thread from
// it (waiting until the pool has them). N: a multiple of 8 in [24, 256]; the kernel's
// __launch_bounds__ fix the count every thread starts with.
template <int N>
__device__ __forceinline__ void regs_release_to() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  TRIDENT_SM90A_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_claim_to() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
  TRIDENT_SM90A_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- bulk copies: f32 adds from shared to global memory by the copy engine (sm_90a) -------
// `bytes` (a multiple of 16; both addresses 16-byte aligned) of f32 at `src` added to those at
// `dst` in global memory (element by element, each add atomic), asynchronously; the op joins
// this thread's open bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  TRIDENT_SM90A_ASM("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
                    "r"(smem_addr(src)), "r"(bytes)
                    : "memory");
}
__device__ __forceinline__ void bulk_commit() { TRIDENT_SM90A_ASM("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk groups have not finished reading their
// shared-memory sources (which may then be written again).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  TRIDENT_SM90A_ASM("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's bulk groups are not complete (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  TRIDENT_SM90A_ASM("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
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

}  // namespace
}  // namespace trident::cuda
