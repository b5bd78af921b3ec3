// The attention kernels of kernels/cuda/attention/ run on the CPU, so that a machine
// without a GPU (CI) still checks their tiling, causal masking, online softmax, dropout
// indexing, shared-memory bookkeeping and mma/ldmatrix fragment arithmetic.
//
// How: emulate_attention.cmake copies the device code and launch plans of those headers
// (minus attn_ptx.cuh, the inline-PTX primitives) into cuda_attention_emulated.inc, compiled
// here as host C++. A launch runs
// each block as 128 to 384 cooperative fibers (emulated/emu_context.h) on one OS thread;
// __syncthreads and the warp-collective operations are barriers between fibers. The primitives are emulated from
// the PTX ISA's fragment layouts (m16n8k16 A/B/C, ldmatrix with and without .trans), and
// cp.async either copies at issue ("eager": catches a buffer overwritten while still read)
// or at the cp.async.wait_group that covers it ("deferred": catches reads before the wait).
// Shared memory starts as 0xFF bytes (NaN in fp16/bf16), so reading an unwritten element
// poisons the result.
//
// What it cannot check: real-hardware timing, bank conflicts, the PTX strings themselves
// (compiled by nvcc in the library build) and register allocation (tools/check-cuda-spills.sh).
// Reference: double-precision attention on the same rounded inputs, with philox.h's
// attn_dropout_keep; tolerances as in test_cuda_attention.cpp.
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attention_test_inputs.h"
#include "tests/attn_mask_test_util.h"
#include "core/attn_dropout_mask.h"
#include "core/philox.h"
#include "emulated/emu_context.h"

// ---- CUDA C++ spelled as host C++ (cuda_fp16.h defined some of these for nvcc) ---------
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__
using std::max;
using std::min;

namespace emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

constexpr int kMaxBlockThreads = 384;  // the kernels' blocks: 128 threads, 256 (two warpgroups), 384 (three)

// One block's fibers and their per-thread cp.async state.
struct Pending {
  void* dst;
  const void* src;
  bool valid;
  size_t bytes;  // 16, or 4 (cp_async4)
};
// One issued wgmma (sm_90a warpgroup MMA), executed at the wgmma.wait_group that covers it.
struct WgmmaOp {
  float* d;                // this thread's accumulators: n / 8 x 4 floats
  int n;                   // N of m64nNk16
  uint64_t desc_a;         // A in shared memory when a == nullptr
  const uint32_t* a;       // else this thread's 4 A registers
  uint64_t desc_b;         // B in shared memory
  bool a_mn_major, b_mn_major, accumulate, fp16;  // ss: both K-major or (ss_mn) both MN-major; rs: B MN-major
};
// One issued bulk f32 reduce (cp.reduce.async.bulk ... add.f32), done at the bulk wait that
// covers it: its source is read then, as late as the hardware may read it.
struct BulkAdd {
  float* dst;
  const float* src;
  size_t floats;
};
struct Barrier;
struct Fiber {
  Context ctx;
  bool done = false;
  const Barrier* waiting = nullptr;  // the barrier this fiber is blocked on, if any
  unsigned wait_gen = 0;             // its generation when the fiber arrived
  std::vector<std::vector<Pending>> groups;  // committed cp.async groups, oldest first
  std::vector<Pending> open;                 // issued, not yet committed
  std::vector<std::vector<WgmmaOp>> wgmma_groups;  // committed wgmma groups, oldest first
  std::vector<WgmmaOp> wgmma_open;
  std::vector<std::vector<BulkAdd>> bulk_groups;  // committed bulk groups, oldest first
  std::vector<BulkAdd> bulk_open;
};

struct Barrier {
  int n = 0, count = 0;
  unsigned gen = 0;
};

// An mbarrier (the warp-specialized forward's pipeline), kept beside the block by the address
// of its 8 bytes of shared memory: `pending` arrivals and `tx` expected bytes complete the
// phase; `phases` counts the completed ones, and `done.gen` moves with it, so that a fiber
// waiting for a phase is blocked for the scheduler as at a __syncthreads.
struct Mbarrier {
  int count = 0, pending = 0;
  int64_t tx = 0;
  unsigned phases = 0;
  Barrier done;
};

struct Block {
  std::vector<Fiber> fibers;
  int cur = -1;
  Context main;
  Barrier block_bar;
  Barrier warp_bar[kMaxBlockThreads / 32];
  uint64_t slot[kMaxBlockThreads][8] = {};  // per-thread mailbox for warp collectives
  const void* addr[kMaxBlockThreads] = {};  // ldmatrix row addresses
  std::vector<unsigned char> smem;
  std::map<const void*, Mbarrier> mbarriers;
  Barrier round;  // its gen moves at each scheduling round: a fiber waiting on it sits the round out
  Barrier named[3];  // named barriers 1 and 2: a consumer warpgroup of a warp-specialized block (128 threads)
};

inline Block* g_block = nullptr;
inline bool g_eager = false;
inline void (*g_entry)() = nullptr;

inline void yield() { switch_context(g_block->fibers[g_block->cur].ctx, g_block->main); }

inline void wait(Barrier& b) {
  const unsigned gen = b.gen;
  if (++b.count == b.n) {
    b.count = 0;
    ++b.gen;
    return;
  }
  Fiber& me = g_block->fibers[g_block->cur];
  me.waiting = &b;
  me.wait_gen = gen;
  while (b.gen == gen) yield();
  me.waiting = nullptr;
}

}  // namespace emu

inline emu::Dim3 threadIdx, blockIdx, gridDim, blockDim;  // set by the scheduler per fiber
inline unsigned char* emu_smem = nullptr;

inline void __syncthreads() { emu::wait(emu::g_block->block_bar); }
namespace emu {
inline int lane() { return static_cast<int>(threadIdx.x) & 31; }
inline int warp() { return static_cast<int>(threadIdx.x) >> 5; }
inline void warp_sync() { wait(g_block->warp_bar[warp()]); }
inline uint64_t* my_slot() { return g_block->slot[threadIdx.x]; }
inline uint64_t* lane_slot(int l) { return g_block->slot[warp() * 32 + l]; }
}  // namespace emu

template <class V>
V __shfl_xor_sync(unsigned, V v, int o) {
  std::memcpy(emu::my_slot(), &v, sizeof(V));
  emu::warp_sync();
  V r;
  std::memcpy(&r, emu::lane_slot(emu::lane() ^ o), sizeof(V));
  emu::warp_sync();
  return r;
}

template <class V>
V __shfl_sync(unsigned, V v, int src) {
  std::memcpy(emu::my_slot(), &v, sizeof(V));
  emu::warp_sync();
  V r;
  std::memcpy(&r, emu::lane_slot(src & 31), sizeof(V));
  emu::warp_sync();
  return r;
}

inline int __any_sync(unsigned, int pred) {
  emu::my_slot()[0] = pred != 0;
  emu::warp_sync();
  bool any = false;
  for (int l = 0; l < 32; ++l) any = any || emu::lane_slot(l)[0] != 0;
  emu::warp_sync();
  return any;
}

namespace trident::cuda {

template <typename T>
inline float to_f32(T v);
template <>
inline float to_f32<float>(float v) { return v; }
template <>
inline float to_f32<__half>(__half v) { return __half2float(v); }
template <>
inline float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) { return v; }
template <>
inline __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
inline __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <typename V>
V warp_sum(V v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- emulated primitives (same signatures as the inline-PTX ones) ------------------------
inline void check_smem(const void* p, size_t n) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const auto& sm = emu::g_block->smem;
  if (c < sm.data() || c + n > sm.data() + sm.size()) {
    std::fprintf(stderr, "emulated kernel: shared-memory access out of the block's allocation\n");
    std::abort();
  }
}
inline void do_copy(const emu::Pending& p) {
  if (p.valid) {
    std::memcpy(p.dst, p.src, p.bytes);
  } else {
    std::memset(p.dst, 0, p.bytes);
  }
}
inline void cp_async_n(void* smem, const void* gmem, bool valid, size_t bytes) {
  check_smem(smem, bytes);
  if (reinterpret_cast<uintptr_t>(smem) % bytes != 0 || (valid && reinterpret_cast<uintptr_t>(gmem) % bytes != 0)) {
    std::fprintf(stderr, "emulated kernel: misaligned cp.async\n");
    std::abort();
  }
  const emu::Pending p{smem, gmem, valid, bytes};
  if (emu::g_eager) {
    do_copy(p);
  } else {
    emu::g_block->fibers[threadIdx.x].open.push_back(p);
  }
}
inline void cp_async16(void* smem, const void* gmem, bool valid) { cp_async_n(smem, gmem, valid, 16); }
inline void cp_async4(void* smem, const void* gmem, bool valid) { cp_async_n(smem, gmem, valid, 4); }
inline void cp_async_commit() {
  auto& f = emu::g_block->fibers[threadIdx.x];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
template <int N>
inline void cp_async_wait() {
  auto& f = emu::g_block->fibers[threadIdx.x];
  while (static_cast<int>(f.groups.size()) > N) {
    for (const auto& p : f.groups.front()) do_copy(p);
    f.groups.erase(f.groups.begin());
  }
}
// ---- mbarriers ------------------------------------------------------------------------------
inline emu::Mbarrier& mbarrier(uint64_t* bar) {
  check_smem(bar, 8);
  auto it = emu::g_block->mbarriers.find(bar);
  if (it == emu::g_block->mbarriers.end()) {
    std::fprintf(stderr, "emulated kernel: an mbarrier used before mbar_init\n");
    std::abort();
  }
  return it->second;
}
inline void mbar_init(uint64_t* bar, int count) {
  check_smem(bar, 8);
  emu::Mbarrier& m = emu::g_block->mbarriers[bar];
  m.count = m.pending = count;
  m.tx = 0;
  m.phases = 0;
}
inline void fence_mbar_init() {}
inline void complete_if_done(emu::Mbarrier& m) {
  if (m.pending == 0 && m.tx == 0) {
    m.pending = m.count;
    ++m.phases;
    ++m.done.gen;
  }
}
inline void arrive_on(uint64_t* bar) {
  emu::Mbarrier& m = mbarrier(bar);
  if (m.pending <= 0) {
    std::fprintf(stderr, "emulated kernel: more arrivals on an mbarrier than its count\n");
    std::abort();
  }
  --m.pending;
  complete_if_done(m);
}
// A thread's arrival ends its turn until the next scheduling round at random, one arrival in
// two (a fixed seed), so that the other warps sometimes run between it and its next steps: a
// producer can refill a released stage before the releasing consumer's in-flight products
// complete, so releasing a stage early shows up as a wrong result. (Always ending the turn
// held every producer to one stage a round, never ahead of its consumers: a stage released a
// step early then went unnoticed.)
inline void mbar_arrive(uint64_t* bar) {
  arrive_on(bar);
  static std::mt19937 turn_rng(4321);
  if (turn_rng() & 1u) return;
  emu::Fiber& me = emu::g_block->fibers[threadIdx.x];
  me.waiting = &emu::g_block->round;
  me.wait_gen = emu::g_block->round.gen;
  emu::yield();
  me.waiting = nullptr;
}
// Blocks while the phase of this parity is the one in progress.
inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  emu::Mbarrier& m = mbarrier(bar);
  emu::Fiber& me = emu::g_block->fibers[threadIdx.x];
  while ((m.phases & 1u) == parity) {
    me.waiting = &m.done;
    me.wait_gen = m.done.gen;
    emu::yield();
  }
  me.waiting = nullptr;
}
inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbarrier(bar).tx += bytes;
  arrive_on(bar);
}

// A TMA load (defined after the kernels' code, which holds HeadsTmaView).
inline void tma_load_box(void* smem, const CUtensorMap* map, int c0, int c1, int c2, int c3, uint64_t* bar);

inline uint32_t ld16(const void* row, int i) {
  const char* p = static_cast<const char*>(row) + 2 * i;
  check_smem(p, 2);
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// Lane l gives the address of row l % 8 of matrix l / 8. Without .trans lane t receives
// row t/4, columns 2(t%4), 2(t%4)+1 of each matrix; with .trans rows 2(t%4), 2(t%4)+1 of
// column t/4.
inline void ldsm(uint32_t (&r)[4], const void* p, bool trans) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    std::fprintf(stderr, "emulated kernel: misaligned ldmatrix row\n");
    std::abort();
  }
  const int t = emu::lane(), w = emu::warp();
  emu::g_block->addr[w * 32 + t] = p;
  emu::warp_sync();
  for (int i = 0; i < 4; ++i) {
    const void* const* a = emu::g_block->addr + w * 32 + 8 * i;
    if (!trans) {
      r[i] = ld16(a[t / 4], 2 * (t % 4)) | ld16(a[t / 4], 2 * (t % 4) + 1) << 16;
    } else {
      r[i] = ld16(a[2 * (t % 4)], t / 4) | ld16(a[2 * (t % 4) + 1], t / 4) << 16;
    }
  }
  emu::warp_sync();
}
inline void ldsm_x4(uint32_t (&r)[4], const void* p) { ldsm(r, p, false); }
inline void ldsm_x4_trans(uint32_t (&r)[4], const void* p) { ldsm(r, p, true); }
// The fibers take turns on one OS thread: a plain read-modify-write is atomic here.
inline void atomic_add_pair(float* p, float a, float b) {
  if (reinterpret_cast<uintptr_t>(p) % 8 != 0) {
    std::fprintf(stderr, "emulated kernel: misaligned float pair atomic\n");
    std::abort();
  }
  p[0] += a;
  p[1] += b;
}

// ex2.approx.ftz.f32: subnormal inputs and results are zero (the hardware's ~2 ulp
// approximation error is below the tests' tolerances, so the exact power stands in).
inline float exp2_ftz(float x) {
  const float y = std::exp2(std::fpclassify(x) == FP_SUBNORMAL ? 0.f : x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.f : y;
}

// m16n8k16, row.col, fp32 accumulators; g = lane / 4, q = lane % 4:
// A reg i: row g + 8 (i & 1), k 2q + 8 (i >> 1) (+1 in the high half);
// B reg i: k 2q + 8 i (+1 high), n g;  C e: row g + 8 (e >> 1), n 2q + (e & 1).
template <typename T>
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint64_t* s = emu::my_slot();
  for (int i = 0; i < 4; ++i) s[i] = a[i];
  s[4] = b0;
  s[5] = b1;
  emu::warp_sync();
  auto half = [](uint64_t reg, int hi) {
    const uint16_t bits = static_cast<uint16_t>(hi ? reg >> 16 : reg);
    T v;
    std::memcpy(static_cast<void*>(&v), &bits, 2);
    return to_f32(v);
  };
  auto A = [&](int r, int k) { return half(emu::lane_slot((r % 8) * 4 + (k % 8) / 2)[(r / 8) + 2 * (k / 8)], k % 2); };
  auto B = [&](int k, int n) { return half(emu::lane_slot(n * 4 + (k % 8) / 2)[4 + k / 8], k % 2); };
  const int g = emu::lane() / 4, q = emu::lane() % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = g + 8 * (e / 2), n = 2 * q + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A(r, k) * B(k, n);
    out[e] = acc;
  }
  emu::warp_sync();
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}

// ---- sm_90a warpgroup MMA ----------------------------------------------------------------
// Shared addresses as the kernels see them (smem_addr): byte i of the block's allocation is
// at kSmemBase + i, which is not a multiple of 1024, so the kernels' alignment of their
// swizzled tiles is exercised.
constexpr uint32_t kSmemBase = 0x190;
inline uint32_t smem_addr(const void* p) {
  check_smem(p, 1);
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - emu_smem) + kSmemBase;
}
inline void fence_proxy_async() {}
inline void consumer_sync(int id = 1) {
  if (id < 1 || id > 2) {
    std::fprintf(stderr, "emulated kernel: named barrier %d is not emulated\n", id);
    std::abort();
  }
  emu::wait(emu::g_block->named[id]);
}
// setmaxnreg: registers are not emulated (ptxas's report checks them); its range is.
template <int N>
inline void regs_release_to() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
}
template <int N>
inline void regs_claim_to() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg's range");
}
// Bulk f32 adds, performed at the wait that covers them (the latest the hardware may read
// the source: a source written again too early shows up as a wrong dQ).
inline void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  check_smem(src, bytes);
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 || smem_addr(src) % 16 != 0) {
    std::fprintf(stderr, "emulated kernel: a bulk copy not in whole, aligned 16-byte units\n");
    std::abort();
  }
  emu::g_block->fibers[threadIdx.x].bulk_open.push_back({dst, src, bytes / 4});
}
inline void bulk_commit() {
  auto& f = emu::g_block->fibers[threadIdx.x];
  f.bulk_groups.push_back(std::move(f.bulk_open));
  f.bulk_open.clear();
}
template <int N>
inline void bulk_wait_read() {
  auto& f = emu::g_block->fibers[threadIdx.x];
  const size_t ready = f.bulk_groups.size() > N ? f.bulk_groups.size() - N : 0;
  for (size_t g = 0; g < ready; ++g)
    for (const emu::BulkAdd& op : f.bulk_groups[g])
      for (size_t i = 0; i < op.floats; ++i) op.dst[i] += op.src[i];
  f.bulk_groups.erase(f.bulk_groups.begin(), f.bulk_groups.begin() + static_cast<std::ptrdiff_t>(ready));
}
template <int N>
inline void bulk_wait() {
  bulk_wait_read<N>();
}
inline void wgmma_fence() {}
template <int NT>
inline void fence_acc(float (&)[NT][4]) {}
template <int KK>
inline void fence_frag(uint32_t (&)[KK][4]) {}

// A 16-bit operand's bits as a float: fp16 or bf16.
inline float bits_to_f32(uint16_t bits, bool fp16) {
  if (fp16) {
    __half v;
    std::memcpy(static_cast<void*>(&v), &bits, 2);
    return to_f32(v);
  }
  __nv_bfloat16 v;
  std::memcpy(static_cast<void*>(&v), &bits, 2);
  return to_f32(v);
}

// Element (mn, k) of a k16 operand in shared memory, read through its descriptor as the PTX
// ISA defines the canonical layouts with the 128-byte swizzle (the only one emulated):
// start address, leading (LBO) and stride (SBO) byte offsets in 16-byte units; K-major:
// rows mn 128 bytes apart, 8-row groups SBO apart, k contiguous; MN-major: mn contiguous
// in 64-element blocks LBO apart, rows k 128 bytes apart, 8-row groups SBO apart. Then
// address bits 4-6 are XORed with bits 7-9.
inline float smem_operand(uint64_t desc, int mn, int k, bool mn_major, bool fp16) {
  if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0) {
    std::fprintf(stderr, "emulated kernel: wgmma descriptor without the 128-byte swizzle or with a base offset\n");
    std::abort();
  }
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  uint32_t addr = mn_major ? start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (mn % 64) * 2
                           : start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2;
  addr ^= ((addr >> 7) & 7) << 4;
  if (addr < kSmemBase) {
    std::fprintf(stderr, "emulated kernel: wgmma operand below the block's shared memory\n");
    std::abort();
  }
  return bits_to_f32(static_cast<uint16_t>(ld16(emu_smem + (addr - kSmemBase), 0)), fp16);
}

template <typename T, int N>
inline void wgmma_issue(float (&d)[N / 8][4], uint64_t desc_a, const uint32_t* a, bool a_mn_major, uint64_t desc_b,
                        bool b_mn_major, bool accumulate) {
  emu::g_block->fibers[threadIdx.x].wgmma_open.push_back(
      {&d[0][0], N, desc_a, a, desc_b, a_mn_major, b_mn_major, accumulate, std::is_same_v<T, __half>});
}
template <typename T, int N>
inline void wgmma_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  wgmma_issue<T, N>(d, desc_a, nullptr, false, desc_b, false, accumulate != 0);
}
template <typename T, int N>
inline void wgmma_ss_mn(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  wgmma_issue<T, N>(d, desc_a, nullptr, true, desc_b, true, accumulate != 0);
}
template <typename T, int N>
inline void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  wgmma_issue<T, N>(d, 0, a, false, desc_b, true, true);
}
inline void wgmma_commit() {
  auto& f = emu::g_block->fibers[threadIdx.x];
  f.wgmma_groups.push_back(std::move(f.wgmma_open));
  f.wgmma_open.clear();
}
// Runs every committed group but the newest N, oldest first. Warp w of its warpgroup (w =
// the block's warp % 4) owns rows 16w..16w+15 of the warpgroup's 64-row product; a thread's
// accumulators are the C layout of those rows (row g, g + 8; columns 8 nt + 2q, + 1). A from
// registers is the m16n8k16 A layout, gathered from the warp's lanes, which are all here
// (wgmma is collective) with their registers intact.
template <int N>
inline void wgmma_wait() {
  const int w = emu::warp(), t = emu::lane(), g = t / 4, q = t % 4;
  const int wr = w % 4;  // the warp's rank in its warpgroup
  auto& me = emu::g_block->fibers[threadIdx.x];
  emu::warp_sync();
  const size_t ready = me.wgmma_groups.size() > N ? me.wgmma_groups.size() - N : 0;
  for (size_t gi = 0; gi < ready; ++gi) {
    for (size_t oi = 0; oi < me.wgmma_groups[gi].size(); ++oi) {
      const emu::WgmmaOp& op = me.wgmma_groups[gi][oi];
      auto A = [&](int r, int k) {
        if (op.a == nullptr) return smem_operand(op.desc_a, 16 * wr + r, k, op.a_mn_major, op.fp16);
        const emu::WgmmaOp& src = emu::g_block->fibers[w * 32 + (r % 8) * 4 + (k % 8) / 2].wgmma_groups[gi][oi];
        const uint32_t reg = src.a[(r / 8) + 2 * (k / 8)];
        return bits_to_f32(static_cast<uint16_t>(k % 2 ? reg >> 16 : reg), op.fp16);
      };
      for (int nt = 0; nt < op.n / 8; ++nt) {
        for (int e = 0; e < 4; ++e) {
          const int r = g + 8 * (e / 2), c = nt * 8 + 2 * q + (e & 1);
          float acc = op.accumulate ? op.d[nt * 4 + e] : 0.f;
          for (int k = 0; k < 16; ++k) acc += A(r, k) * smem_operand(op.desc_b, c, k, op.b_mn_major, op.fp16);
          op.d[nt * 4 + e] = acc;
        }
      }
    }
  }
  emu::warp_sync();  // every lane has read the others' A registers
  me.wgmma_groups.erase(me.wgmma_groups.begin(), me.wgmma_groups.begin() + static_cast<std::ptrdiff_t>(ready));
}

}  // namespace trident::cuda

#include "cuda_attention_emulated.inc"

namespace trident::cuda {

// ---- TMA: the copy engine, on the HeadsTmaView that emulated_maps stores in a map --------
// What the host launchers encode for the driver: p's qkv map, and with dout its dout map.
inline void emulated_maps(AttnParams& p, int elem_bytes) {
  static_assert(sizeof(HeadsTmaView) <= sizeof(CUtensorMap), "a view fits a map's bytes");
  auto store = [](CUtensorMap& map, const HeadsTmaView& v) {
    std::memset(&map, 0, sizeof(map));
    std::memcpy(&map, &v, sizeof(v));
  };
  store(p.qkv_map, qkv_tma_view(p, elem_bytes));
  if (p.dout != nullptr) store(p.dout_map, dout_tma_view(p, elem_bytes));
}
// The box at (c0, c1, c2, c3) lands at once (one order the hardware may take), in the 128-byte
// swizzle of the destination's address bits 4-6 XOR 7-9; elements past the view's dims are
// zeros; its bytes are counted on bar.
inline void tma_load_box(void* smem, const CUtensorMap* map, int c0, int c1, int c2, int c3, uint64_t* bar) {
  HeadsTmaView v;
  std::memcpy(static_cast<void*>(&v), map, sizeof(v));
  if (v.base == nullptr || smem_addr(smem) % 1024 != 0) {
    std::fprintf(stderr, "emulated kernel: a TMA load without a map or to a destination not 1024-byte aligned\n");
    std::abort();
  }
  const int eb = v.elem_bytes, cols = static_cast<int>(v.box[0]), rows = static_cast<int>(v.box[2]);
  check_smem(smem, static_cast<size_t>(rows) * cols * eb);
  unsigned char* dst = static_cast<unsigned char*>(smem);
  for (int r = 0; r < rows; ++r)
    for (int col = 0; col < cols; ++col) {
      const int64_t d = c0 + col, t = c2 + r;
      const bool inside = d >= 0 && d < static_cast<int64_t>(v.dims[0]) && c1 >= 0 &&
                          c1 < static_cast<int64_t>(v.dims[1]) && t >= 0 && t < static_cast<int64_t>(v.dims[2]) &&
                          c3 >= 0 && c3 < static_cast<int64_t>(v.dims[3]);
      const size_t at = static_cast<size_t>(r) * cols * eb + static_cast<size_t>(((col * eb / 16) ^ (r & 7)) * 16) +
                        static_cast<size_t>(col * eb % 16);
      if (inside) {
        std::memcpy(dst + at,
                    static_cast<const unsigned char*>(v.base) + d * eb + c1 * static_cast<int64_t>(v.strides[0]) +
                        t * static_cast<int64_t>(v.strides[1]) + c3 * static_cast<int64_t>(v.strides[2]),
                    eb);
      } else {
        std::memset(dst + at, 0, eb);
      }
    }
  emu::Mbarrier& m = mbarrier(bar);
  m.tx -= static_cast<int64_t>(rows) * cols * eb;
  complete_if_done(m);
}

namespace {

// Runs kernel(p) over a (gx, gy) grid of `threads`-thread blocks (128 to 384) with `smem`
// bytes of shared memory.
template <class K>
void launch(K kernel, unsigned gx, unsigned gy, size_t smem, const AttnParams& p, int threads = 128) {
  static K the_kernel;
  static const AttnParams* the_params;
  the_kernel = kernel;
  the_params = &p;
  if (threads % 32 != 0 || threads < 32 || threads > emu::kMaxBlockThreads)
    throw std::invalid_argument("emulated launch: " + std::to_string(threads) + " threads a block");
  const int warps = threads / 32;
  gridDim = {gx, gy, 1};
  blockDim = {static_cast<unsigned>(threads), 1, 1};
  for (unsigned by = 0; by < gy; ++by) {
    for (unsigned bx = 0; bx < gx; ++bx) {
      auto block = std::make_unique<emu::Block>();
      emu::g_block = block.get();
      block->smem.assign(smem + 16, 0xFF);
      emu_smem = block->smem.data();
      block->block_bar.n = threads;
      for (auto& b : block->named) b.n = 128;
      for (auto& b : block->warp_bar) b.n = 32;
      block->fibers.resize(threads);
      static std::vector<std::vector<char>> stacks(emu::kMaxBlockThreads, std::vector<char>(256 * 1024));
      for (int i = 0; i < threads; ++i) {
        emu::make_context(block->fibers[i].ctx, stacks[i].data(), stacks[i].size(), +[] {
          the_kernel(*the_params);
          emu::Fiber& me = emu::g_block->fibers[emu::g_block->cur];
          if (!me.groups.empty() || !me.open.empty()) {
            std::fprintf(stderr, "emulated kernel: cp.async groups never waited for\n");
            std::abort();
          }
          if (!me.wgmma_groups.empty() || !me.wgmma_open.empty()) {
            std::fprintf(stderr, "emulated kernel: wgmma groups never waited for\n");
            std::abort();
          }
          if (!me.bulk_groups.empty() || !me.bulk_open.empty()) {
            std::fprintf(stderr, "emulated kernel: bulk copy groups never waited for\n");
            std::abort();
          }
          me.done = true;
          for (;;) emu::switch_context(me.ctx, emu::g_block->main);  // never scheduled again
        });
      }
      blockIdx = {bx, by, 0};
      // Each round runs the warps one after the other, in a random order, each until all
      // its threads are done or blocked on __syncthreads: a warp runs as far ahead of the
      // others as the barriers allow, which exposes a missing __syncthreads (together with
      // eager cp.async) as a wrong result.
      static std::mt19937 order_rng(12345);
      int order[emu::kMaxBlockThreads / 32];
      for (int w = 0; w < warps; ++w) order[w] = w;
      for (bool running = true; running;) {
        running = false;
        ++block->round.gen;  // fibers that sat out the last round (mbar_arrive) run again
        bool round_progressed = false;
        std::shuffle(order, order + warps, order_rng);
        for (int oi = 0; oi < warps; ++oi) {
          const int w = order[oi];
          for (bool progressed = true; progressed;) {
            progressed = false;
            for (int i = w * 32; i < w * 32 + 32; ++i) {
              emu::Fiber& f = block->fibers[i];
              if (f.done) continue;
              running = true;
              if (f.waiting != nullptr && f.waiting->gen == f.wait_gen) continue;  // still blocked
              progressed = round_progressed = true;
              block->cur = i;
              threadIdx = {static_cast<unsigned>(i), 0, 0};
              emu::switch_context(block->main, f.ctx);
            }
          }
        }
        if (running && !round_progressed) {
          std::fprintf(stderr, "emulated kernel: deadlock (a barrier or warp collective not reached by all)\n");
          std::abort();
        }
      }
      emu::g_block = nullptr;
    }
  }
}

struct Case {
  int B, T, H, D, head_offset;
  float p;
  float sharp = 0.f;  // > 0: large, growing scores (sharp_input_factor)
  float eod = 0.f;    // > 0: random documents (random_document_starts), AttnParams::doc
  // > 0: two documents, [0, split) and [split, T), and one of them (`poison`, 0 or 1) all
  // NaN (its Q, K, V and dO): the kernels must skip the tiles wholly in the other document
  // (a skipped tile's NaN would reach the results through P V, dS or dP even where P is 0).
  // Only the clean document's results are checked. A split that is a multiple of every
  // tile (128) leaves no tile with keys or queries of both documents. poison -1: no NaN,
  // for splits inside 128-row blocks (which tile a block starts from).
  int split = 0, poison = 0;
};

// The first key of every query of c: random documents or c.split's two (empty: causal).
std::vector<int32_t> case_document_starts(const Case& c, uint64_t seed) {
  if (c.split <= 0) return random_document_starts(c.B, c.T, c.eod, seed);
  std::vector<int32_t> first(static_cast<size_t>(c.B) * c.T);
  for (size_t n = 0; n < first.size(); ++n) first[n] = static_cast<int>(n % c.T) < c.split ? 0 : c.split;
  return first;
}

// The elements of `got` and `ref` whose position (element / per_position % T) passes `keep`.
template <class Keep>
void keep_positions(std::vector<float>& got, std::vector<double>& ref, size_t per_position, int T, Keep keep) {
  size_t n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!keep(static_cast<int>(i / per_position % T))) continue;
    got[n] = got[i];
    ref[n++] = ref[i];
  }
  got.resize(n);
  ref.resize(n);
}

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "B=%d T=%d H=%d D=%d head_offset=%d p=%.2f sharp=%.1f eod=%.2f split=%d poison=%d",
                c.B, c.T, c.H, c.D, c.head_offset, c.p, c.sharp, c.eod, c.split, c.poison);
  return buf;
}

// Double-precision attention (the math of kernels/cpu/cpu_attention.cpp) on the rounded inputs.
struct Reference {
  std::vector<double> out, lse, dqkv;
};
Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout, const Case& c,
                    const DropoutKey& drop, const std::vector<int32_t>& first_keys) {
  const int B = c.B, T = c.T, H = c.H, D = c.D;
  auto first = [&](int b, int i) { return first_keys.empty() ? 0 : first_keys[static_cast<size_t>(b) * T + i]; };
  auto x = [&](int b, int t, int w, int h, int d) {
    return static_cast<double>(qkv[((static_cast<size_t>(b * T + t) * 3 + w) * H + h) * D + d]);
  };
  auto xi = [&](int b, int t, int w, int h, int d) { return ((static_cast<size_t>(b * T + t) * 3 + w) * H + h) * D + d; };
  auto oi = [&](int b, int t, int h, int d) { return (static_cast<size_t>(b * T + t) * H + h) * D + d; };
  Reference r;
  r.out.assign(static_cast<size_t>(B) * T * H * D, 0.0);
  r.lse.assign(static_cast<size_t>(B) * H * T, 0.0);
  r.dqkv.assign(qkv.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // The inverse of the 16-bit keep probability (philox.h's attention dropout).
  const double inv_keep =
      drop.enabled() ? 1.0 / (1.0 - std::ceil(static_cast<double>(drop.p) * 65536.0) / 65536.0) : 1.0;
  std::vector<double> P(static_cast<size_t>(T) * T), Z(P.size()), dP(P.size());
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const uint64_t sample = drop.sample_base + b, hg = static_cast<uint64_t>(c.head_offset + h);
      for (int i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (int j = first(b, i); j <= i; ++j) {
          double a = 0;
          for (int d = 0; d < D; ++d) a += x(b, i, 0, h, d) * x(b, j, 1, h, d);
          s[j] = a * scale;
          mx = std::max(mx, s[j]);
        }
        double se = 0;
        for (int j = first(b, i); j <= i; ++j) se += std::exp(s[j] - mx);
        const double l = mx + std::log(se);
        r.lse[(static_cast<size_t>(b) * H + h) * T + i] = l;
        for (int j = first(b, i); j <= i; ++j) {
          const size_t ij = static_cast<size_t>(i) * T + j;
          P[ij] = std::exp(s[j] - l);
          Z[ij] = drop.enabled() ? (attn_dropout_keep(drop, sample, hg, T, i, j) ? inv_keep : 0.0) : 1.0;
          for (int d = 0; d < D; ++d) r.out[oi(b, i, h, d)] += P[ij] * Z[ij] * x(b, j, 2, h, d);
        }
      }
      for (int i = 0; i < T; ++i) {
        double delta = 0;
        for (int j = first(b, i); j <= i; ++j) {
          const size_t ij = static_cast<size_t>(i) * T + j;
          double a = 0;
          for (int d = 0; d < D; ++d) a += static_cast<double>(dout[oi(b, i, h, d)]) * x(b, j, 2, h, d);
          dP[ij] = Z[ij] * a;
          delta += P[ij] * dP[ij];
        }
        for (int j = first(b, i); j <= i; ++j) {
          const size_t ij = static_cast<size_t>(i) * T + j;
          const double ds = scale * P[ij] * (dP[ij] - delta);
          for (int d = 0; d < D; ++d) {
            r.dqkv[xi(b, i, 0, h, d)] += ds * x(b, j, 1, h, d);
            r.dqkv[xi(b, j, 1, h, d)] += ds * x(b, i, 0, h, d);
            r.dqkv[xi(b, j, 2, h, d)] += P[ij] * Z[ij] * dout[oi(b, i, h, d)];
          }
        }
      }
    }
  }
  return r;
}

void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref,
                  double rtol, double atol_frac, double atol0) {
  double mx = 0;
  for (double v : ref) mx = std::max(mx, std::fabs(v));
  const double atol = atol0 + atol_frac * mx;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(d <= atol + rtol * std::fabs(ref[i]))) {
      if (bad < 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << ref[i];
      ++bad;
    }
    if (!(d <= worst)) worst = d;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size() << " out of tolerance (worst |diff| " << worst
                    << ", atol " << atol << ", rtol " << rtol << ")";
}

// Forward, delta, dK/dV and dQ of one case on emulated blocks, against the reference, with
// the tile shapes `tiles` (the launchers' plans, plan_forward_mma / plan_backward_mma).
std::string describe(const AttnTiles& t) {
  return " wm" + std::to_string(t.fwd_wm) + " fwd_bk" + std::to_string(t.fwd_bk) + " fwd_nb" +
         std::to_string(t.fwd_nb) + " dq_atomic" + std::to_string(t.dq_atomic) + " nb" + std::to_string(t.dkdv_nb) +
         " dkdv_bq" + std::to_string(t.dkdv_bq) + " dq_bk" + std::to_string(t.dq_bk) + " fwd_wgmma" +
         std::to_string(t.fwd_wgmma) + " bwd_wgmma" + std::to_string(t.bwd_wgmma) + " fwd_wg" +
         std::to_string(t.fwd_wg) + " dkdv_wg" + std::to_string(t.dkdv_wg) + " dq_wg" + std::to_string(t.dq_wg) +
         " fwd_ws" + std::to_string(t.fwd_ws) + " dkdv_ws" + std::to_string(t.dkdv_ws) + " dq_ws" +
         std::to_string(t.dq_ws);
}

// The saved dropout mask's bits (AttnParams::mask) against attn_dropout_keep under `drop` at
// every element a query sees; the others are undefined. Returns the number that differ.
int64_t saved_mask_mismatches(const AttnParams& p, const DropoutKey& drop, const std::vector<int32_t>& docs) {
  return test::count_visible(p.B, p.H, p.T, docs, [&](int b, int h, int i, int j) {
    return attn_mask_kept(p.mask, p.mask_blocks, static_cast<int64_t>(b) * p.H + h, i, j) !=
           attn_dropout_keep(drop, drop.sample_base + b, p.head_offset + h, p.T, i, j);
  });
}

// How a case's dropout mask (cases with dropout) reaches the kernels: drawn by each, saved by
// the forward and read by the backward, or drawn ahead by attn_mask_ahead_kernel and read by
// the forward too (TRIDENT_ATTN_MASK_AHEAD=1). After the draws into the mask the kernels run
// with another dropout seed: only bits read from it give the reference's results.
enum class MaskMode { kDrawn, kSaved, kAhead };

template <typename T>
void run_case(const Case& c, bool tensor_cores, uint64_t seed, const AttnTiles& tiles = AttnTiles{},
              MaskMode mask_mode = MaskMode::kDrawn) {
  const bool save_mask = mask_mode != MaskMode::kDrawn && c.p > 0.f, ahead = save_mask && mask_mode == MaskMode::kAhead;
  SCOPED_TRACE(describe(c) + (tensor_cores ? " tensor-core" : " cuda-core") +
               (emu::g_eager ? " eager" : " deferred") + describe(tiles) +
               (ahead ? " mask drawn ahead" : save_mask ? " saved mask" : ""));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const size_t nqkv = static_cast<size_t>(c.B) * c.T * 3 * c.H * c.D, nout = nqkv / 3,
               nrow = static_cast<size_t>(c.B) * c.H * c.T;
  std::vector<T> qkv(nqkv), dout(nout), out(nout, from_f32<T>(7.f)), dqkv(nqkv, from_f32<T>(7.f));
  std::vector<float> qkv_f(nqkv), dout_f(nout), lse(nrow, 7.f), delta(nrow, 7.f), dq_acc(nout, 7.f);
  for (size_t i = 0; i < nqkv; ++i) {
    const float v = dist(rng) * sharp_input_factor(i, c.T, c.H, c.D, c.sharp);
    qkv_f[i] = to_f32(qkv[i] = from_f32<T>(v));
  }
  for (size_t i = 0; i < nout; ++i) dout_f[i] = to_f32(dout[i] = from_f32<T>(dist(rng)));
  // c.split: the poisoned document's inputs are NaN (position t of element i: i / per_position % T).
  auto poisoned = [&](int t) { return c.split > 0 && c.poison >= 0 && (t < c.split) == (c.poison == 0); };
  const size_t qkv_tok = 3 * static_cast<size_t>(c.H) * c.D, out_tok = nout / (static_cast<size_t>(c.B) * c.T);
  for (size_t i = 0; i < nqkv; ++i)
    if (poisoned(static_cast<int>(i / qkv_tok % c.T))) qkv_f[i] = to_f32(qkv[i] = from_f32<T>(NAN));
  for (size_t i = 0; i < nout; ++i)
    if (poisoned(static_cast<int>(i / out_tok % c.T))) dout_f[i] = to_f32(dout[i] = from_f32<T>(NAN));
  DropoutKey drop;
  drop.p = c.p;
  drop.seed = 0x5EED1234ABCDull;
  drop.site = 7 * kSitesPerLayer + kDropAttnProbs;
  drop.sample_base = 1000003;

  AttnParams p;
  p.qkv = qkv.data();
  p.out = out.data();
  p.lse = lse.data();
  p.dout = dout.data();
  p.dqkv = dqkv.data();
  p.delta = delta.data();
  p.dq_acc = dq_acc.data();  // the atomic-dQ variant's accumulator (its plan zeroes it)
  p.B = c.B;
  p.T = c.T;
  p.H = c.H;
  p.D = c.D;
  p.head_offset = c.head_offset;
  p.qkv_tok = 3LL * c.H * c.D;
  p.out_tok = static_cast<int64_t>(c.H) * c.D;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  p.scale_log2 = p.scale * kLog2e;
  set_attn_dropout(p, drop);
  const std::vector<int32_t> docs = case_document_starts(c, seed);
  std::vector<int32_t> doc_end(docs.size(), -7);  // the backward's scratch (plan_document_ends fills it)
  p.doc = docs.empty() ? nullptr : docs.data();
  p.doc_end = docs.empty() ? nullptr : doc_end.data();
  // Garbage where the forward writes nothing (0xA5A5: bits of both kinds), and past the end
  // guard rows that no kernel may write.
  constexpr size_t kGuardRows = 64;
  const size_t mask_rows = save_mask ? 2 * static_cast<size_t>(attn_mask_words(c.B, c.H, c.T)) : 0;
  std::vector<uint16_t> mask(mask_rows + kGuardRows, 0xA5A5);
  if (save_mask) {
    p.mask = mask.data();
    p.mask_blocks = attn_mask_blocks(c.T);
  }
  // After the kernel that draws the mask (the forward, or the kernel ahead of it): its bits,
  // then another seed for the kernels after it. And after a forward that reads the mask: the
  // bits unchanged.
  auto check_saved_mask = [&](const char* drawn_by) {
    if (!save_mask) return;
    EXPECT_EQ(saved_mask_mismatches(p, drop, docs), 0) << "saved mask bits after " << drawn_by;
    EXPECT_EQ(static_cast<size_t>(std::count(mask.begin() + static_cast<std::ptrdiff_t>(mask_rows), mask.end(), 0xA5A5)),
              kGuardRows)
        << "rows written past the mask by " << drawn_by;
    DropoutKey other = drop;
    other.seed ^= 0x9E3779B97F4A7C15ull;
    set_attn_dropout(p, other);
  };
  auto draw_ahead = [&](auto&& launch_mask) {
    if (!ahead) return;
    p.mask_drawn = true;
    plan_mask_ahead(p, launch_mask);
    check_saved_mask("the mask kernel");
  };
  auto check_after_forward = [&] {
    if (ahead)
      EXPECT_EQ(saved_mask_mismatches(p, drop, docs), 0) << "saved mask bits after the forward that read them";
    else
      check_saved_mask("the forward");
  };

  const unsigned rows = static_cast<unsigned>((nrow + 3) / 4);
  if (tensor_cores) {
    if constexpr (!std::is_same_v<T, float>) {
      auto emulated = [&](auto kernel, unsigned gx, unsigned gy, int smem, int threads = 128) {
        launch(kernel, gx, gy, static_cast<size_t>(smem), p, threads);
      };
      if (tiles.fwd_ws || tiles.dkdv_ws || tiles.dq_ws) emulated_maps(p, 2);  // what the host launchers encode for the driver
      draw_ahead(emulated);
      ASSERT_TRUE(plan_forward_mma<T>(p, tiles, emulated)) << "no forward instance";
      check_after_forward();
      plan_document_ends(p, emulated);
      plan_delta<T>(p, true, emulated);  // 16-byte vectors, as on the GPU (D % 8 == 0 here)
      ASSERT_TRUE(plan_backward_mma<T>(p, tiles, emulated)) << "no backward instances";
    }
  } else {
    draw_ahead([&](auto kernel, unsigned gx, unsigned gy, int smem) {
      launch(kernel, gx, gy, static_cast<size_t>(smem), p);
    });
    launch(attn_fwd_simt_kernel<T>, rows, 1, 0, p);
    check_after_forward();
    launch(attn_delta_kernel<T>, rows, 1, 0, p);
    launch(attn_bwd_dkdv_simt_kernel<T>, rows, 1, 0, p);
    launch(attn_bwd_dq_simt_kernel<T>, rows, 1, 0, p);
  }

  Reference ref = reference(qkv_f, dout_f, c, drop, docs);
  std::vector<float> out_f(nout), dqkv_f(nqkv);
  for (size_t i = 0; i < nout; ++i) out_f[i] = to_f32(out[i]);
  for (size_t i = 0; i < nqkv; ++i) dqkv_f[i] = to_f32(dqkv[i]);
  if (c.split > 0) {  // the clean document's results only (lse: [B, H, T])
    auto clean = [&](int t) { return !poisoned(t); };
    keep_positions(out_f, ref.out, out_tok, c.T, clean);
    keep_positions(lse, ref.lse, 1, c.T, clean);
    keep_positions(dqkv_f, ref.dqkv, qkv_tok, c.T, clean);
  }
  const bool f32 = std::is_same_v<T, float>, bf16 = std::is_same_v<T, __nv_bfloat16>;
  const double rtol = f32 ? 1e-4 : bf16 ? 1.6e-2 : 2e-3, frac = f32 ? 1e-5 : bf16 ? 1e-2 : 2e-3;
  expect_close("out", out_f, ref.out, rtol, frac, frac);
  expect_close("lse", lse, ref.lse, 1e-5, 0, 1e-4);
  expect_close("dqkv", dqkv_f, ref.dqkv, rtol, frac, frac);
}

// Tails in both tile directions, every head-dim bucket (32/64/128) with and without padding,
// several heads and batches, dropout (odd and even T, tails of the shared draws), T = 1.
const std::vector<Case>& cases() {
  static const std::vector<Case> v = {
      {1, 37, 2, 64, 1, 0.0f},  {2, 37, 1, 64, 2, 0.5f},  {1, 129, 1, 120, 5, 0.5f}, {1, 45, 1, 8, 0, 0.0f},
      {1, 100, 1, 128, 1, 0.1f}, {1, 70, 1, 40, 0, 0.2f}, {2, 1, 1, 64, 0, 0.5f},    {1, 64, 1, 24, 0, 0.0f},
      // Dropout with several heads and batches (head_offset in the mask's counter).
      {2, 96, 2, 64, 1, 0.3f},   {1, 132, 1, 128, 2, 0.5f},
      // Large scores whose maxima grow along the keys (forward rescaling past the first tile).
      {1, 160, 1, 64, 0, 0.0f, 4.f}, {1, 130, 1, 128, 1, 0.1f, 4.f},
      // Two 16-byte vectors a row (the delta pass's 2-lane groups).
      {1, 40, 2, 16, 0, 0.1f},
      // Long rows: many key and query tiles (the streamed buffers' parity over several
      // rounds, the causal skips of 128-row blocks far from the diagonal, a 8-row tail).
      {1, 520, 1, 64, 1, 0.1f}, {1, 300, 2, 128, 0, 0.0f, 4.f},
      // Documents (--reset-attention-mask): boundaries inside tiles, several in a tile, long
      // documents across tiles; with dropout, with growing maxima, in the 32-dim bucket.
      {2, 150, 2, 64, 1, 0.1f, 0.f, 0.03f}, {1, 140, 1, 128, 0, 0.0f, 4.f, 0.05f}, {1, 90, 1, 32, 0, 0.2f, 0.f, 0.25f},
      // Tiles of other documents skipped: the forward and dQ of the second document never
      // read the first (poison 0), the dK/dV of the first never read the second (poison 1).
      {1, 160, 2, 64, 1, 0.1f, 0.f, 0.f, 128, 0}, {1, 160, 1, 64, 0, 0.0f, 0.f, 0.f, 128, 1},
      {1, 160, 1, 128, 0, 0.1f, 0.f, 0.f, 128, 0}, {1, 150, 1, 128, 0, 0.0f, 4.f, 0.f, 128, 1},
      {2, 160, 1, 32, 0, 0.0f, 0.f, 0.f, 128, 0}, {1, 140, 1, 32, 0, 0.1f, 0.f, 0.f, 128, 1},
      // A document starting inside a 128-row block, on an odd 64-key tile: a two-warpgroup or
      // 128-row block starts from its first row's document, whose first tile has the odd
      // buffer.
      {1, 256, 1, 64, 0, 0.0f, 0.f, 0.f, 192, -1}, {1, 256, 1, 128, 0, 0.1f, 0.f, 0.f, 192, -1},
  };
  return v;
}

// Smaller cases for the CUDA-core path (one warp per row is slow to emulate), plus a head
// dim that is not a multiple of 8, which only this path serves.
const std::vector<Case>& small_cases() {
  static const std::vector<Case> v = {
      {1, 37, 2, 64, 1, 0.0f}, {2, 37, 1, 64, 2, 0.5f}, {1, 45, 1, 8, 0, 0.0f},
      {1, 40, 1, 128, 1, 0.1f}, {1, 33, 1, 21, 3, 0.3f}, {2, 1, 1, 64, 0, 0.5f},
      {1, 50, 1, 64, 0, 0.2f, 0.f, 0.1f}, {2, 33, 1, 21, 1, 0.0f, 0.f, 0.2f},  // documents
      {1, 30, 1, 64, 0, 0.2f, 0.f, 0.f, 17, 0}, {1, 30, 1, 21, 0, 0.0f, 0.f, 0.f, 17, 1},  // one NaN
  };
  return v;
}

// The ways of the dropout mask in turn, per kernel configuration (tile settings and head-dim
// bucket): the n-th case with dropout that a configuration runs draws the mask ahead, saves it
// or draws it by n % 3, so that a configuration with two such cases meets both new ways and
// one with three every way.
class MaskModes {
 public:
  MaskMode next(const Case& c, const AttnTiles& t) {
    if (c.p == 0.f) return MaskMode::kDrawn;
    const std::string key = describe(t) + (c.D <= 32 ? " D32" : c.D <= 64 ? " D64" : " D128");
    constexpr MaskMode kOrder[] = {MaskMode::kAhead, MaskMode::kSaved, MaskMode::kDrawn};
    return kOrder[runs_[key]++ % 3];
  }

 private:
  std::map<std::string, int> runs_;
};

class EmulatedAttention : public ::testing::TestWithParam<bool> {  // param: eager cp.async
 protected:
  void SetUp() override { emu::g_eager = GetParam(); }
};

TEST_P(EmulatedAttention, TensorCoreFp16) {
  uint64_t seed = 1;
  for (const Case& c : cases()) run_case<__half>(c, true, seed++);
}

TEST_P(EmulatedAttention, TensorCoreBf16) {  // with the saved dropout mask, drawn ahead every other case
  uint64_t seed = 100;
  bool ahead = false;
  for (const Case& c : cases()) {
    run_case<__nv_bfloat16>(c, true, seed++, AttnTiles{}, ahead ? MaskMode::kAhead : MaskMode::kSaved);
    ahead = !ahead;
  }
}

// The tile shapes beside the defaults (AttnTiles), each on the cases whose head dim has it:
// 128-row forward blocks with double-buffered dK/dV, the other forward key, dK/dV query and
// dQ key tiles, the forward's two K/V buffers with each forward tile shape, and dQ added by
// atomics (with one and two dK/dV buffers, and with the other dK/dV query tiles). Each with
// each way of the dropout mask in turn (MaskModes).
TEST_P(EmulatedAttention, TensorCoreVariants) {
  MaskModes modes;
  uint64_t seed = 400;
  AttnTiles wm2_db;
  wm2_db.fwd_wm = 2;
  wm2_db.dkdv_nb = 2;
  for (const Case& c : cases()) {
    run_case<__half>(c, true, seed++, wm2_db, modes.next(c, wm2_db));
    wm2_db.fwd_nb = 3 - wm2_db.fwd_nb;  // both forward buffer counts, alternately
    run_case<__nv_bfloat16>(c, true, seed++, wm2_db, modes.next(c, wm2_db));
  }
  AttnTiles fwd_db;  // the default tile shapes with two forward K/V buffers and atomic dQ
  fwd_db.fwd_nb = 2;
  fwd_db.dq_atomic = true;
  for (const Case& c : cases()) {
    run_case<__nv_bfloat16>(c, true, seed++, fwd_db, modes.next(c, fwd_db));
    AttnTiles atomic_db = wm2_db;  // atomic dQ with the two-buffer dK/dV kernel
    atomic_db.dq_atomic = true;
    run_case<__half>(c, true, seed++, atomic_db, modes.next(c, atomic_db));
  }
  for (const Case& c : cases()) {
    if (c.D <= 32) continue;  // D <= 32 has the default tiles only
    const int bk = c.D > 64 ? 32 : 64;
    const int other_bq = c.D > 64 ? 16 : 64;  // the default dK/dV query tiles are 32 for both
    AttnTiles other_atomic;  // atomic dQ with the other dK/dV query tiles
    other_atomic.dkdv_bq = other_bq;
    other_atomic.dq_atomic = true;
    run_case<__nv_bfloat16>(c, true, seed++, other_atomic, modes.next(c, other_atomic));
    AttnTiles other;  // forward keys doubled, the other dK/dV queries, dQ keys doubled (D 128)
    other.fwd_bk = 2 * bk;
    other.fwd_nb = 1 + (seed & 1);
    other.dkdv_bq = other_bq;
    if (c.D > 64) other.dq_bk = 2 * bk;
    run_case<__nv_bfloat16>(c, true, seed++, other, modes.next(c, other));
  }
}

// The sm_90a kernels (warpgroup MMA from swizzled shared memory): the forward with both of
// its key tiles, the backward's dK/dV (D 64: both query tiles) and dQ passes; each with each
// way of the dropout mask in turn (MaskModes).
TEST_P(EmulatedAttention, Wgmma) {
  MaskModes modes;
  uint64_t seed = 700;
  int seen[2] = {0, 0};  // cases so far of D <= 64 and of D > 64
  for (const Case& c : cases()) {
    if (c.D <= 32) continue;  // D <= 32 has no wgmma kernels
    const bool other_tiles = seen[c.D > 64]++ % 2 == 0;  // alternately, within each head-dim bucket
    AttnTiles wgmma;
    wgmma.fwd_wgmma = wgmma.bwd_wgmma = true;
    run_case<__nv_bfloat16>(c, true, seed++, wgmma, modes.next(c, wgmma));
    wgmma.fwd_bk = 128;  // the other key tile
    if (c.D <= 64) wgmma.dkdv_bq = 32;  // D 64's other dK/dV query tile
    run_case<__half>(c, true, seed++, wgmma, modes.next(c, wgmma));
    // Two warpgroups a block (128 rows) in every kernel that has them (dK/dV: D 64), with
    // the other forward key and (D 64) dK/dV query tiles every other case of a head dim.
    AttnTiles two;
    two.fwd_wgmma = two.bwd_wgmma = true;
    two.fwd_wg = two.dq_wg = 2;
    two.fwd_bk = other_tiles ? 128 : 0;
    if (c.D <= 64) {
      two.dkdv_wg = 2;
      two.dkdv_bq = other_tiles ? 32 : 0;
    }
    run_case<__nv_bfloat16>(c, true, seed++, two, modes.next(c, two));
    // The warp-specialized forward (a TMA producer, mbarriers, P V under the next tile's
    // softmax), with D 64's two key tiles alternately.
    // And the warp-specialized dQ kernel (dS K under the next step's dS; D 128 by half tiles).
    AttnTiles ws;
    ws.fwd_wgmma = ws.bwd_wgmma = ws.fwd_ws = ws.dq_ws = true;
    ws.fwd_bk = other_tiles && c.D <= 64 ? 128 : 0;
    run_case<__half>(c, true, seed++, ws, modes.next(c, ws));
    // FlashAttention-3's dK/dV block (two consumer warpgroups of 64 keys, a producer
    // warpgroup; D 64 pipelined), with each dQ kernel in turn.
    AttnTiles ws2 = ws;
    ws2.fwd_bk = 0;
    ws2.dkdv_ws = true;
    ws2.dkdv_wg = 2;
    ws2.dq_ws = !other_tiles;
    run_case<__nv_bfloat16>(c, true, seed++, ws2, modes.next(c, ws2));
    if (c.D > 64) continue;
    ws2.dq_ws = false;  // ... with dQ added by bulk f32 reduces (D 64)
    ws2.dq_atomic = true;
    run_case<__half>(c, true, seed++, ws2, modes.next(c, ws2));
    // The warp-specialized dK/dV kernel (D 64), with each dQ kernel in turn.
    AttnTiles ws_dkdv = ws;
    ws_dkdv.fwd_bk = 0;
    ws_dkdv.dkdv_ws = true;
    ws_dkdv.dq_ws = !other_tiles;
    ws_dkdv.dq_wg = other_tiles ? 2 : 1;
    run_case<__nv_bfloat16>(c, true, seed++, ws_dkdv, modes.next(c, ws_dkdv));
    ws_dkdv.dkdv_bq = 32;  // each stage by halves, the next half's scores under this one's products
    ws_dkdv.dq_ws = other_tiles;
    ws_dkdv.dq_wg = 1;
    run_case<__half>(c, true, seed++, ws_dkdv, modes.next(c, ws_dkdv));
    ws_dkdv.dkdv_bq = 0;  // dQ by the dK/dV kernel, added by bulk f32 reduces
    ws_dkdv.dq_ws = false;
    ws_dkdv.dq_atomic = true;
    run_case<__nv_bfloat16>(c, true, seed++, ws_dkdv, modes.next(c, ws_dkdv));
    AttnTiles atomic;  // dQ added by the dK/dV kernel (dS^T through shared memory), D 64
    atomic.fwd_wgmma = atomic.bwd_wgmma = atomic.dq_atomic = true;
    run_case<__nv_bfloat16>(c, true, seed++, atomic, modes.next(c, atomic));
    atomic.dkdv_wg = 2;  // with two warpgroups, whose dQ partials are summed in shared memory
    run_case<__half>(c, true, seed++, atomic, modes.next(c, atomic));
  }
}

// A tile a head dim has no instance of is refused before anything runs.
TEST(EmulatedAttentionPlans, RefuseMissingTiles) {
  AttnParams p;
  p.B = 1;
  p.H = 1;
  p.T = 64;
  int launches = 0;
  int two_warpgroup_launches = 0, warp_specialized_launches = 0, three_warpgroup_launches = 0;
  auto count = [&](auto, unsigned, unsigned, int, int threads = 128) {
    ++launches;
    two_warpgroup_launches += threads == 256;
    warp_specialized_launches += threads == kWsThreads;
    three_warpgroup_launches += threads == kWs2Threads;
  };
  for (int D : {32, 64, 128}) {
    p.D = D;
    AttnTiles t;
    EXPECT_TRUE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    EXPECT_TRUE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_bk = 48;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.fwd_nb = 3;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dq_bk = D == 128 ? 128 : 2 * 64;  // D 128 has 32 and 64, the others 64 only
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dkdv_bq = 16;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 128) << D;
    t.dq_atomic = true;  // atomic dQ with D 128's 16-query dK/dV tiles
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 128) << D;
    t.dkdv_bq = 0;
    t.dq_bk = D == 128 ? 64 : 0;  // atomic dQ has no dQ kernel to size
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 128) << D;
    t = AttnTiles{};
    t.fwd_wgmma = true;  // D 64 and 128 only, with 64- or 128-key tiles, 64-row blocks, its own buffers
    EXPECT_EQ(plan_forward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.fwd_bk = 32;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_bk = 0;
    t.fwd_wm = 2;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_wm = 1;
    t.fwd_nb = 2;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.bwd_wgmma = true;  // D 64 and 128 only, with its own tiles and buffers
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    for (auto other : {&AttnTiles::dkdv_nb, &AttnTiles::dkdv_bq, &AttnTiles::dq_bk}) {
      AttnTiles u = t;
      u.*other = other == &AttnTiles::dkdv_nb ? 2 : 16;
      EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, u, count)) << D;
    }
    t.dkdv_bq = 32;  // D 64's other tile: D 128 has none
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 64;  // the default, asked for
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.dkdv_bq = 0;
    t.dq_atomic = true;  // zero, dK/dV + dQ (D 64, 64-query tiles only), store
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 32;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dkdv_wg = 2;  // two warpgroups a wgmma dK/dV block (256 threads): D 64 only, any of its tiles
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;  // the mma.sync kernels have none
    t.bwd_wgmma = true;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 32;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 0;
    t.dq_atomic = true;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dq_wg = 2;  // atomic dQ has no dQ kernel
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.dq_wg = 1;
    t.dkdv_wg = 3;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dq_wg = 2;  // the wgmma dQ kernel with two warpgroups: D 64 and 128
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.bwd_wgmma = true;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t = AttnTiles{};
    t.fwd_wg = 2;  // the wgmma forward with two warpgroups: D 64 and 128, both key tiles
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_wgmma = true;
    EXPECT_EQ(plan_forward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.fwd_bk = 128;
    EXPECT_EQ(plan_forward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.fwd_wg = 3;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.fwd_ws = true;  // the warp-specialized forward: a wgmma kernel, D 64 and 128, 64 keys (D 64 also 128), one warpgroup
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_wgmma = true;
    EXPECT_EQ(plan_forward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.fwd_bk = 128;  // D 64 only
    EXPECT_EQ(plan_forward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.fwd_bk = 32;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.fwd_bk = 0;
    t.fwd_wg = 2;
    EXPECT_FALSE(plan_forward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dkdv_ws = true;  // the warp-specialized dK/dV kernel: a wgmma kernel, D 64, 64 or 32 queries a step, one warpgroup
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.bwd_wgmma = true;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 32;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 0;
    t.dq_wg = 2;  // then the two-warpgroup dQ kernel
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dq_wg = 1;
    AttnTiles u = t;
    u.dkdv_bq = 16;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, u, count)) << D;
    t.dq_atomic = true;  // zero, dK/dV + dQ by bulk adds (64-query steps), store
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 32;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.bwd_wgmma = t.dkdv_ws = true;
    t.dkdv_wg = 2;  // FlashAttention-3's dK/dV block (384 threads): D 64 and 128, 64 queries a step
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.dkdv_bq = 64;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    for (int bq : {32, 128}) {
      t.dkdv_bq = bq;
      EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    }
    t.dkdv_bq = 0;
    t.dq_ws = true;  // then the warp-specialized dQ kernel
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.dq_ws = false;
    t.dq_atomic = true;  // zero, dK/dV + dQ by bulk adds (D 64), store
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_bq = 32;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t = AttnTiles{};
    t.dq_ws = true;  // the warp-specialized dQ kernel: a wgmma kernel, D 64 and 128, one warpgroup
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.bwd_wgmma = true;
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D != 32) << D;
    t.dkdv_ws = true;  // after the warp-specialized dK/dV kernel (D 64)
    EXPECT_EQ(plan_backward_mma<__nv_bfloat16>(p, t, count), D == 64) << D;
    t.dkdv_ws = false;
    t.dq_wg = 2;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
    t.dq_wg = 1;
    t.dq_atomic = true;
    EXPECT_FALSE(plan_backward_mma<__nv_bfloat16>(p, t, count)) << D;
  }
  // Per D: one forward and two backward launches for the defaults, two more for D 128's BQ
  // 16, three (zero, dK/dV + dQ, store) for D 128's atomic dQ with BQ 16 and for atomic dQ
  // with the default tiles at D 32 and 64.
  // Plus, for D 64 and 128, one wgmma forward and the two wgmma backward passes, twice more
  // with 64-query dK/dV tiles, and D 64's with 32 asked for; three for D 64's atomic dQ.
  // Plus D 64's two-warpgroup dK/dV kernels: 2 + 2 + 3 launches, one of each 256 threads;
  // and for D 64 and 128 the two-warpgroup dQ kernel (2 launches, one of 256 threads) and
  // forwards (1 + 1, 256 threads); the warp-specialized forwards (2 for D 64, 1 for D 128;
  // 160 threads); and D 64's warp-specialized dK/dV kernel (160 threads) with either dQ
  // kernel (the second of 256): 2 + 2, with 32-query steps 2, with atomic dQ 3 (one of 160);
  // the warp-specialized dQ kernel after the wgmma dK/dV kernel (D 64 and 128) and after the
  // warp-specialized one (D 64): 2 + 2 + 2, four of them of 160 threads; FlashAttention-3's
  // dK/dV block (384 threads) and a dQ kernel: 3 x 2 for D 64 and 128, one dQ kernel of each
  // D warp-specialized; and at D 64 with dQ by bulk adds 3 (one of 384 threads).
  EXPECT_EQ(launches,
            3 * 3 + 2 + 3 + 2 * 3 + 2 * 3 + 2 * 2 + 2 + 3 + 7 + 2 * 4 + 3 + 4 + 2 + 3 + 6 + 2 * 3 * 2 + 3);
  EXPECT_EQ(two_warpgroup_launches, 3 + 2 * 3 + 1);
  EXPECT_EQ(warp_specialized_launches, 3 + 2 + 1 + 1 + 4 + 2);
  EXPECT_EQ(three_warpgroup_launches, 2 * 3 + 1);
}

// The atomic-dQ dK/dV grid (atomic_dq_grid, dkdv_block): in launch order (x fastest) every
// (head, key tile) exactly once, by groups of 2^g heads whose dQ rows fit 4 MB (g up to 16,
// never more heads than the next power of two of B*H), within a group key tile by key tile
// and head by head; blocks past B*H are left over only in the last group.
TEST(EmulatedAttentionPlans, AtomicDqGrid) {
  struct Shape {
    int heads, T, D, g;
  };
  for (const Shape& c : {Shape{1, 64, 64, 0}, Shape{6, 96, 64, 3}, Shape{512, 1024, 64, 4}, Shape{200, 1024, 64, 4},
                         Shape{37, 4096, 128, 1}, Shape{33, 2048, 64, 3}, Shape{100000, 1, 8, 16}}) {
    SCOPED_TRACE("heads " + std::to_string(c.heads) + " T " + std::to_string(c.T) + " D " + std::to_string(c.D));
    const int g = atomic_dq_group_log2(c.heads, c.T, c.D);
    EXPECT_EQ(g, c.g);
    AttnParams p;
    p.B = 1;
    p.H = c.heads;
    p.T = c.T;
    p.D = c.D;
    for (int key_rows : {64, 128}) {  // one and two warpgroups a block
      SCOPED_TRACE("key rows " + std::to_string(key_rows));
      const GridXY grid = atomic_dq_grid(p, key_rows);
      const int tiles = (c.T + key_rows - 1) / key_rows;
      std::vector<int> seen(static_cast<size_t>(c.heads) * tiles, 0);
      int64_t last = -1, idle = 0;
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          const KeyBlock k = atomic_dq_block(bx, by, g);
          if (k.bh >= c.heads) {
            ++idle;
            EXPECT_EQ(by, grid.y - 1) << bx;  // only the last group has heads to spare
            continue;
          }
          ASSERT_TRUE(k.bh >= 0 && k.kt >= 0 && k.kt < tiles) << bx << "," << by;
          ++seen[static_cast<size_t>(k.bh) * tiles + k.kt];
          const int64_t order = ((static_cast<int64_t>(k.bh >> g) * tiles + k.kt) << g) + (k.bh & ((1 << g) - 1));
          EXPECT_GT(order, last) << bx << "," << by;  // group, then key tile, then head
          last = order;
        }
      for (int v : seen) ASSERT_EQ(v, 1);
      EXPECT_LT(idle, static_cast<int64_t>(tiles) << g);
    }
  }
}

// The CUDA-core path (fp32, and the 16-bit fallback) has no cp.async: one run each.
TEST(EmulatedAttentionCudaCore, Fp32) {
  uint64_t seed = 200;
  for (const Case& c : small_cases()) run_case<float>(c, false, seed++);
}

TEST(EmulatedAttentionCudaCore, Bf16) {
  uint64_t seed = 300;
  for (const Case& c : small_cases()) run_case<__nv_bfloat16>(c, false, seed++);
}

TEST(EmulatedAttentionCudaCore, SavedMask) {
  uint64_t seed = 350;
  for (const Case& c : small_cases()) {
    run_case<__half>(c, false, seed++, AttnTiles{}, MaskMode::kSaved);
    run_case<__half>(c, false, seed++, AttnTiles{}, MaskMode::kAhead);
  }
}

INSTANTIATE_TEST_SUITE_P(CpAsync, EmulatedAttention, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "eager" : "deferred");
                         });

// The single draw of the CUDA-core kernels against philox.h's attn_dropout_keep, which the
// CPU twin uses.
TEST(EmulatedAttentionDropout, OneDrawMatchesAttnDropoutKeep) {
  std::mt19937_64 rng(7);
  int bad = 0, kept = 0;
  for (int t = 0; t < 100000; ++t) {
    DropoutKey drop;
    drop.p = static_cast<float>(rng() % 100) / 100.0f;
    drop.seed = rng();
    drop.site = static_cast<uint32_t>(rng());
    AttnParams p;
    p.T = 1 + static_cast<int>(rng() % 5000);
    set_attn_dropout(p, drop);
    const uint64_t sample = rng() >> (rng() % 64), hg = rng() % 100;
    const int i = static_cast<int>(rng() % p.T), j = static_cast<int>(rng() % p.T);
    const bool keep = attn_dropout_keep(drop, sample, hg, p.T, i, j);
    bad += attn_keep_one(p, sample, hg, i, j) != keep;
    kept += keep;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(kept, 20000);  // both outcomes were seen (mean p ~0.5)
  EXPECT_LT(kept, 80000);
}

// The shared draws of the tensor-core kernels (four lanes, one block each, exchanged by
// shuffles), run on emulated warps over whole T x T score matrices in both tile layouts,
// against attn_dropout_keep per element. p.out receives the factors of the rows layout
// (forward, dQ), p.dqkv those of the keys layout (dK/dV), both [T][T] by (query, key).
void shared_draws_probe(const AttnParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3, T_ = p.T;
  float* rows = static_cast<float*>(p.out);
  float* keys = static_cast<float*>(p.dqkv);
  const uint64_t sample = p.drop.sample_base + 1, hg = static_cast<uint64_t>(p.head_offset);
  constexpr int NT = 16;  // 128 columns a draw: two words of bits
  for (int r0 = warp * 16; r0 < T_; r0 += 64)  // 16-row tiles of queries (rows) or keys (keys)
    for (int c0 = 0; c0 < T_; c0 += 8 * NT) {
      const KeepBits<NT> by_rows = attn_keep_rows<NT>(p, sample, hg, r0 + (lane >> 2), c0, lane);
      const KeepBits<NT> by_keys = attn_keep_keys<NT>(p, sample, hg, r0 + (lane >> 2), c0, lane);
      for (int nt = 0; nt < NT; ++nt)
        for (int e = 0; e < 4; ++e) {
          const int r = r0 + (lane >> 2) + (e >> 1) * 8, c = c0 + nt * 8 + tq * 2 + (e & 1);
          if (r < T_ && c < T_) {
            rows[r * T_ + c] = by_rows.factor(p, nt, e);  // r: query, c: key
            keys[c * T_ + r] = by_keys.factor(p, nt, e);  // r: key, c: query
          }
        }
    }
}

TEST(EmulatedAttentionDropout, SharedDrawsMatchAttnDropoutKeep) {
  for (const int T : {1, 7, 16, 45, 200}) {
    DropoutKey drop;
    drop.p = 0.37f;
    drop.seed = 0xABCDEF0123ull + T;
    drop.site = 3;
    drop.sample_base = 41;
    AttnParams p;
    p.T = T;
    p.head_offset = 5;
    set_attn_dropout(p, drop);
    std::vector<float> rows(static_cast<size_t>(T) * T, -1.f), keys(rows.size(), -1.f);
    p.out = rows.data();
    p.dqkv = keys.data();
    launch(shared_draws_probe, 1, 1, 0, p);
    int bad_rows = 0, bad_keys = 0;
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < T; ++j) {
        const float want = attn_dropout_keep(drop, 42, 5, T, i, j) ? p.inv_keep : 0.f;
        bad_rows += rows[i * T + j] != want;
        bad_keys += keys[i * T + j] != want;
      }
    EXPECT_EQ(bad_rows, 0) << "T=" << T;
    EXPECT_EQ(bad_keys, 0) << "T=" << T;
  }
}

}  // namespace
}  // namespace trident::cuda
