// Megatron-DeepSpeed's token counts, on short CPU runs of a tiny model (16 tokens a sample,
// 4 samples a batch: 64 tokens an iteration):
//  - --lr-warmup-tokens / --lr-decay-tokens: every iteration's rate (used and logged) against
//    a transcription of Megatron-DeepSpeed's OptimizerParamScheduler driven as its training
//    loop drives it (the scheduler steps after a successful update with the consumed tokens
//    before that iteration's, so its count lags by one batch; fp16 runs skip iterations);
//  - the hand-checked corners it leaves undefined (no warm-up, a warm-up end it never lands on);
//  - --train-tokens stops the run, with the "consumed tokens" field in the log line;
//  - the scheduler's token state (num_tokens, the recorded warm-up end, the consumed tokens)
//    is saved and a resume continues the uninterrupted run's rates; a changed
//    --lr-decay-tokens is refused as Megatron's _check_and_set refuses it;
//  - --skip-train evaluates the loaded model without training or saving.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace trident {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // trainer_test_util.h

constexpr uint64_t kTokensPerIteration = kGlobalBatch * 16;

// Megatron-DeepSpeed's OptimizerParamScheduler (megatron/optimizer_param_scheduler.py),
// transcribed: get_lr runs inside step and may record the warm-up's end in tokens.
struct MegatronDsScheduler {
  std::string style;
  double max_lr = kMaxLr, min_lr = kMinLr;
  double warmup_steps = 0, decay_steps = 0;
  std::optional<double> warmup_tokens, decay_tokens;
  double num_steps = 0, num_tokens = 0, lr = 0;

  double get_lr() {
    if (!warmup_tokens) {
      if (warmup_steps > 0 && num_steps <= warmup_steps) {
        if (num_steps == warmup_steps && decay_tokens) warmup_tokens = num_tokens;
        return max_lr * num_steps / warmup_steps;
      }
    } else if (*warmup_tokens > 0 && num_tokens <= *warmup_tokens) {
      return max_lr * num_tokens / *warmup_tokens;
    }
    if (style == "constant") return max_lr;
    if (!decay_tokens ? num_steps > decay_steps : num_tokens > *decay_tokens) return min_lr;
    if (style == "inverse-square-root") {
      const double x = warmup_tokens ? std::max(*warmup_tokens, 1.0) / std::max(num_tokens, 1.0)
                                     : std::max(warmup_steps, 1.0) / std::max(num_steps, 1.0);
      return std::max(min_lr, max_lr * std::sqrt(x));
    }
    double ratio = 0;
    if (!decay_tokens) {
      ratio = (num_steps - warmup_steps) / (decay_steps - warmup_steps);
    } else {
      if (!warmup_tokens) throw std::logic_error("Megatron-DeepSpeed subtracts None here");
      ratio = (num_tokens - *warmup_tokens) / (*decay_tokens - *warmup_tokens);
    }
    const double coeff = style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
    return min_lr + coeff * (max_lr - min_lr);
  }
  void step(double increment, double token_num) {
    num_tokens = token_num;
    num_steps += increment;
    lr = get_lr();
  }
};

// The reference for `o` (its warm-up and decay in samples, as Megatron's "steps").
MegatronDsScheduler reference_for(const TrainOptions& o) {
  MegatronDsScheduler s;
  s.style = o.lr_decay_style;
  s.warmup_steps = static_cast<double>(o.lr_warmup_iters * o.global_batch_size);
  s.decay_steps = static_cast<double>((o.lr_decay_iters ? o.lr_decay_iters : o.train_iters) * o.global_batch_size);
  if (o.lr_warmup_tokens) s.warmup_tokens = static_cast<double>(*o.lr_warmup_tokens);
  if (o.lr_decay_tokens) s.decay_tokens = static_cast<double>(*o.lr_decay_tokens);
  s.step(0, 0);  // its constructor's
  return s;
}

// fp16 at Megatron's initial scale 2^32: the first iterations skip while the scale backs off,
// and a growth window of 3 brings skips back among the updates.
TrainOptions with_skips(TrainOptions o) {
  o.model.dtype = DType::F16;
  o.loss_scale_window = 3;
  o.max_nan_iterations = 2;
  return o;
}

std::vector<IterationResult> train(const TrainOptions& o, std::string* log_out = nullptr) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  tr.train();
  if (log_out) *log_out = log.str();
  return tr.history();
}

// Each iteration's rates against the reference driven as Megatron-DeepSpeed's loop drives it.
void expect_megatron_deepspeed_rates(const TrainOptions& o, const std::string& what) {
  const std::vector<IterationResult> history = train(o);
  ASSERT_EQ(history.size(), static_cast<size_t>(o.train_iters)) << what;
  MegatronDsScheduler ref = reference_for(o);
  uint64_t consumed_tokens = 0;
  int skipped = 0;
  for (size_t i = 0; i < history.size(); ++i) {
    const IterationResult& r = history[i];
    EXPECT_NEAR(r.lr, ref.lr, 1e-15) << what << ": rate used at iteration " << i + 1;
    if (!r.skipped) ref.step(kGlobalBatch, static_cast<double>(consumed_tokens));
    skipped += r.skipped;
    consumed_tokens += kTokensPerIteration;  // after the scheduler's step, as in its train()
    EXPECT_NEAR(r.logged_lr, ref.lr, 1e-15) << what << ": rate logged at iteration " << i + 1;
  }
  if (o.model.dtype == DType::F16) {
    EXPECT_GE(skipped, 10) << what;
  }
}

TEST(TokenSchedule, RatesMatchMegatronDeepSpeedsScheduler) {
  struct Case {
    const char* what;
    const char* style;
    int64_t warmup_iters;
    std::optional<uint64_t> warmup_tokens, decay_tokens;
  };
  const Case cases[] = {
      {"warm-up and decay in tokens, cosine", "cosine", 0, 200, 1500},
      {"warm-up in iterations, decay in tokens (the warm-up's end recorded), linear", "linear", 4, std::nullopt, 1500},
      {"warm-up in tokens, decay in iterations, linear", "linear", 0, 300, std::nullopt},
      {"inverse-square-root, warm-up in tokens", "inverse-square-root", 0, 200, std::nullopt},
      {"inverse-square-root, warm-up in iterations, decay in tokens", "inverse-square-root", 4, std::nullopt, 1700},
      {"constant after a warm-up in tokens", "constant", 0, 200, 1500},
  };
  for (const Case& c : cases) {
    TrainOptions o = tiny_options();
    o.lr_decay_style = c.style;
    o.lr_warmup_iters = c.warmup_iters;
    o.lr_warmup_tokens = c.warmup_tokens;
    o.lr_decay_tokens = c.decay_tokens;
    expect_megatron_deepspeed_rates(o, c.what);
    expect_megatron_deepspeed_rates(with_skips(o), std::string(c.what) + ", fp16 with skipped iterations");
  }
}

// Hand-checked points, the lag included: iteration k+1 runs at the rate of the scheduler's
// step after iteration k, whose token count is (k - 1) x 64.
TEST(TokenSchedule, HandPickedRates) {
  TrainOptions o = tiny_options();
  o.lr_decay_style = "linear";
  o.lr_warmup_iters = 0;
  o.lr_warmup_tokens = 256;
  o.lr_decay_tokens = 1280;
  const std::vector<IterationResult> h = train(o);
  EXPECT_EQ(h[0].lr, 0.0);
  EXPECT_EQ(h[1].lr, 0.0);                           // after iteration 1 the count is still 0
  EXPECT_DOUBLE_EQ(h[2].lr, kMaxLr * 64 / 256);      // after iteration 2: 64 tokens
  EXPECT_DOUBLE_EQ(h[5].lr, kMaxLr);                 // 256: the warm-up's last step
  EXPECT_DOUBLE_EQ(h[11].lr, kMinLr + (1 - 384.0 / 1024) * (kMaxLr - kMinLr));  // 640 tokens
  EXPECT_NEAR(h[21].lr, kMinLr, 1e-18);               // 1280: the decay's end
  EXPECT_EQ(h[22].lr, kMinLr);
}

// Where Megatron-DeepSpeed fails (a decay in tokens after no warm-up, or after a warm-up whose
// end no step lands on) trident decays from token 0, or from the first step past the warm-up.
TEST(TokenSchedule, CornersMegatronDeepSpeedLeavesUndefined) {
  LrSchedule s;
  s.max_lr = kMaxLr;
  s.min_lr = kMinLr;
  s.style = LrDecayStyle::Linear;
  s.decay_samples = 1000;
  s.decay_tokens = 1000;
  LrPosition p = s.step(LrPosition{}, 0, 0);
  EXPECT_FALSE(p.warmup_end_tokens);
  EXPECT_DOUBLE_EQ(s.lr(p), kMaxLr);
  p = s.step(p, 4, 250);
  EXPECT_DOUBLE_EQ(s.lr(p), kMinLr + 0.75 * (kMaxLr - kMinLr));

  s.warmup_samples = 6;  // steps of 4 samples: 4, then 8 (past 6)
  p = s.step(LrPosition{}, 4, 0);
  EXPECT_FALSE(p.warmup_end_tokens);
  EXPECT_DOUBLE_EQ(s.lr(p), kMaxLr * 4 / 6);
  p = s.step(p, 4, 100);
  ASSERT_TRUE(p.warmup_end_tokens);
  EXPECT_EQ(*p.warmup_end_tokens, 100u);
  EXPECT_DOUBLE_EQ(s.lr(p), kMaxLr);
  p = s.step(p, 4, 550);
  EXPECT_EQ(*p.warmup_end_tokens, 100u);  // recorded once
  EXPECT_DOUBLE_EQ(s.lr(p), kMinLr + 0.5 * (kMaxLr - kMinLr));
  // A warm-up that ends at or past the decay's end leaves nothing to decay.
  p = s.step(LrPosition{}, 8, 1000);
  EXPECT_EQ(s.lr(s.step(p, 4, 1000)), kMinLr);
}

// Megatron-DeepSpeed's inverse-square-root with a warm-up in samples that no step lands on
// (6 samples, steps of 4) records no warm-up end and keeps its step formula; one that lands
// (8) switches to tokens.
TEST(TokenSchedule, InverseSquareRootRecordsOnlyAnExactWarmupEnd) {
  for (const double warmup : {6.0, 8.0}) {
    LrSchedule s;
    s.max_lr = kMaxLr;
    s.min_lr = kMinLr;
    s.style = LrDecayStyle::InverseSquareRoot;
    s.warmup_samples = warmup;
    s.decay_samples = 1000;
    s.decay_tokens = 100000;
    MegatronDsScheduler ref;
    ref.style = "inverse-square-root";
    ref.warmup_steps = warmup;
    ref.decay_steps = 1000;
    ref.decay_tokens = 100000.0;
    ref.step(0, 0);
    LrPosition p = s.step(LrPosition{}, 0, 0);
    for (int k = 1; k <= 20; ++k) {
      const uint64_t tokens = static_cast<uint64_t>(k - 1) * 64;
      p = s.step(p, 4, tokens);
      ref.step(4, static_cast<double>(tokens));
      EXPECT_NEAR(s.lr(p), ref.lr, 1e-15) << "warm-up " << warmup << ", step " << k;
    }
    EXPECT_EQ(p.warmup_end_tokens.has_value(), warmup == 8.0);
  }
}

TEST(TrainTokens, StopsOnceConsumedAndLogsTheTokens) {
  TrainOptions o = tiny_options();
  o.train_tokens = 10 * kTokensPerIteration + 1;  // reached after iteration 11
  o.log_interval = 4;  // iteration 11's line comes from the stop, not from the interval
  std::string log;
  const std::vector<IterationResult> h = train(o, &log);
  EXPECT_EQ(h.size(), 11u);
  EXPECT_TRUE(has(log, " iteration       11/      30 | consumed samples:           44 | consumed tokens:          704 |"))
      << log;
  EXPECT_TRUE(has(log, " iteration        8/      30 | consumed samples:           32 | consumed tokens:          512 |"))
      << log;
  EXPECT_TRUE(has(log, "trident: --train-tokens 641 reached at iteration 11 (704 tokens)\n")) << log;
  EXPECT_TRUE(has(log, "trident: done, 11 iterations, 44 samples;")) << log;
  o.train_tokens = 10 * kTokensPerIteration;  // reached exactly by iteration 10
  EXPECT_EQ(train(o, &log).size(), 10u);
  EXPECT_TRUE(has(log, "trident: --train-tokens 640 reached at iteration 10 (640 tokens)\n")) << log;
  // A run that counts no tokens has Megatron-LM's line, without the field.
  o = tiny_options();
  o.train_iters = 2;
  o.lr_warmup_iters = 0;
  train(o, &log);
  EXPECT_FALSE(has(log, "consumed tokens")) << log;
  EXPECT_TRUE(has(log, " iteration        2/       2 | consumed samples:            8 | elapsed time")) << log;
}

struct Loaded {
  std::vector<IterationResult> history;
  std::string log;
};

Loaded resume(const TrainOptions& o) {
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  EXPECT_TRUE(tr.load_checkpoint()) << log.str();
  tr.train();
  return Loaded{tr.history(), log.str()};
}

nlohmann::json read_json(const fs::path& p) {
  nlohmann::json j;
  std::ifstream(p) >> j;
  return j;
}

TEST(TokenSchedule, CheckpointKeepsTheTokenStateAndResumesTheSameRates) {
  const fs::path dir = fresh_temp_dir("token_schedule");
  TrainOptions o = tiny_options();
  o.lr_decay_style = "linear";
  o.lr_warmup_iters = 4;
  o.lr_decay_iters = 30;  // the decay in samples is checked on resume too
  o.lr_decay_tokens = 1500;
  const std::vector<IterationResult> whole = train(o);

  TrainOptions first = o;
  first.train_iters = 12;
  first.save = dir.string();
  train(first);
  const nlohmann::json st = read_json(iteration_dir(dir, 12) / kMetadataFileName)["trainer_state"];
  EXPECT_EQ(st["consumed_train_tokens"], 12 * kTokensPerIteration);
  const nlohmann::json& sched = st["opt_param_scheduler"];
  EXPECT_EQ(sched["num_steps"], 12 * kGlobalBatch);
  EXPECT_EQ(sched["num_tokens"], 11 * kTokensPerIteration);      // before iteration 12's
  EXPECT_EQ(sched["warmup_end_tokens"], 3 * kTokensPerIteration);  // the step after iteration 4
  EXPECT_EQ(sched["lr_decay_tokens"], 1500);
  EXPECT_TRUE(sched["lr_warmup_tokens"].is_null());

  TrainOptions second = o;
  second.load = dir.string();
  const Loaded resumed = resume(second);
  ASSERT_EQ(resumed.history.size(), 18u);
  for (size_t i = 0; i < resumed.history.size(); ++i)
    EXPECT_EQ(resumed.history[i].lr, whole[12 + i].lr) << "iteration " << 13 + i;

  // Another decay length is refused, as Megatron-DeepSpeed's _check_and_set.
  TrainOptions longer = second;
  longer.lr_decay_tokens = 1600;
  EXPECT_TRUE(has(load_error(longer), "lr_decay_tokens (--lr-decay-tokens) is 1600 on the command line but 1500 in "
                                      "the checkpoint"));

  // A checkpoint without the token fields (written before they were saved) counted no tokens:
  // a decay in tokens added on resume is a difference; forced in with
  // --override-opt_param-scheduler, the decay's start (the warm-up's end in tokens) is
  // unknown, which is an error too rather than a decay restarting from the resume.
  const fs::path meta = iteration_dir(dir, 12) / kMetadataFileName;
  nlohmann::json j = read_json(meta);
  for (const char* key : {"warmup_end_tokens", "num_tokens", "lr_decay_tokens", "lr_warmup_tokens"})
    EXPECT_EQ(j["trainer_state"]["opt_param_scheduler"].erase(key), 1u) << key;
  std::ofstream(meta) << j.dump(1);
  EXPECT_TRUE(has(load_error(second), "lr_decay_tokens (--lr-decay-tokens) is 1500 on the command line but null in "
                                      "the checkpoint"));
  second.override_opt_param_scheduler = true;
  EXPECT_TRUE(has(load_error(second), "is past its warm-up of 16 samples without the token count where it ended"));
  fs::remove_all(dir);
}

TEST(SkipTrain, EvaluatesTheLoadedModelOnly) {
  const fs::path dir = fresh_temp_dir("skip_train");
  TrainOptions o = tiny_options();
  o.train_iters = 6;
  o.save = dir.string();
  train(o);

  o.load = dir.string();
  o.skip_train = true;
  // Past the checkpoint's iteration, so that a loop that ran would train; without the
  // optimizer state, whose schedule would differ. TensorBoard gets no evaluation scalars.
  o.train_iters = 9;
  o.no_load_optim = true;
  o.tensorboard_dir = (dir / "tb").string();
  o.eval_iters = 2;
  auto be = make_cpu_backend();
  std::ostringstream log;
  Trainer tr(o, *be, synthetic_tokens(o), log);
  ASSERT_TRUE(tr.load_checkpoint()) << log.str();
  tr.set_evaluation_data(synthetic_tokens(o, 1), synthetic_tokens(o, 2));
  const EvalResult valid = tr.evaluate(*synthetic_tokens(o, 1), 0, 2);
  tr.train();
  EXPECT_EQ(tr.iteration(), 6);
  EXPECT_TRUE(tr.history().empty());
  const std::string s = log.str();
  EXPECT_TRUE(has(s, "trident: skipping training (--skip-train): evaluating the model of iteration 6\n")) << s;
  char line[160];
  std::snprintf(line, sizeof line, " validation loss at iteration 6 on validation set | lm loss value: %.6E |",
                valid.loss);
  EXPECT_TRUE(has(s, line)) << s;
  EXPECT_TRUE(has(s, " validation loss at iteration 6 on test set | lm loss value: ")) << s;
  EXPECT_FALSE(has(s, "\n iteration ")) << s;  // no iteration's line
  EXPECT_FALSE(has(s, "trident: done")) << s;
  EXPECT_EQ(latest_iteration(dir), 6);  // nothing saved
  EXPECT_FALSE(fs::exists(iteration_dir(dir, 9)));
  // The event file holds no scalar named like the validation's (tags are plain bytes in it).
  size_t event_files = 0;
  for (const auto& e : fs::directory_iterator(dir / "tb")) {
    ++event_files;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find("lm loss validation"), std::string::npos);
  }
  EXPECT_EQ(event_files, 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trident
