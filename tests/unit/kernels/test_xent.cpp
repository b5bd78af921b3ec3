// Softmax cross-entropy in its three phases, per dtype: padded vocabulary (padding holds
// huge logits that must not count), ignored targets (-1), top-1 "correct", the gradient
// grad_scale * (softmax - onehot) against the analytic double reference and against
// central differences of grad_scale * sum(losses); and vocab-parallel use: two shards
// whose phase results are combined by hand (MAX, SUM, SUM) reproduce the unsharded run.
// logits_argmax (a decoding step's greedy draw) against a loop written here: ties, padding
// columns holding larger logits, NaN logits, a row of NaN.
#include "kernel_test_util.h"
#include "naive_ref.h"

namespace trident::test {
namespace {

constexpr int64_t kN = 6, kValid = 11, kPadded = 14;
const std::vector<int32_t> kTargets = {3, -1, 10, 0, 7, 6};
constexpr float kGradScale = 0.5f;

std::vector<float> make_logits(uint32_t seed) {
  auto l = randn(kN * kPadded, seed, 2.0f);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = kValid; c < kPadded; ++c) l[n * kPadded + c] = 100.0f;  // padding: must be ignored
  l[3 * kPadded + 0] = 9.0f;  // row 3's target is its top-1
  return l;
}

struct Result {
  Vec row_max, target_logit, sumexp, losses, correct, grad;
};

// Runs the three phases on one shard with given (already combined) phase-1/2 inputs.
struct Shard {
  Backend& be;
  Buffer logits, targets, row_max, target_logit, sumexp, losses, correct;
  int64_t start, valid;
  Shard(Backend& b, const std::vector<float>& l, int64_t width, int64_t start_, int64_t valid_, DType dt)
      : be(b), logits(upload(b, l, Shape{kN, width}, dt)), targets(upload_i32(b, kTargets, Shape{kN})),
        row_max(b.empty(Shape{kN}, DType::F32)), target_logit(b.empty(Shape{kN}, DType::F32)),
        sumexp(b.empty(Shape{kN}, DType::F32)), losses(b.empty(Shape{kN}, DType::F32)),
        correct(b.empty(Shape{kN}, DType::F32)), start(start_), valid(valid_) {}
};

class Xent : public ::testing::TestWithParam<DType> {};

TEST_P(Xent, UnshardedMatchesReferenceAndFiniteDifferences) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto l = make_logits(1);
  Shard s(*be, l, kPadded, 0, kValid, dt);
  be->xent_stats(s.logits, s.targets, 0, kValid, s.row_max, s.target_logit);
  be->xent_sumexp(s.logits, kValid, s.row_max, s.sumexp);
  be->xent_loss_grad(s.logits, s.targets, 0, kValid, s.row_max, s.sumexp, s.target_logit, s.losses, s.correct, kGradScale);

  const Vec rl = rounded(l, dt);
  Vec grad, correct;
  const Vec losses = ref::xent(rl, kTargets, kN, kPadded, kValid, &grad, &correct);
  for (auto& g : grad) g *= kGradScale;
  expect_close(download(*be, s.losses), losses, 1e-5, 1e-5, "losses");
  expect_close(download(*be, s.correct), correct, 0, 0, "correct");
  EXPECT_EQ(correct[3], 1.0);
  EXPECT_EQ(correct[1], 0.0);  // ignored row
  EXPECT_EQ(download(*be, s.losses)[1], 0.0);
  const double tol = dtype_tol(dt);
  const Vec got = download(*be, s.logits);
  expect_close(got, grad, tol * 0.1, tol, "grad");
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kPadded; ++c)
      if (c >= kValid || n == 1) {
        EXPECT_EQ(got[n * kPadded + c], 0.0) << n << "," << c;
      }
  const Vec fd = fd_grad([&](const Vec& v) {
    double s = 0;
    for (double x : ref::xent(v, kTargets, kN, kPadded, kValid)) s += kGradScale * x;
    return s;
  }, rl);
  expect_close(got, fd, std::max(tol * 0.1, 1e-6), std::max(tol, 1e-5), "grad vs finite differences");
}

TEST_P(Xent, VocabParallelShardsMatchUnsharded) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  const auto l = make_logits(2);
  // Shard 0: ids [0, 7), all real. Shard 1: ids [7, 14), of which 4 are real.
  constexpr int64_t kW = kPadded / 2;
  std::vector<float> l0(kN * kW), l1(kN * kW);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kW; ++c) {
      l0[n * kW + c] = l[n * kPadded + c];
      l1[n * kW + c] = l[n * kPadded + kW + c];
    }
  Shard a(*be, l0, kW, 0, kW, dt), b(*be, l1, kW, kW, kValid - kW, dt);
  for (Shard* s : {&a, &b}) be->xent_stats(s->logits, s->targets, s->start, s->valid, s->row_max, s->target_logit);
  // All-reduce by hand: MAX of row_max, SUM of target_logit (only the owner is non-zero).
  const Vec m0 = download(*be, a.row_max), m1 = download(*be, b.row_max);
  const Vec t0 = download(*be, a.target_logit), t1 = download(*be, b.target_logit);
  std::vector<float> mx(kN), tl(kN);
  for (int64_t n = 0; n < kN; ++n) {
    mx[n] = static_cast<float>(std::max(m0[n], m1[n]));
    tl[n] = static_cast<float>(t0[n] + t1[n]);
    EXPECT_TRUE(t0[n] == 0.0 || t1[n] == 0.0) << "target owned by one shard only, row " << n;
  }
  for (Shard* s : {&a, &b}) {
    be->copy_from_host(s->row_max, mx.data());
    be->copy_from_host(s->target_logit, tl.data());
    be->xent_sumexp(s->logits, s->valid, s->row_max, s->sumexp);
  }
  const Vec s0 = download(*be, a.sumexp), s1 = download(*be, b.sumexp);
  std::vector<float> se(kN);
  for (int64_t n = 0; n < kN; ++n) se[n] = static_cast<float>(s0[n] + s1[n]);
  for (Shard* s : {&a, &b}) {
    be->copy_from_host(s->sumexp, se.data());
    be->xent_loss_grad(s->logits, s->targets, s->start, s->valid, s->row_max, s->sumexp, s->target_logit,
                       s->losses, s->correct, kGradScale);
  }

  Shard full(*be, l, kPadded, 0, kValid, dt);
  be->xent_stats(full.logits, full.targets, 0, kValid, full.row_max, full.target_logit);
  be->xent_sumexp(full.logits, kValid, full.row_max, full.sumexp);
  be->xent_loss_grad(full.logits, full.targets, 0, kValid, full.row_max, full.sumexp, full.target_logit,
                     full.losses, full.correct, kGradScale);
  const Vec want_loss = download(*be, full.losses), want_correct = download(*be, full.correct);
  for (Shard* s : {&a, &b}) {
    expect_close(download(*be, s->losses), want_loss, 1e-5, 1e-5, "shard losses");
    expect_close(download(*be, s->correct), want_correct, 0, 0, "shard correct");
  }
  const Vec g = download(*be, full.logits), g0 = download(*be, a.logits), g1 = download(*be, b.logits);
  Vec joined(kN * kPadded);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kW; ++c) {
      joined[n * kPadded + c] = g0[n * kW + c];
      joined[n * kPadded + kW + c] = g1[n * kW + c];
    }
  const double tol = dtype_tol(dt);
  expect_close(joined, g, tol * 0.1, tol, "sharded grad");
}

TEST_P(Xent, ArgmaxTakesTheFirstLargestOfTheValidColumns) {
  const DType dt = GetParam();
  auto be = make_cpu_backend();
  std::vector<float> l = make_logits(3);  // padding columns hold 100
  const auto row = [&](int64_t n) { return l.begin() + n * kPadded; };
  std::fill(row(1), row(1) + kValid, 1.0f);  // all equal: column 0
  row(2)[4] = row(2)[9] = 50.0f;             // a tie of the largest: the lower column
  row(3)[0] = row(3)[5] = NAN;               // NaN never wins, also first
  row(3)[8] = 60.0f;
  std::fill(row(4), row(4) + kValid, NAN);  // all NaN: column 0
  Buffer logits = upload(*be, l, Shape{kN, kPadded}, dt);
  Buffer values = be->empty(Shape{kN}, DType::F32), ids = be->empty(Shape{kN}, DType::I32);
  be->logits_argmax(logits, kValid, values, ids);
  const Vec got_values = download(*be, values), got_ids = download(*be, ids);
  const Vec held = rounded(l, dt);
  for (int64_t n = 0; n < kN; ++n) {
    int64_t want = 0;  // the first column of the largest non-NaN value, by a plain scan
    bool found = false;
    for (int64_t c = 0; c < kValid; ++c) {
      const double x = held[n * kPadded + c];
      if (std::isnan(x)) continue;
      if (!found || x > held[n * kPadded + want]) want = c;
      found = true;
    }
    EXPECT_EQ(got_ids[n], static_cast<double>(want)) << "row " << n;
    const double v = held[n * kPadded + want];
    EXPECT_TRUE(got_values[n] == v || (std::isnan(v) && std::isnan(got_values[n]))) << "row " << n;
  }
  EXPECT_EQ(got_ids[2], 4.0);
  EXPECT_EQ(got_ids[3], 8.0);
  EXPECT_THROW(be->logits_argmax(logits, 0, values, ids), std::exception);  // nothing to draw from
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Xent, kFloatTypes, DTypeName());

}  // namespace
}  // namespace trident::test
