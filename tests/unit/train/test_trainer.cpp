// The trainer's bookkeeping against Megatron-LM's rules, on short CPU runs of a tiny model:
//  - the LR scheduler steps only after a successful update (fp16 runs with skipped
//    iterations), the update uses the rate before the step, and the log line and the
//    TensorBoard "learning-rate" scalar show the rate after it; a warm-up starts from
//    --lr-warmup-init;
//  - skipped iterations stay out of the loss averages, an interval of skips only has no
//    loss field, the loss scale is always printed, and TensorBoard's is the same (after the
//    scaler's update);
//  - the weight-decay schedule gives each update its decay, and the optimizer applies it;
//  - --exit-duration-in-mins stops after the iteration that ran out of time, saving first;
//  - --rampup-batch-size: each iteration's batch, micro-batches and learning rate follow the ramp;
//  - a run whose every step skips for an inf gradient norm (fp32, bf16) stops after
//    --max-nan-iterations, while fp16's loss-scale back-off does not count;
//  - a missing --load directory starts from scratch; the scheduler's position is saved in
//    the checkpoint, and a checkpoint without it falls back to the consumed samples;
//  - --no-load-optim restarts the schedule at step 0 (Megatron loads the scheduler only with
//    the optimizer) while the iteration and the consumed samples carry on;
//  - the schedules' parameters (rate and weight decay) are saved and checked on resume (a difference is an error
//    unless --override-opt_param-scheduler or --use-checkpoint-opt_param-scheduler says
//    which schedule wins); a checkpoint without them loads with the command line's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/profiling_backend.h"
#include "train/synthetic_data.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace trident {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // trainer_test_util.h

// fp16 at Megatron's initial scale 2^32: the first iterations skip while the scale backs
// off; a growth window of 3 then doubles the scale into overflows again, so skipped
// iterations also fall between successful ones, in the warm-up and in the decay.
TrainOptions fp16_options() {
  TrainOptions o = tiny_options();
  o.model.dtype = DType::F16;
  o.loss_scale_window = 3;
  o.max_nan_iterations = 2;  // overflow skips must not count: the back-off alone skips more
  return o;
}

// Megatron's cosine schedule after `samples` samples of successful updates, written out.
double expected_lr(uint64_t samples) {
  const double step = static_cast<double>(samples), warmup = kWarmupIters * kGlobalBatch,
               decay = kTrainIters * kGlobalBatch;
  if (step <= warmup) return kMaxLr * step / warmup;
  if (step > decay) return kMinLr;
  return kMinLr + 0.5 * (std::cos(M_PI * (step - warmup) / (decay - warmup)) + 1.0) * (kMaxLr - kMinLr);
}

struct TrainedRun {
  std::vector<IterationResult> history;
  std::string log;
  uint64_t consumed_samples = 0, scheduler_samples = 0;
};

TrainedRun train(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  tr.train();
  return TrainedRun{tr.history(), log.str(), tr.consumed_samples(), tr.scheduler_samples()};
}

std::vector<std::string> iteration_lines(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(" iteration ", 0) == 0) lines.push_back(line);
  return lines;
}

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

TEST(TrainerLr, SchedulerStepsOnlyAfterSuccessfulUpdates) {
  const TrainedRun run = train(fp16_options());
  ASSERT_EQ(run.history.size(), static_cast<size_t>(kTrainIters));
  uint64_t successful = 0;
  int skipped = 0, skipped_after_a_success = 0;
  for (size_t i = 0; i < run.history.size(); ++i) {
    const IterationResult& r = run.history[i];
    EXPECT_NEAR(r.lr, expected_lr(successful * kGlobalBatch), 1e-15) << "rate used at iteration " << i + 1;
    if (!r.skipped) ++successful;
    EXPECT_NEAR(r.logged_lr, expected_lr(successful * kGlobalBatch), 1e-15) << "rate logged at iteration " << i + 1;
    if (r.skipped) {
      EXPECT_EQ(r.logged_lr, r.lr) << "a skipped iteration leaves the rate alone (iteration " << i + 1 << ")";
      EXPECT_TRUE(std::isfinite(r.loss)) << "an overflow, not a NaN loss";
      ++skipped;
      skipped_after_a_success += successful > 0;
    }
  }
  // The run is the scenario this test is about: the back-off, then skips among updates.
  EXPECT_GE(skipped, 10);
  EXPECT_GE(skipped_after_a_success, 2);
  EXPECT_GE(successful, 8u);

  EXPECT_EQ(run.scheduler_samples, successful * kGlobalBatch);
  EXPECT_EQ(run.consumed_samples, static_cast<uint64_t>(kTrainIters) * kGlobalBatch);
}

TEST(TrainerLr, LogShowsTheRateAfterTheStep) {
  TrainOptions o = tiny_options();
  o.train_iters = 8;
  o.lr_warmup_iters = 2;
  o.lr_decay_style = "linear";
  const TrainedRun run = train(o);
  const std::vector<std::string> lines = iteration_lines(run.log);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(run.history[0].lr, 0.0);  // iteration 1 of a warm-up updates with rate 0 ...
  EXPECT_TRUE(has(lines[0], "| learning rate: 5.000E-04 |")) << lines[0];  // ... and logs lr(1 step)
  EXPECT_NEAR(run.history[7].lr, kMinLr + (kMaxLr - kMinLr) / 6, 1e-18);  // lr(7 steps) of linear 2..8
  EXPECT_TRUE(has(lines[7], "| learning rate: 1.000E-04 |")) << lines[7];  // the end: min-lr
}

TEST(TrainerLog, SkippedIterationsStayOutOfTheLossAverages) {
  TrainOptions o = fp16_options();
  const TrainedRun each = train(o);
  o.log_interval = 5;
  const TrainedRun grouped = train(o);
  ASSERT_EQ(each.history.size(), grouped.history.size());
  for (size_t i = 0; i < each.history.size(); ++i) ASSERT_EQ(each.history[i].loss, grouped.history[i].loss);

  const std::vector<std::string> lines = iteration_lines(each.log);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kTrainIters));
  for (size_t i = 0; i < lines.size(); ++i) {
    const IterationResult& r = each.history[i];
    const std::string& l = lines[i];
    EXPECT_TRUE(has(l, "| learning rate: " + printf_string("%.3E", r.logged_lr) + " |")) << l;
    // Megatron's order: ... global batch size | lm loss | loss scale | grad norm | skipped | nan.
    const size_t batch = l.find("| global batch size:"), scale = l.find("| loss scale: "),
                 counts = l.find("| number of skipped iterations:");
    ASSERT_TRUE(batch < scale && scale < counts) << l;
    EXPECT_TRUE(has(l, "| number of nan iterations:   0 |")) << l;
    if (r.skipped) {
      EXPECT_FALSE(has(l, "lm loss")) << l;
      EXPECT_FALSE(has(l, "lm acc")) << l;
      EXPECT_FALSE(has(l, "grad norm")) << l;
    } else {
      const size_t loss = l.find("| lm loss: " + printf_string("%.6E", r.loss) + " |");
      EXPECT_TRUE(batch < loss && loss < scale) << l;
      EXPECT_TRUE(has(l, "| grad norm: " + printf_string("%.3f", r.grad_norm) + " |")) << l;
    }
  }

  const std::vector<std::string> grouped_lines = iteration_lines(grouped.log);
  ASSERT_EQ(grouped_lines.size(), static_cast<size_t>(kTrainIters / 5));
  int loss_free_lines = 0;
  for (size_t k = 0; k < grouped_lines.size(); ++k) {
    double sum = 0;
    int updated = 0;
    for (size_t i = 5 * k; i < 5 * k + 5; ++i)
      if (!grouped.history[i].skipped) sum += grouped.history[i].loss, ++updated;
    const std::string& l = grouped_lines[k];
    // The skipped count is the interval's (Megatron resets it after every line).
    EXPECT_TRUE(has(l, "| number of skipped iterations:   " + std::to_string(5 - updated) + " |")) << l;
    if (updated == 0) {
      EXPECT_FALSE(has(l, "lm loss")) << l;
      ++loss_free_lines;
    } else {
      EXPECT_TRUE(has(l, "| lm loss: " + printf_string("%.6E", sum / updated) + " |")) << l;
    }
  }
  EXPECT_GE(loss_free_lines, 1) << "the back-off from 2^32 should fill the first interval";
}

// The scalars tagged `tag` of the event files in `dir`, decoded by the independent reader:
// per record, {step, float32 bits}.
std::vector<std::pair<int64_t, uint32_t>> tensorboard_scalars(const fs::path& dir, const std::string& tag) {
  std::string want;  // the reader prints tags as the hex of their bytes
  for (unsigned char c : tag) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", c);
    want += hex;
  }
  std::vector<std::pair<int64_t, uint32_t>> values;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string cmd = std::string(TRIDENT_PYTHON3) + " " + TRIDENT_READ_TFEVENTS + " '" + e.path().string() + "'";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return values;
    char got[256];
    long long step = 0;
    unsigned bits = 0;
    char line[512];  // "scalar <step> <tag hex> <value bits> <wall bits>"
    while (std::fgets(line, sizeof line, p))
      if (std::sscanf(line, "scalar %lld %255s %x", &step, got, &bits) == 3 && want == got)
        values.emplace_back(step, bits);
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  return values;
}

uint32_t float_bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

TEST(TrainerLog, TensorBoardLearningRateIsTheLoggedRate) {
  const fs::path dir = fresh_temp_dir("tensorboard");
  TrainOptions o = fp16_options();
  o.tensorboard_dir = dir.string();
  const TrainedRun run = train(o);
  const auto rates = tensorboard_scalars(dir, "learning-rate");
  ASSERT_EQ(rates.size(), run.history.size());
  for (size_t i = 0; i < rates.size(); ++i) {
    EXPECT_EQ(rates[i].first, static_cast<int64_t>(i + 1));
    EXPECT_EQ(rates[i].second, float_bits(run.history[i].logged_lr)) << "iteration " << i + 1;
  }
  fs::remove_all(dir);
}

// Megatron's --no-log-learnig-rate-to-tensorboard (its spelling) and
// --no-log-loss-scale-to-tensorboard leave those scalars out, and only those.
TEST(TrainerLog, TensorBoardWithoutLearningRateOrLossScale) {
  const fs::path dir = fresh_temp_dir("tensorboard_without");
  TrainOptions o = fp16_options();
  o.tensorboard_dir = dir.string();
  o.log_learning_rate_to_tensorboard = false;
  o.log_loss_scale_to_tensorboard = false;
  const TrainedRun run = train(o);
  for (const char* tag : {"learning-rate", "learning-rate vs samples", "loss-scale", "loss-scale vs samples"})
    EXPECT_TRUE(tensorboard_scalars(dir, tag).empty()) << tag;
  EXPECT_FALSE(tensorboard_scalars(dir, "lm loss").empty()) << run.log;
  fs::remove_all(dir);
}

// --log-world-size-to-tensorboard and --log-memory-to-tensorboard: Megatron's tags, every
// iteration; the memory is the allocator's (the last peak is the run's: nothing runs after).
TEST(TrainerLog, TensorBoardWorldSizeAndMemory) {
  const fs::path dir = fresh_temp_dir("tensorboard_memory");
  TrainOptions o = tiny_options();
  o.train_iters = 5;
  o.tensorboard_dir = dir.string();
  o.log_world_size_to_tensorboard = true;
  o.log_memory_to_tensorboard = true;
  auto be = make_cpu_backend();
  std::ostringstream log;
  {
    Trainer tr(o, *be, synthetic_tokens(o), log);
    tr.train();
  }
  const AllocatorStats end = be->allocator().stats();
  const auto world = tensorboard_scalars(dir, "world-size");
  ASSERT_EQ(world.size(), 5u);
  for (const auto& [step, bits] : world) EXPECT_EQ(bits, float_bits(1.0)) << step;
  EXPECT_EQ(tensorboard_scalars(dir, "world-size vs samples").back().first, 5 * kGlobalBatch);
  const auto peak = tensorboard_scalars(dir, "mem-max-allocated-bytes");
  const auto in_use = tensorboard_scalars(dir, "mem-allocated-bytes");
  const auto reserved = tensorboard_scalars(dir, "mem-reserved-bytes");
  const auto count = tensorboard_scalars(dir, "mem-allocated-count");
  ASSERT_EQ(peak.size(), 5u);
  ASSERT_EQ(in_use.size(), 5u);
  ASSERT_EQ(reserved.size(), 5u);
  ASSERT_EQ(count.size(), 5u);
  EXPECT_EQ(peak.back().second, float_bits(static_cast<double>(end.peak_bytes_in_use)));
  auto value = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_GT(value(in_use[i].second), 0.0f);
    EXPECT_LE(value(in_use[i].second), value(peak[i].second));
    EXPECT_LE(value(in_use[i].second), value(reserved[i].second));
    EXPECT_GT(value(count[i].second), 10.0f) << "parameters, gradients and optimizer states at least";
  }
  fs::remove_all(dir);
}

// --tensorboard-tags megatron-deepspeed: Megatron-DeepSpeed's panels and token axis, the
// run's position, the validation's and the test set's losses at the training's position, and
// none of Megatron-LM's tags; its batch size has no token axis. The iteration time
// (--log-timers-to-tensorboard) in both layouts at multiples of --log-interval: Megatron-LM's
// without a samples axis. The perplexity only with --log-validation-ppl-to-tensorboard.
TEST(TrainerLog, TensorBoardMegatronDeepSpeedTags) {
  const fs::path dir = fresh_temp_dir("tensorboard_deepspeed");
  TrainOptions o = tiny_options();
  o.train_iters = 5;
  o.tensorboard_dir = dir.string();
  o.tensorboard_tags = "megatron-deepspeed";
  o.log_batch_size_to_tensorboard = true;
  o.log_timers_to_tensorboard = true;
  o.log_interval = 2;
  o.eval_interval = 4;
  o.eval_iters = 1;
  const auto run = [&] {
    auto be = make_cpu_backend();
    std::ostringstream log;
    Trainer tr(o, *be, synthetic_tokens(o), log);
    tr.set_evaluation_data(synthetic_tokens(o, 1), synthetic_tokens(o, 2));
    tr.train();
    return tr.history();
  };
  const std::vector<IterationResult> history = run();
  const int64_t tokens_per_iteration = int64_t{kGlobalBatch} * o.model.seq_length;
  const auto loss = tensorboard_scalars(dir, "lm-loss-training/lm loss");
  const auto loss_vs_samples = tensorboard_scalars(dir, "lm-loss-training/lm loss vs samples");
  const auto loss_vs_tokens = tensorboard_scalars(dir, "lm-loss-training/lm loss vs tokens");
  ASSERT_EQ(loss.size(), 5u);
  ASSERT_EQ(loss_vs_samples.size(), 5u);
  ASSERT_EQ(loss_vs_tokens.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const int64_t it = static_cast<int64_t>(i) + 1;
    EXPECT_EQ(loss[i].first, it);
    EXPECT_EQ(loss_vs_samples[i].first, it * kGlobalBatch);
    EXPECT_EQ(loss_vs_tokens[i].first, it * tokens_per_iteration);
    EXPECT_EQ(loss[i].second, float_bits(history[i].loss)) << it;
    EXPECT_EQ(loss_vs_tokens[i].second, loss[i].second) << it;
  }
  const auto tokens = tensorboard_scalars(dir, "steps-vs-tokens/y=tokens,x=steps");
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(tokens.back().first, 5);
  EXPECT_EQ(tokens.back().second, float_bits(static_cast<double>(5 * tokens_per_iteration)));
  const auto steps = tensorboard_scalars(dir, "steps-vs-samples/y=steps,x=samples");
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps.back().first, 5 * kGlobalBatch);
  EXPECT_EQ(steps.back().second, float_bits(5.0));
  for (const char* tag : {"grad-norm/grad-norm vs tokens", "learning-rate/learning-rate vs tokens",
                          "loss-scale/loss-scale vs samples", "batch-size/batch-size vs samples"})
    EXPECT_EQ(tensorboard_scalars(dir, tag).size(), 5u) << tag;
  // The evaluation at iteration 4, then the final validation and test at 5.
  const auto valid = tensorboard_scalars(dir, "lm-loss-validation/lm loss validation vs tokens");
  ASSERT_EQ(valid.size(), 2u);
  EXPECT_EQ(valid[0].first, 4 * tokens_per_iteration);
  EXPECT_EQ(valid[1].first, 5 * tokens_per_iteration);
  const auto test = tensorboard_scalars(dir, "lm-loss-validation/lm loss test");
  ASSERT_EQ(test.size(), 1u);
  EXPECT_EQ(test[0].first, 5);
  const auto time = tensorboard_scalars(dir, "iteration-time/iteration-time vs tokens");
  ASSERT_EQ(time.size(), 2u);
  EXPECT_EQ(time[0].first, 2 * tokens_per_iteration);
  EXPECT_EQ(time[1].first, 4 * tokens_per_iteration);
  for (const char* tag : {"lm loss", "lm loss vs samples", "grad-norm", "learning-rate", "lm loss validation",
                          "batch-size/batch-size vs tokens", "lm-loss-validation/lm loss validation ppl"})
    EXPECT_TRUE(tensorboard_scalars(dir, tag).empty()) << tag;
  fs::remove_all(dir);

  o.tensorboard_tags = "megatron";
  o.log_validation_ppl_to_tensorboard = true;
  run();
  const auto megatron_time = tensorboard_scalars(dir, "iteration-time");
  ASSERT_EQ(megatron_time.size(), 2u);
  EXPECT_EQ(megatron_time[1].first, 4);
  EXPECT_TRUE(tensorboard_scalars(dir, "iteration-time vs samples").empty());
  EXPECT_TRUE(tensorboard_scalars(dir, "steps-vs-tokens/y=tokens,x=steps").empty());
  EXPECT_EQ(tensorboard_scalars(dir, "lm loss").size(), 5u);
  EXPECT_EQ(tensorboard_scalars(dir, "lm loss validation").size(), 2u);  // not the test set's
  EXPECT_EQ(tensorboard_scalars(dir, "lm loss validation ppl vs samples").size(), 2u);
  EXPECT_TRUE(tensorboard_scalars(dir, "lm loss test").empty());
  fs::remove_all(dir);
}

// Megatron writes the scale after the scaler's update to both: the TensorBoard scalar of an
// iteration is the scale its log line prints (fp16's back-off changes it, so a scalar that
// lagged by an iteration would differ).
TEST(TrainerLog, TensorBoardLossScaleIsTheLoggedScale) {
  const fs::path dir = fresh_temp_dir("tensorboard_scale_fp16");
  TrainOptions o = fp16_options();
  o.tensorboard_dir = dir.string();
  const TrainedRun run = train(o);
  const std::vector<std::string> lines = iteration_lines(run.log);
  const auto scales = tensorboard_scalars(dir, "loss-scale");
  ASSERT_EQ(scales.size(), run.history.size());
  ASSERT_EQ(lines.size(), run.history.size());
  int changes = 0;
  for (size_t i = 0; i < scales.size(); ++i) {
    EXPECT_EQ(scales[i].first, static_cast<int64_t>(i + 1));
    EXPECT_EQ(scales[i].second, float_bits(run.history[i].loss_scale)) << "iteration " << i + 1;
    EXPECT_TRUE(has(lines[i], "| loss scale: " + printf_string("%.1f", run.history[i].loss_scale) + " |")) << lines[i];
    changes += i > 0 && run.history[i].loss_scale != run.history[i - 1].loss_scale;
  }
  EXPECT_GE(changes, 10) << "the back-off from 2^32 changes the scale";
  EXPECT_EQ(run.history[0].loss_scale, 4294967296.0) << "the first overflow counts the hysteresis down only";
  EXPECT_EQ(run.history[1].loss_scale, 2147483648.0) << "the second halves the scale";
  fs::remove_all(dir);
}

// In the log line and, as Megatron writes it every iteration, in TensorBoard.
TEST(TrainerLog, LossScaleIsOneWithoutAScaler) {
  TrainOptions o = tiny_options();
  o.train_iters = 2;
  o.lr_warmup_iters = 0;
  for (DType dtype : {DType::F32, DType::BF16}) {
    const fs::path dir = fresh_temp_dir("tensorboard-scale");
    o.model.dtype = dtype;
    o.tensorboard_dir = dir.string();
    const std::vector<std::string> lines = iteration_lines(train(o).log);
    ASSERT_EQ(lines.size(), 2u);
    for (const std::string& l : lines) {
      const size_t loss = l.find("| lm loss: "), scale = l.find("| loss scale: 1.0 |"), norm = l.find("| grad norm: ");
      EXPECT_TRUE(loss < scale && scale < norm && norm != std::string::npos) << dtype_name(dtype) << ": " << l;
    }
    const auto scales = tensorboard_scalars(dir, "loss-scale");
    ASSERT_EQ(scales.size(), 2u) << dtype_name(dtype);
    for (const auto& [step, bits] : scales) EXPECT_EQ(bits, float_bits(1.0)) << dtype_name(dtype) << " step " << step;
    fs::remove_all(dir);
  }
}

// A huge init gives a finite loss but infinite gradients: every step skips, nothing recovers.
// 1e12: in the middle of the range where the fp32 gradient norm overflows (on an AMD EPYC
// with OpenBLAS 0.3.21, 1e11..1e14; at 1e10 the fp32 norm stayed finite there for 10 steps,
// and from 1e15 up it was finite again).
TEST(TrainerNan, InfiniteGradientNormsStopAnUnscaledRun) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    TrainOptions o = tiny_options();
    o.model.dtype = dtype;
    o.model.init_method_std = 1e12f;
    o.max_nan_iterations = 2;
    auto be = make_cpu_backend();
    std::ostringstream log;
    Trainer tr(o, *be, synthetic_tokens(o), log);
    try {
      tr.train();
      ADD_FAILURE() << dtype_name(dtype) << ": the run did not stop";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(has(e.what(), "3 iterations in a row (--max-nan-iterations 2)")) << e.what();
      EXPECT_TRUE(has(e.what(), "stopped at iteration 3")) << e.what();
    }
    ASSERT_EQ(tr.history().size(), 3u);
    for (const IterationResult& r : tr.history()) {
      EXPECT_TRUE(r.skipped);
      EXPECT_TRUE(std::isfinite(r.loss)) << "the loss stays finite: only the gradient norm is not";
    }
    EXPECT_EQ(tr.scheduler_samples(), 0u);
    // Skipped, but not Megatron's "nan iterations" (those have a NaN loss). The stop comes
    // before the third iteration's line.
    const std::vector<std::string> lines = iteration_lines(log.str());
    ASSERT_EQ(lines.size(), 2u);
    // Counts per log interval, as Megatron's (reset after every line).
    EXPECT_TRUE(has(lines[1], "| number of skipped iterations:   1 | number of nan iterations:   0 |")) << lines[1];
  }
}

// --lr-warmup-init: iteration 1 of the warm-up updates with init_lr (Megatron's get_lr).
TEST(TrainerLr, WarmupStartsFromTheWarmupInit) {
  TrainOptions o = tiny_options();
  o.train_iters = 6;
  o.lr_decay_iters = kTrainIters;  // expected_lr's decay
  o.lr_warmup_init = 2e-4;
  const TrainedRun run = train(o);
  ASSERT_EQ(run.history.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const double step = static_cast<double>(i * kGlobalBatch), warmup = kWarmupIters * kGlobalBatch;
    const double want = step <= warmup ? 2e-4 + (kMaxLr - 2e-4) * step / warmup : expected_lr(i * kGlobalBatch);
    EXPECT_NEAR(run.history[i].lr, want, 1e-18) << "iteration " << i + 1;
  }
  EXPECT_EQ(run.history[0].lr, 2e-4);
}

// Megatron's weight-decay schedule, per successful update like the rate: each iteration's
// decay is get_wd at the samples of the updates before it, and the optimizer applies it.
TEST(TrainerWeightDecay, ScheduledDecayIsTheOneApplied) {
  TrainOptions o = tiny_options();
  o.train_iters = 5;
  o.lr = 1e-2;
  o.min_lr = 1e-2;
  o.lr_decay_style = "constant";
  o.lr_warmup_iters = 0;
  o.model.hidden_dropout = o.model.attention_dropout = 0;
  o.start_weight_decay = 0.5;
  o.end_weight_decay = 20.5;
  o.weight_decay_incr_style = "linear";
  const TrainedRun rising = train(o);
  ASSERT_EQ(rising.history.size(), 5u);
  for (size_t i = 0; i < 5; ++i)  // r = samples / (5 x 4): 0.5 + 20 r
    EXPECT_NEAR(rising.history[i].weight_decay, 0.5 + 20.0 * static_cast<double>(i) / 5, 1e-12)
        << "iteration " << i + 1;
  // The first update decays with start_wd: a constant 0.5 gives the same parameters, hence
  // the same second loss; the later updates decay more, so the losses part.
  TrainOptions flat = o;
  flat.start_weight_decay = flat.end_weight_decay = 0.5;
  flat.weight_decay_incr_style = "constant";
  const TrainedRun constant = train(flat);
  EXPECT_EQ(rising.history[1].loss, constant.history[1].loss);
  EXPECT_NE(rising.history[2].loss, constant.history[2].loss);
  EXPECT_NE(rising.history[4].loss, constant.history[4].loss);
  for (const IterationResult& r : constant.history) EXPECT_EQ(r.weight_decay, 0.5);
  // A first step at another decay gives other parameters.
  flat.start_weight_decay = flat.end_weight_decay = 10.5;
  EXPECT_NE(train(flat).history[1].loss, constant.history[1].loss);
}

// After every iteration the ranks agree whether the time is up (one rank here); then the run
// saves (with --save) and ends without the final evaluation.
TEST(TrainerExit, ExitDurationStopsAfterTheIterationAndSaves) {
  const fs::path dir = fresh_temp_dir("exit_duration");
  TrainOptions o = tiny_options();
  o.exit_duration_in_mins = 1e-12;  // over before the first iteration ends
  o.save = dir.string();
  const TrainedRun run = train(o);
  ASSERT_EQ(run.history.size(), 1u);
  EXPECT_TRUE(has(run.log, "trident: exiting at iteration 1 after ")) << run.log;
  EXPECT_TRUE(has(run.log, " minutes (--exit-duration-in-mins)")) << run.log;
  EXPECT_TRUE(fs::is_directory(iteration_dir(dir, 1))) << "the stop saves a checkpoint";
  EXPECT_FALSE(has(run.log, "trident: done")) << run.log;
  o.exit_duration_in_mins = 1e6;
  o.save.clear();
  o.train_iters = 3;
  o.lr_warmup_iters = 0;
  EXPECT_EQ(train(o).history.size(), 3u);
  fs::remove_all(dir);
}

// Synthetic tokens that create a file when the trainer reads sample `trigger`: the kill
// switch appearing during a given iteration.
class CreatesFileAtSample : public SampleSource {
 public:
  CreatesFileAtSample(std::unique_ptr<SampleSource> inner, uint64_t trigger, fs::path file)
      : inner_(std::move(inner)), trigger_(trigger), file_(std::move(file)) {}
  uint64_t size() const override { return inner_->size(); }
  void get(uint64_t i, int32_t* tokens) const override {
    if (i == trigger_) std::ofstream(file_) << "stop";
    inner_->get(i, tokens);
  }

 private:
  std::unique_ptr<SampleSource> inner_;
  uint64_t trigger_;
  fs::path file_;
};

// BigScience's --kill-switch-path: found after an iteration, the run saves it and ends without
// the final evaluation; found at the start, it ends without training or saving; after the
// last iteration it changes nothing.
TEST(TrainerExit, KillSwitchStopsAfterTheIterationAndSaves) {
  const fs::path dir = fresh_temp_dir("kill_switch");
  const fs::path kill = dir / "kill-switch";
  TrainOptions o = tiny_options();
  o.save = (dir / "ckpt").string();
  o.kill_switch_path = kill.string();
  o.eval_iters = 1;
  auto be = make_cpu_backend();
  std::ostringstream log;
  // Iteration 3 reads samples 8 to 11.
  Trainer tr(o, *be, std::make_unique<CreatesFileAtSample>(synthetic_tokens(o), 9, kill), log);
  tr.set_evaluation_data(synthetic_tokens(o, 1), synthetic_tokens(o, 2));
  tr.train();
  EXPECT_EQ(tr.iteration(), 3);
  EXPECT_TRUE(has(log.str(), "trident: kill switch " + kill.string() + " found at iteration 3\n")) << log.str();
  EXPECT_TRUE(fs::is_directory(iteration_dir(dir / "ckpt", 3))) << "the stop saves a checkpoint";
  EXPECT_FALSE(has(log.str(), "validation loss at iteration 3 on validation set")) << log.str();

  // Still there at the next start: nothing trains, nothing is saved.
  o.load = o.save;
  std::ostringstream again;
  Trainer second(o, *be, synthetic_tokens(o), again);
  ASSERT_TRUE(second.load_checkpoint());
  second.train();
  EXPECT_EQ(second.iteration(), 3);
  EXPECT_TRUE(has(again.str(), "trident: kill switch " + kill.string() + " found before iteration 4: exiting "
                               "without training\n"))
      << again.str();
  EXPECT_EQ(latest_iteration(dir / "ckpt"), 3);

  // Appearing during the last iteration: the run ends as usual, final evaluation included.
  fs::remove(kill);
  o.load.clear();
  o.save.clear();
  o.train_iters = 5;
  o.lr_warmup_iters = 0;
  std::ostringstream last;
  Trainer third(o, *be, std::make_unique<CreatesFileAtSample>(synthetic_tokens(o), 17, kill), last);
  third.set_evaluation_data(synthetic_tokens(o, 1), synthetic_tokens(o, 2));
  third.train();
  EXPECT_EQ(third.iteration(), 5);
  EXPECT_TRUE(fs::exists(kill));
  EXPECT_TRUE(has(last.str(), "validation loss at iteration 5 on validation set")) << last.str();
  fs::remove_all(dir);
}

// As Megatron, an evaluation checks the time after every batch: out of time, the run stops
// there (and saves) without the evaluation's line.
TEST(TrainerExit, ExitDurationStopsDuringTheEvaluation) {
  const fs::path dir = fresh_temp_dir("exit_duration_eval");
  TrainOptions o = tiny_options();
  o.exit_duration_in_mins = 1e-12;
  o.eval_interval = 1;
  o.eval_iters = 3;
  o.save = dir.string();
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  tr.set_evaluation_data(synthetic_tokens(o, 1), nullptr);
  tr.train();
  EXPECT_EQ(tr.iteration(), 1);
  EXPECT_TRUE(has(log.str(), "trident: exiting during the evaluation at iteration 1 after ")) << log.str();
  EXPECT_FALSE(has(log.str(), "validation loss")) << log.str();
  EXPECT_TRUE(fs::is_directory(iteration_dir(dir, 1))) << "the stop saves a checkpoint";
  fs::remove_all(dir);
}

TEST(TrainerCheckpoint, MissingLoadDirectoryStartsFromScratch) {
  const fs::path dir = fresh_temp_dir("missing");
  TrainOptions o = tiny_options();
  o.train_iters = 2;
  o.lr_warmup_iters = 0;
  o.load = (dir / "nowhere").string();
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  EXPECT_FALSE(tr.load_checkpoint());
  EXPECT_EQ(log.str(), "trident: warning: --load " + o.load +
                           " does not exist; no checkpoint loaded, starting from scratch\n");
  tr.train();
  EXPECT_EQ(tr.iteration(), 2);
  // A path that exists but is not a directory is still an error.
  std::ofstream(dir / "file") << "x";
  o.load = (dir / "file").string();
  Trainer bad(o, *be, synthetic_tokens(o), log);
  try {
    bad.load_checkpoint();
    ADD_FAILURE() << "a file loaded as a checkpoint directory";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(has(e.what(), "--load: not a directory")) << e.what();
  }
  fs::remove_all(dir);
}

uint64_t loaded_scheduler_samples(const TrainOptions& o, uint64_t* consumed) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  EXPECT_TRUE(tr.load_checkpoint()) << log.str();
  *consumed = tr.consumed_samples();
  return tr.scheduler_samples();
}

TEST(TrainerCheckpoint, SchedulerPositionIsSavedAndRestored) {
  const fs::path dir = fresh_temp_dir("scheduler");
  TrainOptions o = fp16_options();
  o.train_iters = 20;  // the back-off from 2^32 skips the first 15 of these
  o.save = dir.string();
  const TrainedRun first = train(o);
  ASSERT_LT(first.scheduler_samples, first.consumed_samples);
  ASSERT_GT(first.scheduler_samples, 0u);

  o.load = dir.string();
  uint64_t consumed = 0;
  EXPECT_EQ(loaded_scheduler_samples(o, &consumed), first.scheduler_samples);
  EXPECT_EQ(consumed, first.consumed_samples);

  // A checkpoint written before the scheduler's position was saved: the consumed samples.
  const fs::path meta = iteration_dir(dir, o.train_iters) / kMetadataFileName;
  nlohmann::json j;
  std::ifstream(meta) >> j;
  ASSERT_EQ(j["trainer_state"].erase("opt_param_scheduler"), 1u);
  std::ofstream(meta) << j.dump(1);
  EXPECT_EQ(loaded_scheduler_samples(o, &consumed), first.consumed_samples);
  fs::remove_all(dir);
}

// --profile: the capture starts before iteration profile_step_start + 1 and stops after
// iteration profile_step_end; in between every iteration and every timer's phase (whatever
// --timing-log-level) is a balanced range, and before and after nothing is.
TEST(Trainer, ProfileCapturesItsIterationsWithRanges) {
  TrainOptions o = tiny_options();
  o.train_iters = 6;
  o.profile = true;
  o.profile_step_start = 2;
  o.profile_step_end = 4;
  o.profile_rank_ids = {0};
  ProfilingBackend be(make_cpu_backend());
  std::ostringstream log;
  Trainer tr(o, be, synthetic_tokens(o), log);
  EXPECT_TRUE(has(log.str(), "trident: --profile: the device profiler captures iterations 3 to 4 on rank 0 "
                             "(run under nsys profile --capture-range=cudaProfilerApi)\n"))
      << log.str();
  // A window past the run's end is named in the same line.
  for (const auto& [end, note] : {std::pair{7, ", before --profile-step-end: the capture ends with the process"},
                                  std::pair{0, ": nothing will be captured"}}) {
    TrainOptions late = o;
    late.profile_step_start = end == 0 ? 6 : 5;
    late.profile_step_end = end == 0 ? 8 : end;
    std::ostringstream late_log;
    const Trainer probe(late, be, synthetic_tokens(late), late_log);
    EXPECT_TRUE(has(late_log.str(), std::string("cudaProfilerApi); the run ends after iteration 6") + note))
        << late_log.str();
  }
  tr.train();
  EXPECT_TRUE(has(log.str(), "trident: rank 0: --profile: the cpu+profiling backend has no device profiler to start"))
      << log.str();
  const std::vector<std::string>& ev = be.profiler_events();
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.front(), "start");
  EXPECT_EQ(ev.back(), "stop");
  std::vector<std::string> iterations, open;
  int ranges = 0;
  for (size_t i = 1; i + 1 < ev.size(); ++i) {
    ASSERT_NE(ev[i], "start");
    ASSERT_NE(ev[i], "stop");
    if (ev[i] == "pop") {
      ASSERT_FALSE(open.empty()) << "pop without a range at event " << i;
      open.pop_back();
      continue;
    }
    ASSERT_EQ(ev[i].rfind("push ", 0), 0u) << ev[i];
    const std::string name = ev[i].substr(5);
    if (name.rfind("iteration ", 0) == 0) {
      EXPECT_TRUE(open.empty()) << name << " inside " << open.back();
      iterations.push_back(name);
    } else {
      EXPECT_FALSE(open.empty()) << name << " outside an iteration";
    }
    open.push_back(name);
    ++ranges;
  }
  EXPECT_TRUE(open.empty()) << open.size() << " ranges left open, the first " << open.front();
  EXPECT_EQ(iterations, (std::vector<std::string>{"iteration 3", "iteration 4"}));
  for (const char* phase : {"push forward-backward", "push forward-compute", "push backward-compute",
                            "push optimizer", "push all-grads-sync"})
    EXPECT_EQ(std::count(ev.begin(), ev.end(), std::string(phase)), 2) << phase;
  EXPECT_GT(ranges, 10);
  // A rank the job does not have is named.
  o.profile_rank_ids = {0, 3};
  try {
    Trainer bad(o, be, synthetic_tokens(o), log);
    FAIL() << "rank 3 of a one-rank job was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--profile-ranks: rank 3 is not one of this job's 1 ranks");
  }
}

TrainedRun resume(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  EXPECT_TRUE(tr.load_checkpoint()) << log.str();
  tr.train();
  return TrainedRun{tr.history(), log.str(), tr.consumed_samples(), tr.scheduler_samples()};
}

TEST(TrainerCheckpoint, NoLoadOptimRestartsTheScheduleAtStepZero) {
  const fs::path dir = fresh_temp_dir("no_load_optim");
  TrainOptions o = tiny_options();  // warm-up: 4 of 30 iterations
  o.save = dir.string();
  o.exit_interval = 6;
  const TrainedRun first = train(o);
  ASSERT_EQ(first.history.size(), 6u);
  o.save.clear();
  o.load = dir.string();
  o.exit_interval = 8;

  const TrainedRun resumed = resume(o);  // the schedule carries on from step 6
  ASSERT_EQ(resumed.history.size(), 2u);
  EXPECT_NEAR(resumed.history[0].lr, expected_lr(6 * kGlobalBatch), 1e-15);

  o.no_load_optim = true;
  const TrainedRun restarted = resume(o);
  ASSERT_EQ(restarted.history.size(), 2u);
  // Iterations 7 and 8 use and log the rates of the first run's iterations 1 and 2 ...
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(restarted.history[i].lr, first.history[i].lr) << "iteration " << i + 7;
    EXPECT_EQ(restarted.history[i].logged_lr, first.history[i].logged_lr) << "iteration " << i + 7;
  }
  EXPECT_EQ(restarted.history[0].lr, 0.0);
  EXPECT_EQ(restarted.scheduler_samples, 2u * kGlobalBatch);
  // ... while the iteration and the consumed samples continue.
  EXPECT_EQ(restarted.consumed_samples, 8u * kGlobalBatch);
  const std::vector<std::string> lines = iteration_lines(restarted.log);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(has(lines[0], " iteration        7/      30 |")) << lines[0];
  EXPECT_TRUE(has(lines[0], "| learning rate: 2.500E-04 |")) << lines[0];  // lr(1 step of 4 warm-up steps)
  EXPECT_TRUE(has(restarted.log, "without optimizer state (learning-rate schedule from step 0)")) << restarted.log;
  fs::remove_all(dir);
}

nlohmann::json saved_scheduler(const fs::path& dir, int64_t iteration) {
  nlohmann::json j;
  std::ifstream(iteration_dir(dir, iteration) / kMetadataFileName) >> j;
  return j["trainer_state"]["opt_param_scheduler"];
}

// Megatron's OptimizerParamScheduler.load_state_dict: the checkpoint holds the schedule's
// parameters (in samples) and a resumed run's must match them, unless
// --override-opt_param-scheduler (the command line's) or --use-checkpoint-opt_param-scheduler
// (the checkpoint's) says which wins; a checkpoint without them loads as before.
TEST(TrainerCheckpoint, ScheduleParametersAreCheckedOnResume) {
  const fs::path dir = fresh_temp_dir("schedule_check");
  TrainOptions o = tiny_options();  // cosine, 1e-3 -> 1e-4, warm-up 4 and decay 30 iterations of 4 samples
  o.save = dir.string();
  o.exit_interval = 6;
  train(o);
  const nlohmann::json saved = saved_scheduler(dir, 6);
  EXPECT_EQ(saved["num_steps"], 6 * kGlobalBatch);
  EXPECT_EQ(saved["max_lr"], kMaxLr);
  EXPECT_EQ(saved["min_lr"], kMinLr);
  EXPECT_EQ(saved["lr_warmup_steps"], kWarmupIters * kGlobalBatch);
  EXPECT_EQ(saved["lr_decay_steps"], kTrainIters * kGlobalBatch);
  EXPECT_EQ(saved["lr_decay_style"], "cosine");
  EXPECT_EQ(saved["init_lr"], 0.0);
  EXPECT_FLOAT_EQ(saved["start_wd"].get<float>(), 0.01f);  // Megatron's default --weight-decay
  EXPECT_FLOAT_EQ(saved["end_wd"].get<float>(), 0.01f);
  EXPECT_EQ(saved["wd_incr_steps"], kTrainIters * kGlobalBatch);
  EXPECT_EQ(saved["wd_incr_style"], "constant");
  o.save.clear();
  o.load = dir.string();
  o.exit_interval = 8;

  // (a) The same schedule resumes.
  const TrainedRun same = resume(o);
  ASSERT_EQ(same.history.size(), 2u);
  EXPECT_EQ(same.history[0].lr, expected_lr(6 * kGlobalBatch));

  // (b) Another --lr is an error naming the field, both values and the two flags; every
  // differing field is named (here also the decay, from --train-iters).
  TrainOptions other = o;
  other.lr = 2e-3;
  std::string msg = load_error(other);
  EXPECT_EQ(msg, "--load: " + iteration_dir(dir, 6).string() +
                 ": the learning-rate and weight-decay schedule differs from the checkpoint's: max_lr (--lr) is "
                 "0.002 on the command line but 0.001 in the checkpoint (give --override-opt_param-scheduler to "
                 "train with the command line's, or --use-checkpoint-opt_param-scheduler to train with the "
                 "checkpoint's)");
  other.train_iters = 40;
  resolve_schedule(other);
  msg = load_error(other);
  EXPECT_TRUE(has(msg, "max_lr (--lr) is 0.002 on the command line but 0.001 in the checkpoint; lr_decay_steps ("))
      << msg;
  EXPECT_TRUE(has(msg, ") is 160.0 on the command line but 120.0 in the checkpoint (give")) << msg;
  EXPECT_FALSE(has(msg, "wd_incr_steps")) << "a constant weight decay has no length to compare: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  TrainOptions style = o;
  style.lr_decay_style = "linear";
  EXPECT_TRUE(has(load_error(style), "lr_decay_style (--lr-decay-style) is linear on the command line but cosine in the checkpoint"));
  // WSD's anneal is compared only where a schedule anneals: here the command line's.
  style.lr_decay_style = "WSD";
  style.lr_wsd_decay_iters = 5;
  resolve_schedule(style);
  msg = load_error(style);
  EXPECT_TRUE(has(msg, "lr_decay_style (--lr-decay-style) is WSD on the command line but cosine")) << msg;
  EXPECT_TRUE(has(msg, "wsd_decay_steps (anneal samples: --lr-wsd-decay-iters x --global-batch-size, or "
                       "--lr-wsd-decay-samples) is 20.0 on the command line but 0.0 in the checkpoint"))
      << msg;
  EXPECT_FALSE(has(msg, "lr_wsd_decay_style")) << "the default shape on both sides: " << msg;
  // The warm-up's start and the weight-decay schedule are checked like the rates.
  TrainOptions init = o;
  init.lr_warmup_init = 1e-4;
  EXPECT_TRUE(has(load_error(init), "init_lr (--lr-warmup-init) is 0.0001 on the command line but 0.0 in the "
                                    "checkpoint"))
      << load_error(init);
  // So are the word embedding's own rates (--decoupled-lr), null in a run without them.
  EXPECT_TRUE(saved["decoupled_lr"].is_null());
  EXPECT_TRUE(saved["decoupled_min_lr"].is_null());
  TrainOptions decoupled = o;
  decoupled.decoupled_lr = 3e-3;
  msg = load_error(decoupled);
  EXPECT_TRUE(has(msg, "decoupled_lr (--decoupled-lr) is 0.003 on the command line but null in the checkpoint; "
                       "decoupled_min_lr (--decoupled-min-lr (default --min-lr)) is 0.0001 on the command line but "
                       "null in the checkpoint"))
      << msg;
  TrainOptions wd = o;
  wd.end_weight_decay = 0.25;
  wd.weight_decay_incr_style = "cosine";
  msg = load_error(wd);
  EXPECT_TRUE(has(msg, "end_wd (--end-weight-decay (default --weight-decay)) is 0.25 on the command line but ")) << msg;
  EXPECT_TRUE(has(msg, "wd_incr_style (--weight-decay-incr-style) is cosine on the command line but constant in the "
                       "checkpoint"))
      << msg;
  EXPECT_FALSE(has(msg, "start_wd")) << msg;
  // A longer run with a fixed decay length resumes: the weight decay's rise spans the run,
  // but a constant decay (the checkpoint's and the command line's) never rises, so its
  // length is not compared; a rising one is.
  TrainOptions longer = o;
  longer.train_iters = 40;
  longer.lr_decay_iters = kTrainIters;
  EXPECT_EQ(load_error(longer), "");
  longer.end_weight_decay = 0.25;
  longer.weight_decay_incr_style = "linear";
  msg = load_error(longer);
  EXPECT_TRUE(has(msg, "wd_incr_steps (weight-decay samples: --train-iters x --global-batch-size, or "
                       "--train-samples) is 160.0 on the command line but 120.0 in the checkpoint"))
      << msg;

  // (c) --override-opt_param-scheduler: the command line's schedule from the saved position,
  // and the next checkpoint holds it.
  TrainOptions override_opt = o;
  override_opt.lr = 2e-3;
  override_opt.override_opt_param_scheduler = true;
  override_opt.save = (dir / "next").string();
  const TrainedRun overridden = resume(override_opt);
  ASSERT_EQ(overridden.history.size(), 2u);
  resolve_schedule(override_opt);
  const LrSchedule cli = make_lr_schedule(override_opt);
  EXPECT_EQ(overridden.history[0].lr, cli.lr(6 * kGlobalBatch));
  EXPECT_GT(overridden.history[0].lr, expected_lr(6 * kGlobalBatch));
  EXPECT_TRUE(has(overridden.log, "trident: --override-opt_param-scheduler: training with the command line's "
                                  "learning-rate and weight-decay schedule, not the checkpoint's: max_lr (--lr) is "
                                  "0.002"))
      << overridden.log;
  EXPECT_EQ(saved_scheduler(dir / "next", 8)["max_lr"], 2e-3);

  // (d) --use-checkpoint-opt_param-scheduler: the checkpoint's schedule, whatever the
  // command line says (rate, style and decay length here).
  TrainOptions use_ckpt = o;
  use_ckpt.lr = 2e-3;
  use_ckpt.lr_decay_style = "linear";
  use_ckpt.train_iters = 40;
  resolve_schedule(use_ckpt);
  use_ckpt.use_checkpoint_opt_param_scheduler = true;
  const TrainedRun from_ckpt = resume(use_ckpt);
  ASSERT_EQ(from_ckpt.history.size(), 2u);
  EXPECT_EQ(from_ckpt.history[0].lr, expected_lr(6 * kGlobalBatch));
  EXPECT_EQ(from_ckpt.history[1].lr, expected_lr(7 * kGlobalBatch));
  EXPECT_TRUE(has(from_ckpt.log, "trident: --use-checkpoint-opt_param-scheduler: training with the checkpoint's"))
      << from_ckpt.log;

  // Without the optimizer state the scheduler's state is not loaded (Megatron): nothing to
  // check, the command line's schedule from step 0.
  TrainOptions no_optim = other;
  no_optim.no_load_optim = true;
  EXPECT_EQ(load_error(no_optim), "");

  // (e) A checkpoint written before the parameters were saved (its position only) loads
  // with the command line's schedule, as before.
  const fs::path meta = iteration_dir(dir, 6) / kMetadataFileName;
  nlohmann::json j;
  std::ifstream(meta) >> j;
  j["trainer_state"]["opt_param_scheduler"] = {{"num_steps", 6 * kGlobalBatch}};
  std::ofstream(meta) << j.dump(1);
  const TrainedRun old = resume(other);
  ASSERT_EQ(old.history.size(), 2u);
  EXPECT_EQ(old.history[0].lr, make_lr_schedule(other).lr(6 * kGlobalBatch));
  fs::remove_all(dir);
}

// --rampup-batch-size 2 2 12 to a global batch of 8 over 40 samples: each iteration takes
// the ramp's batch of the samples before it (Megatron's update), with as many micro-batches,
// and the learning rate counts those samples.
TEST(TrainerRampup, IterationsTakeTheRampsBatches) {
  TrainOptions o = tiny_options();
  o.micro_batch_size = 2;
  o.global_batch_size = 8;
  o.sample_based = true;
  o.train_samples = 40;
  o.lr_warmup_iters = 0;
  o.lr_warmup_samples = 8;
  o.rampup_start = 2;
  o.rampup_increment = 2;
  o.rampup_samples = 12;
  o.model.hidden_dropout = o.model.attention_dropout = 0;
  const TrainedRun run = train(o);
  // Three steps of 4 samples: 2 (at 0), 2 (at 2), 4 (at 4), 6 (at 8); past 12 samples, 8.
  const std::vector<int> batches = {2, 2, 4, 6, 8, 8, 8};
  ASSERT_EQ(run.history.size(), batches.size());
  EXPECT_EQ(run.consumed_samples, 38u);
  EXPECT_EQ(run.scheduler_samples, 38u);
  const std::vector<std::string> lines = iteration_lines(run.log);
  ASSERT_EQ(lines.size(), batches.size());
  uint64_t consumed = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(run.history[i].global_batch, batches[i]) << "iteration " << i + 1;
    EXPECT_TRUE(has(lines[i], printf_string("| global batch size: %5.0f |", batches[i]))) << lines[i];
    const double after = static_cast<double>(consumed + batches[i]);
    EXPECT_TRUE(has(lines[i], printf_string("| consumed samples: %12.0f |", after))) << lines[i];
    // Linear warm-up over 8 samples, then cosine decay to the 40 samples' end.
    const double x = static_cast<double>(consumed);
    const double want = x <= 8 ? kMaxLr * x / 8
                               : kMinLr + 0.5 * (std::cos(M_PI * (x - 8) / 32) + 1.0) * (kMaxLr - kMinLr);
    EXPECT_NEAR(run.history[i].lr, want, 1e-15) << "iteration " << i + 1;
    consumed += batches[i];
  }
  EXPECT_TRUE(has(run.log, "(ramping up from a global batch of 2 over 12 samples)")) << run.log;
  // The first iteration trains on samples 0 and 1 alone: the loss of a run of batch 2.
  TrainOptions two = o;
  two.rampup_start = 0;
  two.global_batch_size = 2;
  two.train_samples = 16;
  EXPECT_EQ(train(two).history[0].loss, run.history[0].loss);
  two.global_batch_size = 4;
  EXPECT_NE(train(two).history[0].loss, run.history[0].loss);

  // Stopped in the ramp and resumed, the run goes on with the ramp's batches (the consumed
  // samples decide them) and the same losses.
  const fs::path dir = fresh_temp_dir("rampup");
  TrainOptions first = o;
  first.save = dir.string();
  first.exit_interval = 3;
  ASSERT_EQ(train(first).history.size(), 3u);
  TrainOptions rest = o;
  rest.load = dir.string();
  const TrainedRun resumed = resume(rest);
  ASSERT_EQ(resumed.history.size(), batches.size() - 3);
  for (size_t i = 0; i < resumed.history.size(); ++i) {
    EXPECT_EQ(resumed.history[i].global_batch, batches[i + 3]) << "iteration " << i + 4;
    EXPECT_EQ(resumed.history[i].loss, run.history[i + 3].loss) << "iteration " << i + 4;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident
