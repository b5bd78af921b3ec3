// Megatron-core's multi-phase training (train/training_phases.h): each phase's bounds and data
// size by Megatron's get_train_valid_test_num_samples, the window that reads a phase's dataset
// from its first sample, --phase-transition-iterations' parsing, and make_train_data building a
// later phase's data as a run of that phase's length would (its samples read from the start).
#include "train/training_phases.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../data/data_test_util.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "parse_options.h"
#include "train/train_data.h"

namespace trident {
namespace {

// Megatron's own case (its unit test of get_train_valid_test_num_samples): 22208 iterations of
// 208, one transition at 13794, resumed there: the second phase's 8414 iterations of samples.
TEST(TrainingPhases, MegatronsExtensionPhase) {
  const TrainingPhase p = training_phase({13794}, 13794, 208, 22208u * 208u);
  EXPECT_EQ(p.samples, (22208u - 13794u) * 208u);
  EXPECT_EQ(p.first_sample, 13794u * 208u);
  EXPECT_EQ(p.index, 1);
  EXPECT_EQ(p.count, 2);
  EXPECT_EQ(p.first_iteration, 13794);
  EXPECT_EQ(p.end_iteration, -1);
}

TEST(TrainingPhases, EachIterationsPhase) {
  const std::vector<int64_t> t = {2, 4};
  struct Want {
    int64_t iteration;
    int index;
    uint64_t first_sample, samples;
    int64_t end;
  };
  // 6 iterations of 4 samples: phases [0, 8), [8, 16), [16, 24).
  for (const Want& w : {Want{0, 0, 0, 8, 2}, Want{1, 0, 0, 8, 2}, Want{2, 1, 8, 8, 4}, Want{3, 1, 8, 8, 4},
                        Want{4, 2, 16, 8, -1}, Want{5, 2, 16, 8, -1}}) {
    const TrainingPhase p = training_phase(t, w.iteration, 4, 24);
    EXPECT_EQ(p.index, w.index) << w.iteration;
    EXPECT_EQ(p.count, 3);
    EXPECT_EQ(p.first_sample, w.first_sample) << w.iteration;
    EXPECT_EQ(p.samples, w.samples) << w.iteration;
    EXPECT_EQ(p.end_iteration, w.end) << w.iteration;
  }
  // At the run's end nothing is trained: Megatron's whole-run size, read from its start (a
  // relaunch of a finished run, a transition past its end too).
  const TrainingPhase end = training_phase(t, 6, 4, 24);
  EXPECT_EQ(end.first_sample, 0u);
  EXPECT_EQ(end.samples, 24u);
  EXPECT_EQ(phase_data_start(end, 6, 24, 4), 0u);
  const TrainingPhase finished = training_phase({1, 5}, 2, 4, 8);
  EXPECT_EQ(finished.samples, 8u);
  EXPECT_EQ(phase_data_start(finished, 2, 8, 4), 0u);
  // Without transitions: one phase, the whole run.
  const TrainingPhase one = training_phase({}, 3, 4, 24);
  EXPECT_EQ(one.count, 1);
  EXPECT_EQ(one.first_sample, 0u);
  EXPECT_EQ(one.samples, 24u);
  EXPECT_EQ(one.end_iteration, -1);
  // A transition past the run's end ends no phase: the run's end bounds the one before it.
  const TrainingPhase past = training_phase({10}, 3, 4, 32);
  EXPECT_EQ(past.samples, 32u);
  EXPECT_EQ(past.end_iteration, -1);
  const TrainingPhase last = training_phase({3, 10}, 3, 4, 32);
  EXPECT_EQ(last.index, 1);
  EXPECT_EQ(last.first_sample, 12u);
  EXPECT_EQ(last.samples, 20u);
  EXPECT_EQ(last.end_iteration, -1);
}

// Megatron reads a phase from (iteration - its first iteration) x the global batch, whatever
// the run consumed before the phase (an earlier batch ramp-up).
TEST(TrainingPhases, DataStartCountsThePhasesIterations) {
  const TrainingPhase p = training_phase({3}, 5, 8, 64);
  EXPECT_EQ(phase_data_start(p, 5, 40, 8), 24u);  // iteration x 8 consumed
  EXPECT_EQ(phase_data_start(p, 5, 36, 8), 20u);  // 4 fewer before the phase
  EXPECT_THROW(phase_data_start(p, 5, 10, 8), ConfigError);
}

TEST(TrainingPhases, TextNumbersIterationsAsTheLog) {
  EXPECT_EQ(phase_text(training_phase({2, 4}, 2, 4, 24)), "phase 2 of 3 (iterations 3 to 4)");
  EXPECT_EQ(phase_text(training_phase({2, 4}, 5, 4, 24)), "phase 3 of 3 (iterations from 5)");
}

// Sample i of a source is i + 100 in its first token.
class Numbered : public SampleSource {
 public:
  explicit Numbered(uint64_t n) : n_(n) {}
  uint64_t size() const override { return n_; }
  void get(uint64_t i, int32_t* tokens) const override { tokens[0] = static_cast<int32_t>(i + 100); }

 private:
  uint64_t n_;
};

TEST(TrainingPhases, WindowReadsThePhaseFromItsStart) {
  const PhaseWindow w(std::make_unique<Numbered>(5), 8);
  EXPECT_EQ(w.size(), 13u);
  int32_t token = 0;
  w.get(8, &token);
  EXPECT_EQ(token, 100);
  w.get(12, &token);
  EXPECT_EQ(token, 104);
  EXPECT_THROW(w.get(7, &token), InternalError);
  // Synthetic tokens have no end: the window's neither.
  EXPECT_EQ(PhaseWindow(std::make_unique<Numbered>(UINT64_MAX), 8).size(), UINT64_MAX);
}

TEST(TrainingPhases, FlagParsesAsMegatrons) {
  EXPECT_EQ(parse({"--phase-transition-iterations", "8, 2, 5"}).phase_transition_iterations,
            (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(parse({"--phase-transition-iterations", "5,2,5"}).phase_transition_iterations,
            (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(parse({}).phase_transition_iterations.empty());
  EXPECT_EQ(error_of({"--phase-transition-iterations", "4,0"}),
            "--phase-transition-iterations: 0 is not a positive iteration (a transition is the iteration a phase ends "
            "at)");
  EXPECT_EQ(error_of({"--phase-transition-iterations", "3", "--iterations-to-skip", "2", "3"}),
            "--iterations-to-skip 3 is a --phase-transition-iterations transition, where the run saves and exits after "
            "training that iteration: skip another");
  EXPECT_EQ(error_of({"--phase-transition-iterations", "4,x"}), "--phase-transition-iterations: cannot parse 'x' as a number");
  EXPECT_EQ(error_of({"--phase-transition-iterations", "4", "--train-samples", "64", "--global-batch-size", "8",
                      "--rampup-batch-size", "4", "4", "32"}),
            "--phase-transition-iterations and --rampup-batch-size: the phases count iterations of one global batch, as "
            "Megatron's, which refuses a ramp-up");
}

// make_train_data for a run resumed in its second phase builds that phase's dataset (the
// samples of a run of the phase's length) and reads it from its first sample; in the first
// phase, the first phase's.
TEST(TrainingPhases, TrainDataOfALaterPhaseIsARunOfItsLength) {
  testing::ScratchDir dir;
  {
    IndexedDatasetBuilder b(dir / "corpus", IndexDType::kUInt16);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> tokens;
      for (int t = 0; t <= d % 13; ++t) tokens.push_back((11 * d + 3 * t) % 400);
      b.add_item(tokens);
      b.end_document();
    }
    b.finish();
  }
  const auto options = [&](int64_t train_iters, std::vector<int64_t> transitions, int64_t start) {
    TrainOptions o;
    o.data_path = {dir / "corpus"};
    o.tokenizer_type = "NullTokenizer";
    o.null_tokenizer_vocab_size = 511;
    o.data_cache_path = dir / "cache";
    o.split = "100,0,0";
    o.model.seq_length = 8;
    o.micro_batch_size = 1;
    o.global_batch_size = 8;
    o.train_iters = train_iters;
    o.eval_iters = 0;
    o.phase_transition_iterations = std::move(transitions);
    o.start_iteration = start;
    o.start_consumed_samples = static_cast<uint64_t>(start) * 8;
    return o;
  };
  const auto sample = [](const SampleSource& s, uint64_t i) {
    std::vector<int32_t> tokens(9);
    s.get(i, tokens.data());
    return tokens;
  };
  // 14 iterations of 8, a transition at 4: phase 2 holds run samples [32, 112), more than one
  // epoch of the corpus's ~35 samples, so that its size orders its samples.
  TrainOptions phased = options(14, {4}, 5), second = options(10, {}, 0), whole = options(14, {}, 0);
  const TrainData in_phase = make_train_data(phased), of_its_length = make_train_data(second),
                  unphased = make_train_data(whole);
  ASSERT_EQ(in_phase.train->size(), 32 + of_its_length.train->size());
  bool differs = false;
  for (uint64_t j = 0; j < 80; ++j) {
    EXPECT_EQ(sample(*in_phase.train, 32 + j), sample(*of_its_length.train, j)) << j;
    differs = differs || sample(*in_phase.train, 32 + j) != sample(*unphased.train, j);
  }
  EXPECT_TRUE(differs) << "the phase's dataset is the whole run's";
  TrainOptions first_phase = options(14, {4}, 3), first_length = options(4, {}, 0);
  const TrainData first = make_train_data(first_phase), first_ref = make_train_data(first_length);
  for (uint64_t j = 0; j < 32; ++j) EXPECT_EQ(sample(*first.train, j), sample(*first_ref.train, j)) << j;
}

}  // namespace
}  // namespace trident
