// Training-loop properties on the CPU backend: memorising one batch, bit-identical reruns,
// gradient accumulation equal to one big micro-batch, and no allocation in the step loop.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "kernels/cpu/cpu_backend.h"
#include "model_test_util.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"

namespace trident {
namespace {

// Every sample is the same fixed sequence.
class FixedBatchSource final : public SampleSource {
 public:
  FixedBatchSource(int seq, int count, int64_t vocab) : seq_(seq), count_(count), vocab_(vocab) {}
  uint64_t size() const override { return UINT64_MAX; }
  void get(uint64_t i, int32_t* tokens) const override {
    const uint64_t row = i % count_;
    for (int k = 0; k <= seq_; ++k) tokens[k] = static_cast<int32_t>((row * 31 + k * k * 7 + 11) % vocab_);
  }

 private:
  int seq_, count_;
  int64_t vocab_;
};

TrainOptions tiny_options() {
  TrainOptions o;
  o.model = test::tiny_config();
  o.model.hidden_size = 32;
  o.model.num_attention_heads = 4;
  o.model.seq_length = 16;
  o.model.max_position_embeddings = 16;
  o.model.vocab_size = 64;
  o.micro_batch_size = 4;
  o.global_batch_size = 4;
  o.train_iters = 10;
  o.lr = 3e-3;
  o.min_lr = 3e-3;
  o.lr_decay_style = "constant";
  o.lr_decay_iters = o.train_iters;
  o.weight_decay = 0.0f;
  o.log_interval = 1000;
  o.seed = 1234;
  return o;
}

TEST(Training, MemorisesOneFixedBatch) {
  TrainOptions o = tiny_options();
  o.train_iters = 300;
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, std::make_unique<FixedBatchSource>(o.model.seq_length, 4, o.model.vocab_size), log);
  tr.train();
  const double first = tr.history().front().loss, last = tr.history().back().loss;
  EXPECT_GT(first, 3.5);  // about ln(64) = 4.16 at init
  EXPECT_LT(last, 0.05) << "loss went from " << first << " to " << last;
  EXPECT_GT(tr.history().back().acc, 0.95);
}

// Runs `iters` iterations and returns the losses and the final flat parameters.
std::pair<std::vector<double>, std::vector<float>> run(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, std::make_unique<SyntheticSource>(o.model.vocab_size, o.model.seq_length, o.seed), log);
  std::vector<double> losses;
  for (int64_t i = 0; i < o.train_iters; ++i) losses.push_back(tr.train_iteration().loss);
  return {losses, test::to_host(*be, tr.model().params().flat_params())};
}

TEST(Training, SameSeedIsBitIdentical) {
  TrainOptions o = tiny_options();
  o.model.hidden_dropout = 0.1f;
  o.model.attention_dropout = 0.1f;
  o.train_iters = 5;
  const auto a = run(o), b = run(o);
  ASSERT_EQ(a.first.size(), b.first.size());
  for (size_t i = 0; i < a.first.size(); ++i) EXPECT_EQ(a.first[i], b.first[i]) << "iteration " << i;
  ASSERT_EQ(a.second.size(), b.second.size());
  EXPECT_EQ(std::memcmp(a.second.data(), b.second.data(), a.second.size() * sizeof(float)), 0);
  o.seed = 99;  // and a different seed gives a different run
  EXPECT_NE(run(o).first[0], a.first[0]);
}

TEST(Training, GradientAccumulationEqualsOneMicroBatch) {
  TrainOptions o = tiny_options();
  o.global_batch_size = 8;
  o.micro_batch_size = 8;
  o.train_iters = 4;
  const auto one = run(o);
  o.micro_batch_size = 2;  // four micro-batches of two
  const auto four = run(o);
  for (size_t i = 0; i < one.first.size(); ++i) EXPECT_NEAR(one.first[i], four.first[i], 1e-5 * one.first[i]);
  for (size_t i = 0; i < one.second.size(); ++i) ASSERT_NEAR(one.second[i], four.second[i], 1e-4) << i;
}

TEST(Training, NoAllocationAfterTheFirstIteration) {
  TrainOptions o = tiny_options();
  o.global_batch_size = 8;
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, std::make_unique<SyntheticSource>(o.model.vocab_size, o.model.seq_length, o.seed), log);
  tr.train_iteration();
  const size_t allocs = be->allocator().stats().raw_allocs;
  for (int i = 0; i < 3; ++i) tr.train_iteration();
  EXPECT_EQ(be->allocator().stats().raw_allocs, allocs);
}

TEST(Training, LossFallsOnSyntheticTokens) {
  TrainOptions o = tiny_options();
  o.train_iters = 60;
  o.global_batch_size = 8;
  const auto r = run(o);
  EXPECT_LT(r.first.back(), r.first.front() - 1.0);
}

}  // namespace
}  // namespace trident
