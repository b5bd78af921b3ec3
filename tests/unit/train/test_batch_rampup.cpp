// Megatron's --rampup-batch-size START INCR SAMPLES: the batch of each point of the ramp and
// the run's iterations against references written from RampupBatchsizeNumMicroBatches.update
// and training.py's update_train_iters, and the flag's checks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/batch_rampup.h"
#include "train/options.h"
#include "parse_options.h"

namespace trident {
namespace {

// RampupBatchsizeNumMicroBatches.update, written out.
int64_t reference_batch(int64_t start, int64_t incr, uint64_t ramp_samples, int64_t global, uint64_t consumed) {
  if (consumed > ramp_samples) return global;
  const double per_increment = static_cast<double>(ramp_samples) / static_cast<double>((global - start) / incr);
  return start + static_cast<int64_t>(static_cast<double>(consumed) / per_increment) * incr;
}

// update_train_iters for a sample-based run with a ramp-up, written out.
int64_t reference_iters(int64_t start, int64_t incr, uint64_t ramp_samples, int64_t global, uint64_t train_samples) {
  int64_t iterations = 0;
  uint64_t consumed = 0;
  while (consumed <= ramp_samples && consumed <= train_samples) {
    consumed += reference_batch(start, incr, ramp_samples, global, consumed);
    ++iterations;
  }
  if (train_samples > consumed) iterations += (train_samples - consumed) / global;
  return iterations;
}

BatchRampup make(int64_t start, int64_t incr, uint64_t samples, int64_t global) {
  BatchRampup r;
  r.start = start;
  r.increment = incr;
  r.samples = samples;
  r.global = global;
  return r;
}

TEST(BatchRampup, HandPickedPoints) {
  // 16 -> 64 by 16 over 1000 samples: three steps of 333.3 samples.
  const BatchRampup r = make(16, 16, 1000, 64);
  EXPECT_EQ(r.global_batch(0), 16);
  EXPECT_EQ(r.global_batch(333), 16);
  EXPECT_EQ(r.global_batch(334), 32);
  EXPECT_EQ(r.global_batch(666), 32);
  EXPECT_EQ(r.global_batch(667), 48);
  EXPECT_EQ(r.global_batch(999), 48);
  EXPECT_EQ(r.global_batch(1001), 64);
  EXPECT_EQ(r.global_batch(1u << 30), 64);
  // Without a ramp-up the batch is always the global one.
  EXPECT_EQ(make(64, 0, 0, 64).global_batch(0), 64);
  // The ramp's iterations (16 x 21 = 336 samples, 32 x 11 = 352, 48 x 7 = 336: 1024 > 1000),
  // then (5000 - 1024) / 64 = 62 whole batches.
  EXPECT_EQ(train_iters_with_rampup(r, 5000), 21 + 11 + 7 + 62);
  EXPECT_EQ(r.samples_in(21), 336u);
  EXPECT_EQ(r.samples_in(21 + 11 + 7), 1024u);
  EXPECT_EQ(r.samples_in(21 + 11 + 7 + 62), 1024u + 62 * 64);
}

TEST(BatchRampup, MatchesTheReferenceEverywhere) {
  struct Case {
    int64_t start, incr;
    uint64_t samples;
    int64_t global;
  };
  for (const Case& c : std::vector<Case>{{16, 16, 1000, 64}, {2, 2, 12, 8}, {32, 32, 3000000, 1536}, {8, 8, 1, 16},
                                          {4, 4, 7, 32}}) {
    const BatchRampup r = make(c.start, c.incr, c.samples, c.global);
    for (uint64_t x = 0; x <= c.samples + 2 * c.global; ++x)
      ASSERT_EQ(r.global_batch(x), reference_batch(c.start, c.incr, c.samples, c.global, x)) << x;
    for (uint64_t train : {uint64_t{1}, c.samples / 2, c.samples, c.samples + 1, 3 * c.samples + 17, uint64_t{100000}})
      EXPECT_EQ(train_iters_with_rampup(r, train), reference_iters(c.start, c.incr, c.samples, c.global, train))
          << c.start << " " << c.incr << " " << c.samples << " " << c.global << " over " << train;
    // samples_in against the batches summed one iteration at a time
    uint64_t consumed = 0;
    for (int64_t it = 0; it <= 3000; ++it) {
      ASSERT_EQ(r.samples_in(it), consumed) << c.start << " " << c.incr << " " << c.samples << " after " << it;
      consumed += static_cast<uint64_t>(reference_batch(c.start, c.incr, c.samples, c.global, consumed));
    }
  }
  // Without a ramp-up, and a run too long to count one iteration at a time.
  const BatchRampup flat = make(64, 16, 1000, 64);
  EXPECT_EQ(flat.samples_in(75'000'000'000), 75'000'000'000ull * 64);
  const BatchRampup r = make(16, 16, 1000, 64);
  EXPECT_EQ(r.samples_in(75'000'000'000), 1024 + (75'000'000'000ull - 39) * 64);
}

TEST(BatchRampup, FromTheFlags) {
  const std::vector<std::string> run = {"--micro-batch-size", "16", "--global-batch-size", "64", "--train-samples",
                                        "5000"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const TrainOptions o = parse(with({"--rampup-batch-size", "16", "16", "1000"}));
  EXPECT_EQ(o.train_iters, reference_iters(16, 16, 1000, 64, 5000));
  const BatchRampup r = make_batch_rampup(o);
  EXPECT_TRUE(r.ramps());
  EXPECT_EQ(r.global_batch(334), 32);
  EXPECT_FALSE(make_batch_rampup(parse(run)).ramps());
  EXPECT_EQ(parse(run).train_iters, 5000 / 64);

  EXPECT_EQ(error_of({"--train-iters", "10", "--rampup-batch-size", "4", "4", "100"}),
            "--rampup-batch-size needs sample-based training (--train-samples), as Megatron's");
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "16", "16"})),
            "--rampup-batch-size: expected START INCR SAMPLES, got 2 words");
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "16", "x", "1000"})),
            "--rampup-batch-size: cannot parse 'x' as a number");
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "0", "16", "1000"})),
            "--rampup-batch-size: START and INCR must be positive");
  // SAMPLES 0 would divide by zero (Megatron's ZeroDivisionError).
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "16", "16", "0"})),
            "--rampup-batch-size: SAMPLES must be positive");
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "64", "16", "1000"})),
            "--rampup-batch-size: START (64) must be below --global-batch-size (64)");
  EXPECT_EQ(error_of(with({"--rampup-batch-size", "16", "32", "1000"})),
            "--rampup-batch-size: --global-batch-size (64) - START (16) must be a multiple of INCR (32)");
  EXPECT_EQ(error_of({"--micro-batch-size", "4", "--global-batch-size", "64", "--train-samples", "5000",
                      "--rampup-batch-size", "6", "2", "1000"}),
            "--rampup-batch-size: START (6) and INCR (2) must be multiples of --micro-batch-size (4)");
  EXPECT_EQ(error_of({"--micro-batch-size", "4", "--train-samples", "5000", "--rampup-batch-size", "4", "4", "100"}),
            "--rampup-batch-size: START (4) must be below --global-batch-size (4, not given)");
}

}  // namespace
}  // namespace trident
