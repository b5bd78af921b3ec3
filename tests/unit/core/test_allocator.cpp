// CachingAllocator: a repeated allocation pattern is served from the cache (no raw
// allocations after the warm-up), and the statistics account every byte.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace trident {
namespace {

struct Counting {
  int allocs = 0, frees = 0;
};

// One "training step": a few live tensors of mixed sizes, some freed mid-way.
void step(CachingAllocator& a) {
  void* x = a.allocate(1000);
  void* y = a.allocate(4096);
  void* z = a.allocate(10);
  a.release(y);
  void* w = a.allocate(3000);  // fits the freed 4096 block
  void* big = a.allocate(1 << 20);
  a.release(x);
  a.release(z);
  a.release(w);
  a.release(big);
}

TEST(Allocator, SteadyStateHasNoRawAllocations) {
  Counting c;
  {
    CachingAllocator a([&](size_t n) { ++c.allocs; return std::malloc(n); },
                       [&](void* p) { ++c.frees; std::free(p); });
    step(a);
    const AllocatorStats warm = a.stats();
    EXPECT_EQ(warm.raw_allocs, static_cast<size_t>(c.allocs));
    EXPECT_EQ(warm.raw_allocs, 4u);  // x, y, z, big; w reuses y's block
    for (int i = 0; i < 10; ++i) step(a);
    const AllocatorStats s = a.stats();
    EXPECT_EQ(s.raw_allocs, warm.raw_allocs);
    EXPECT_EQ(c.allocs, 4);
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.bytes_reserved, warm.bytes_reserved);
    // 1000 and 10 round up to 1024 and 256; peak in use: x, w in y's block, z, big.
    EXPECT_EQ(s.peak_bytes_reserved, 1024u + 4096 + 256 + (1u << 20));
    EXPECT_EQ(s.peak_bytes_in_use, 1024u + 4096 + 256 + (1u << 20));
    a.empty_cache();
    EXPECT_EQ(a.stats().bytes_reserved, 0u);
    EXPECT_EQ(a.stats().peak_bytes_reserved, s.peak_bytes_reserved);  // a peak stays
  }
  EXPECT_EQ(c.frees, c.allocs);  // destructor returns every cached block
}

// A device with room for 1 MiB: a 512 KiB block cached for another size is given back when
// a 768 KiB request finds no room, and the request is tried again; an allocator that signals
// no room by a null pointer is retried alike. With nothing cached, the failure stands.
TEST(Allocator, OutOfMemoryGivesBackTheCacheAndRetries) {
  for (const bool throws : {true, false}) {
    std::map<void*, size_t> live;  // the device's blocks
    size_t used = 0;
    int attempts = 0;
    CachingAllocator a(
        [&](size_t n) -> void* {
          ++attempts;
          if (used + n > (1u << 20)) {
            if (throws) throw Error("device full");
            return nullptr;
          }
          used += n;
          void* p = std::malloc(n);
          live[p] = n;
          return p;
        },
        [&](void* p) {
          used -= live.at(p);
          live.erase(p);
          std::free(p);
        });
    a.release(a.allocate(512u << 10));
    EXPECT_EQ(a.stats().bytes_reserved, 512u << 10);
    void* p = a.allocate(768u << 10);  // the cached 512 KiB is too small: a new block
    EXPECT_EQ(attempts, 3);             // 512 KiB, 768 KiB refused, 768 KiB after the cache went back
    EXPECT_EQ(a.stats().bytes_reserved, 768u << 10);
    EXPECT_EQ(a.stats().raw_allocs, 2u);
    EXPECT_EQ(used, 768u << 10);
    EXPECT_THROW(a.allocate(768u << 10), Error) << "nothing cached: no retry, the failure stands";
    EXPECT_EQ(attempts, 4);
    a.release(p);
  }
}

TEST(Allocator, StatsRoundTo256) {
  Counting c;
  CachingAllocator a([&](size_t n) { ++c.allocs; return std::malloc(n); },
                     [&](void* p) { ++c.frees; std::free(p); });
  void* p = a.allocate(1);
  void* q = a.allocate(1000);  // 1024
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 256u + 1024u);
  EXPECT_EQ(s.bytes_reserved, 1280u);
  EXPECT_EQ(s.peak_bytes_in_use, 1280u);
  a.release(q);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 256u);
  EXPECT_EQ(s.peak_bytes_in_use, 1280u);
  EXPECT_EQ(s.bytes_reserved, 1280u);
  // A much smaller request does not take the 1024 block (no more than 2x waste).
  void* r = a.allocate(100);
  EXPECT_NE(r, q);
  EXPECT_EQ(a.stats().raw_allocs, 3u);
  a.release(r);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.bytes_reserved, 256u);  // only p is still held
  EXPECT_EQ(c.frees, 2);
  a.release(p);
  EXPECT_THROW(a.release(p), InternalError);  // double release is a bug
}

TEST(Allocator, LeakedBlocksFreedAtTeardown) {
  Counting c;
  {
    CachingAllocator a([&](size_t n) { ++c.allocs; return std::malloc(n); },
                       [&](void* p) { ++c.frees; std::free(p); });
    a.allocate(64);
    a.allocate(5000);
  }
  EXPECT_EQ(c.allocs, 2);
  EXPECT_EQ(c.frees, 2);
}

// The same property through a backend: Buffers of a repeated step reuse cached blocks,
// and raw_alloc returns 64-byte-aligned memory.
TEST(Allocator, BackendBuffersReuseCache) {
  auto be = make_cpu_backend();
  auto run = [&] {
    std::vector<Buffer> live;
    live.push_back(be->empty(Shape{8, 768}, DType::F32));
    live.push_back(be->zeros(Shape{8, 3 * 768}, DType::BF16));
    live.push_back(be->empty(Shape{17}, DType::I32));
    for (auto& b : live) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.t().data) % 64, 0u);
  };
  run();
  const size_t warm = be->allocator().stats().raw_allocs;
  EXPECT_EQ(warm, 3u);
  for (int i = 0; i < 5; ++i) run();
  EXPECT_EQ(be->allocator().stats().raw_allocs, warm);
  EXPECT_EQ(be->allocator().stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace trident
