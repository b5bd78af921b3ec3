// GPU vs CPU: memory, copies, fill, cast, scale, add, accumulate; and the behaviour of
// cuda_device_count() without a GPU (the one test here that runs everywhere).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

constexpr int64_t kRows = 37, kCols = 129;  // awkward: not multiples of warps or vectors

class Elementwise : public CudaVsCpuDtype {};

TEST(CudaDeviceCount, NeverFailsAndMakeBackendRejectsMissingGpu) {
  const int n = cuda_device_count();  // must not throw or abort without a GPU/driver
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_THROW(make_cuda_backend(0), ConfigError);
  } else {
    EXPECT_THROW(make_cuda_backend(n), ConfigError);
  }
}

// --log-energy's counter (NVML): readable on a datacenter GPU, and it grows while the GPU
// works (2 s of GEMMs); the CPU backend says it has none. Skipped where NVML has no counter.
TEST_F(CudaVsCpu, EnergyCounterGrowsWithWork) {
  std::string why_none;
  EXPECT_FALSE(cpu().energy_joules(&why_none).has_value());
  EXPECT_NE(why_none.find("no energy counter"), std::string::npos) << why_none;
  const std::optional<double> before = gpu().energy_joules(&why_none);
  if (!before) GTEST_SKIP() << why_none;
  Buffer a = gpu().empty(Shape{4096, 4096}, DType::BF16), c = gpu().empty(Shape{4096, 4096}, DType::BF16);
  gpu().fill(a, 0.01f);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
    for (int i = 0; i < 20; ++i) gpu().matmul(c, a, a, Tensor(), false, false, false);
    gpu().synchronize();
  }
  const std::optional<double> after = gpu().energy_joules(nullptr);
  ASSERT_TRUE(after.has_value());
  // An idle H100/H200 draws ~70-100 W, a busy one several hundred: 2 s are well above 50 J.
  EXPECT_GT(*after - *before, 50.0) << "joules over 2 s of GEMMs";
  EXPECT_LT(*after - *before, 4000.0) << "joules over 2 s of GEMMs";
  std::printf("[ energy ] %.0f J over 2 s of bf16 GEMMs\n", *after - *before);
}

// --log-device-memory-used: the device's memory in use (every process's) covers what this
// backend holds, and grows by a new 512 MiB block; the CPU has no device memory. Other tests'
// processes (ctest -j8) allocate and free meanwhile: the growth must show in one of five tries.
TEST_F(CudaVsCpu, DeviceMemoryUsedCoversTheAllocator) {
  EXPECT_FALSE(cpu().device_memory_used().has_value());
  std::vector<Buffer> held;
  int64_t largest_growth = 0;
  for (int attempt = 0; attempt < 5 && largest_growth < (int64_t{512} << 20); ++attempt) {
    const std::optional<uint64_t> before = gpu().device_memory_used();
    ASSERT_TRUE(before.has_value());
    held.push_back(gpu().empty(Shape{128 << 20}, DType::F32));  // 512 MiB
    const std::optional<uint64_t> after = gpu().device_memory_used();
    ASSERT_TRUE(after.has_value());
    EXPECT_GE(*after, gpu().allocator().stats().bytes_reserved);
    largest_growth = std::max(largest_growth, static_cast<int64_t>(*after) - static_cast<int64_t>(*before));
  }
  EXPECT_GE(largest_growth, int64_t{512} << 20) << "bytes in use grew by at most this over a 512 MiB allocation";
}

TEST_F(CudaVsCpu, HostRoundTripAndDeviceCopy) {
  TRIDENT_SKIP_WITHOUT_GPU();
  EXPECT_EQ(gpu().device(), Device::Cuda);
  Pair a = random(Shape{kRows, kCols}, DType::F32);
  Pair b{cpu().empty(a.shape(), DType::F32), gpu().empty(a.shape(), DType::F32)};
  cpu().copy(b.cpu, a.cpu);
  gpu().copy(b.gpu, a.gpu);
  expect_identical(b, "copy");
  Pair t = ints(Shape{5}, {0, -1, 7, 50256, 123456});
  expect_identical(t, "int32 upload");
}

TEST_P(Elementwise, Fill) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair a = random(Shape{kRows, kCols}, dt());
  cpu().fill(a.cpu, -0.3f);
  gpu().fill(a.gpu, -0.3f);
  expect_identical(a, "fill");
  for (float zero : {0.0f, -0.0f}) {  // +0 goes through cudaMemsetAsync, -0 through the kernel
    cpu().fill(a.cpu, zero);
    gpu().fill(a.gpu, zero);
    expect_identical(a, std::signbit(zero) ? "fill -0" : "fill +0");
  }
  Pair z{cpu().zeros(Shape{kCols}, dt()), gpu().zeros(Shape{kCols}, dt())};
  expect_identical(z, "zeros");
}

TEST_F(CudaVsCpu, FillInt32) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair a{cpu().zeros(Shape{kRows}, DType::I32), gpu().zeros(Shape{kRows}, DType::I32)};
  expect_identical(a, "zeros int32");
  cpu().fill(a.cpu, 42.f);
  gpu().fill(a.gpu, 42.f);
  expect_identical(a, "fill int32");
}

TEST_P(Elementwise, CastToEveryFloatDtype) {
  TRIDENT_SKIP_WITHOUT_GPU();
  // Values spanning fp16's range edges too: overflow to inf and subnormals must match.
  std::vector<float> v(kRows * kCols);
  std::uniform_real_distribution<float> d(-3.f, 3.f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = d(rng_) * (i % 7 == 0 ? 3e4f : i % 11 == 0 ? 1e-6f : 1.f);
  Pair src = upload(Shape{kRows, kCols}, DType::F32, v);
  Pair mid{cpu().empty(src.shape(), dt()), gpu().empty(src.shape(), dt())};
  cpu().cast(src.cpu, mid.cpu);
  gpu().cast(src.gpu, mid.gpu);
  expect_identical(mid, std::string("cast f32 -> ") + dtype_name(dt()));  // both round to nearest even
  for (DType to : {DType::F32, DType::F16, DType::BF16}) {
    Pair dst{cpu().empty(src.shape(), to), gpu().empty(src.shape(), to)};
    cpu().cast(mid.cpu, dst.cpu);
    gpu().cast(mid.gpu, dst.gpu);
    expect_identical(dst, std::string("cast ") + dtype_name(dt()) + " -> " + dtype_name(to));
  }
}

TEST_P(Elementwise, Scale) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair a = random(Shape{kRows, kCols}, dt());
  cpu().scale(a.cpu, 0.37f);
  gpu().scale(a.gpu, 0.37f);
  expect_identical(a, "scale");  // one fp32 multiply, one rounding: exact on both
}

TEST_P(Elementwise, AddSameAndMixedDtypes) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair a = random(Shape{kRows, kCols}, dt()), b = random(Shape{kRows, kCols}, dt());
  Pair out{cpu().empty(a.shape(), dt()), gpu().empty(a.shape(), dt())};
  cpu().add(a.cpu, b.cpu, out.cpu);
  gpu().add(a.gpu, b.gpu, out.gpu);
  expect_identical(out, "add");
  Pair f = random(Shape{kRows, kCols}, DType::F32);
  Pair out32{cpu().empty(a.shape(), DType::F32), gpu().empty(a.shape(), DType::F32)};
  cpu().add(a.cpu, f.cpu, out32.cpu);
  gpu().add(a.gpu, f.gpu, out32.gpu);
  expect_identical(out32, "add mixed -> f32");
}

TEST_P(Elementwise, AccumulateIntoSameAndF32) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Pair src = random(Shape{kRows, kCols}, dt());
  Pair dst = random(Shape{kRows, kCols}, dt());
  cpu().accumulate(dst.cpu, src.cpu);
  gpu().accumulate(dst.gpu, src.gpu);
  expect_identical(dst, "accumulate same dtype");
  Pair dst32 = random(Shape{kRows, kCols}, DType::F32);  // fp32 gradient buffer += 16-bit grad
  cpu().accumulate(dst32.cpu, src.cpu);
  gpu().accumulate(dst32.gpu, src.gpu);
  expect_identical(dst32, "accumulate into f32");
}

TEST_F(CudaVsCpu, ShapeMismatchThrowsNamingTheOp) {
  TRIDENT_SKIP_WITHOUT_GPU();
  Buffer a = gpu().empty(Shape{4, 5}, DType::F32), b = gpu().empty(Shape{4, 6}, DType::F32);
  try {
    gpu().add(a, b, a);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Elementwise, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
