// Memory and element-wise ops (fill, copy, cast, scale, add, accumulate) per dtype, and the
// host reductions (sum, sum_squares in double; has_inf_or_nan) against double loops.
#include "kernel_test_util.h"

namespace trident::test {
namespace {

class Elementwise : public ::testing::TestWithParam<DType> {};

constexpr int64_t kN = 5003;  // several chunks plus a ragged tail

TEST_P(Elementwise, FillCopyCastScaleAdd) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto a = randn(kN, 1), b = randn(kN, 2);
  const Vec ra = rounded(a, dt), rb = rounded(b, dt);
  Buffer A = upload(*be, a, Shape{kN}, dt), B = upload(*be, b, Shape{kN}, dt), out = be->empty(Shape{kN}, dt);
  const double tol = dtype_tol(dt);

  be->fill(out, 0.3f);
  expect_close(download(*be, out), Vec(kN, rounded({0.3f}, dt)[0]), 0, 0, "fill");
  EXPECT_EQ(download(*be, be->zeros(Shape{7}, dt)), Vec(7, 0.0));

  be->copy(out, A);
  EXPECT_EQ(bytes(*be, out), bytes(*be, A));

  be->add(A, B, out);
  Vec want(kN);
  for (int64_t i = 0; i < kN; ++i) want[i] = ra[i] + rb[i];
  expect_close(download(*be, out), want, tol * 1e-3, tol, "add");

  be->accumulate(out, A);  // out = (a + b) + a
  const Vec sum1 = download(*be, out);
  for (int64_t i = 0; i < kN; ++i) want[i] = sum1[i];
  be->scale(out, -0.5f);
  for (auto& w : want) w *= -0.5;
  expect_close(download(*be, out), want, 0, tol, "scale");

  // cast to and from every float dtype: the value is the source rounded to the target.
  for (DType to : {DType::F32, DType::F16, DType::BF16}) {
    Buffer c = be->empty(Shape{kN}, to);
    be->cast(A, c);
    std::vector<float> af(ra.begin(), ra.end());
    EXPECT_EQ(download(*be, c), rounded(af, to)) << dtype_name(dt) << " -> " << dtype_name(to);
  }
}

TEST_P(Elementwise, Reductions) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t n = 100003;
  const auto a = randn(n, 3);
  const Vec ra = rounded(a, dt);
  Buffer A = upload(*be, a, Shape{n}, dt);
  double s = 0, ss = 0;
  for (double x : ra) {
    s += x;
    ss += x * x;
  }
  EXPECT_NEAR(be->sum(A), s, 1e-9 * n);
  EXPECT_NEAR(be->sum_squares(A), ss, 1e-12 * ss + 1e-9);
  EXPECT_FALSE(be->has_inf_or_nan(A));
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    auto c = a;
    c[n - 2] = bad;
    EXPECT_TRUE(be->has_inf_or_nan(upload(*be, c, Shape{n}, dt))) << bad;
  }
  // A large value is not an overflow in f32, but 1e5 overflows fp16.
  auto big = a;
  big[17] = 1e5f;
  EXPECT_EQ(be->has_inf_or_nan(upload(*be, big, Shape{n}, dt)), dt == DType::F16);
}

TEST(ElementwiseShapes, MismatchThrows) {
  auto be = make_cpu_backend();
  Buffer a = be->zeros(Shape{4}, DType::F32), b = be->zeros(Shape{5}, DType::F32);
  EXPECT_THROW(be->add(a, b, a), InternalError);
  EXPECT_THROW(be->copy(a, b), InternalError);
  Buffer h = be->zeros(Shape{4}, DType::F16);
  EXPECT_THROW(be->copy(a, h), InternalError);  // copy needs one dtype; cast converts
}

TEST(ElementwiseIo, HostRoundTrip) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->device(), Device::Cpu);
  std::vector<int32_t> v = {1, -2, 50256};
  Buffer t = upload_i32(*be, v, Shape{3});
  std::vector<int32_t> back(3);
  be->copy_to_host(back.data(), t);
  EXPECT_EQ(back, v);
  be->synchronize();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Elementwise, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
