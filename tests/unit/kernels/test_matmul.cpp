// matmul: every transpose combination, with and without bias, "=" and "+=", per dtype,
// against a double reference; and a linear layer's backward (dX, dW, db built from
// matmul and bias_backward) against finite differences.
#include "kernel_test_util.h"
#include "kernels/cpu/cpu_ops.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

class Matmul : public ::testing::TestWithParam<DType> {};

TEST_P(Matmul, AllTransposesBiasAccumulate) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t M = 13, N = 11, K = 7;
  const auto a = randn(M * K, 1), b = randn(K * N, 2), bias = randn(N, 3), init = randn(M * N, 4);
  const Vec ra = rounded(a, dt), rb = rounded(b, dt), rbias = rounded(bias, dt), rinit = rounded(init, dt);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int use_bias = 0; use_bias < 2; ++use_bias)
        for (int acc = 0; acc < 2; ++acc) {
          // The same numbers stored transposed when ta/tb, so every case has one answer.
          std::vector<float> as(a.size()), bs(b.size());
          for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k) as[ta ? k * M + m : m * K + k] = a[m * K + k];
          for (int64_t k = 0; k < K; ++k)
            for (int64_t n = 0; n < N; ++n) bs[tb ? n * K + k : k * N + n] = b[k * N + n];
          Buffer A = upload(*be, as, ta ? Shape{K, M} : Shape{M, K}, dt);
          Buffer B = upload(*be, bs, tb ? Shape{N, K} : Shape{K, N}, dt);
          Buffer bb = upload(*be, bias, Shape{N}, dt);
          Buffer out = upload(*be, init, Shape{M, N}, dt);
          be->matmul(out, A, B, use_bias ? bb.t() : Tensor(), ta, tb, acc);
          Vec want = ref::matmul(ra, rb, use_bias ? &rbias : nullptr, M, N, K, false, false);
          if (acc)
            for (size_t i = 0; i < want.size(); ++i) want[i] += rinit[i];
          const double tol = dtype_tol(dt);
          expect_close(download(*be, out), want, 4 * tol, tol,
                       std::string(dtype_name(dt)) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                           " bias=" + std::to_string(use_bias) + " acc=" + std::to_string(acc));
        }
}

// Linear layer y = x W^T + b with L = sum(y * R): dX = R W, dW = R^T x, db = colsum(R).
// The backend's results are compared with central differences of the double forward.
TEST_P(Matmul, LinearBackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t M = 6, In = 5, Out = 4;
  const auto x = randn(M * In, 5), w = randn(Out * In, 6), bias = randn(Out, 7), r = randn(M * Out, 8);
  const Vec rx = rounded(x, dt), rw = rounded(w, dt), rbias = rounded(bias, dt), rr = rounded(r, dt);
  auto loss_x = [&](const Vec& xv) { return dot(ref::matmul(xv, rw, &rbias, M, Out, In, false, true), rr); };
  auto loss_w = [&](const Vec& wv) { return dot(ref::matmul(rx, wv, &rbias, M, Out, In, false, true), rr); };
  auto loss_b = [&](const Vec& bv) { return dot(ref::matmul(rx, rw, &bv, M, Out, In, false, true), rr); };

  Buffer X = upload(*be, x, Shape{M, In}, dt), W = upload(*be, w, Shape{Out, In}, dt);
  Buffer R = upload(*be, r, Shape{M, Out}, dt);
  const auto g0 = randn(Out * In, 9), b0 = randn(Out, 10);  // "+=" targets start non-zero
  Buffer dX = be->empty(Shape{M, In}, dt);
  Buffer dW = upload(*be, g0, Shape{Out, In}, dt), dB = upload(*be, b0, Shape{Out}, dt);
  be->matmul(dX, R, W, Tensor(), false, false, false);
  be->matmul(dW, R, X, Tensor(), true, false, true);
  be->bias_backward(R, dB);

  Vec want_w = fd_grad(loss_w, rw), want_b = fd_grad(loss_b, rbias);
  const Vec rg0 = rounded(g0, dt), rb0 = rounded(b0, dt);
  for (size_t i = 0; i < want_w.size(); ++i) want_w[i] += rg0[i];
  for (size_t i = 0; i < want_b.size(); ++i) want_b[i] += rb0[i];
  const double tol = std::max(dtype_tol(dt), 1e-4);  // FD truncation ~1e-7 on O(1) values
  expect_close(download(*be, dX), fd_grad(loss_x, rx), 4 * tol, tol, "dX");
  expect_close(download(*be, dW), want_w, 4 * tol, tol, "dW");
  expect_close(download(*be, dB), want_b, 4 * tol, tol, "db");
}

#ifdef TRIDENT_OPENBLAS_IS_OPENMP
// CMake found OpenBLAS's OpenMP build; the executables must load it, not the default
// pthreads alternative by the same soname (their run path names its directory).
TEST(MatmulBlas, RunsOnOpenMpThreads) { EXPECT_STREQ(trident::cpu::blas_threading(), "openmp"); }
#endif

TEST(MatmulShapes, MismatchThrows) {
  auto be = make_cpu_backend();
  Buffer a = be->zeros(Shape{3, 4}, DType::F32), b = be->zeros(Shape{5, 2}, DType::F32);
  Buffer out = be->zeros(Shape{3, 2}, DType::F32);
  EXPECT_THROW(be->matmul(out, a, b, Tensor(), false, false, false), InternalError);
}

// A 3-D activation [B, T, C] is a [B*T, C] matrix.
TEST(MatmulShapes, ThreeDimensionalActivations) {
  auto be = make_cpu_backend();
  const auto x = randn(2 * 3 * 4, 11), w = randn(5 * 4, 12);
  Buffer X = upload(*be, x, Shape{2, 3, 4}, DType::F32), W = upload(*be, w, Shape{5, 4}, DType::F32);
  Buffer Y = be->empty(Shape{2, 3, 5}, DType::F32);
  be->matmul(Y, X, W, Tensor(), false, true, false);
  expect_close(download(*be, Y), ref::matmul(to_vec(x), to_vec(w), nullptr, 6, 5, 4, false, true), 1e-5, 1e-5, "3d");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Matmul, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
