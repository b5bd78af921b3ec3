// kernels/cuda/cuda_reduce.cu on the CPU emulator vs the CPU backend: bias_backward (+=,
// column sums in two deterministic passes), sum and sum_squares (double accumulation),
// the multi-tensor sum of squares (several launches, dtype changes, empty pieces), its
// magnitude statistics and has_inf_or_nan; the deterministic ones are also run twice under different thread
// schedules and must give the same bits.
//
// What it cannot check: float atomics or scheduling effects of real hardware (the
// emulator's random warp/lane order stands in for them), device math precision.
#include <functional>
#include <limits>

#include "emu_test_util.h"
#include "launch_reduce.h"

namespace trident::emu_test {
namespace {

namespace kr = ::trident::cuda::emu_reduce;

class EmulatedReduce : public EmuVsCpuDtype {
 protected:
  // The multi-tensor reductions' 110 pieces (more than one launch holds): empty ones, pieces of
  // several chunks, five fp32 ones among the test's dtype (a launch has one dtype), and every
  // fourth one starting one element into its buffer (a scalar head, then vectors). Random in
  // [-2, 2), or what `fill(i, n, skip)` returns; `bufs` holds the memory.
  std::vector<Tensor> mixed_pieces(std::vector<Buffer>& bufs,
                                   const std::function<Buffer(int, int64_t, int64_t, DType)>& fill = {}) {
    std::vector<Tensor> list;
    for (int i = 0; i < 110; ++i) {
      const int64_t n = i == 5 ? 70000 : i == 60 ? 16384 * 2 + 9 : (i % 9 == 0 ? 0 : 1 + (i * 37) % 300);
      const DType t = i >= 40 && i < 45 ? DType::F32 : dt();
      const int64_t skip = i % 4 == 1 ? 1 : 0;
      bufs.push_back(n == 0 ? cpu().empty(Shape{0}, t) : fill ? fill(i, n, skip, t) : random(Shape{n + skip}, t, -2.f, 2.f));
      list.push_back(n == 0 ? bufs.back().t() : bufs.back().t().flat_slice(skip, n));
    }
    return list;
  }
};
class EmulatedReduceLarge : public EmuVsCpu {};

TEST_P(EmulatedReduce, BiasBackwardAccumulates) {
  for (int64_t N : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{100}}) {
    for (int64_t C : awkward_cols()) {
      for (DType grad_dt : {dt(), DType::F32}) {
        SCOPED_TRACE(shape_label(N, C, dt()) + " dbias " + dtype_name(grad_dt));
        Buffer dout = random(Shape{N, C}, dt());
        Buffer ref = random(Shape{C}, grad_dt);  // += into existing values
        Buffer emu = clone(ref);
        cpu().bias_backward(dout, ref);
        kr::bias_backward(dout, emu);
        expect_close(emu, ref, storage_tol(grad_dt, 1e-5, 1e-5), std::string("dbias ") + dtype_name(grad_dt));
      }
    }
  }
}

// Rows wider than one block of 16-byte vectors (32 lanes x 8 or 4 columns): nine column
// blocks, the last with one vector, on the vector path.
TEST_P(EmulatedReduce, BiasBackwardWideRowsOnTheVectorPath) {
  for (int64_t N : {int64_t{7}, int64_t{40}}) {
    const int64_t C = 2056;
    SCOPED_TRACE(shape_label(N, C, dt()));
    Buffer dout = random(Shape{N, C}, dt());
    Buffer ref = random(Shape{C}, DType::F32), emu = clone(ref);
    cpu().bias_backward(dout, ref);
    kr::bias_backward(dout, emu);
    expect_close(emu, ref, storage_tol(DType::F32, 1e-5, 1e-5), "dbias (vector path)");
  }
}

TEST_P(EmulatedReduce, BiasBackwardIsDeterministic) {
  const int64_t N = 300, C = 300;  // several chunks and two column blocks
  Buffer dout = random(Shape{N, C}, dt());
  Buffer a = filled(Shape{C}, DType::F32, 0.f), b = filled(Shape{C}, DType::F32, 0.f);
  emu::set_schedule_seed(1);
  kr::bias_backward(dout, a);
  emu::set_schedule_seed(2);
  kr::bias_backward(dout, b);
  EXPECT_TRUE(same_bytes(a, b)) << "bias_backward differs between two thread schedules";
  Buffer ref = filled(Shape{C}, DType::F32, 0.f);
  cpu().bias_backward(dout, ref);
  expect_close(a, ref, Tol{1e-5, 1e-5}, "dbias (300x300)");
}

// dropout_backward and the bias gradient in one pass: dx bit-identical to the CPU's
// dropout_backward (the same mask), dbias += the column sums of that dx. Rows of several
// samples (T), chunks that start inside a sample, the vector and scalar paths, p = 0 (a
// copy), and dx over dout.
TEST_P(EmulatedReduce, DropoutBiasBackward) {
  struct Case {
    int64_t N, C;
    int T;
    float p;
    bool in_place;
  };
  for (const Case& c : {Case{300, 136, 3, 0.3f, false}, Case{300, 136, 100, 0.5f, true}, Case{40, 130, 8, 0.2f, false},
                        Case{64, 264, 4, 0.0f, false}}) {
    SCOPED_TRACE(shape_label(c.N, c.C, dt()) + " T=" + std::to_string(c.T) + " p=" + std::to_string(c.p) +
                 (c.in_place ? " in place" : ""));
    DropoutKey drop;
    drop.p = c.p;
    drop.seed = 31337;
    drop.site = 4 * kSitesPerLayer + kDropAttnOut;
    drop.sample_base = 5;
    Buffer dout = random(Shape{c.N, c.C}, dt());
    Buffer dx = filled(Shape{c.N, c.C}, dt(), NAN), e_dx = c.in_place ? clone(dout) : clone(dx);
    Buffer dbias = random(Shape{c.C}, DType::F32), e_dbias = clone(dbias);
    cpu().dropout_bias_backward(dout, c.T, drop, dx, dbias);
    kr::dropout_bias_backward(c.in_place ? e_dx.t() : dout.t(), c.T, drop, e_dx, e_dbias);
    EXPECT_TRUE(same_bytes(e_dx, dx)) << "dx";
    expect_close(e_dbias, dbias, Tol{1e-5, 1e-5}, "dbias");
  }
}

TEST_P(EmulatedReduce, SumAndSumSquares) {
  for (int64_t n : {int64_t{1}, int64_t{17 * 65}, int64_t{70001}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " " + dtype_name(dt()));
    Buffer t = random(Shape{n}, dt(), -1.f, 1.5f);
    // Both add the fp32 values in double; only the order differs.
    const double s = cpu().sum(t), sq = cpu().sum_squares(t);
    const double got = kr::sum(t, false), got_sq = kr::sum(t, true);
    expect_near(got, s, 1e-12 * static_cast<double>(n), "sum (atol 1e-12 n)");
    expect_near(got_sq, sq, 1e-12 * sq, "sum_squares (relative 1e-12)");
    emu::set_schedule_seed(static_cast<uint32_t>(n));
    EXPECT_EQ(got, kr::sum(t, false)) << "sum differs between two thread schedules";
    EXPECT_EQ(got_sq, kr::sum(t, true)) << "sum_squares differs between two thread schedules";
  }
}

// More elements than the first pass has threads (1024 blocks of 256): the grid-stride loop.
TEST_F(EmulatedReduceLarge, SumGridStrideLoopFp32) {
  const int64_t n = 1024 * 256 + 4099;
  Buffer t = random(Shape{n}, DType::F32, -1.f, 1.5f);
  expect_near(kr::sum(t, false), cpu().sum(t), 1e-12 * static_cast<double>(n), "sum (atol 1e-12 n)");
  const double sq = cpu().sum_squares(t);
  expect_near(kr::sum(t, true), sq, 1e-12 * sq, "sum_squares (relative 1e-12)");
}

// 110 pieces (more than one launch holds), empty ones, pieces of several chunks, a change
// of dtype in the middle (a launch has one dtype), and pieces that start off the 16-byte
// alignment (a scalar head, then vectors) next to aligned ones (the vector path with a tail). With 3
// blocks a launch every block adds many chunks, of several tensors.
TEST_P(EmulatedReduce, SumSquaresMulti) {
  std::vector<Buffer> bufs;
  const std::vector<Tensor> list = mixed_pieces(bufs);
  const double ref = cpu().sum_squares_multi(list);
  const double got = kr::sum_squares_multi(list);
  expect_near(got, ref, 1e-12 * ref, "sum_squares_multi (relative 1e-12)");
  expect_near(kr::sum_squares_multi(list, 3), ref, 1e-12 * ref, "sum_squares_multi, 3 blocks a launch");
  emu::set_schedule_seed(99);
  EXPECT_EQ(got, kr::sum_squares_multi(list)) << "differs between two thread schedules";
  EXPECT_EQ(kr::sum_squares_multi({}), 0.0);
}

// count_zeros_multi: the kernel of sum_squares_multi counting zeros (-0 too, NaN not), over
// pieces that start off the 16-byte alignment, several launches and 3 blocks a launch.
TEST_P(EmulatedReduce, CountZerosMulti) {
  std::vector<Buffer> bufs;
  std::vector<Tensor> list;
  int64_t planted = 0;
  for (int i = 0; i < 110; ++i) {
    const int64_t n = i == 5 ? 70000 : i == 60 ? 16384 * 2 + 9 : (i % 9 == 0 ? 0 : 1 + (i * 37) % 300);
    const int64_t skip = i % 4 == 1 ? 1 : 0;  // starts one element into its buffer: misaligned
    std::vector<float> v(static_cast<size_t>(n + skip));
    for (int64_t j = 0; j < n + skip; ++j) {
      const bool zero = (j + i) % 6 == 0;
      v[j] = zero ? (j % 2 ? -0.f : 0.f) : (j % 11 == 3 ? std::nanf("") : 0.5f + static_cast<float>(j % 7));
      planted += zero && j >= skip;
    }
    bufs.push_back(from_floats(Shape{n + skip}, dt(), v));
    list.push_back(bufs.back().t().flat_slice(skip, n));
  }
  ASSERT_EQ(cpu().count_zeros_multi(list), planted);
  EXPECT_EQ(kr::count_zeros_multi(list), planted);
  EXPECT_EQ(kr::count_zeros_multi(list, 3), planted);
  EXPECT_EQ(kr::count_zeros_multi({}), 0);
}

// magnitude_stats_multi: sum_squares_multi's layout of pieces (several launches, a dtype
// change, misaligned starts, 3 blocks a launch) against the CPU: the sums of squares and of
// |x| to 1e-12, the sum of square roots to 1e-7 (float's root on the GPU, double's on the
// CPU), the maximum exact and at a planted element; a NaN reaches sum_abs and max_abs.
TEST_P(EmulatedReduce, MagnitudeStatsMulti) {
  std::vector<Buffer> bufs;
  const std::vector<Tensor> list = mixed_pieces(bufs, [&](int i, int64_t n, int64_t skip, DType t) {
    Buffer b = random(Shape{n + skip}, t, -2.f, 2.f);
    if (i == 60) store_from_float(b.t().data, t, skip + n / 2, -7.5f);  // the largest magnitude
    return b;
  });
  const MagnitudeStats ref = cpu().magnitude_stats_multi(list);
  ASSERT_EQ(ref.max_abs, 7.5);
  for (int max_blocks : {kr::kSquaresBlocks, 3}) {
    SCOPED_TRACE("blocks a launch " + std::to_string(max_blocks));
    const MagnitudeStats got = kr::magnitude_stats_multi(list, max_blocks);
    expect_near(got.sum_squares, ref.sum_squares, 1e-12 * ref.sum_squares, "sum of squares");
    expect_near(got.sum_abs, ref.sum_abs, 1e-12 * ref.sum_abs, "sum of |x|");
    expect_near(got.sum_sqrt_abs, ref.sum_sqrt_abs, 1e-7 * ref.sum_sqrt_abs, "sum of sqrt|x|");
    EXPECT_EQ(got.max_abs, ref.max_abs);
  }
  const MagnitudeStats once = kr::magnitude_stats_multi(list);
  emu::set_schedule_seed(98);
  const MagnitudeStats again = kr::magnitude_stats_multi(list);
  EXPECT_EQ(once.sum_sqrt_abs, again.sum_sqrt_abs) << "differs between two thread schedules";
  EXPECT_EQ(once.sum_abs, again.sum_abs) << "differs between two thread schedules";

  const MagnitudeStats none = kr::magnitude_stats_multi({});
  EXPECT_EQ(none.sum_squares + none.sum_abs + none.sum_sqrt_abs + none.max_abs, 0.0);
  std::vector<float> with_nan(300, 1.f);
  with_nan[123] = std::nanf("");
  Buffer nan_buf = from_floats(Shape{300}, dt(), with_nan);
  const MagnitudeStats nan_stats = kr::magnitude_stats_multi({list[1], nan_buf.t(), list[2]}, 2);
  EXPECT_TRUE(std::isnan(nan_stats.sum_abs));
  EXPECT_TRUE(std::isnan(nan_stats.max_abs)) << "a NaN must not lose to a larger magnitude";
}

// The elements before the first 16-byte boundary of a misaligned start (also a whole
// tensor shorter than them), the vector path and its tail, for sum and sum_squares
// (grid-stride over one tensor).
TEST_P(EmulatedReduce, SumOfMisalignedAndRaggedTensors) {
  for (int64_t skip : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{7}})
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{256 * 8 * 3 + 13}}) {
      SCOPED_TRACE("skip=" + std::to_string(skip) + " n=" + std::to_string(n) + " " + dtype_name(dt()));
      Buffer b = random(Shape{n + skip}, dt(), -1.f, 1.5f);
      const Tensor t = b.t().flat_slice(skip, n);
      const double sq = cpu().sum_squares(t);
      expect_near(kr::sum(t, false), cpu().sum(t), 1e-12 * static_cast<double>(n), "sum (atol 1e-12 n)");
      expect_near(kr::sum(t, true), sq, 1e-12 * sq, "sum_squares (relative 1e-12)");
    }
}

TEST_P(EmulatedReduce, HasInfOrNan) {
  // The largest size has more elements than the kernel has threads (4096 blocks of 256);
  // skip 1 starts off the 16-byte alignment (a scalar head first); n - 1 lies in the vector
  // path's tail for n = 130 and 256 * 4096 + 3.
  for (int64_t skip : {int64_t{0}, int64_t{1}}) {
    for (int64_t n : {int64_t{1}, int64_t{130}, int64_t{256 * 4096 + 3}}) {
      Buffer b = random(Shape{n + skip}, dt());
      const Tensor t = b.t().flat_slice(skip, n);
      EXPECT_FALSE(kr::has_inf_or_nan(t)) << "n=" << n;
      for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
        for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
          if (n > 1000 && (at == 0 || !std::isnan(bad))) continue;  // the tail is what the big size is for
          Buffer u = clone(b);
          store_from_float(u.t().data, dt(), static_cast<size_t>(skip + at), bad);
          const Tensor ut = u.t().flat_slice(skip, n);
          EXPECT_TRUE(cpu().has_inf_or_nan(ut));
          EXPECT_TRUE(kr::has_inf_or_nan(ut)) << bad << " at " << at << " of " << n << ", skip " << skip;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmulatedReduce, TRIDENT_EMU_DTYPES, dtype_param_name);

}  // namespace
}  // namespace trident::emu_test
