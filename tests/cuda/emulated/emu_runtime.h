// A small CUDA execution model on the CPU, so that the device code of kernels/cuda/*.cu
// (extracted by extract_device_code.cmake) compiles as host C++ and runs without a GPU.
// Entry point: emu::launch(grid, block, dynamic_smem_bytes, kernel, args...).
//
// How it runs a launch: blocks one after the other; the threads of a block (up to 1024,
// 1-3 dimensions) as cooperative fibers on the calling OS thread (a small register switch
// on x86-64, ucontext elsewhere). __syncthreads(_count/_and/_or), __syncwarp and the warp
// collectives (__shfl*_sync, __ballot_sync, __any_sync, __all_sync) are barriers between
// fibers. Each scheduling round runs the warps in a random order and the lanes of a warp
// in a random order, each as far as the barriers allow, so a result that depends on an
// unsynchronised order of threads shows up as a wrong or run-to-run different result.
// Barriers are strict: a barrier that some thread of its group never reaches (it exited
// or took another path) aborts the process with a "deadlock" message, as do a shuffle
// from a lane outside the mask and lanes disagreeing on the mask; a launch configuration
// CUDA would reject throws std::invalid_argument before anything runs. Atomics are plain
// read-modify-writes (fibers never interleave inside one).
// Shared memory: `__shared__ T name[...]` declarations are rewritten by the extraction
// script into per-block storage (emu::shared_var), filled with 0xFF bytes at the start of
// every block (NaN as float/half/bf16/double, -1 as int), so reading an element no thread
// of this block wrote poisons the result. `extern __shared__` arrays (emu::dynamic_smem)
// get the launch's dynamic size, also poisoned per block. A `__shared__` declaration the
// script could not rewrite falls back to a function-local `static`: still shared by the
// block's threads (blocks run one at a time), but not poisoned.
//
// What it cannot check: anything about timing, occupancy, bank conflicts, register use,
// coalescing; races between blocks (blocks never overlap here); out-of-bounds accesses
// (run under a sanitizer for that); device math precision (expf, tanhf, rsqrtf ... are
// the host libm's, and nvcc's fused multiply-adds are not modelled); code under
// __CUDA_ARCH__ (undefined here, so the host branch is compiled); inline PTX; library
// device code (CUB, cuBLAS); a thread that loops forever without a barrier (it hangs, as
// on a GPU: the ctest timeout ends it). Shuffles of disjoint lane groups with different
// masks at the same time are not supported (reported as a mask disagreement).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>  // dim3, uint3; host-only declarations under g++
#include <math.h>          // ::expf, ::isfinite ... in the global namespace, as in device code
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "emu_context.h"

// ---- CUDA C++ keywords spelled as host C++ (the CUDA headers above defined some) --------
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __shared__
#undef __constant__
#undef __managed__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static  // fallback only: the extraction script rewrites the usual forms
#define __constant__
#define __managed__
#define TRIDENT_EMU_CHECK_ALIGNED(p, bytes) ::emu::check_aligned(p, bytes)

namespace emu {

constexpr int kWarpSize = 32;
constexpr int kMaxBlockThreads = 1024;
constexpr size_t kMaxDynamicSmem = 227 * 1024;  // sm_90's opt-in maximum per block
constexpr size_t kStackBytes = 64 * 1024;       // per fiber (kernels do not recurse)

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "emulated kernel: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A GPU faults ("misaligned address") on a vector access that is not aligned to its size;
// x86 does not. cuda_common.cuh's load_vec/store_vec call this through
// TRIDENT_EMU_CHECK_ALIGNED (defined below), so an emulated kernel fails the same way.
inline void check_aligned(const void* p, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0)
    fail("misaligned " + std::to_string(bytes) + "-byte vector access at " +
         std::to_string(reinterpret_cast<uintptr_t>(p)));
}


struct Barrier {
  int expected = 0;  // threads of the group (block barrier) or lanes of the mask (warp)
  int arrived = 0;
  unsigned gen = 0;   // bumped each time the barrier opens
  unsigned mask = 0;  // warp barriers: the mask of the collective in progress
  const char* what = "";
};

struct Fiber {
  Context ctx;
  bool done = false;
  const Barrier* waiting = nullptr;  // the barrier this fiber is blocked on, if any
  unsigned wait_gen = 0;             // its generation when the fiber arrived
};

// Uninitialised bytes, aligned to 64.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n) : raw_(new unsigned char[n + 64]) {
    const auto a = reinterpret_cast<uintptr_t>(raw_.get());
    p_ = raw_.get() + ((64 - a % 64) % 64);
  }
  unsigned char* get() const { return p_; }

 private:
  std::unique_ptr<unsigned char[]> raw_;
  unsigned char* p_;
};

struct BlockState {
  int nthreads = 0;
  int cur = -1;  // the fiber running now
  Context main;  // the scheduler
  std::vector<Fiber> fibers;
  Barrier block_bar;
  std::vector<Barrier> warp_bar;
  // Mailboxes of the collectives, double-buffered by the barrier generation's parity: the
  // collective after next cannot open before every lane has read this one's values.
  std::vector<uint64_t> slot[2];
  std::vector<uint8_t> vote[2];  // the same for block-wide votes, by the block barrier's parity
  // Per-block shared memory: static declarations (keyed by a static local's address) and
  // the dynamic allocation.
  std::vector<std::pair<const void*, AlignedBytes>> statics;
  std::unique_ptr<AlignedBytes> dynamic;
  size_t dynamic_bytes = 0;
};

struct Runtime {
  BlockState* block = nullptr;
  std::function<void()> body;  // the kernel call of the current launch
  char* stacks = nullptr;  // kMaxBlockThreads stacks of kStackBytes, allocated on first use
  std::mt19937 order_rng{12345};
  uint64_t launches = 0;
};
inline Runtime g;

// Order of warps and lanes within a round; tests may reseed it.
inline void set_schedule_seed(uint32_t seed) { g.order_rng.seed(seed); }
inline uint64_t launch_count() { return g.launches; }

inline BlockState& blk() {
  if (g.block == nullptr) fail("device function called outside an emulated launch");
  return *g.block;
}

}  // namespace emu

// ---- built-in variables (set by the scheduler before it resumes a fiber) ----------------
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
constexpr int warpSize = emu::kWarpSize;

namespace emu {

inline int tid() { return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }
inline int lane() { return tid() % kWarpSize; }
inline int warp() { return tid() / kWarpSize; }
inline int warp_lanes(int w) { return std::min(kWarpSize, blk().nthreads - w * kWarpSize); }

inline void yield() {
  BlockState& b = blk();
  switch_context(b.fibers[b.cur].ctx, b.main);
}

// Arrives at `bar` and returns once all `bar.expected` threads have arrived.
inline void arrive_and_wait(Barrier& bar) {
  const unsigned gen = bar.gen;
  if (++bar.arrived == bar.expected) {
    bar.arrived = 0;
    ++bar.gen;
    return;
  }
  Fiber& me = blk().fibers[blk().cur];
  me.waiting = &bar;
  me.wait_gen = gen;
  while (bar.gen == gen) yield();
  me.waiting = nullptr;
}

// Joins the warp collective over `mask`; returns the mailbox parity of this collective.
inline unsigned warp_arrive(unsigned mask, const char* what, uint64_t value) {
  BlockState& b = blk();
  const int w = warp(), l = lane(), nl = warp_lanes(w);
  Barrier& bar = b.warp_bar[w];
  if (!(mask >> l & 1u)) fail(std::string(what) + ": calling lane " + std::to_string(l) + " is not in the mask");
  if (nl < kWarpSize && (mask >> nl) != 0u)
    fail(std::string(what) + ": mask names lanes beyond the block's last warp (" + std::to_string(nl) +
         " lanes)");
  if (bar.arrived == 0) {
    bar.mask = mask;
    bar.expected = __builtin_popcount(mask);
    bar.what = what;
  } else if (bar.mask != mask || (bar.what != what && std::strcmp(bar.what, what) != 0)) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (mask 0x%08x) meets %s (mask 0x%08x) in warp %d: lanes disagree on the"
                  " collective or its mask, or two lane groups use the warp at once", what, mask, bar.what, bar.mask, w);
    fail(buf);
  }
  const unsigned parity = bar.gen & 1u;
  b.slot[parity][tid()] = value;
  arrive_and_wait(bar);
  return parity;
}

inline uint64_t lane_value(unsigned parity, unsigned mask, int src, const char* what) {
  if (!(mask >> src & 1u)) fail(std::string(what) + ": reads lane " + std::to_string(src) + " outside the mask");
  return blk().slot[parity][warp() * kWarpSize + src];
}

template <class V>
uint64_t to_bits(V v) {
  static_assert(sizeof(V) <= 8 && std::is_trivially_copyable_v<V>, "shuffles move at most 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(V));
  return u;
}
template <class V>
V from_bits(uint64_t u) {
  V v;
  std::memcpy(static_cast<void*>(&v), &u, sizeof(V));
  return v;
}

// src(lane) gives the source lane, or -1 for "keep the own value".
template <class V, class Src>
V shuffle(unsigned mask, V v, const char* what, Src src) {
  const unsigned parity = warp_arrive(mask, what, to_bits(v));
  const int s = src(lane());
  return s < 0 ? v : from_bits<V>(lane_value(parity, mask, s, what));
}

// Per-block storage for `__shared__ A name;` (A may be an array type), poisoned with 0xFF.
template <class A>
A& shared_var(const void* key) {
  BlockState& b = blk();
  for (auto& [k, p] : b.statics)
    if (k == key) return *reinterpret_cast<A*>(p.get());
  AlignedBytes p(sizeof(A));
  std::memset(p.get(), 0xFF, sizeof(A));
  b.statics.emplace_back(key, std::move(p));
  return *reinterpret_cast<A*>(b.statics.back().second.get());
}

// The block's `extern __shared__` array (the launch's dynamic shared memory).
template <class T>
T* dynamic_smem() {
  return reinterpret_cast<T*>(blk().dynamic->get());
}

}  // namespace emu

// ---- synchronisation and warp collectives ----------------------------------------------
inline void __syncthreads() { emu::arrive_and_wait(emu::blk().block_bar); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_arrive(mask, "__syncwarp", 0); }
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace emu {
// Block-wide predicate reductions (__syncthreads_count / _and / _or).
inline int block_count(int pred) {
  BlockState& b = blk();
  const unsigned parity = b.block_bar.gen & 1u;
  b.vote[parity][tid()] = pred != 0;
  __syncthreads();
  int n = 0;
  for (int t = 0; t < b.nthreads; ++t) n += b.vote[parity][t];
  return n;
}
}  // namespace emu
inline int __syncthreads_count(int pred) { return emu::block_count(pred); }
inline int __syncthreads_and(int pred) { return emu::block_count(pred) == emu::blk().nthreads; }
inline int __syncthreads_or(int pred) { return emu::block_count(pred) != 0; }

template <class V>
V __shfl_sync(unsigned mask, V v, int src_lane, int width = warpSize) {
  return emu::shuffle(mask, v, "__shfl_sync",
                      [&](int l) { return (l & ~(width - 1)) + (src_lane & (width - 1)); });
}
template <class V>
V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = warpSize) {
  // A source in a later group of `width` lanes gives the lane its own value.
  return emu::shuffle(mask, v, "__shfl_xor_sync", [&](int l) {
    const int s = l ^ lane_mask;
    return s >= (l / width + 1) * width ? -1 : s;
  });
}
template <class V>
V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = warpSize) {
  return emu::shuffle(mask, v, "__shfl_down_sync",
                      [&](int l) { return (l % width) + static_cast<int>(delta) >= width ? -1 : l + static_cast<int>(delta); });
}
template <class V>
V __shfl_up_sync(unsigned mask, V v, unsigned delta, int width = warpSize) {
  return emu::shuffle(mask, v, "__shfl_up_sync",
                      [&](int l) { return (l % width) < static_cast<int>(delta) ? -1 : l - static_cast<int>(delta); });
}

inline unsigned __ballot_sync(unsigned mask, int pred) {
  const unsigned parity = emu::warp_arrive(mask, "__ballot_sync", pred != 0);
  unsigned r = 0;
  for (int l = 0; l < emu::kWarpSize; ++l)
    if (mask >> l & 1u) r |= static_cast<unsigned>(emu::lane_value(parity, mask, l, "__ballot_sync")) << l;
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0u; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }

// ---- atomics: fibers never interleave inside a call, so plain read-modify-write ---------
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicSub(T* p, T v) {
  const T old = *p;
  *p = old - v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = std::max(old, v);
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = std::min(old, v);
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}
template <class T>
T atomicOr(T* p, T v) {
  const T old = *p;
  *p = old | v;
  return old;
}
template <class T>
T atomicAnd(T* p, T v) {
  const T old = *p;
  *p = old & v;
  return old;
}

// ---- device math and bit casts (host libm; not the device's precision) ------------------
using std::max;
using std::min;
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : (x == x ? x : 0.f); }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float_as_int(float x) { return emu::from_bits<int>(emu::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return emu::from_bits<unsigned>(emu::to_bits(x)); }
inline float __int_as_float(int x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return emu::from_bits<float>(emu::to_bits(x)); }
inline long long __double_as_longlong(double x) { return emu::from_bits<long long>(emu::to_bits(x)); }
inline double __longlong_as_double(long long x) { return emu::from_bits<double>(emu::to_bits(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
T __ldg(const T* p) { return *p; }

namespace emu {

// The fiber entry point: runs the launch's kernel call for the current thread, then
// hands control back to the scheduler for good.
inline void fiber_main() {
  g.body();
  BlockState& b = blk();
  b.fibers[b.cur].done = true;
  switch_context(b.fibers[b.cur].ctx, b.main);
  fail("a finished fiber was resumed");
}

inline void check_config(dim3 grid, dim3 block, size_t dyn_smem) {
  auto bad = [](const std::string& w) { throw std::invalid_argument("emu::launch: invalid configuration: " + w); };
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxBlockThreads) bad("block of " + std::to_string(threads) + " threads");
  if (block.x > 1024 || block.y > 1024 || block.z > 64) bad("block dimension out of range");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) bad("empty grid");
  if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) bad("grid dimension out of range");
  if (dyn_smem > kMaxDynamicSmem) bad(std::to_string(dyn_smem) + " bytes of dynamic shared memory");
}

// getcontext (the ucontext path) is declared returns_twice; these contexts are only
// entered through their entry point, so nothing here is clobbered.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wclobbered"
inline void run_block(BlockState& b) {
  const int n = b.nthreads;
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f = Fiber{};
    make_context(f.ctx, g.stacks + static_cast<size_t>(i) * kStackBytes, kStackBytes, fiber_main);
  }
  const int nwarps = (n + kWarpSize - 1) / kWarpSize;
  std::vector<int> warps(nwarps), lanes(kWarpSize);
  for (int w = 0; w < nwarps; ++w) warps[w] = w;
  for (bool running = true; running;) {
    running = false;
    bool progressed_round = false;
    std::shuffle(warps.begin(), warps.end(), g.order_rng);
    for (int w : warps) {
      const int nl = std::min(kWarpSize, n - w * kWarpSize);
      for (int l = 0; l < nl; ++l) lanes[l] = l;
      std::shuffle(lanes.begin(), lanes.begin() + nl, g.order_rng);
      for (bool progressed = true; progressed;) {
        progressed = false;
        for (int li = 0; li < nl; ++li) {
          const int i = w * kWarpSize + lanes[li];
          Fiber& f = b.fibers[i];
          if (f.done) continue;
          running = true;
          if (f.waiting != nullptr && f.waiting->gen == f.wait_gen) continue;  // still blocked
          progressed = progressed_round = true;
          b.cur = i;
          threadIdx = uint3{static_cast<unsigned>(i) % blockDim.x, static_cast<unsigned>(i) / blockDim.x % blockDim.y,
                            static_cast<unsigned>(i) / (blockDim.x * blockDim.y)};
          switch_context(b.main, f.ctx);
        }
      }
    }
    if (running && !progressed_round) {
      int done = 0, at_block = 0;
      std::string warps_blocked;
      for (int i = 0; i < n; ++i) {
        done += b.fibers[i].done;
        at_block += b.fibers[i].waiting == &b.block_bar;
      }
      for (int w = 0; w < nwarps; ++w)
        if (b.warp_bar[w].arrived > 0)
          warps_blocked += " warp " + std::to_string(w) + " in " + b.warp_bar[w].what + " (" +
                           std::to_string(b.warp_bar[w].arrived) + "/" + std::to_string(b.warp_bar[w].expected) +
                           " lanes)";
      fail("deadlock in block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
           std::to_string(blockIdx.z) + "): " + std::to_string(done) + " of " + std::to_string(n) +
           " threads exited, " + std::to_string(at_block) + " wait at __syncthreads;" + warps_blocked +
           " (a barrier or warp collective not reached by every thread it waits for)");
    }
  }
}
#pragma GCC diagnostic pop

// One arena for all fiber stacks, on transparent huge pages where the kernel allows: a
// block's threads touch the tops of up to 1024 stacks in every round, which would
// otherwise cost a TLB miss per context switch. Pages are committed as they are touched.
inline char* allocate_stacks() {
  const size_t bytes = kMaxBlockThreads * kStackBytes;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail("cannot map the fibers' stacks");
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return static_cast<char*>(p);  // kept for the life of the process
}

// Runs `body` once per thread of every block of the grid (see the file comment).
inline void run_grid(dim3 grid, dim3 block, size_t dyn_smem, std::function<void()> body) {
  check_config(grid, block, dyn_smem);
  if (g.block != nullptr) fail("nested launch");
  const int n = static_cast<int>(block.x * block.y * block.z);
  if (g.stacks == nullptr) g.stacks = allocate_stacks();
  auto b = std::make_unique<BlockState>();
  b->nthreads = n;
  b->fibers.resize(n);
  b->block_bar.expected = n;
  b->block_bar.what = "__syncthreads";
  b->warp_bar.resize((n + kWarpSize - 1) / kWarpSize);
  b->slot[0].assign(n, 0);
  b->slot[1].assign(n, 0);
  b->vote[0].assign(n, 0);
  b->vote[1].assign(n, 0);
  b->dynamic_bytes = dyn_smem;
  b->dynamic = std::make_unique<AlignedBytes>(dyn_smem + 16);
  g.body = std::move(body);
  gridDim = grid;
  blockDim = block;
  ++g.launches;
  g.block = b.get();
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = uint3{x, y, z};
        b->statics.clear();
        std::memset(b->dynamic->get(), 0xFF, dyn_smem + 16);
        for (Barrier& w : b->warp_bar) w.arrived = 0;
        b->block_bar.arrived = 0;
        run_block(*b);
      }
  g.block = nullptr;
  g.body = nullptr;
}

// emu::launch(grid, block, dynamic_smem_bytes, kernel, args...): kernel<<<grid, block,
// dynamic_smem_bytes>>>(args...). Arguments convert to the kernel's parameter types once;
// every thread gets its own copy of them, as on the device.
template <class... P, class... A>
void launch(dim3 grid, dim3 block, size_t dyn_smem, void (*kernel)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "emu::launch: wrong number of kernel arguments");
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  run_grid(grid, block, dyn_smem, [kernel, params] { std::apply(kernel, *params); });
}

// What extract_device_code.cmake turns `kernel<<<grid, block, smem, stream>>>(args...)`
// into: LaunchConfig(grid, block, smem, stream)(kernel, args...). The stream is ignored
// (launches run to completion in order).
struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  LaunchConfig(dim3 g, dim3 b, size_t dynamic_smem = 0, cudaStream_t /*stream*/ = nullptr)
      : grid(g), block(b), smem(dynamic_smem) {}
  template <class... P, class... A>
  void operator()(void (*kernel)(P...), A&&... args) const {
    launch(grid, block, smem, kernel, std::forward<A>(args)...);
  }
};

}  // namespace emu
