// Megatron's OptimizerParamScheduler formulas, in samples, against their closed forms at
// the warm-up boundaries, through the decay, at its end and after it, for each style; and
// the same schedule reached from iteration-based and sample-based flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "train/lr_schedule.h"
#include "train/options.h"
#include "parse_options.h"

namespace trident {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The reference, written from the formulas in Megatron-LM's get_lr.
double reference_lr(const std::string& style, double max_lr, double min_lr, double warmup, double decay, double x,
                    double init_lr = 0) {
  if (warmup > 0 && x <= warmup) return init_lr + (max_lr - init_lr) * x / warmup;
  if (style == "constant") return max_lr;
  if (x > decay) return min_lr;
  const double r = (x - warmup) / (decay - warmup);
  const double coeff = style == "linear" ? 1.0 - r : 0.5 * (std::cos(kPi * r) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

LrSchedule make(LrDecayStyle style, double warmup, double decay) {
  LrSchedule s;
  s.max_lr = 6e-4;
  s.min_lr = 6e-5;
  s.warmup_samples = warmup;
  s.decay_samples = decay;
  s.style = style;
  return s;
}

TEST(LrSchedule, WarmupRisesLinearlyFromZero) {
  for (LrDecayStyle st : {LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine}) {
    const LrSchedule s = make(st, 1000, 11000);
    EXPECT_EQ(s.lr(0), 0.0);
    EXPECT_DOUBLE_EQ(s.lr(1), 6e-7);
    EXPECT_DOUBLE_EQ(s.lr(250), 1.5e-4);
    EXPECT_DOUBLE_EQ(s.lr(500), 3e-4);
    EXPECT_DOUBLE_EQ(s.lr(999), 6e-4 * 0.999);
    EXPECT_DOUBLE_EQ(s.lr(1000), 6e-4);  // the last warm-up step reaches max_lr
  }
}

TEST(LrSchedule, HandPickedPointsOfEachStyle) {
  const LrSchedule cos = make(LrDecayStyle::Cosine, 1000, 11000);
  EXPECT_DOUBLE_EQ(cos.lr(1001), 6e-5 + 0.5 * (std::cos(kPi * 1e-4) + 1) * 5.4e-4);
  EXPECT_DOUBLE_EQ(cos.lr(6000), 3.3e-4);                   // half-way: (max + min) / 2
  EXPECT_NEAR(cos.lr(3500), 6e-5 + 5.4e-4 * (0.5 + 0.5 * std::sqrt(0.5)), 1e-18);  // a quarter: cos(pi/4)
  EXPECT_DOUBLE_EQ(cos.lr(11000), 6e-5);                    // end of decay
  EXPECT_EQ(cos.lr(11001), 6e-5);                           // after: min_lr exactly
  EXPECT_EQ(cos.lr(1u << 30), 6e-5);
  const LrSchedule lin = make(LrDecayStyle::Linear, 1000, 11000);
  EXPECT_DOUBLE_EQ(lin.lr(3500), 6e-5 + 0.75 * 5.4e-4);
  EXPECT_DOUBLE_EQ(lin.lr(6000), 3.3e-4);
  EXPECT_DOUBLE_EQ(lin.lr(8500), 6e-5 + 0.25 * 5.4e-4);
  EXPECT_NEAR(lin.lr(11000), 6e-5, 1e-20);
  EXPECT_EQ(lin.lr(11001), 6e-5);
  const LrSchedule con = make(LrDecayStyle::Constant, 1000, 11000);
  EXPECT_EQ(con.lr(1001), 6e-4);
  EXPECT_EQ(con.lr(50000), 6e-4);  // constant never decays, not even after decay_samples
}

TEST(LrSchedule, NoWarmupStartsAtMaxLr) {
  EXPECT_EQ(make(LrDecayStyle::Cosine, 0, 100).lr(0), 6e-4);
  EXPECT_EQ(make(LrDecayStyle::Linear, 0, 100).lr(0), 6e-4);
  EXPECT_DOUBLE_EQ(make(LrDecayStyle::Linear, 0, 100).lr(50), 3.3e-4);
  EXPECT_EQ(make(LrDecayStyle::Constant, 0, 100).lr(0), 6e-4);
}

TEST(LrSchedule, MatchesClosedFormsEverywhere) {
  const std::vector<std::pair<LrDecayStyle, std::string>> styles = {
      {LrDecayStyle::Constant, "constant"}, {LrDecayStyle::Linear, "linear"}, {LrDecayStyle::Cosine, "cosine"}};
  const std::vector<std::pair<double, double>> shapes = {{0, 640}, {80, 640}, {12.5, 100}, {1, 2}, {700 * 512.0, 600000 * 512.0}};
  for (const auto& [st, name] : styles)
    for (const auto& [w, d] : shapes) {
      const LrSchedule s = make(st, w, d);
      std::vector<uint64_t> points = {0, 1, 2, 3};
      for (double anchor : {w, d})
        for (int delta = -3; delta <= 3; ++delta)
          if (anchor + delta >= 0) points.push_back(static_cast<uint64_t>(std::floor(anchor)) + delta);
      for (int k = 0; k <= 64; ++k) points.push_back(static_cast<uint64_t>(1.25 * d * k / 64));
      for (uint64_t x : points) {
        const double want = reference_lr(name, 6e-4, 6e-5, w, d, static_cast<double>(x));
        ASSERT_NEAR(s.lr(x), want, 1e-18) << name << " warmup " << w << " decay " << d << " at " << x;
      }
    }
}

// --lr-warmup-init: the warm-up rises from init_lr instead of 0; after it nothing changes.
TEST(LrSchedule, WarmupRisesFromTheWarmupInit) {
  for (LrDecayStyle st : {LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine}) {
    LrSchedule s = make(st, 1000, 11000);
    s.init_lr = 1e-4;
    EXPECT_EQ(s.lr(0), 1e-4);
    EXPECT_DOUBLE_EQ(s.lr(250), 1e-4 + 5e-4 * 0.25);
    EXPECT_DOUBLE_EQ(s.lr(500), 3.5e-4);
    EXPECT_DOUBLE_EQ(s.lr(1000), 6e-4);
    const char* name = st == LrDecayStyle::Constant ? "constant" : st == LrDecayStyle::Linear ? "linear" : "cosine";
    for (uint64_t x : {0u, 1u, 999u, 1000u, 1001u, 6000u, 11000u, 11001u})
      EXPECT_NEAR(s.lr(x), reference_lr(name, 6e-4, 6e-5, 1000, 11000, static_cast<double>(x), 1e-4), 1e-18)
          << name << " at " << x;
  }
  const TrainOptions o = parse({"--micro-batch-size", "4", "--global-batch-size", "4", "--train-iters", "10",
                                "--lr-warmup-iters", "2", "--lr", "1e-3", "--lr-warmup-init", "2e-4"});
  const LrSchedule from_flags = make_lr_schedule(o);
  EXPECT_EQ(from_flags.init_lr, 2e-4);
  EXPECT_DOUBLE_EQ(from_flags.lr(4), 6e-4);  // half-way through the 8-sample warm-up
}

// --decoupled-lr / --decoupled-min-lr (Megatron-core): the word embedding's group has its own
// max_lr and min_lr, and get_lr runs the same warm-up (from init_lr) and decay with them.
TEST(LrSchedule, DecoupledRateRunsTheScheduleWithItsOwnPeakAndFloor) {
  for (LrDecayStyle st : {LrDecayStyle::Constant, LrDecayStyle::Linear, LrDecayStyle::Cosine}) {
    LrSchedule s = make(st, 1000, 11000);
    s.init_lr = 1e-5;
    EXPECT_FALSE(s.has_decoupled_lr());
    EXPECT_EQ(s.decoupled_lr(LrPosition{6000, 0, std::nullopt}), s.lr(6000));  // none: the others' rate
    s.decoupled_max_lr = 2e-3;
    s.decoupled_min_lr = 1e-4;
    const char* name = st == LrDecayStyle::Constant ? "constant" : st == LrDecayStyle::Linear ? "linear" : "cosine";
    for (uint64_t x : {0u, 1u, 500u, 999u, 1000u, 1001u, 3500u, 6000u, 10999u, 11000u, 11001u, 50000u}) {
      const LrPosition at{x, 0, std::nullopt};
      EXPECT_NEAR(s.decoupled_lr(at), reference_lr(name, 2e-3, 1e-4, 1000, 11000, static_cast<double>(x), 1e-5), 1e-18)
          << name << " at " << x;
      EXPECT_NEAR(s.lr(at), reference_lr(name, 6e-4, 6e-5, 1000, 11000, static_cast<double>(x), 1e-5), 1e-18)
          << "the others' rate stays --lr's, " << name << " at " << x;
    }
  }
  // From the flags: --decoupled-min-lr defaults to --min-lr; alone it changes nothing.
  const std::vector<std::string> flags = {"--micro-batch-size", "4", "--global-batch-size", "4", "--train-iters", "10",
                                          "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "linear"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> all = flags;
    all.insert(all.end(), more.begin(), more.end());
    return make_lr_schedule(parse(all));
  };
  const LrSchedule both = with({"--decoupled-lr", "4e-3", "--decoupled-min-lr", "2e-4"});
  EXPECT_EQ(both.decoupled_max_lr, 4e-3);
  EXPECT_EQ(both.decoupled_min_lr, 2e-4);
  EXPECT_DOUBLE_EQ(both.decoupled_lr(LrPosition{20, 0, std::nullopt}), 2e-4 + 0.5 * 3.8e-3);  // half-way
  const LrSchedule peak_only = with({"--decoupled-lr", "4e-3"});
  EXPECT_EQ(peak_only.decoupled_min_lr, 1e-4);
  EXPECT_DOUBLE_EQ(peak_only.decoupled_lr(LrPosition{40, 0, std::nullopt}), 1e-4);
  EXPECT_FALSE(with({"--decoupled-min-lr", "2e-4"}).has_decoupled_lr());
  // As Megatron, a floor above the peak is taken (the group's rate then rises to it).
  const LrSchedule rising = with({"--decoupled-lr", "5e-5"});
  EXPECT_DOUBLE_EQ(rising.decoupled_lr(LrPosition{40, 0, std::nullopt}), 1e-4);
  EXPECT_EQ(error_of({"--decoupled-lr", "-1"}), "--decoupled-lr must be a finite number >= 0, got -1");
  EXPECT_EQ(error_of({"--decoupled-lr", "1e-3", "--decoupled-min-lr", "-1e-5"}),
            "--decoupled-min-lr must be a finite number >= 0, got -1e-05");
}

TEST(LrSchedule, FractionalWarmupFromAWarmupFraction) {
  // warmup = 0.125 x 100 = 12.5 samples: sample 12 is still warming, 13 decays.
  const LrSchedule s = make(LrDecayStyle::Linear, 12.5, 100);
  EXPECT_DOUBLE_EQ(s.lr(12), 6e-4 * 12 / 12.5);
  EXPECT_DOUBLE_EQ(s.lr(13), 6e-5 + (1 - 0.5 / 87.5) * 5.4e-4);
}

// Runs the schedule over every iteration of a run as the trainer does: iteration k
// (from 1) uses lr(consumed samples before it).
std::vector<double> per_iteration(const TrainOptions& o) {
  const LrSchedule s = make_lr_schedule(o);
  std::vector<double> lrs;
  for (int64_t k = 0; k < o.train_iters; ++k) lrs.push_back(s.lr(static_cast<uint64_t>(k) * o.global_batch_size));
  return lrs;
}

TEST(LrSchedule, SamplesAndIterationsGiveTheSameSchedule) {
  for (const char* style : {"constant", "linear", "cosine"}) {
    const std::vector<std::string> common = {"--micro-batch-size", "4", "--global-batch-size", "16", "--lr", "3e-4",
                                             "--min-lr", "3e-5", "--lr-decay-style", style};
    std::vector<std::string> it = common, sa = common;
    for (const char* a : {"--train-iters", "120", "--lr-warmup-iters", "15", "--lr-decay-iters", "100"}) it.push_back(a);
    for (const char* a : {"--train-samples", "1920", "--lr-warmup-samples", "240", "--lr-decay-samples", "1600"})
      sa.push_back(a);
    const TrainOptions oi = parse(it), os = parse(sa);
    EXPECT_EQ(oi.train_iters, os.train_iters);
    EXPECT_EQ(oi.train_samples, os.train_samples);
    EXPECT_EQ(oi.warmup_samples, os.warmup_samples);
    EXPECT_EQ(oi.decay_samples, os.decay_samples);
    const std::vector<double> a = per_iteration(oi), b = per_iteration(os);
    ASSERT_EQ(a.size(), 120u);
    EXPECT_EQ(a, b) << style;
    // Iteration 1 uses 0 (warm-up from 0); iteration 16 is the last of the warm-up, at max_lr.
    EXPECT_EQ(a[0], 0.0);
    EXPECT_DOUBLE_EQ(a[15], 3e-4);
    EXPECT_DOUBLE_EQ(a[14], 3e-4 * 14 / 15);
    if (std::string(style) != "constant") {
      EXPECT_NEAR(a[100], 3e-5, 1e-18);  // decay ends at sample 1600, iteration 101
      EXPECT_EQ(a[101], 3e-5);
      EXPECT_EQ(a[119], 3e-5);
    } else {
      EXPECT_EQ(a[119], 3e-4);
    }
    // The warm-up as a fraction of the decay gives the same 240 samples.
    it = common;
    sa = common;
    for (const char* x : {"--train-iters", "120", "--lr-warmup-fraction", "0.15", "--lr-decay-iters", "100"})
      it.push_back(x);
    for (const char* x : {"--train-samples", "1920", "--lr-warmup-fraction", "0.15", "--lr-decay-samples", "1600"})
      sa.push_back(x);
    const TrainOptions fi = parse(it), fs = parse(sa);
    EXPECT_EQ(fi.warmup_samples, 0.15 * 1600);
    EXPECT_EQ(per_iteration(fi), per_iteration(fs));
    EXPECT_NEAR(per_iteration(fi)[10], a[10], 1e-18);
  }
}

// inverse-square-root and WSD, against Megatron's get_lr written out here: the warm-up
// first, then min_lr past the decay, then the style (WSD: stable at max_lr until the
// anneal's last wsd samples of the decay).
double reference_megatron_lr(const std::string& style, const std::string& wsd_style, double warmup, double decay,
                             double wsd, double x) {
  const double max_lr = 6e-4, min_lr = 6e-5;
  if (warmup > 0 && x <= warmup) return max_lr * x / warmup;
  if (x > decay) return min_lr;
  if (style == "inverse-square-root") {
    const double lr = max_lr * std::pow(std::max(warmup, 1.0), 0.5) / std::pow(std::max(x, 1.0), 0.5);
    return lr < min_lr ? min_lr : lr;
  }
  double coeff = 1.0;
  const double start = decay - wsd;
  if (x > start) {
    const double a = (x - start) / wsd;
    if (wsd_style == "linear") coeff = 1.0 - a;
    if (wsd_style == "cosine") coeff = 0.5 * (std::cos(kPi * a) + 1.0);
    if (wsd_style == "exponential") coeff = 2.0 * std::pow(0.5, a) - 1.0;
    if (wsd_style == "minus_sqrt") coeff = 1.0 - std::sqrt(a);
  }
  return min_lr + coeff * (max_lr - min_lr);
}

TEST(LrSchedule, InverseSquareRootAndWsdMatchMegatronsFormulas) {
  const std::vector<std::pair<double, double>> shapes = {{0, 640}, {80, 640}, {12.5, 100}, {1000, 11000}};
  for (const auto& [w, d] : shapes) {
    std::vector<uint64_t> points = {0, 1, 2, 3};
    for (int k = 0; k <= 200; ++k) points.push_back(static_cast<uint64_t>(1.1 * d * k / 200));
    LrSchedule isr = make(LrDecayStyle::InverseSquareRoot, w, d);
    for (uint64_t x : points)
      ASSERT_NEAR(isr.lr(x), reference_megatron_lr("inverse-square-root", "", w, d, 0, static_cast<double>(x)),
                  1e-18)
          << "inverse-square-root warmup " << w << " decay " << d << " at " << x;
    for (const auto& [ws, name] :
         std::vector<std::pair<WsdDecayStyle, std::string>>{{WsdDecayStyle::Exponential, "exponential"},
                                                             {WsdDecayStyle::Linear, "linear"},
                                                             {WsdDecayStyle::Cosine, "cosine"},
                                                             {WsdDecayStyle::MinusSqrt, "minus_sqrt"}})
      for (double anneal : {1.0, std::floor((d - w) / 5), d - w}) {
        LrSchedule s = make(LrDecayStyle::WarmupStableDecay, w, d);
        s.wsd_decay_samples = anneal;
        s.wsd_style = ws;
        for (uint64_t x : points)
          ASSERT_NEAR(s.lr(x), reference_megatron_lr("WSD", name, w, d, anneal, static_cast<double>(x)), 1e-18)
              << "WSD " << name << " anneal " << anneal << " warmup " << w << " decay " << d << " at " << x;
      }
  }
}

TEST(LrSchedule, HandPickedPointsOfInverseSquareRootAndWsd) {
  LrSchedule isr = make(LrDecayStyle::InverseSquareRoot, 1000, 11000);
  EXPECT_DOUBLE_EQ(isr.lr(1000), 6e-4);
  EXPECT_DOUBLE_EQ(isr.lr(4000), 3e-4);    // sqrt(1000 / 4000) = 1/2
  EXPECT_DOUBLE_EQ(isr.lr(9000), 2e-4);    // 1/3
  EXPECT_EQ(isr.lr(11001), 6e-5);          // past the decay: min_lr
  isr.min_lr = 2.5e-4;
  EXPECT_EQ(isr.lr(9000), 2.5e-4);         // never below min_lr
  LrSchedule wsd = make(LrDecayStyle::WarmupStableDecay, 1000, 11000);
  wsd.wsd_decay_samples = 2000;            // stable until sample 9000
  for (uint64_t x : {1000u, 1001u, 5000u, 9000u}) EXPECT_EQ(wsd.lr(x), 6e-4) << x;
  EXPECT_DOUBLE_EQ(wsd.lr(10000), 6e-5 + (2 * std::sqrt(0.5) - 1) * 5.4e-4);  // exponential, half-way
  EXPECT_NEAR(wsd.lr(11000), 6e-5, 1e-18);  // 2 x 0.5 - 1 = 0 at the end
  wsd.wsd_style = WsdDecayStyle::Linear;
  EXPECT_DOUBLE_EQ(wsd.lr(9500), 6e-5 + 0.75 * 5.4e-4);
  wsd.wsd_style = WsdDecayStyle::MinusSqrt;
  EXPECT_DOUBLE_EQ(wsd.lr(9500), 6e-5 + 0.5 * 5.4e-4);  // 1 - sqrt(1/4)
}

TEST(LrSchedule, WsdFromIterationAndSampleFlags) {
  const std::vector<std::string> common = {"--micro-batch-size", "4", "--global-batch-size", "16", "--lr", "6e-4",
                                           "--min-lr", "6e-5", "--lr-decay-style", "WSD", "--lr-wsd-decay-style",
                                           "cosine"};
  std::vector<std::string> it = common, sa = common;
  for (const char* a : {"--train-iters", "120", "--lr-warmup-iters", "10", "--lr-wsd-decay-iters", "20"})
    it.push_back(a);
  for (const char* a : {"--train-samples", "1920", "--lr-warmup-samples", "160", "--lr-wsd-decay-samples", "320"})
    sa.push_back(a);
  const TrainOptions oi = parse(it), os = parse(sa);
  EXPECT_EQ(oi.wsd_decay_samples, 320u);
  EXPECT_EQ(os.wsd_decay_samples, 320u);
  const std::vector<double> a = per_iteration(oi);
  EXPECT_EQ(a, per_iteration(os));
  EXPECT_EQ(a[99], 6e-4);  // iteration 100 starts at sample 1584: stable through sample 1600
  EXPECT_DOUBLE_EQ(a[110], 6e-5 + 0.5 * (std::cos(kPi * 160.0 / 320.0) + 1) * 5.4e-4);
  EXPECT_EQ(make_lr_schedule(oi).wsd_style, WsdDecayStyle::Cosine);
  EXPECT_EQ(parse({"--lr-decay-style", "WSD", "--lr-wsd-decay-iters", "5"}).lr_wsd_decay_style, "exponential");
  // With another style, as in Megatron, the anneal's flags do nothing; the note names them.
  const TrainOptions cosine = parse({"--lr-decay-style", "cosine", "--lr-wsd-decay-iters", "5"});
  EXPECT_EQ(cosine.flags_without_effect,
            (std::vector<std::string>{"--lr-wsd-decay-iters (without --lr-decay-style WSD)"}));
  EXPECT_EQ(make_lr_schedule(cosine).lr(800), make_lr_schedule(parse({"--lr-decay-style", "cosine"})).lr(800));
}

}  // namespace
}  // namespace trident
