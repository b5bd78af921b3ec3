// GPU vs CPU: AdamW (gradient dtypes, model-dtype copy, weight decay, bias correction,
// one piece and multi-tensor), sum / sum_squares (double accumulation, deterministic; also
// over a list of tensors) and has_inf_or_nan.
#include <limits>

#include "cuda_test_util.h"

namespace trident::cuda_test {
namespace {

class AdamW : public CudaVsCpuDtype {};
class Reduce : public CudaVsCpuDtype {};

TEST_P(AdamW, ThreeStepsWithDecayAndModelCopy) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t n = 37 * 129;
  Pair master = random(Shape{n}, DType::F32), m = filled(Shape{n}, DType::F32, 0.f),
       v = filled(Shape{n}, DType::F32, 0.f);
  Pair model = random(Shape{n}, dt());
  for (int64_t step = 1; step <= 3; ++step) {
    Pair grad = random(Shape{n}, dt(), -2.f, 2.f);
    AdamWArgs c, g;
    c.master = master.cpu; c.grad = grad.cpu; c.m = m.cpu; c.v = v.cpu; c.model_param = model.cpu;
    g.master = master.gpu; g.grad = grad.gpu; g.m = m.gpu; g.v = v.gpu; g.model_param = model.gpu;
    for (AdamWArgs* a : {&c, &g}) {
      a->lr = 3e-4f;
      a->weight_decay = 0.1f;
      a->grad_scale = 0.25f;
      a->step = step;
    }
    cpu().adamw(c);
    gpu().adamw(g);
  }
  // Same fp32 formula; the GPU may fuse multiply-adds, so allow a few ulps.
  expect_close(master, Tol{1e-6, 1e-7}, "master");
  expect_close(m, Tol{1e-5, 1e-7}, "m");
  expect_close(v, Tol{1e-5, 1e-9}, "v");
  expect_close(model, storage_tol(dt(), 1e-6, 1e-7), "model_param");
}

TEST_P(AdamW, WithoutModelCopy) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t n = 1001;
  Pair master = random(Shape{n}, DType::F32), m = random(Shape{n}, DType::F32, -0.1f, 0.1f),
       v = random(Shape{n}, DType::F32, 0.f, 0.01f), grad = random(Shape{n}, dt());
  AdamWArgs c{master.cpu, grad.cpu, m.cpu, v.cpu, Tensor()}, g{master.gpu, grad.gpu, m.gpu, v.gpu, Tensor()};
  c.lr = g.lr = 1e-3f;
  c.step = g.step = 10;
  cpu().adamw(c);
  gpu().adamw(g);
  expect_close(master, Tol{1e-6, 1e-7}, "master");
}

// adamw_multi: pieces of awkward sizes (an empty one, one larger than a launch's 2048
// chunks of 16384, more pieces than a launch's 16) with per-piece weight decay, against
// the CPU's piece-by-piece adamw.
TEST_P(AdamW, MultiTensorAcrossLaunches) {
  TRIDENT_SKIP_WITHOUT_GPU();
  std::vector<int64_t> sizes = {1, 0, 17, 16384, 16385, 2049 * 16384 + 5};
  for (int i = 0; i < 20; ++i) sizes.push_back(100 + 37 * i);
  std::vector<Pair> master, m, v, grad, model;
  std::vector<AdamWArgs> c, g;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    master.push_back(random(Shape{n}, DType::F32));
    m.push_back(random(Shape{n}, DType::F32, -0.1f, 0.1f));
    v.push_back(random(Shape{n}, DType::F32, 0.f, 0.01f));
    grad.push_back(random(Shape{n}, dt(), -2.f, 2.f));
    model.push_back(random(Shape{n}, dt()));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool copy = dt() != DType::F32 && i % 3 != 2;  // some pieces without a model copy
    AdamWArgs a{master[i].cpu, grad[i].cpu, m[i].cpu, v[i].cpu, copy ? model[i].cpu.t() : Tensor()};
    AdamWArgs b{master[i].gpu, grad[i].gpu, m[i].gpu, v[i].gpu, copy ? model[i].gpu.t() : Tensor()};
    for (AdamWArgs* x : {&a, &b}) {
      x->lr = 1e-3f;
      x->weight_decay = i % 2 == 0 ? 0.1f : 0.0f;
      x->grad_scale = 0.5f;
      x->step = 7;
    }
    c.push_back(a);
    g.push_back(b);
  }
  cpu().adamw_multi(c);
  gpu().adamw_multi(g);
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "piece " << i << " of " << sizes[i] << " elements");
    expect_close(master[i], Tol{1e-6, 1e-7}, "master");
    expect_close(m[i], Tol{1e-5, 1e-7}, "m");
    expect_close(v[i], Tol{1e-5, 1e-9}, "v");
    expect_close(model[i], storage_tol(dt(), 1e-6, 1e-7), "model_param");
  }
  // Pieces of one call must share the step: a mismatch is an error, not a silent mix.
  g[3].step = 8;
  EXPECT_THROW(gpu().adamw_multi(g), InternalError);
  // A gradient that is not a float tensor, late in the list: refused before any launch,
  // so the pieces before it keep their values (before, the launches of the earlier dtype
  // group had updated them when the bad one threw).
  g[3].step = g[0].step;
  const std::vector<float> before = host_gpu(master[0]);
  Buffer ints = gpu().empty(g.back().grad.shape, DType::I32);
  g.back().grad = ints.t();
  EXPECT_ANY_THROW(gpu().adamw_multi(g));
  gpu().synchronize();
  EXPECT_EQ(host_gpu(master[0]), before) << "the first piece was updated before the bad one was seen";
}

// sum_squares_multi: more tensors than one launch takes (96), mixed sizes, one of more
// chunks than a launch has blocks (1024 of 16384 elements), pieces that are consecutive
// slices of one buffer (so most start off the 16-byte alignment: the scalar path) and
// aligned ones, against the CPU, and bit-identical when repeated.
// The pieces of the multi-tensor reductions' tests, and their total.
std::vector<int64_t> multi_piece_sizes(int64_t* total) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 110; ++i) sizes.push_back(i == 5 ? 0 : i == 9 ? (int64_t{1} << 24) + 3 : 1 + 97 * i);
  *total = 0;
  for (int64_t n : sizes) *total += n;
  return sizes;
}

// The pieces of those sizes, consecutive slices of `all` (most start off the 16-byte
// alignment), on each backend.
void slice_pieces(const Pair& all, const std::vector<int64_t>& sizes, std::vector<Tensor>& c, std::vector<Tensor>& g) {
  int64_t off = 0;
  for (int64_t n : sizes) {
    c.push_back(all.cpu.t().flat_slice(off, n));
    g.push_back(all.gpu.t().flat_slice(off, n));
    off += n;
  }
}

TEST_P(Reduce, SumSquaresMulti) {
  TRIDENT_SKIP_WITHOUT_GPU();
  int64_t total = 0;
  const std::vector<int64_t> sizes = multi_piece_sizes(&total);
  Pair all = random(Shape{total}, dt(), -1.f, 1.5f);
  std::vector<Pair> aligned;  // separate allocations: 16-byte aligned starts (the vector path)
  aligned.reserve(sizes.size());
  std::vector<Tensor> c, g;
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i % 3 == 0) {
      aligned.push_back(random(Shape{sizes[i]}, dt(), -1.f, 1.5f));
      c.push_back(aligned.back().cpu);
      g.push_back(aligned.back().gpu);
    } else {
      c.push_back(all.cpu.t().flat_slice(off, sizes[i]));
      g.push_back(all.gpu.t().flat_slice(off, sizes[i]));
    }
    off += sizes[i];
  }
  const double want = cpu().sum_squares_multi(c);
  const double got = gpu().sum_squares_multi(g);
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(got, gpu().sum_squares_multi(g)) << "not deterministic";
  EXPECT_EQ(gpu().sum_squares_multi({}), 0.0);
}

// count_zeros_multi: the same layout of pieces with zeros (and -0) planted every few
// elements, against the CPU's count.
TEST_P(Reduce, CountZerosMulti) {
  TRIDENT_SKIP_WITHOUT_GPU();
  int64_t total = 0;
  const std::vector<int64_t> sizes = multi_piece_sizes(&total);
  std::vector<float> v(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) v[i] = i % 5 == 0 ? 0.f : i % 5 == 1 ? -0.f : 0.25f + static_cast<float>(i % 3);
  Pair all = upload(Shape{total}, dt(), v);
  std::vector<Tensor> c, g;
  slice_pieces(all, sizes, c, g);
  const int64_t want = cpu().count_zeros_multi(c);
  EXPECT_EQ(want, (total + 4) / 5 + (total + 3) / 5);
  EXPECT_EQ(gpu().count_zeros_multi(g), want);
  EXPECT_EQ(gpu().count_zeros_multi({}), 0);
}

// magnitude_stats_multi: sum_squares_multi's layout of pieces, the largest magnitude
// planted (negative), against the CPU (double square roots there, float's here: 1e-7), and
// bit-identical when repeated.
TEST_P(Reduce, MagnitudeStatsMulti) {
  TRIDENT_SKIP_WITHOUT_GPU();
  int64_t total = 0;
  const std::vector<int64_t> sizes = multi_piece_sizes(&total);
  std::vector<float> v(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) v[i] = static_cast<float>((i * 7919) % 2001 - 1000) / 400.f;
  v[static_cast<size_t>(total / 3)] = -11.f;
  Pair all = upload(Shape{total}, dt(), v);
  std::vector<Tensor> c, g;
  slice_pieces(all, sizes, c, g);
  const MagnitudeStats want = cpu().magnitude_stats_multi(c);
  const MagnitudeStats got = gpu().magnitude_stats_multi(g);
  EXPECT_NEAR(got.sum_squares, want.sum_squares, 1e-12 * want.sum_squares);
  EXPECT_NEAR(got.sum_abs, want.sum_abs, 1e-12 * want.sum_abs);
  EXPECT_NEAR(got.sum_sqrt_abs, want.sum_sqrt_abs, 1e-7 * want.sum_sqrt_abs);
  EXPECT_EQ(got.max_abs, 11.0);
  EXPECT_EQ(got.sum_sqrt_abs, gpu().magnitude_stats_multi(g).sum_sqrt_abs) << "not deterministic";
  EXPECT_EQ(gpu().magnitude_stats_multi({}).max_abs, 0.0);
}

TEST_P(Reduce, SumAndSumSquares) {
  TRIDENT_SKIP_WITHOUT_GPU();
  for (int64_t n : {int64_t{1}, int64_t{37 * 129}, int64_t{1} << 20}) {
    Pair t = random(Shape{n}, dt(), -1.f, 1.5f);
    // Both accumulate the fp32 values in double; only the order differs.
    EXPECT_NEAR(gpu().sum(t.gpu), cpu().sum(t.cpu), 1e-9 * n) << "n=" << n;
    const double sq = cpu().sum_squares(t.cpu);
    EXPECT_NEAR(gpu().sum_squares(t.gpu), sq, 1e-12 * sq + 1e-12) << "n=" << n;
    EXPECT_EQ(gpu().sum(t.gpu), gpu().sum(t.gpu)) << "sum is not deterministic";
  }
}

TEST_P(Reduce, HasInfOrNan) {
  TRIDENT_SKIP_WITHOUT_GPU();
  const int64_t n = 37 * 129;
  Pair t = random(Shape{n}, dt());
  EXPECT_FALSE(gpu().has_inf_or_nan(t.gpu));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> v = host_gpu(t);
    v[n - 2] = bad;
    Pair u = upload(Shape{n}, dt(), v);
    EXPECT_EQ(gpu().has_inf_or_nan(u.gpu), cpu().has_inf_or_nan(u.cpu));
    EXPECT_TRUE(gpu().has_inf_or_nan(u.gpu)) << bad;
    // A view that starts one element in (the scalar path) and one that ends before the bad value.
    EXPECT_TRUE(gpu().has_inf_or_nan(u.gpu.t().flat_slice(1, n - 1))) << bad << " (misaligned view)";
    EXPECT_FALSE(gpu().has_inf_or_nan(u.gpu.t().flat_slice(0, n - 2))) << bad << " (view before it)";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamW, TRIDENT_FLOAT_DTYPES, dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, Reduce, TRIDENT_FLOAT_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::cuda_test
