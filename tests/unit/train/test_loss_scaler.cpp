// LossScaler against Megatron's ConstantGradScaler / DynamicGradScaler semantics, as
// sequences of clean and overflowing iterations with the scale expected after each, and
// against DeepSpeed's FP16_Optimizer (ZeRO stage 0) and DynamicLossScaler (stage >= 1)
// transcribed as they count.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/loss_scaler.h"

namespace trident {
namespace {

LossScalerConfig dynamic(double initial, double min_scale, int64_t window, int64_t hysteresis) {
  LossScalerConfig c;
  c.kind = LossScaleKind::Dynamic;
  c.initial_scale = initial;
  c.min_scale = min_scale;
  c.growth_interval = window;
  c.hysteresis = hysteresis;
  return c;
}

// Feeds `steps` ('.' clean, 'x' overflow) and checks the scale after each one.
void expect_sequence(LossScaler& s, const std::string& steps, const std::vector<double>& scales) {
  ASSERT_EQ(steps.size(), scales.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    s.update(steps[i] == 'x');
    ASSERT_EQ(s.scale(), scales[i]) << "after step " << i + 1 << " of '" << steps << "'";
  }
}

TEST(LossScaler, MegatronDefaults) {
  LossScalerConfig c;
  c.kind = LossScaleKind::Dynamic;
  const LossScaler s(c);
  EXPECT_EQ(s.scale(), 4294967296.0);  // 2^32
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.state().hysteresis_tracker, 2);
  EXPECT_TRUE(s.enabled());
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.inv_scale(), 1.0 / 4294967296.0);
}

TEST(LossScaler, GrowsAfterEachFullWindow) {
  LossScaler s(dynamic(1024, 1, 3, 2));
  expect_sequence(s, "........", {1024, 1024, 2048, 2048, 2048, 4096, 4096, 4096});
  EXPECT_EQ(s.state().growth_tracker, 2);
}

TEST(LossScaler, HysteresisDelaysTheBackoff) {
  // Hysteresis 2: the first overflow only counts down, the second halves; the tracker is
  // not reset by the backoff, so every further overflow halves again.
  LossScaler s(dynamic(1024, 1, 1000, 2));
  expect_sequence(s, "xxxx", {1024, 512, 256, 128});
  EXPECT_EQ(s.state().hysteresis_tracker, -2);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(LossScaler, CleanStepsBetweenOverflowsDoNotResetHysteresis) {
  // Only a full window of clean steps restores the hysteresis budget.
  LossScaler s(dynamic(1024, 1, 4, 2));
  expect_sequence(s, "x..x", {1024, 1024, 1024, 512});
  // An overflow resets the growth tracker: the window starts over.
  expect_sequence(s, "...x....x", {512, 512, 512, 256, 256, 256, 256, 512, 512});
  // After the growth (trackers reset: hysteresis 2 again) one overflow does not halve.
  EXPECT_EQ(s.state().hysteresis_tracker, 1);
  expect_sequence(s, "x", {256});
}

TEST(LossScaler, NeverBelowMinScale) {
  LossScaler s(dynamic(8, 2, 100, 1));
  expect_sequence(s, "xxxxx", {4, 2, 2, 2, 2});
  LossScaler h(dynamic(8, 3, 100, 1));  // min not a power-of-two step: clamps to 3
  expect_sequence(h, "xxx", {4, 3, 3});
}

TEST(LossScaler, HysteresisOneHalvesAtOnceAndGrowthDoubles) {
  LossScaler s(dynamic(65536, 1, 2, 1));
  expect_sequence(s, "x..x..x.", {32768, 32768, 65536, 32768, 32768, 65536, 32768, 32768});
}

// DeepSpeed's FP16_Optimizer._update_scale (deepspeed/runtime/fp16/fused_optimizer.py), as
// written there: cur_iter and last_overflow_iter, not trident's tracker.
struct Fp16OptimizerScale {
  double cur_scale, min_loss_scale;
  int64_t scale_window, cur_iter = 0, last_overflow_iter = -1;
  void update(bool skip) {
    if (skip) {
      cur_scale = std::max(cur_scale / 2, min_loss_scale);
      last_overflow_iter = cur_iter;
    } else {
      const int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) cur_scale *= 2;
    }
    ++cur_iter;
  }
};

LossScalerConfig deepspeed_fused(double initial, double min_scale, int64_t window) {
  LossScalerConfig c = dynamic(initial, min_scale, window, 1);
  c.kind = LossScaleKind::DeepSpeedFused;
  c.hysteresis = 0;  // not read
  return c;
}

TEST(LossScaler, DeepSpeedFusedGrowsAStepLaterAndHasNoHysteresis) {
  LossScaler s(deepspeed_fused(1024, 1, 3));
  EXPECT_TRUE(s.dynamic());
  // window + 1 clean steps to the first growth (Megatron's: window), then every window.
  expect_sequence(s, "........", {1024, 1024, 1024, 2048, 2048, 2048, 4096, 4096});
  // An overflow halves at once; the count starts over.
  expect_sequence(s, "x...x", {2048, 2048, 2048, 2048, 1024});
  expect_sequence(s, "xx", {512, 256});
  LossScaler floor(deepspeed_fused(8, 3, 100));
  expect_sequence(floor, "xxx", {4, 3, 3});
}

TEST(LossScaler, DeepSpeedFusedMatchesFp16OptimizerOnRandomSequences) {
  std::mt19937 rng(11);
  for (int64_t window : {1, 2, 5, 16}) {
    for (int run = 0; run < 20; ++run) {
      LossScaler s(deepspeed_fused(65536, 4, window));
      Fp16OptimizerScale ref{65536, 4, window};
      // Overflows at a rate that lets some windows complete and others not.
      std::bernoulli_distribution overflow(run % 2 ? 0.05 : 0.3);
      for (int step = 0; step < 200; ++step) {
        const bool x = overflow(rng);
        s.update(x);
        ref.update(x);
        ASSERT_EQ(s.scale(), ref.cur_scale) << "window " << window << " run " << run << " step " << step;
        ASSERT_EQ(s.state().growth_tracker, ref.cur_iter - ref.last_overflow_iter - 1);
      }
      // A resumed scaler continues as the one that kept running.
      LossScaler resumed(deepspeed_fused(65536, 4, window));
      resumed.set_state(s.state());
      for (int step = 0; step < 50; ++step) {
        const bool x = overflow(rng);
        resumed.update(x);
        ref.update(x);
        ASSERT_EQ(resumed.scale(), ref.cur_scale) << "resumed, step " << step;
      }
    }
  }
}

// DeepSpeed's DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), the
// scaler of its ZeRO optimizers (stage >= 1), as written there, without consecutive_hysteresis
// (which the import refuses).
struct DynamicLossScalerScale {
  double cur_scale, min_scale;
  int64_t scale_window, delayed_shift, cur_hysteresis, cur_iter = 0, last_overflow_iter = -1;
  void update(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) cur_scale = std::max(cur_scale / 2, min_scale);
      else --cur_hysteresis;
      last_overflow_iter = cur_iter;
    } else if ((cur_iter - last_overflow_iter) % scale_window == 0) {
      cur_hysteresis = delayed_shift;
      cur_scale *= 2;
    }
    ++cur_iter;
  }
};

// trident-convert's import of a Megatron-DeepSpeed ZeRO checkpoint maps that scaler's state to
// the Megatron-rules scaler trident runs for DeepSpeed at ZeRO stage >= 1
// (ckpt/megatron_deepspeed_optimizer.cpp): growth tracker (cur_iter - last_overflow_iter - 1)
// mod scale_window, hysteresis tracker cur_hysteresis. Both rules then scale alike, from the
// start and from any state mapped so.
TEST(LossScaler, DeepSpeedDynamicLossScalerStateContinuesUnderMegatronRules) {
  std::mt19937 rng(7);
  for (int64_t window : {1, 2, 5}) {
    for (int64_t hysteresis : {1, 2, 3}) {
      for (int run = 0; run < 10; ++run) {
        std::bernoulli_distribution overflow(run % 2 ? 0.05 : 0.35);
        DynamicLossScalerScale ref{65536, 4, window, hysteresis, hysteresis};
        LossScaler s(dynamic(65536, 4, window, hysteresis));
        for (int step = 0; step < 100; ++step) {
          const bool x = overflow(rng);
          s.update(x);
          ref.update(x);
          ASSERT_EQ(s.scale(), ref.cur_scale) << "window " << window << " hysteresis " << hysteresis << " step " << step;
        }
        LossScaler imported(dynamic(65536, 4, window, hysteresis));
        imported.set_state({ref.cur_scale, (ref.cur_iter - ref.last_overflow_iter - 1) % window, ref.cur_hysteresis});
        for (int step = 0; step < 100; ++step) {
          const bool x = overflow(rng);
          imported.update(x);
          ref.update(x);
          ASSERT_EQ(imported.scale(), ref.cur_scale) << "imported, window " << window << " step " << step;
        }
      }
    }
  }
}

TEST(LossScaler, ConstantAndNone) {
  LossScalerConfig c;
  c.kind = LossScaleKind::Constant;
  c.constant_scale = 128;
  LossScaler s(c);
  EXPECT_TRUE(s.enabled());
  EXPECT_FALSE(s.dynamic());
  expect_sequence(s, "xxx...x", {128, 128, 128, 128, 128, 128, 128});
  LossScaler n;  // fp32 / bf16 without --loss-scale
  EXPECT_FALSE(n.enabled());
  expect_sequence(n, "x.x", {1, 1, 1});
}

TEST(LossScaler, StateRoundTripsForCheckpoints) {
  LossScaler a(dynamic(1024, 1, 5, 3));
  for (char c : std::string("..x.x...")) a.update(c == 'x');
  const LossScalerState st = a.state();
  EXPECT_EQ(st.scale, 1024.0);
  EXPECT_EQ(st.growth_tracker, 3);
  EXPECT_EQ(st.hysteresis_tracker, 1);
  LossScaler b(dynamic(1024, 1, 5, 3));
  b.set_state(st);
  // Both continue identically: 2 clean steps finish the window (scale 2048, hysteresis
  // back to 3), then the 3rd and 4th overflows after that halve.
  for (char c : std::string("..xxx.x")) {
    a.update(c == 'x');
    b.update(c == 'x');
    ASSERT_EQ(a.scale(), b.scale());
    ASSERT_EQ(a.state().growth_tracker, b.state().growth_tracker);
    ASSERT_EQ(a.state().hysteresis_tracker, b.state().hysteresis_tracker);
  }
  EXPECT_EQ(a.scale(), 512.0);
  EXPECT_THROW(b.set_state({0.0, 0, 1}), IoError);
  EXPECT_THROW(b.set_state({1.0, -1, 1}), IoError);
  // A tracker at or past this run's window (a smaller --loss-scale-window on resume): the
  // next clean step grows the scale.
  b.set_state({256.0, 7, 3});
  EXPECT_EQ(b.state().growth_tracker, 4);
  b.update(false);
  EXPECT_EQ(b.scale(), 512.0);
  EXPECT_EQ(b.state().growth_tracker, 0);
}

TEST(LossScaler, RejectsImpossibleConfigurationsNamingTheFlag) {
  auto msg = [](const LossScalerConfig& c) -> std::string {
    try {
      LossScaler s(c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg(dynamic(0, 1, 1, 1)).find("--initial-loss-scale"), std::string::npos);
  EXPECT_NE(msg(dynamic(4, 8, 1, 1)).find("--min-loss-scale"), std::string::npos);
  EXPECT_NE(msg(dynamic(4, 0, 1, 1)).find("--min-loss-scale"), std::string::npos);
  EXPECT_NE(msg(dynamic(4, 1, 0, 1)).find("--loss-scale-window"), std::string::npos);
  EXPECT_NE(msg(dynamic(4, 1, 1, 0)).find("--hysteresis"), std::string::npos);
  LossScalerConfig c;
  c.kind = LossScaleKind::Constant;
  c.constant_scale = -1;
  EXPECT_NE(msg(c).find("--loss-scale"), std::string::npos);
}

}  // namespace
}  // namespace trident
