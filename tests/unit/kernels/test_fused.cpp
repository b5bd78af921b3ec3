// The fused ops of the Backend seam on the CPU reference (their meaning, which the CUDA
// twins are tested against): residual add + LayerNorm (also after the branch's dropout),
// the bias gradient behind the hidden dropout, GEMM + bias + GELU and its backward, a linear
// layer's weight and bias gradients, multi-tensor AdamW and sum of squares. Each against a
// double reference.
#include "core/philox.h"
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

class Fused : public ::testing::TestWithParam<DType> {};

// The hidden dropout of v ([N, C], already rounded to its dtype) by philox.h's mask, the one
// every dropout draws: element (n, c) is index (n % T) C + c of sample sample_base + n / T;
// kept values scaled by 1 / (1 - p) (in float, before the caller rounds), the others 0.
// *kept counts the kept elements.
std::vector<float> hidden_dropout(const DropoutKey& drop, const Vec& v, int64_t N, int64_t C, int T, int* kept) {
  std::vector<float> out(N * C);
  *kept = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const bool keep = dropout_keep(drop, drop.sample_base + n / T, static_cast<uint64_t>((n % T) * C + c));
      *kept += keep;
      out[n * C + c] = keep ? static_cast<float>(v[n * C + c]) * (1.0f / (1.0f - drop.p)) : 0.0f;
    }
  return out;
}

// A residual LayerNorm's four outputs against the reference: the residual exactly (one
// rounded add), the rest within dt's tolerance.
void expect_residual_layernorm(Backend& be, DType dt, const Tensor& resid, const Tensor& out, const Tensor& mean,
                               const Tensor& rstd, const Vec& want_resid, const Vec& want, const Vec& wm,
                               const Vec& wr) {
  expect_close(download(be, resid), want_resid, 0, 0, "resid");
  const double tol = dtype_tol(dt);
  expect_close(download(be, out), want, 4 * tol, tol, "out");
  expect_close(download(be, mean), wm, 1e-6, 1e-6, "mean");
  expect_close(download(be, rstd), wr, 1e-6, 1e-5, "rstd");
}

TEST_P(Fused, ResidualLayerNormRoundsTheResidualThenNormalisesIt) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t N = 6, C = 41;
  const auto x = randn(N * C, 1, 2.0f), br = randn(N * C, 2), g = randn(C, 3), b = randn(C, 4);
  // The residual the op stores: x + branch of the stored inputs, rounded once to dt.
  Vec sum(N * C);
  const Vec rx = rounded(x, dt), rbr = rounded(br, dt);
  for (int64_t i = 0; i < N * C; ++i) sum[i] = rx[i] + rbr[i];
  const Vec want_resid = rounded(std::vector<float>(sum.begin(), sum.end()), dt);
  Vec wm, wr;
  const Vec want = ref::layernorm(want_resid, rounded(g, dt), rounded(b, dt), N, C, &wm, &wr);
  for (bool alias : {false, true}) {
    SCOPED_TRACE(alias ? "resid aliases x" : "separate resid");
    Buffer X = upload(*be, x, Shape{N, C}, dt), Br = upload(*be, br, Shape{N, C}, dt);
    Buffer G = upload(*be, g, Shape{C}, dt), Bt = upload(*be, b, Shape{C}, dt);
    Buffer own = be->empty(Shape{N, C}, dt);
    const Tensor resid = alias ? X.t() : own.t();
    Buffer out = be->empty(Shape{N, C}, dt), mean = be->empty(Shape{N}, DType::F32),
           rstd = be->empty(Shape{N}, DType::F32);
    be->residual_layernorm_forward(X, Br, resid, G, Bt, out, mean, rstd);
    expect_residual_layernorm(*be, dt, resid, out, mean, rstd, want_resid, want, wm, wr);
  }
}

// The branch's dropout (hidden_dropout) in front of the residual add, rounded to dt before
// the add.
TEST_P(Fused, DropoutResidualLayerNormDropsTheBranchFirst) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t N = 6, C = 41;
  const int T = 3;
  DropoutKey drop;
  drop.p = 0.25f;
  drop.seed = 99;
  drop.site = 2 * kSitesPerLayer + kDropAttnOut;
  drop.sample_base = 10;
  const auto x = randn(N * C, 5, 2.0f), br = randn(N * C, 6), g = randn(C, 7), b = randn(C, 8);
  const Vec rx = rounded(x, dt);
  int kept = 0;
  const std::vector<float> dropped = hidden_dropout(drop, rounded(br, dt), N, C, T, &kept);
  EXPECT_GT(kept, N * C / 2);
  EXPECT_LT(kept, N * C);
  const Vec rd = rounded(dropped, dt);
  std::vector<float> sum(N * C);
  for (int64_t i = 0; i < N * C; ++i) sum[i] = static_cast<float>(rx[i] + rd[i]);
  const Vec want_resid = rounded(sum, dt);
  Vec wm, wr;
  const Vec want = ref::layernorm(want_resid, rounded(g, dt), rounded(b, dt), N, C, &wm, &wr);
  Buffer X = upload(*be, x, Shape{N, C}, dt), Br = upload(*be, br, Shape{N, C}, dt);
  Buffer G = upload(*be, g, Shape{C}, dt), Bt = upload(*be, b, Shape{C}, dt);
  Buffer resid = be->empty(Shape{N, C}, dt), out = be->empty(Shape{N, C}, dt),
         mean = be->empty(Shape{N}, DType::F32), rstd = be->empty(Shape{N}, DType::F32);
  be->dropout_residual_layernorm_forward(X, Br, T, drop, resid, G, Bt, out, mean, rstd);
  expect_residual_layernorm(*be, dt, resid, out, mean, rstd, want_resid, want, wm, wr);
}

// The projection's gradient through the hidden dropout and its bias gradient: dx =
// hidden_dropout(dout) rounded to dt, dbias += the column sums of dx.
TEST_P(Fused, DropoutBiasBackwardMasksThenSumsColumns) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t N = 8, C = 13;
  const int T = 4;
  DropoutKey drop;
  drop.p = 0.3f;
  drop.seed = 5;
  drop.site = kSitesPerLayer + kDropMlpOut;
  drop.sample_base = 2;
  const auto dout = randn(N * C, 9), db0 = randn(C, 10);
  int kept = 0;
  const Vec want_dx = rounded(hidden_dropout(drop, rounded(dout, dt), N, C, T, &kept), dt);
  Vec want_db(C);
  for (int64_t c = 0; c < C; ++c) {
    want_db[c] = db0[c];
    for (int64_t n = 0; n < N; ++n) want_db[c] += want_dx[n * C + c];
  }
  Buffer D = upload(*be, dout, Shape{N, C}, dt), DX = be->empty(Shape{N, C}, dt);
  Buffer DB = upload(*be, db0, Shape{C}, DType::F32);
  be->dropout_bias_backward(D, T, drop, DX, DB);
  expect_close(download(*be, DX), want_dx, 0, 0, "dx");
  expect_close(download(*be, DB), want_db, 1e-5, 1e-5, "dbias");
}

// Both GELU forms: against the double reference, and against the unfused ops (matmul then
// gelu_forward / gelu_backward of the same form), which the composition must equal exactly.
TEST_P(Fused, MatmulBiasGeluAndItsBackward) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t M = 7, N = 24, K = 13;
  const auto x = randn(M * K, 5), w = randn(N * K, 6, 0.5f), bias = randn(N, 7), dy = randn(M * K, 8),
             w2 = randn(K * N, 9, 0.5f);
  Buffer X = upload(*be, x, Shape{M, K}, dt), W = upload(*be, w, Shape{N, K}, dt), Bs = upload(*be, bias, Shape{N}, dt);
  Buffer DY = upload(*be, dy, Shape{M, K}, dt), W2 = upload(*be, w2, Shape{K, N}, dt);
  const Vec rb = rounded(bias, dt);
  const Vec want_pre = ref::matmul(rounded(x, dt), rounded(w, dt), &rb, M, N, K, false, true);
  const Vec dg = ref::matmul(rounded(dy, dt), rounded(w2, dt), nullptr, M, N, K, false, false);
  const double tol = dtype_tol(dt);
  for (const Gelu form : {Gelu::Tanh, Gelu::Erf}) {
    SCOPED_TRACE(gelu_name(form));
    Buffer pre = be->empty(Shape{M, N}, dt), out = be->empty(Shape{M, N}, dt);
    be->matmul_bias_gelu(pre, out, X, W, Bs, false, true, form);
    expect_close(download(*be, pre), want_pre, 4 * tol, tol, "pre");
    const Vec got_pre = download(*be, pre);  // gelu reads the stored pre
    Vec want_out(M * N);
    for (int64_t i = 0; i < M * N; ++i) want_out[i] = ref::gelu(got_pre[i], form);
    expect_close(download(*be, out), want_out, 4 * tol, tol, "gelu out");
    Buffer pre2 = be->empty(Shape{M, N}, dt), out2 = be->empty(Shape{M, N}, dt);
    be->matmul(pre2, X, W, Bs, false, true, false);
    be->gelu_forward(pre2, out2, form);
    EXPECT_EQ(bytes(*be, out2), bytes(*be, out)) << "fused vs unfused forward";

    // dpre = (dy W2) * gelu'(pre), W2 the down-projection [K, N] (here: [out, in] = [K, N]).
    Buffer dpre = be->empty(Shape{M, N}, dt);
    be->matmul_gelu_backward(dpre, DY, W2, pre, false, false, form);
    Vec want_dpre(M * N);
    for (int64_t i = 0; i < M * N; ++i) want_dpre[i] = dg[i] * ref::gelu_grad(got_pre[i], form);
    expect_close(download(*be, dpre), want_dpre, 8 * tol, 2 * tol, "dpre");
    Buffer prod = be->empty(Shape{M, N}, dt), dpre2 = be->empty(Shape{M, N}, dt);
    be->matmul(prod, DY, W2, Tensor(), false, false, false);
    be->gelu_backward(prod, pre, dpre2, form);
    EXPECT_EQ(bytes(*be, dpre2), bytes(*be, dpre)) << "fused vs unfused backward";
  }
}

// A linear layer's parameter gradients: dw += dout^T x and dbias += the column sums of
// dout, both accumulating onto what the gradients held; an empty dbias leaves only dw.
TEST_P(Fused, LinearParamGradsAccumulateWeightAndBiasGradients) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const int64_t M = 11, out = 9, in = 14;  // M rows of activations
  const auto dout = randn(M * out, 21), x = randn(M * in, 22), dw0 = randn(out * in, 23), db0 = randn(out, 24);
  const Vec rdout = rounded(dout, dt), rx = rounded(x, dt);
  const Vec prod = ref::matmul(rdout, rx, nullptr, out, in, M, true, false);
  const Vec rdw0 = rounded(dw0, dt), rdb0 = rounded(db0, dt);
  Vec want_dw(out * in), want_db(out);
  for (int64_t i = 0; i < out * in; ++i) want_dw[i] = rdw0[i] + prod[i];
  for (int64_t o = 0; o < out; ++o) {
    want_db[o] = rdb0[o];
    for (int64_t m = 0; m < M; ++m) want_db[o] += rdout[m * out + o];
  }
  Buffer D = upload(*be, dout, Shape{M, out}, dt), X = upload(*be, x, Shape{M, in}, dt);
  Buffer DW = upload(*be, dw0, Shape{out, in}, dt), DB = upload(*be, db0, Shape{out}, dt);
  be->linear_param_grads(D, X, DW, DB);
  const double tol = dtype_tol(dt);
  expect_close(download(*be, DW), want_dw, 4 * tol, tol, "dw");
  expect_close(download(*be, DB), want_db, 4 * tol, tol, "dbias");

  Buffer DW2 = upload(*be, dw0, Shape{out, in}, dt);
  be->linear_param_grads(D, X, DW2, Tensor());
  expect_close(download(*be, DW2), want_dw, 4 * tol, tol, "dw without a bias");
}

// adamw_multi is adamw on each piece: bit-identical results, per-piece weight decay.
TEST_P(Fused, AdamWMultiEqualsPieceByPiece) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const std::vector<int64_t> sizes = {5, 0, 130, 1};
  std::vector<Buffer> keep;
  std::vector<AdamWArgs> multi, single;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const auto p = randn(n, 20 + i), gr = randn(n, 40 + i);
    for (auto* list : {&multi, &single}) {
      AdamWArgs a;
      keep.push_back(upload(*be, p, Shape{n}, DType::F32));
      a.master = keep.back();
      keep.push_back(upload(*be, gr, Shape{n}, dt));
      a.grad = keep.back();
      keep.push_back(be->zeros(Shape{n}, DType::F32));
      a.m = keep.back();
      keep.push_back(be->zeros(Shape{n}, DType::F32));
      a.v = keep.back();
      keep.push_back(be->zeros(Shape{n}, dt));
      a.model_param = keep.back();
      a.lr = 1e-2f;
      a.weight_decay = i % 2 ? 0.1f : 0.0f;
      a.grad_scale = 0.5f;
      a.step = 3;
      list->push_back(a);
    }
  }
  be->adamw_multi(multi);
  for (const AdamWArgs& a : single) be->adamw(a);
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(bytes(*be, multi[i].master), bytes(*be, single[i].master)) << "piece " << i;
    EXPECT_EQ(bytes(*be, multi[i].v), bytes(*be, single[i].v)) << "piece " << i;
    EXPECT_EQ(bytes(*be, multi[i].model_param), bytes(*be, single[i].model_param)) << "piece " << i;
  }
  EXPECT_NE(bytes(*be, multi[0].master), bytes(*be, upload(*be, randn(5, 20), Shape{5}, DType::F32)))
      << "the update changed nothing";
  multi[2].lr = 2e-2f;
  EXPECT_THROW(be->adamw_multi(multi), InternalError);
}

TEST_P(Fused, SumSquaresMultiAddsEveryTensor) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  std::vector<Buffer> keep;
  std::vector<Tensor> list;
  double want = 0;
  for (int64_t n : {int64_t{3}, int64_t{0}, int64_t{1000}, int64_t{17}}) {
    const auto v = randn(n, 60 + n);
    for (double r : rounded(v, dt)) want += r * r;
    keep.push_back(upload(*be, v, Shape{n}, dt));
    list.push_back(keep.back());
  }
  EXPECT_NEAR(be->sum_squares_multi(list), want, 1e-12 * want);
  EXPECT_EQ(be->sum_squares_multi({}), 0.0);
}

// Zeros of every tensor counted, -0 among them; NaN, inf and small values (1e-3, nonzero in
// every dtype) not.
TEST_P(Fused, CountZerosMultiCountsEveryTensor) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  std::vector<Buffer> keep;
  std::vector<Tensor> list;
  int64_t want = 0;
  for (int64_t n : {int64_t{3}, int64_t{0}, int64_t{10000}, int64_t{17}}) {
    std::vector<float> v = randn(n, 70 + n);
    for (int64_t i = 0; i < n; ++i) {
      if (i % 7 == 1) v[i] = 0.0f;
      if (i % 7 == 2) v[i] = -0.0f;
      if (i % 7 == 3) v[i] = std::nanf("");
      if (i % 7 == 4) v[i] = i % 2 ? INFINITY : 1e-3f;
    }
    for (float r : rounded(v, dt)) want += r == 0.0f;
    keep.push_back(upload(*be, v, Shape{n}, dt));
    list.push_back(keep.back());
  }
  EXPECT_EQ(want, 2 + 2858 + 6);  // what was planted (i % 7 in {1, 2}): the naive count checks itself
  EXPECT_EQ(be->count_zeros_multi(list), want);
  EXPECT_EQ(be->count_zeros_multi({}), 0);
}

// Every tensor's elements in the four statistics, against a naive double loop over the
// stored values; a NaN makes sum_abs and max_abs NaN wherever it lies.
TEST_P(Fused, MagnitudeStatsMultiCoversEveryTensor) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  std::vector<Buffer> keep;
  std::vector<Tensor> list;
  MagnitudeStats want;
  for (int64_t n : {int64_t{3}, int64_t{0}, int64_t{10000}, int64_t{17}}) {
    std::vector<float> v = randn(n, 80 + n);
    if (n == 17) v[5] = -9.0f;  // the largest magnitude, negative
    for (double r : rounded(v, dt)) {
      want.sum_squares += r * r;
      want.sum_abs += std::fabs(r);
      want.sum_sqrt_abs += std::sqrt(std::fabs(r));
      want.max_abs = std::max(want.max_abs, std::fabs(r));
    }
    keep.push_back(upload(*be, v, Shape{n}, dt));
    list.push_back(keep.back());
  }
  const MagnitudeStats got = be->magnitude_stats_multi(list);
  EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares);
  EXPECT_NEAR(got.sum_abs, want.sum_abs, 1e-12 * want.sum_abs);
  EXPECT_NEAR(got.sum_sqrt_abs, want.sum_sqrt_abs, 1e-12 * want.sum_sqrt_abs);
  EXPECT_EQ(got.max_abs, 9.0);
  const MagnitudeStats none = be->magnitude_stats_multi({});
  EXPECT_EQ(none.sum_squares + none.sum_abs + none.sum_sqrt_abs + none.max_abs, 0.0);

  std::vector<float> with_nan(5000, 0.5f);
  with_nan[4500] = std::nanf("");  // in the second block of 4096, after larger values
  with_nan[10] = 3.0f;
  keep.push_back(upload(*be, with_nan, Shape{5000}, dt));
  const MagnitudeStats nan_stats = be->magnitude_stats_multi({list[3], keep.back().t(), list[0]});
  EXPECT_TRUE(std::isnan(nan_stats.sum_abs));
  EXPECT_TRUE(std::isnan(nan_stats.max_abs)) << "a NaN must not lose to a larger magnitude";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Fused, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
