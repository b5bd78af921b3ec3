// Megatron's weight-decay schedule (OptimizerParamScheduler.get_wd) in samples: hand-picked
// points of each style, a reference written from the formulas at every point of a run, and
// the schedule the flags give (--start-weight-decay, --end-weight-decay,
// --weight-decay-incr-style; the run's samples as the increase).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/options.h"
#include "train/weight_decay_schedule.h"
#include "parse_options.h"

namespace trident {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The reference, written from Megatron-LM's get_wd.
double reference_wd(const std::string& style, double start, double end, double incr, double x) {
  if (x > incr) return end;
  if (style == "constant") return end;
  const double r = x / incr;
  const double coeff = style == "linear" ? r : 0.5 * (std::cos(kPi * (1 - r)) + 1.0);
  return start + coeff * (end - start);
}

WeightDecaySchedule make(WdIncrStyle style, double start, double end, double incr) {
  WeightDecaySchedule s;
  s.start_wd = start;
  s.end_wd = end;
  s.incr_samples = incr;
  s.style = style;
  return s;
}

TEST(WeightDecaySchedule, HandPickedPointsOfEachStyle) {
  const WeightDecaySchedule lin = make(WdIncrStyle::Linear, 0.01, 0.1, 1000);
  EXPECT_EQ(lin.weight_decay(0), 0.01);
  EXPECT_DOUBLE_EQ(lin.weight_decay(250), 0.01 + 0.25 * 0.09);
  EXPECT_DOUBLE_EQ(lin.weight_decay(500), 0.055);
  EXPECT_DOUBLE_EQ(lin.weight_decay(1000), 0.1);
  EXPECT_EQ(lin.weight_decay(1001), 0.1);  // after the run's samples: end_wd exactly
  const WeightDecaySchedule cos = make(WdIncrStyle::Cosine, 0.01, 0.1, 1000);
  EXPECT_DOUBLE_EQ(cos.weight_decay(0), 0.01);     // 0.5 (cos(pi) + 1) = 0
  EXPECT_DOUBLE_EQ(cos.weight_decay(500), 0.055);  // half-way: the mean
  EXPECT_DOUBLE_EQ(cos.weight_decay(250), 0.01 + 0.09 * 0.5 * (1 - std::sqrt(0.5)));  // cos(3 pi / 4)
  EXPECT_DOUBLE_EQ(cos.weight_decay(750), 0.01 + 0.09 * 0.5 * (1 + std::sqrt(0.5)));  // cos(pi / 4)
  EXPECT_DOUBLE_EQ(cos.weight_decay(1000), 0.1);
  EXPECT_EQ(cos.weight_decay(5000), 0.1);
  const WeightDecaySchedule con = make(WdIncrStyle::Constant, 0.1, 0.1, 1000);
  for (uint64_t x : {0u, 500u, 1000u, 1001u}) EXPECT_EQ(con.weight_decay(x), 0.1);
}

TEST(WeightDecaySchedule, MatchesTheReferenceEverywhere) {
  for (const auto& [style, name] : std::vector<std::pair<WdIncrStyle, std::string>>{
           {WdIncrStyle::Linear, "linear"}, {WdIncrStyle::Cosine, "cosine"}})
    for (double incr : {1.0, 3.0, 640.0, 600000.0 * 512}) {
      const WeightDecaySchedule s = make(style, 0.0, 0.3, incr);
      for (int k = 0; k <= 80; ++k) {
        const auto x = static_cast<uint64_t>(1.25 * incr * k / 64);
        ASSERT_NEAR(s.weight_decay(x), reference_wd(name, 0.0, 0.3, incr, static_cast<double>(x)), 1e-16)
            << name << " over " << incr << " at " << x;
      }
    }
}

TEST(WeightDecaySchedule, FromTheFlags) {
  // Megatron's defaults: constant at --weight-decay.
  WeightDecaySchedule s = make_weight_decay_schedule(parse({"--weight-decay", "0.05"}));
  EXPECT_EQ(s.style, WdIncrStyle::Constant);
  EXPECT_FLOAT_EQ(static_cast<float>(s.start_wd), 0.05f);
  EXPECT_FLOAT_EQ(static_cast<float>(s.end_wd), 0.05f);
  // The increase spans the run in samples: iterations x global batch, or --train-samples.
  s = make_weight_decay_schedule(parse({"--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "30",
                                        "--start-weight-decay", "0", "--end-weight-decay", "0.1",
                                        "--weight-decay-incr-style", "cosine"}));
  EXPECT_EQ(s.style, WdIncrStyle::Cosine);
  EXPECT_EQ(s.start_wd, 0.0);
  EXPECT_FLOAT_EQ(static_cast<float>(s.end_wd), 0.1f);
  EXPECT_EQ(s.incr_samples, 240.0);
  EXPECT_DOUBLE_EQ(s.weight_decay(120), 0.5 * s.end_wd);  // half-way up the cosine
  s = make_weight_decay_schedule(parse({"--micro-batch-size", "4", "--global-batch-size", "8", "--train-samples", "100",
                                        "--end-weight-decay", "0.2", "--weight-decay", "0.1",
                                        "--weight-decay-incr-style", "linear"}));
  EXPECT_EQ(s.incr_samples, 100.0);
  EXPECT_FLOAT_EQ(static_cast<float>(s.start_wd), 0.1f);  // --start-weight-decay defaults to --weight-decay
  EXPECT_FLOAT_EQ(static_cast<float>(s.end_wd), 0.2f);

  EXPECT_EQ(error_of({"--start-weight-decay", "0.01", "--end-weight-decay", "0.1"}),
            "--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (0.01 and 0.1); give "
            "--weight-decay-incr-style linear or cosine to change it over the run");
  EXPECT_EQ(error_of({"--start-weight-decay", "0.1", "--end-weight-decay", "0.01", "--weight-decay-incr-style",
                      "linear"}),
            "--end-weight-decay (0.01) must not be below --start-weight-decay (0.1): Megatron's schedule only "
            "increases the weight decay");
  EXPECT_EQ(error_of({"--weight-decay-incr-style", "exponential"}),
            "--weight-decay-incr-style: unknown style 'exponential' (expected constant, linear or cosine)");
  EXPECT_EQ(error_of({"--start-weight-decay", "-0.1"}), "--start-weight-decay must not be negative");
  EXPECT_EQ(error_of({"--end-weight-decay", "-1", "--weight-decay-incr-style", "linear"}),
            "--end-weight-decay must not be negative");
  EXPECT_EQ(error_of({"--weight-decay", "-0.01"}), "--weight-decay must not be negative");
}

}  // namespace
}  // namespace trident
