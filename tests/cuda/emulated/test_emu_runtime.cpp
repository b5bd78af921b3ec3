// Self-tests of the CPU execution model (emu_runtime.h) and of extract_device_code.cmake's
// rewrites: warp shuffles against the PTX ISA's lane rules, per-block poisoned shared
// memory, barriers that order threads, strict detection of barriers not every thread
// reaches (death tests), launch-configuration checks, per-thread kernel parameters,
// 2-D blocks, 1024-thread blocks and trident's block_sum from cuda_common.cuh.
// These make sure the kernel tests in this directory can fail for the right reasons.
//
// What it cannot check: that the model matches real hardware beyond these documented
// rules (see emu_runtime.h for what is not modelled).
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "emu_cuda_common.h"
#include "emu_shared_forms.inc"

namespace trident::cuda {
namespace {

// ---- kernels of the self-tests (host C++ through the same macros as the real ones) -----
// 0: xor 5, 1: down 3, 2: up 3, 3: broadcast from lane 7, 4: xor 2 width 8, 5: down 5 width 8,
// 6: idx from lane (l+9)%32 width 16, 7: ballot of odd lanes.
__global__ void shuffle_kernel(int* out) {
  const int l = threadIdx.x & 31, w = threadIdx.x >> 5, v = 100 * w + l;
  int* o = out + (w * 32 + l) * 8;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
  o[1] = __shfl_down_sync(0xffffffffu, v, 3);
  o[2] = __shfl_up_sync(0xffffffffu, v, 3);
  o[3] = __shfl_sync(0xffffffffu, v, 7);
  o[4] = __shfl_xor_sync(0xffffffffu, v, 2, 8);
  o[5] = __shfl_down_sync(0xffffffffu, v, 5, 8);
  o[6] = __shfl_sync(0xffffffffu, v, (l + 9) % 32, 16);
  o[7] = static_cast<int>(__ballot_sync(0xffffffffu, l & 1));
}

template <bool kSync>
__global__ void reverse_kernel(const float* in, float* out) {
  static char key;
  auto& s = ::emu::shared_var<float[256]>(&key);
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * 256 + t];
  if (kSync) __syncthreads();
  out[blockIdx.x * 256 + t] = s[255 - t];
}

__global__ void block_sum_kernel(const float* in, float* out) {
  static char key;
  auto& shared = ::emu::shared_var<float[32]>(&key);
  const float r = block_sum(in[blockIdx.x * blockDim.x + threadIdx.x], shared);
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;  // every thread gets the total
}

// block_sum as in cuda_common.cuh but without its trailing barrier, called twice on one
// `shared`: a fast warp's second call overwrites what a slow warp still has to read.
template <bool kTrailingBarrier>
__global__ void two_block_sums_kernel(const float* in, float* out) {
  static char key;
  auto& shared = ::emu::shared_var<float[32]>(&key);
  auto sum = [&](float v) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared[lane] : 0.f;
    r = warp_sum(r);
    if (kTrailingBarrier) __syncthreads();
    return r;
  };
  const float a = sum(in[threadIdx.x]);
  const float b = sum(2.f * in[threadIdx.x]);
  out[threadIdx.x] = a + 10.f * b;
}

// out[t * 6 + k]: __syncthreads_count/_and/_or of (t % 3 == 0), (t < 1000), (t == 77), then
// __any_sync/__all_sync/__ballot_sync of (lane % 4 == 1) in the thread's warp.
__global__ void votes_kernel(int* out) {
  const int t = threadIdx.x, l = t & 31;
  out[t * 6 + 0] = __syncthreads_count(t % 3 == 0);
  out[t * 6 + 1] = __syncthreads_and(t < 1000);
  out[t * 6 + 2] = __syncthreads_or(t == 77);
  out[t * 6 + 3] = __any_sync(0xffffffffu, l % 4 == 1);
  out[t * 6 + 4] = __all_sync(0xffffffffu, l % 4 == 1);
  out[t * 6 + 5] = static_cast<int>(__ballot_sync(0xffffffffu, l % 4 == 1));
}

__global__ void params_kernel(int n, int* out) {
  n += static_cast<int>(threadIdx.x);  // a parameter is each thread's own copy
  const int lin = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int block = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
  out[block * 24 + lin] = n * 1000 + static_cast<int>(threadIdx.y) * 10 + static_cast<int>(threadIdx.z);
  atomicAdd(&out[24 * 6], 1);
}

__global__ void early_exit_then_barrier_kernel(float* p) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  p[threadIdx.x] = 1.f;
}

__global__ void early_exit_then_shuffle_kernel(float* p) {
  if (threadIdx.x == 40) return;
  p[threadIdx.x] = warp_sum(p[threadIdx.x]);
}

__global__ void mask_mismatch_kernel(int* p) {
  const unsigned mask = threadIdx.x < 16 ? 0x0000ffffu : 0xffff0000u;
  p[threadIdx.x] = __shfl_xor_sync(mask, static_cast<int>(threadIdx.x), 1);
}

// ---- tests -------------------------------------------------------------------------------
TEST(EmulatedRuntime, ShufflesFollowTheLaneRules) {
  std::vector<int> out(64 * 8, -1);
  emu::launch(dim3(1), dim3(64), 0, shuffle_kernel, out.data());
  for (int w = 0; w < 2; ++w) {
    for (int l = 0; l < 32; ++l) {
      const int* o = out.data() + (w * 32 + l) * 8;
      auto val = [&](int src) { return 100 * w + src; };
      SCOPED_TRACE("warp " + std::to_string(w) + " lane " + std::to_string(l));
      EXPECT_EQ(o[0], val(l ^ 5));
      EXPECT_EQ(o[1], val(l + 3 < 32 ? l + 3 : l));
      EXPECT_EQ(o[2], val(l >= 3 ? l - 3 : l));
      EXPECT_EQ(o[3], val(7));
      EXPECT_EQ(o[4], val(l ^ 2));
      EXPECT_EQ(o[5], val(l % 8 + 5 < 8 ? l + 5 : l));
      EXPECT_EQ(o[6], val(l / 16 * 16 + (l + 9) % 32 % 16));
      EXPECT_EQ(static_cast<unsigned>(o[7]), 0xaaaaaaaau);
    }
  }
}

TEST(EmulatedRuntime, BlockAndWarpVotes) {
  std::vector<int> out(96 * 6, -1);
  emu::launch(dim3(1), dim3(96), 0, votes_kernel, out.data());
  for (int t = 0; t < 96; ++t) {
    EXPECT_EQ(out[t * 6 + 0], 32) << t;
    EXPECT_EQ(out[t * 6 + 1], 1) << t;
    EXPECT_EQ(out[t * 6 + 2], 1) << t;
    EXPECT_EQ(out[t * 6 + 3], 1) << t;
    EXPECT_EQ(out[t * 6 + 4], 0) << t;
    EXPECT_EQ(static_cast<unsigned>(out[t * 6 + 5]), 0x22222222u) << t;
  }
}

TEST(EmulatedRuntime, MissingBarrierIsExposed) {
  std::vector<float> in(3 * 256), with(in.size(), 0.f), without(in.size(), 0.f);
  std::iota(in.begin(), in.end(), 0.f);
  emu::launch(dim3(3), dim3(256), 0, reverse_kernel<true>, in.data(), with.data());
  emu::launch(dim3(3), dim3(256), 0, reverse_kernel<false>, in.data(), without.data());
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t) ASSERT_EQ(with[b * 256 + t], in[b * 256 + 255 - t]);
  int wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) wrong += !(without[i] == with[i]);  // poison (NaN) or stale
  EXPECT_GT(wrong, 0) << "a read of shared memory before the barrier went unnoticed";
}

TEST(EmulatedRuntime, MissingTrailingBarrierIsExposed) {
  std::vector<float> in(256), good(256, 0.f), bad(256, 0.f);
  for (int i = 0; i < 256; ++i) in[i] = static_cast<float>(i % 5);
  const float total = std::accumulate(in.begin(), in.end(), 0.f);
  emu::launch(dim3(1), dim3(256), 0, two_block_sums_kernel<true>, in.data(), good.data());
  emu::launch(dim3(1), dim3(256), 0, two_block_sums_kernel<false>, in.data(), bad.data());
  int wrong = 0;
  for (int t = 0; t < 256; ++t) {
    ASSERT_EQ(good[t], total + 20.f * total);
    wrong += bad[t] != good[t];
  }
  EXPECT_GT(wrong, 0) << "reusing shared memory without a barrier went unnoticed";
}

TEST(EmulatedRuntime, SharedMemoryIsPerBlockAndPoisoned) {
  constexpr int kBlocks = 3;
  std::vector<uint32_t> out(kBlocks * emu_shared_forms::kForms, 0);
  std::vector<int> mismatches(kBlocks, 0);
  emu::launch(dim3(kBlocks), dim3(64), 64, emu_shared_forms::shared_forms_kernel<float>, out.data(), mismatches.data());
  for (int b = 0; b < kBlocks; ++b) {
    SCOPED_TRACE("block " + std::to_string(b));
    EXPECT_EQ(out[b * emu_shared_forms::kForms + 0], 0xffffffffu) << "static __shared__ array";
    EXPECT_EQ(out[b * emu_shared_forms::kForms + 1], 0xffffffffu) << "static __shared__ scalar";
    EXPECT_EQ(out[b * emu_shared_forms::kForms + 2], 0xffffffffu) << "static __shared__ int array";
    EXPECT_EQ(out[b * emu_shared_forms::kForms + 3], 0xffffffffu) << "extern __shared__ array";
    EXPECT_EQ(out[b * emu_shared_forms::kForms + 4], 0u) << "dynamic shared memory alignment";
    EXPECT_EQ(mismatches[b], 0);
  }
}

TEST(EmulatedRuntime, BlockSumOfCudaCommonWith1024Threads) {
  for (unsigned threads : {32u, 96u, 1024u}) {
    std::vector<float> in(2 * threads), out(in.size(), 0.f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);  // exact in fp32
    emu::launch(dim3(2), dim3(threads), 0, block_sum_kernel, in.data(), out.data());
    for (unsigned b = 0; b < 2; ++b) {
      const float want = std::accumulate(in.begin() + b * threads, in.begin() + (b + 1) * threads, 0.f);
      for (unsigned t = 0; t < threads; ++t) ASSERT_EQ(out[b * threads + t], want) << threads << " threads";
    }
  }
}

TEST(EmulatedRuntime, ParametersIndicesAndAtomics) {
  std::vector<int> out(24 * 6 + 1, -1);
  out[24 * 6] = 0;
  emu::launch(dim3(3, 2), dim3(4, 3, 2), 0, params_kernel, 5, out.data());
  for (int block = 0; block < 6; ++block)
    for (int z = 0; z < 2; ++z)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 4; ++x)
          EXPECT_EQ(out[block * 24 + x + 4 * (y + 3 * z)], (5 + x) * 1000 + y * 10 + z);
  EXPECT_EQ(out[24 * 6], 6 * 24);
}

TEST(EmulatedRuntime, RejectsInvalidConfigurations) {
  std::vector<float> p(2048);
  EXPECT_THROW(emu::launch(dim3(1), dim3(1025), 0, early_exit_then_barrier_kernel, p.data()), std::invalid_argument);
  EXPECT_THROW(emu::launch(dim3(0), dim3(32), 0, early_exit_then_barrier_kernel, p.data()), std::invalid_argument);
  EXPECT_THROW(emu::launch(dim3(1, 65536), dim3(32), 0, early_exit_then_barrier_kernel, p.data()),
               std::invalid_argument);
  EXPECT_THROW(emu::launch(dim3(1), dim3(32), 300 * 1024, early_exit_then_barrier_kernel, p.data()),
               std::invalid_argument);
}

TEST(EmulatedRuntimeDeathTest, BarrierNotReachedByAnExitedThread) {
  std::vector<float> p(64);
  EXPECT_DEATH(emu::launch(dim3(1), dim3(64), 0, early_exit_then_barrier_kernel, p.data()),
               "deadlock.*1 of 64 threads exited, 63 wait at __syncthreads");
}

TEST(EmulatedRuntimeDeathTest, ShuffleWithAnExitedLane) {
  std::vector<float> p(64, 1.f);
  EXPECT_DEATH(emu::launch(dim3(1), dim3(64), 0, early_exit_then_shuffle_kernel, p.data()),
               "deadlock.*warp 1 in __shfl_xor_sync \\(31/32 lanes\\)");
}

// cuda_common.cuh's vector accesses fault on a GPU when misaligned; emulated, they abort.
TEST(EmulatedRuntimeDeathTest, MisalignedVectorAccess) {
  alignas(16) float buf[12] = {};
  EXPECT_EQ((load_vec<float, 4>(buf + 4).v[0]), 0.f);  // aligned: fine
  EXPECT_DEATH((load_vec<float, 4>(buf + 1)), "misaligned 16-byte vector access");
  EXPECT_DEATH((store_vec<float, 2>(buf + 3, Vec<float, 2>{})), "misaligned 8-byte vector access");
}

TEST(EmulatedRuntimeDeathTest, LanesDisagreeOnTheMask) {
  std::vector<int> p(32);
  EXPECT_DEATH(emu::launch(dim3(1), dim3(32), 0, mask_mismatch_kernel, p.data()), "lanes disagree");
}

}  // namespace
}  // namespace trident::cuda
