// The run's length and LR schedule in samples (resolve_schedule), the default global batch once
// the data-parallel size is known (resolve_global_batch_size), and the counts that follow from
// them: the validations the data is sized for, those that run, the samples training reads.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "train/options.h"
#include "train/options_internal.h"

namespace trident {
using options_internal::join_words;
namespace {

// Megatron's assertion lr_warmup_steps < lr_decay_steps in the flags the user sets: the decay
// ends with the run unless --lr-decay-iters/--lr-decay-samples says otherwise, so a config's
// warm-up can outlast the default --train-iters (100) that the user never gave.
std::string warmup_outlasts_decay(const TrainOptions& o) {
  if (o.lr_warmup_fraction >= 0) return "--lr-warmup-fraction must be below 1";
  const bool s = o.sample_based;
  const std::string warmup = s ? "--lr-warmup-samples (" + std::to_string(o.lr_warmup_samples) + ")"
                               : "--lr-warmup-iters (" + std::to_string(o.lr_warmup_iters) + ")";
  if (s ? o.lr_decay_samples != 0 : o.lr_decay_iters != 0)
    return s ? "--lr-decay-samples (" + std::to_string(o.lr_decay_samples) + ") must exceed " + warmup
             : "--lr-decay-iters (" + std::to_string(o.lr_decay_iters) + ") must exceed " + warmup;
  const std::string run = s ? "--train-samples (" + std::to_string(o.train_samples) + ")"
                            : "--train-iters (" + std::to_string(o.train_iters) +
                                  (o.train_iters_is_default ? ", the default)" : ")");
  return run + " must exceed " + warmup + ": the learning-rate decay ends with the run unless " +
         (s ? "--lr-decay-samples" : "--lr-decay-iters") + " says otherwise; set " +
         (s ? "--train-samples or --lr-decay-samples" : "--train-iters or --lr-decay-iters");
}

// An iteration count in samples (x the global batch), which must fit 64 bits.
uint64_t samples_of(int64_t iterations, uint64_t global_batch, const char* flag) {
  uint64_t samples = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(iterations), global_batch, &samples))
    throw ConfigError(std::string("--") + flag + " (" + std::to_string(iterations) + ") x --global-batch-size (" +
                      std::to_string(global_batch) + ") does not fit 64 bits");
  return samples;
}

// WSD's anneal (Megatron requires its length with the style) must fit between the warm-up's
// end and the decay's: one that reached into the warm-up would make the rate jump down when the
// warm-up ends (Megatron does not check it).
void check_wsd_anneal(const TrainOptions& o) {
  if (o.lr_decay_style != "WSD") return;  // the anneal's flags then do nothing (read_schedule_flags notes them)
  const bool s = o.sample_based;
  const std::string flag = s ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters";
  const bool given = s ? o.lr_wsd_decay_samples != 0 : o.lr_wsd_decay_iters != 0;
  if (!given) throw ConfigError("--lr-decay-style WSD needs " + flag + " (the final anneal's length)");
  const double after_warmup = static_cast<double>(o.decay_samples) - o.warmup_samples;
  if (static_cast<double>(o.wsd_decay_samples) > after_warmup) {
    const double room = s ? after_warmup : after_warmup / static_cast<double>(o.global_batch_size);
    std::ostringstream m;
    m << flag << " (" << (s ? o.lr_wsd_decay_samples : static_cast<uint64_t>(o.lr_wsd_decay_iters))
      << ") must not exceed the decay after the warm-up (" << room << (s ? " samples)" : " iterations)");
    throw ConfigError(m.str());
  }
}

// Megatron's evaluation batch sizes, which trident takes only equal to the training's.
void check_evaluation_batches(const TrainOptions& o) {
  const auto check = [](const std::optional<int64_t>& given, int64_t training, const char* flag, const char* of) {
    if (given && *given != training)
      throw ConfigError(std::string("--") + flag + " " + std::to_string(*given) + ": trident evaluates with the "
                        "training's batches (" + of + " " + std::to_string(training) + ")");
  };
  check(o.eval_micro_batch_size, o.micro_batch_size, "eval-micro-batch-size", "--micro-batch-size");
  check(o.eval_global_batch_size, o.global_batch_size, "eval-global-batch-size", global_batch_flag(o).c_str());
}

}  // namespace

void resolve_schedule(TrainOptions& o) {
  if (o.global_batch_size <= 0) throw ConfigError("--global-batch-size must be positive");
  const uint64_t gbs = static_cast<uint64_t>(o.global_batch_size);
  if (o.lr_warmup_fraction > 1) throw ConfigError("--lr-warmup-fraction must be in [0, 1]");
  if (o.sample_based) {
    // The token thresholds in samples at the sequence length the run has now (--use-checkpoint-args
    // may have taken it from the checkpoint since the flags were read).
    if (!o.step_batch_size_schedule.empty())
      o.batch_steps = parse_step_batch_schedule(join_words(o.step_batch_size_schedule), o.model.seq_length);
    const BatchSchedule batches = make_batch_schedule(o);
    if (!o.batch_steps.empty() && o.train_samples < static_cast<uint64_t>(batches.global_batch(0)))
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) + ") must be at least the first batch "
                        "of --step-batch-size-schedule (" + std::to_string(batches.global_batch(0)) + ")");
    if (o.batch_steps.empty() && o.train_samples < gbs)
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) +
                        ") must be at least --global-batch-size (" + std::to_string(gbs) + ")");
    o.train_iters = batches.varies() ? train_iters_of_samples(batches, o.train_samples)
                                     : static_cast<int64_t>(o.train_samples / gbs);
    o.decay_samples = o.lr_decay_samples != 0 ? o.lr_decay_samples : o.train_samples;
    o.warmup_samples = static_cast<double>(o.lr_warmup_samples);
    o.wsd_decay_samples = o.lr_wsd_decay_samples;
  } else {
    if (o.train_iters <= 0) throw ConfigError("--train-iters must be positive");
    if (o.lr_warmup_iters < 0) throw ConfigError("--lr-warmup-iters must not be negative");
    if (o.lr_decay_iters < 0) throw ConfigError("--lr-decay-iters must not be negative");
    const int64_t decay_iters = o.lr_decay_iters != 0 ? o.lr_decay_iters : o.train_iters;
    o.train_samples = samples_of(o.train_iters, gbs, "train-iters");
    o.decay_samples = samples_of(decay_iters, gbs, o.lr_decay_iters != 0 ? "lr-decay-iters" : "train-iters");
    o.warmup_samples = static_cast<double>(o.lr_warmup_iters) * static_cast<double>(gbs);
    if (o.lr_wsd_decay_iters < 0) throw ConfigError("--lr-wsd-decay-iters must not be negative");
    o.wsd_decay_samples = samples_of(o.lr_wsd_decay_iters, gbs, "lr-wsd-decay-iters");
  }
  if (o.lr_warmup_fraction >= 0) o.warmup_samples = o.lr_warmup_fraction * static_cast<double>(o.decay_samples);
  // Megatron asserts warm-up < decay; a constant schedule never decays, so only the
  // decaying styles need it here.
  if (o.lr_decay_style != "constant" && !(o.warmup_samples < static_cast<double>(o.decay_samples)))
    throw ConfigError(warmup_outlasts_decay(o));
  check_wsd_anneal(o);
  // The validation samples the run reads: every periodic evaluation and the final one.
  const auto evaluations = static_cast<uint64_t>(sized_validations(o));
  uint64_t valid_samples = 0;
  if (o.eval_iters > 0 && __builtin_mul_overflow(samples_of(o.eval_iters, gbs, "eval-iters"), evaluations, &valid_samples))
    throw ConfigError("--eval-iters (" + std::to_string(o.eval_iters) + ") x --global-batch-size x the " +
                      std::to_string(evaluations) + " evaluations does not fit 64 bits");
}

uint64_t run_training_samples(const TrainOptions& o) {
  return std::max<uint64_t>(o.train_samples, make_batch_schedule(o).samples_in(o.train_iters));
}

int64_t sized_validations(const TrainOptions& o) {
  if (o.eval_interval <= 0) return 1;
  int64_t n = o.train_iters / o.eval_interval + 1;
  // (at least the final validation's, which always runs: Megatron's rule gives none when
  // --start-eval-at-iter lies past the run)
  if (o.start_eval_at_iter) n = std::max<int64_t>(1, n - *o.start_eval_at_iter / o.eval_interval);
  return n;
}

bool validates_after(const TrainOptions& o, int64_t iteration) {
  return o.eval_interval > 0 && iteration % o.eval_interval == 0 &&
         (!o.start_eval_at_iter || iteration >= *o.start_eval_at_iter);
}

int64_t periodic_validations(const TrainOptions& o, int64_t after, int64_t upto) {
  const int64_t E = o.eval_interval;
  if (E <= 0) return 0;
  // The multiples k E with k E > after and k E >= --start-eval-at-iter, up to upto.
  const int64_t first = std::max<int64_t>(after / E + 1, o.start_eval_at_iter ? (*o.start_eval_at_iter + E - 1) / E : 1);
  return std::max<int64_t>(0, upto / E - first + 1);
}

void resolve_global_batch_size(TrainOptions& o, int data_parallel_size) {
  if (!o.deepspeed_config.empty())
    check_deepspeed_batch(o.deepspeed_batch, o.micro_batch_size, data_parallel_size, o.deepspeed_config);
  if (o.global_batch_size_is_default) {
    o.global_batch_size = o.micro_batch_size * data_parallel_size;
    resolve_schedule(o);
  }
  check_evaluation_batches(o);
}

std::string global_batch_flag(const TrainOptions& o) {
  return o.step_batch_size_schedule.empty() ? "--global-batch-size" : "the last batch of --step-batch-size-schedule";
}

}  // namespace trident
