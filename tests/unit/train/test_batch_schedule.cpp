// Megatron's --rampup-batch-size START INCR SAMPLES and --step-batch-size-schedule: the batch
// of each point of the run and its iterations against references written from
// RampupBatchsizeNumMicroBatches.update, StepBatchsizeNumMicroBatchesCalculator and
// training.py's update_train_iters, and the flags' checks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/batch_schedule.h"
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

BatchSchedule make(int64_t start, int64_t incr, uint64_t samples, int64_t global) {
  BatchSchedule r;
  r.start = start;
  r.increment = incr;
  r.samples = samples;
  r.global = global;
  return r;
}

TEST(BatchSchedule, HandPickedPoints) {
  // 16 -> 64 by 16 over 1000 samples: three steps of 333.3 samples.
  const BatchSchedule r = make(16, 16, 1000, 64);
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
  EXPECT_EQ(train_iters_of_samples(r, 5000), 21 + 11 + 7 + 62);
  EXPECT_EQ(r.samples_in(21), 336u);
  EXPECT_EQ(r.samples_in(21 + 11 + 7), 1024u);
  EXPECT_EQ(r.samples_in(21 + 11 + 7 + 62), 1024u + 62 * 64);
}

TEST(BatchSchedule, MatchesTheReferenceEverywhere) {
  struct Case {
    int64_t start, incr;
    uint64_t samples;
    int64_t global;
  };
  for (const Case& c : std::vector<Case>{{16, 16, 1000, 64}, {2, 2, 12, 8}, {32, 32, 3000000, 1536}, {8, 8, 1, 16},
                                          {4, 4, 7, 32}}) {
    const BatchSchedule r = make(c.start, c.incr, c.samples, c.global);
    for (uint64_t x = 0; x <= c.samples + 2 * c.global; ++x)
      ASSERT_EQ(r.global_batch(x), reference_batch(c.start, c.incr, c.samples, c.global, x)) << x;
    for (uint64_t train : {uint64_t{1}, c.samples / 2, c.samples, c.samples + 1, 3 * c.samples + 17, uint64_t{100000}})
      EXPECT_EQ(train_iters_of_samples(r, train), reference_iters(c.start, c.incr, c.samples, c.global, train))
          << c.start << " " << c.incr << " " << c.samples << " " << c.global << " over " << train;
    // samples_in against the batches summed one iteration at a time
    uint64_t consumed = 0;
    for (int64_t it = 0; it <= 3000; ++it) {
      ASSERT_EQ(r.samples_in(it), consumed) << c.start << " " << c.incr << " " << c.samples << " after " << it;
      consumed += static_cast<uint64_t>(reference_batch(c.start, c.incr, c.samples, c.global, consumed));
    }
    for (uint64_t start : {uint64_t{1}, c.samples / 3 + 1, c.samples + 5}) {  // a resumed run's points
      uint64_t at = start;
      for (int64_t it = 0; it <= 300; ++it) {
        ASSERT_EQ(r.samples_after(start, it), at - start) << c.start << " from " << start << " after " << it;
        at += static_cast<uint64_t>(reference_batch(c.start, c.incr, c.samples, c.global, at));
      }
    }
  }
  // Without a ramp-up, and a run too long to count one iteration at a time.
  const BatchSchedule flat = make(64, 16, 1000, 64);
  EXPECT_EQ(flat.samples_in(75'000'000'000), 75'000'000'000ull * 64);
  const BatchSchedule r = make(16, 16, 1000, 64);
  EXPECT_EQ(r.samples_in(75'000'000'000), 1024 + (75'000'000'000ull - 39) * 64);
}

TEST(BatchSchedule, FromTheFlags) {
  const std::vector<std::string> run = {"--micro-batch-size", "16", "--global-batch-size", "64", "--train-samples",
                                        "5000"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const TrainOptions o = parse(with({"--rampup-batch-size", "16", "16", "1000"}));
  EXPECT_EQ(o.train_iters, reference_iters(16, 16, 1000, 64, 5000));
  const BatchSchedule r = make_batch_schedule(o);
  EXPECT_TRUE(r.varies());
  EXPECT_EQ(r.global_batch(334), 32);
  EXPECT_FALSE(make_batch_schedule(parse(run)).varies());
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

// StepBatchsizeNumMicroBatchesCalculator._get_batch_size_for_samples, written out.
int64_t reference_step_batch(const std::vector<std::pair<uint64_t, int64_t>>& steps, uint64_t consumed) {
  int64_t batch = steps[0].second;
  for (const auto& [threshold, b] : steps) {
    if (consumed >= threshold)
      batch = b;
    else
      break;
  }
  return batch;
}

BatchSchedule with_steps(const std::vector<std::pair<uint64_t, int64_t>>& steps) {
  BatchSchedule s;
  for (const auto& [samples, batch] : steps) s.steps.push_back({samples, batch, samples});
  s.start = s.global = steps.back().second;
  return s;
}

TEST(BatchSchedule, StepsMatchTheReferenceEverywhere) {
  for (const auto& steps : std::vector<std::vector<std::pair<uint64_t, int64_t>>>{
           {{0, 4}, {10, 8}, {50, 16}}, {{0, 2}, {1, 2}, {3, 6}}, {{0, 32}}, {{0, 1}, {1000, 3}}}) {
    const BatchSchedule s = with_steps(steps);
    EXPECT_TRUE(s.varies());
    for (uint64_t x = 0; x <= 2000; ++x) ASSERT_EQ(s.global_batch(x), reference_step_batch(steps, x)) << x;
    // The run's iterations one at a time: whole batches while they fit in the samples.
    for (uint64_t train = 1; train <= 3000; ++train) {
      int64_t iterations = 0;
      for (uint64_t consumed = 0; consumed + reference_step_batch(steps, consumed) <= train;
           consumed += reference_step_batch(steps, consumed))
        ++iterations;
      ASSERT_EQ(train_iters_of_samples(s, train), iterations) << train;
    }
    uint64_t consumed = 0;
    for (int64_t it = 0; it <= 3000; ++it) {
      ASSERT_EQ(s.samples_in(it), consumed) << it;
      consumed += static_cast<uint64_t>(reference_step_batch(steps, consumed));
    }
    // From points no iteration of the schedule starts at (a run resumed from another one's).
    for (uint64_t start : {uint64_t{1}, uint64_t{7}, uint64_t{9}, uint64_t{999}}) {
      uint64_t at = start;
      for (int64_t it = 0; it <= 300; ++it) {
        ASSERT_EQ(s.samples_after(start, it), at - start) << start << " " << it;
        at += static_cast<uint64_t>(reference_step_batch(steps, at));
      }
    }
  }
  // Hand-picked: 4 until 10 samples (iterations at 0, 4, 8: the switch overshoots by 2), then 8.
  const BatchSchedule s = with_steps({{0, 4}, {10, 8}, {50, 16}});
  EXPECT_EQ(s.samples_in(3), 12u);
  EXPECT_EQ(s.global_batch(12), 8);
  EXPECT_EQ(s.batches_from(0), (std::vector<int64_t>{4, 8, 16}));
  EXPECT_EQ(s.batches_from(12), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(s.batches_from(60), (std::vector<int64_t>{16}));
  EXPECT_EQ(s.samples_in(75'000'000'000), 52 + (75'000'000'000ull - 8) * 16);  // 3 x 4, 5 x 8, then 16s
}

TEST(BatchSchedule, ParsesMegatronsScheduleText) {
  // Tokens floor-divided by the sequence length; decimal K/M/B/T in any case; sorted.
  std::vector<BatchStep> s = parse_step_batch_schedule("500B:3072  0:768 250b:1536", 4096);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].samples, 0u);
  EXPECT_EQ(s[0].batch, 768);
  EXPECT_EQ(s[1].samples, 250'000'000'000ull / 4096);  // 61035156
  EXPECT_EQ(s[1].tokens, 250'000'000'000ull);
  EXPECT_EQ(s[2].samples, 122'070'312u);
  EXPECT_EQ(s[2].batch, 3072);
  // Commas; decimals truncated as Python's int(float(x) * 1000): 1.005K is 1004.
  s = parse_step_batch_schedule("0:1,1.005K:2,+1.5k:0.004K", 1);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].tokens, 1004u);
  EXPECT_EQ(s[2].tokens, 1500u);
  EXPECT_EQ(s[2].batch, 4);
  EXPECT_EQ(parse_step_batch_schedule("0:8 1e3:16", 10)[1].samples, 100u);

  auto error = [](const std::string& text, int64_t seq) {
    try {
      parse_step_batch_schedule(text, seq);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string flag = "--step-batch-size-schedule: ";
  EXPECT_EQ(error("0:4 64", 32), flag + "\"64\" is not THRESHOLD:BATCH");
  EXPECT_EQ(error("0:4 64X:8", 32), flag + "\"64X:8\" is not THRESHOLD:BATCH (numbers with an optional K, M, B or T)");
  EXPECT_EQ(error("0:4 inf:8", 32), flag + "\"inf:8\" is not THRESHOLD:BATCH (numbers with an optional K, M, B or T)");
  EXPECT_EQ(error(" , ", 32), flag + "no THRESHOLD:BATCH entries");
  EXPECT_EQ(error("64:4 128:8", 32), flag + "the first threshold must be 0 (tokens), got 64");
  EXPECT_EQ(error("0:4 10:8", 32), flag + "the thresholds 0 and 10 tokens are the same sample (0) at --seq-length 32");
  EXPECT_EQ(error("0:8 64:4", 32), flag + "the batch may not decrease (8 from 0 tokens, then 4 from 64)");
  EXPECT_EQ(error("0:0", 32), flag + "\"0:0\": the batch must be in [1, 2^31)");
  EXPECT_EQ(error("-64:4", 32), flag + "\"-64:4\": a threshold must not be negative");
  EXPECT_EQ(error("0:4 1e30:8", 32), flag + "\"1e30:8\": number too large");
}

TEST(BatchSchedule, StepsFromTheFlags) {
  const std::vector<std::string> run = {"--micro-batch-size", "2", "--seq-length", "32", "--train-samples", "100"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = run;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // 4 from 0 tokens, 8 from 320 (10 samples), 16 from 1600 (50): 3 x 4 = 12, 5 x 8 = 52, then
  // (100 - 52) / 16 = 3 whole batches.
  const TrainOptions o = parse(with({"--step-batch-size-schedule", "0:4 320:8", "1600:16"}));
  EXPECT_EQ(o.global_batch_size, 16);
  EXPECT_EQ(o.train_iters, 3 + 5 + 3);
  EXPECT_EQ(make_batch_schedule(o).global_batch(52), 16);
  EXPECT_EQ(o.decay_samples, 100u);

  EXPECT_EQ(must_fail(with({"--step-batch-size-schedule", "0:4", "--global-batch-size", "4"})),
            "--step-batch-size-schedule and --global-batch-size: give one of them (the schedule's last batch is the "
            "global batch)");
  EXPECT_EQ(must_fail(with({"--step-batch-size-schedule", "0:4", "--rampup-batch-size", "2", "2", "10"})),
            "--step-batch-size-schedule and --rampup-batch-size: give one of them");
  EXPECT_EQ(must_fail({"--train-iters", "10", "--step-batch-size-schedule", "0:4"}),
            "--step-batch-size-schedule needs sample-based training (--train-samples), as Megatron's");
  EXPECT_EQ(must_fail(with({"--step-batch-size-schedule", "0:4 32:5"})),
            "the last batch of --step-batch-size-schedule (5) must be a multiple of --micro-batch-size (2)");
  EXPECT_EQ(must_fail({"--micro-batch-size", "2", "--train-samples", "3", "--step-batch-size-schedule", "0:4"}),
            "--train-samples (3) must be at least the first batch of --step-batch-size-schedule (4)");
  EXPECT_EQ(must_fail(with({"--step-batch-size-schedule"})), "--step-batch-size-schedule: expected THRESHOLD:BATCH ...");
  // The thresholds follow a sequence length taken later (--use-checkpoint-args): 64 tokens a
  // sample put the steps at 5 and 25 samples.
  TrainOptions longer = o;
  longer.model.seq_length = 64;
  resolve_schedule(longer);
  EXPECT_EQ(make_batch_schedule(longer).steps[1].samples, 5u);
  EXPECT_EQ(make_batch_schedule(longer).steps[2].samples, 25u);
  EXPECT_EQ(longer.train_iters, 2 + 3 + 4);  // 2 of 4 (to 8), 3 of 8 (to 32), then (100 - 32) / 16 = 4
}

}  // namespace
}  // namespace trident
