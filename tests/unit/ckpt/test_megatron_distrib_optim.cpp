// place_parameters: the search that finds each parameter of a model chunk in the distributed
// optimizer's flat buffers by its fp32 master (distrib_optim.pt, torch_dist's bucket formats).
// Buffers are built here by hand, as Megatron lays them out: the chunk's parameters in reverse
// order, starts at multiples of 64 elements from the bucket's start, a bucket per segment, noise
// in the gaps; the expected places are the ones written.
#include "ckpt/megatron_distrib_optim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace trident::megatron {
namespace {

struct Buffer {
  std::vector<std::vector<float>> segments;

  std::vector<BufferSegment> view() const {
    std::vector<BufferSegment> out;
    for (const std::vector<float>& s : segments)
      out.push_back({static_cast<int64_t>(s.size()), [&s](int64_t at, int64_t n) {
                       return std::vector<float>(s.begin() + at, s.begin() + at + n);
                     }});
    return out;
  }
  void put(size_t seg, int64_t at, const std::vector<float>& v) {
    std::copy(v.begin(), v.end(), segments[seg].begin() + at);
  }
};

std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.001f * static_cast<float>(i);
  return v;
}

std::vector<float> noise(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

BufferParam param(const std::string& name, const std::vector<float>& v) {
  return {name, {static_cast<int64_t>(v.size())}, static_cast<int64_t>(v.size()), [v] { return v; }};
}

std::string io_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(PlaceParameters, AlignedStartsAndANewSegment) {
  // named_parameters() order a, b, c: the buffer holds c at 0, b at 64 (the next multiple of
  // 64), and a in the next bucket.
  const std::vector<float> a = values(10, 1), b = values(100, 2), c = values(5, 3);
  Buffer buf{{noise(200, 1), noise(16, 2)}};
  buf.put(0, 0, c);
  buf.put(0, 64, b);
  buf.put(1, 0, a);
  const std::vector<BufferPlace> at =
      place_parameters({param("a", a), param("b", b), param("c", c)}, buf.view(), DType::F32, 0, "buf");
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(at[0].segment, 1u);
  EXPECT_EQ(at[0].at, 0);
  EXPECT_EQ(at[1].segment, 0u);
  EXPECT_EQ(at[1].at, 64);
  EXPECT_EQ(at[2].segment, 0u);
  EXPECT_EQ(at[2].at, 0);
}

TEST(PlaceParameters, BacktracksFromAPlaceThatOnlyLooksRight) {
  // y (all zeros) also matches the zero padding right after x; there z, the next parameter,
  // fits nowhere, so the search goes back and takes y's aligned place at 64.
  const std::vector<float> x = values(5, 1), y(10, 0.0f), z = values(7, 4);
  Buffer buf{{noise(96, 3)}};
  std::fill(buf.segments[0].begin() + 5, buf.segments[0].begin() + 74, 0.0f);
  buf.put(0, 0, x);
  buf.put(0, 64, y);
  buf.put(0, 74, z);
  const std::vector<BufferPlace> at =
      place_parameters({param("z", z), param("y", y), param("x", x)}, buf.view(), DType::F32, 0, "buf");
  EXPECT_EQ(at[1].at, 64);
  EXPECT_EQ(at[0].at, 74);
}

TEST(PlaceParameters, SixteenBitWeightsMatchTheMastersTheyRoundFrom) {
  std::vector<float> master = values(300, 0.5f), stored(300);
  for (size_t i = 0; i < master.size(); ++i) {
    master[i] += 1e-5f;  // bits below bf16's mantissa
    stored[i] = bf16_to_float(float_to_bf16(master[i]));
  }
  const std::vector<float> v = {9.0f, 9.0625f, 9.125f};  // exact in bf16
  // v first in the buffer (reverse order), then w at its aligned start.
  Buffer buf{{noise(400, 4)}};
  buf.put(0, 0, v);
  buf.put(0, 64, master);
  const std::vector<BufferPlace> placed =
      place_parameters({param("w", stored), param("v", v)}, buf.view(), DType::BF16, 0, "buf");
  EXPECT_EQ(placed[0].at, 64);
  EXPECT_EQ(placed[1].at, 0);
  // In fp32 the stored weight must equal the master: nowhere.
  EXPECT_NE(io_error_of([&] {
              place_parameters({param("w", stored), param("v", v)}, buf.view(), DType::F32, 0, "buf");
            }).find("parameter 'w' ([300]) is nowhere"),
            std::string::npos);
}

TEST(PlaceParameters, AMasterFoundNowhereIsNamed) {
  const std::vector<float> a = values(10, 1), b = values(20, 2);
  Buffer buf{{noise(128, 5)}};
  buf.put(0, 0, b);
  std::vector<float> moved = a;
  std::rotate(moved.begin(), moved.begin() + 1, moved.end());
  buf.put(0, 64, moved);
  EXPECT_EQ(io_error_of([&] { place_parameters({param("a", a), param("b", b)}, buf.view(), DType::F32, 0, "f: buffer 0"); }),
            "f: buffer 0: parameter 'a' ([10]) is nowhere in the buffer where its master weight matches it: not a "
            "layout of Megatron's distributed optimizer that trident reads, or not this model's optimizer");
}

}  // namespace
}  // namespace trident::megatron
