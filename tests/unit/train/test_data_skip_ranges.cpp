// BigScience's --skip-train-iteration-range (train/data_skip_ranges.h): parsing as BigScience's
// (sorted, overlapping ranges merged, adjacent ones kept apart), which range is due at an
// iteration (on reaching it, or at once when resumed inside it, never one already applied),
// and the flag and Megatron-DeepSpeed's --load-tag and BigScience's --eval-only on the command
// line.
#include "train/data_skip_ranges.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "parse_options.h"

namespace trident {
namespace {

TEST(DataSkipRanges, ParsedSortedAndOverlapsMerged) {
  const std::vector<IterationRange> r = parse_skip_ranges({"251-300", "101-200", "150-220", "301-301", "7-7"});
  const std::vector<IterationRange> want = {{7, 7}, {101, 220}, {251, 300}, {301, 301}};
  EXPECT_EQ(r, want);  // 251-300 and 301-301 touch without overlapping: two ranges, as BigScience's
  EXPECT_EQ(range_text(r[1]), "101-220");
  EXPECT_TRUE(parse_skip_ranges({}).empty());
}

TEST(DataSkipRanges, BadWordsAreNamed) {
  for (const std::string w : {"100", "0-5", "-5", "5-", "a-b", "1-2-3", " 1-2", "1--2", "+1-2", "1-99999999999999999999"}) {
    try {
      parse_skip_ranges({"1-2", w});
      ADD_FAILURE() << w << " parsed";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--skip-train-iteration-range: '" + w + "' is not a range FIRST-LAST"),
                std::string::npos) << e.what();
    }
  }
  try {
    parse_skip_ranges({"9-5"});
    ADD_FAILURE() << "9-5 parsed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--skip-train-iteration-range: 9-5 ends before it starts");
  }
}

TEST(DataSkipRanges, DueOnReachingItOrInsideItUnlessApplied) {
  const std::vector<IterationRange> ranges = {{3, 5}, {6, 8}};
  EXPECT_FALSE(due_skip_range(ranges, {}, 0));
  EXPECT_FALSE(due_skip_range(ranges, {}, 1));
  EXPECT_EQ(due_skip_range(ranges, {}, 2), (IterationRange{3, 5}));  // before training 3
  EXPECT_EQ(due_skip_range(ranges, {}, 4), (IterationRange{3, 5}));  // resumed inside: the rest (5)
  EXPECT_EQ(due_skip_range(ranges, {}, 5), (IterationRange{6, 8}));  // the next one, reached at 5
  EXPECT_FALSE(due_skip_range(ranges, {}, 8));                        // past both
  // Applied (by this run, or by the run that wrote its checkpoint): never again.
  EXPECT_FALSE(due_skip_range(ranges, {{3, 5}}, 2));
  EXPECT_FALSE(due_skip_range(ranges, {{3, 5}}, 4));
  // Another range than the one applied is not that one.
  EXPECT_EQ(due_skip_range(ranges, {{3, 4}}, 3), (IterationRange{3, 5}));
}

// The samples the ranges will read past, which the training data is built for: each range's
// remaining iterations x the global batch where the run reaches it.
TEST(DataSkipRanges, SamplesReadPast) {
  BatchSchedule constant;
  constant.start = constant.global = 4;
  const std::vector<IterationRange> ranges = {{3, 5}, {8, 8}};
  EXPECT_EQ(samples_read_past(ranges, {}, constant, 0, 0, 10), 3u * 4 + 1u * 4);
  EXPECT_EQ(samples_read_past(ranges, {}, constant, 0, 0, 7), 3u * 4);  // the run ends before reaching 8
  EXPECT_EQ(samples_read_past(ranges, {}, constant, 0, 0, 2), 0u);      // ... before training 3
  EXPECT_EQ(samples_read_past(ranges, {}, constant, 4, 16, 10), 1u * 4 + 1u * 4);  // resumed inside 3-5: 5 only
  EXPECT_EQ(samples_read_past(ranges, {{3, 5}}, constant, 4, 16, 10), 1u * 4);      // 3-5 applied
  EXPECT_EQ(samples_read_past(ranges, {}, constant, 8, 32, 10), 0u);               // past both
  // A ramp-up (Megatron's: START 2, INCR 2 every 6 samples, up to 6): iterations 1 to 3 take 2
  // samples, 4 and 5 take 4; 4-5 is reached after iteration 3, at 6 samples consumed: 2 x 4.
  BatchSchedule ramp;
  ramp.start = 2;
  ramp.increment = 2;
  ramp.samples = 12;
  ramp.global = 6;
  ASSERT_EQ(ramp.global_batch(6), 4);
  EXPECT_EQ(samples_read_past({{1, 1}, {4, 5}}, {}, ramp, 0, 0, 10), 1u * 2 + 2u * 4);
  // More than 64 bits of samples saturate, so that the data check refuses them.
  BatchSchedule huge;
  huge.start = huge.global = int64_t{1} << 31;
  EXPECT_EQ(samples_read_past({{1, kMaxSkipIteration}}, {}, huge, 0, 0, 2), UINT64_MAX);
}

TEST(DataSkipRanges, CommandLine) {
  const std::vector<std::string> tiny = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "2"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = tiny;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const TrainOptions o = parse(with({"--skip-train-iteration-range", "20-30", "5-9", "--train-iters", "50"}));
  EXPECT_EQ(o.skip_train_iteration_ranges, (std::vector<IterationRange>{{5, 9}, {20, 30}}));
  EXPECT_NE(must_fail(with({"--skip-train-iteration-range"})).find("expected one or more ranges FIRST-LAST"),
            std::string::npos);
  // Megatron-DeepSpeed's --load-tag: DeepSpeed's global_stepN, trident's iter_NNNNNNN, or N.
  for (const std::string tag : {"global_step1200", "iter_0001200", "1200"}) {
    const TrainOptions t = parse(with({"--load", "/tmp/x", "--load-tag", tag}));
    EXPECT_EQ(t.ckpt_step, 1200) << tag;
    EXPECT_EQ(t.ckpt_step_flag, "--load-tag " + tag);
  }
  EXPECT_EQ(parse(with({"--load", "/tmp/x", "--load-tag", "global_step12", "--ckpt-step", "12"})).ckpt_step_flag,
            "--ckpt-step");
  for (const std::string tag : {"latest", "global_step", "global_step-1", "step12"})
    EXPECT_NE(must_fail(with({"--load", "/tmp/x", "--load-tag", tag})).find("expected a checkpoint's iteration"),
              std::string::npos) << tag;
  // BigScience's --eval-only VALUE: true is --skip-train; false is what argparse's bool() reads as true.
  EXPECT_TRUE(parse(with({"--eval-only", "True"})).skip_train);
  EXPECT_TRUE(parse(with({"--eval-only", "1"})).skip_train);
  EXPECT_FALSE(parse(with({})).skip_train);
  for (const std::string v : {"False", "0", "no"})
    EXPECT_NE(must_fail(with({"--eval-only", v})).find("reads any value as true"), std::string::npos) << v;
}

}  // namespace
}  // namespace trident
