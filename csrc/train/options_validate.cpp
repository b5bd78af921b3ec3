// The checks across flags, once every flag is read (validate_train_options), each error naming
// the flags involved; with them the word lists that need other flags (the batch ramp-up and
// steps, the iterations to skip, --recompute-modules, --profile-ranks) and the model's shape
// against the layout (validate_model_options).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/error.h"
#include "parallel/pipeline_split.h"
#include "train/options_internal.h"
#include "train/timers.h"

namespace trident {
using namespace options_internal;  // convert, join_words
namespace {

void check_positive(int64_t v, const char* flag) {
  if (v <= 0) throw ConfigError(std::string("--") + flag + " must be positive");
}
void check_non_negative(double v, const char* flag) {
  if (v < 0) throw ConfigError(std::string("--") + flag + " must not be negative");
}

// --recompute-modules' words (Megatron's list, core_attn by default): core_attn is what the
// fused attention recomputes always, so a list of it alone changes nothing; any other module
// (mlp, layernorm, ...) is refused.
void read_recompute_modules(TrainOptions& o) {
  if (o.recompute_modules.empty()) return;
  const bool other = std::any_of(o.recompute_modules.begin(), o.recompute_modules.end(),
                                 [](const std::string& w) { return w != "core_attn"; });
  if (other)
    throw ConfigError("--recompute-modules " + join_words(o.recompute_modules) + ": not supported: trident recomputes the attention's core "
                      "(the fused attention) always, and whole layers with --recompute-granularity full "
                      "(--recompute-modules core_attn)");
  o.flags_without_effect.push_back("--recompute-modules");
}

// --rampup-batch-size's words, checked as Megatron's RampupBatchsizeNumMicroBatches checks
// them (every batch of the ramp a multiple of the micro batch; the Trainer checks the
// data-parallel size too).
void read_batch_rampup(TrainOptions& o) {
  const std::vector<std::string>& w = o.rampup_batch_size;
  if (w.empty()) return;
  if (w.size() != 3)
    throw ConfigError("--rampup-batch-size: expected START INCR SAMPLES, got " + std::to_string(w.size()) + " words");
  if (!o.sample_based)
    throw ConfigError("--rampup-batch-size needs sample-based training (--train-samples), as Megatron's");
  o.rampup_start = convert<int64_t>("rampup-batch-size", w[0]);
  o.rampup_increment = convert<int64_t>("rampup-batch-size", w[1]);
  o.rampup_samples = convert<uint64_t>("rampup-batch-size", w[2]);
  const int64_t start = o.rampup_start, incr = o.rampup_increment, g = o.global_batch_size;
  if (start <= 0 || incr <= 0) throw ConfigError("--rampup-batch-size: START and INCR must be positive");
  if (o.rampup_samples == 0) throw ConfigError("--rampup-batch-size: SAMPLES must be positive");
  if (start >= g)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") must be below --global-batch-size (" +
                      std::to_string(g) + (o.global_batch_size_is_default ? ", not given)" : ")"));
  if ((g - start) % incr != 0)
    throw ConfigError("--rampup-batch-size: --global-batch-size (" + std::to_string(g) + ") - START (" +
                      std::to_string(start) + ") must be a multiple of INCR (" + std::to_string(incr) + ")");
  if (start % o.micro_batch_size != 0 || incr % o.micro_batch_size != 0)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") and INCR (" + std::to_string(incr) +
                      ") must be multiples of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
}

// --step-batch-size-schedule's words, checked as Megatron checks them: its last batch is the
// global batch, so --global-batch-size is not given too.
void read_step_batch_schedule(TrainOptions& o) {
  const std::vector<std::string>& w = o.step_batch_size_schedule;
  if (w.empty()) return;
  if (!o.rampup_batch_size.empty())
    throw ConfigError("--step-batch-size-schedule and --rampup-batch-size: give one of them");
  if (o.given_flags.count("global-batch-size"))
    throw ConfigError("--step-batch-size-schedule and --global-batch-size: give one of them (the schedule's last batch "
                      "is the global batch)");
  if (!o.sample_based)
    throw ConfigError("--step-batch-size-schedule needs sample-based training (--train-samples), as Megatron's");
  o.batch_steps = parse_step_batch_schedule(join_words(w), o.model.seq_length);  // again in resolve_schedule
  o.global_batch_size = static_cast<int>(o.batch_steps.back().batch);
  o.global_batch_size_is_default = false;
}

void validate_batch_and_schedule(TrainOptions& o) {
  check_positive(o.micro_batch_size, "micro-batch-size");
  read_step_batch_schedule(o);
  // Not given: the micro batch x the data-parallel size (Megatron's); a given 0 is an error.
  if (o.global_batch_size == 0 && !o.given_flags.count("global-batch-size")) {  // until resolve_global_batch_size
    o.global_batch_size = o.micro_batch_size;
    o.global_batch_size_is_default = true;
  }
  check_positive(o.global_batch_size, "global-batch-size");
  if (o.global_batch_size % o.micro_batch_size != 0)
    throw ConfigError(global_batch_flag(o) + " (" + std::to_string(o.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
  if (!(std::isfinite(o.lr) && o.lr >= 0))
    throw ConfigError("--lr must be a finite number >= 0, got " + detail::concat(o.lr));
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr)) throw ConfigError("--min-lr must be in [0, --lr]");
  if (o.decoupled_lr && !(std::isfinite(*o.decoupled_lr) && *o.decoupled_lr >= 0))
    throw ConfigError("--decoupled-lr must be a finite number >= 0, got " + detail::concat(*o.decoupled_lr));
  // Megatron sets the decoupled group's floor without comparing it with its peak: one above it
  // (--min-lr, its default, over a small --decoupled-lr) makes that group's rate rise.
  if (o.decoupled_min_lr && !(std::isfinite(*o.decoupled_min_lr) && *o.decoupled_min_lr >= 0))
    throw ConfigError("--decoupled-min-lr must be a finite number >= 0, got " + detail::concat(*o.decoupled_min_lr));
  parse_lr_decay_style(o.lr_decay_style);  // throws naming --lr-decay-style
  parse_wsd_decay_style(o.lr_wsd_decay_style);
  read_batch_rampup(o);
  for (const std::string& w : o.iterations_to_skip_words) {
    const int64_t it = convert<int64_t>("iterations-to-skip", w);
    if (it < 1) throw ConfigError("--iterations-to-skip: " + w + " is not an iteration (they count from 1)");
    o.iterations_to_skip.insert(it);
  }
  o.skip_train_iteration_ranges = parse_skip_ranges(o.skip_train_iteration_range_words);
  // Each phase reads its data from its first sample on, where a skip range moves the run's.
  if (!o.skip_train_iteration_ranges.empty() && !o.phase_transition_iterations.empty())
    throw ConfigError("--skip-train-iteration-range and --phase-transition-iterations: a phase reads its data from "
                      "its own first sample, which samples read past would move; use --iterations-to-skip");
  read_recompute_modules(o);
  // A skipped iteration neither trains nor saves: the run would go on past its transition.
  for (int64_t t : o.phase_transition_iterations)
    if (o.iterations_to_skip.count(t))
      throw ConfigError("--iterations-to-skip " + std::to_string(t) + " is a --phase-transition-iterations transition, "
                        "where the run saves and exits after training that iteration: skip another");
  // The phases' boundaries count iterations of one global batch (Megatron refuses a ramp-up).
  if (!o.phase_transition_iterations.empty() && (!o.rampup_batch_size.empty() || !o.batch_steps.empty()))
    throw ConfigError(detail::concat("--phase-transition-iterations and ",
                                     o.batch_steps.empty() ? "--rampup-batch-size" : "--step-batch-size-schedule",
                                     ": the phases count iterations of one global batch, as Megatron's, which refuses "
                                     "a ramp-up"));
  if (!(o.lr_warmup_init >= 0 && o.lr_warmup_init <= o.lr))
    throw ConfigError("--lr-warmup-init must be in [0, --lr], got " + detail::concat(o.lr_warmup_init));
  resolve_schedule(o);
}

// Megatron's rules for the weight-decay schedule (validate_args, OptimizerParamScheduler):
// it only rises, and the constant style has one value.
void validate_weight_decay(const TrainOptions& o) {
  check_non_negative(o.weight_decay, "weight-decay");
  const WeightDecaySchedule wd = make_weight_decay_schedule(o);  // throws naming --weight-decay-incr-style
  if (wd.end_wd < wd.start_wd)
    throw ConfigError("--end-weight-decay (" + detail::concat(wd.end_wd) + ") must not be below " +
                      "--start-weight-decay (" + detail::concat(wd.start_wd) +
                      "): Megatron's schedule only increases the weight decay");
  if (wd.style == WdIncrStyle::Constant && wd.start_wd != wd.end_wd)
    throw ConfigError("--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (" +
                      detail::concat(wd.start_wd) + " and " + detail::concat(wd.end_wd) +
                      "); give --weight-decay-incr-style linear or cosine to change it over the run");
}

// torch.optim.AdamW's checks (Megatron hands these flags to it): betas in [0, 1), eps >= 0.
// Outside them the moments do not decay, or grow, or the update flips its sign: NaN
// parameters after one step, reported later as NaN losses.
void validate_adam(const TrainOptions& o) {
  for (const auto& [flag, beta] : {std::pair{"adam-beta1", o.adam_beta1}, std::pair{"adam-beta2", o.adam_beta2}})
    if (!(beta >= 0 && beta < 1))
      throw ConfigError(std::string("--") + flag + " must be in [0, 1), got " + detail::concat(beta));
  if (!(o.adam_eps >= 0 && std::isfinite(o.adam_eps)))
    throw ConfigError("--adam-eps must be a finite number >= 0, got " + detail::concat(o.adam_eps));
}

void validate_precision(const TrainOptions& o) {
  check_non_negative(o.loss_scale, "loss-scale");
  if (!(o.initial_loss_scale > 0)) throw ConfigError("--initial-loss-scale must be positive");
  if (!(o.min_loss_scale > 0)) throw ConfigError("--min-loss-scale must be positive");
  if (o.min_loss_scale > o.initial_loss_scale)
    throw ConfigError("--min-loss-scale must not exceed --initial-loss-scale");
  check_positive(o.loss_scale_window, "loss-scale-window");
  check_positive(o.hysteresis, "hysteresis");
}

// Megatron's rules: a method only with full granularity, and full needs a method.
void validate_recompute(const TrainOptions& o) {
  const std::string& g = o.recompute_granularity;
  if (!g.empty() && g != "full" && g != "selective")
    throw ConfigError("--recompute-granularity: unknown value '" + g + "' (expected full or selective)");
  if (!o.recompute_method.empty() && o.recompute_method != "uniform" && o.recompute_method != "block")
    throw ConfigError("--recompute-method: unknown value '" + o.recompute_method + "' (expected uniform or block)");
  if (g == "full" && o.recompute_method.empty())
    throw ConfigError("--recompute-granularity full needs --recompute-method uniform or block");
  if (g != "full" && !o.recompute_method.empty())
    throw ConfigError("--recompute-method needs --recompute-granularity full");
  check_positive(o.recompute_num_layers, "recompute-num-layers");
}

// --profile's window and ranks (whether the ranks exist is known once the job runs).
void validate_profile(TrainOptions& o) {
  const bool given = !o.profile_ranks.empty() || o.given_flags.count("profile-step-start") ||
                     o.given_flags.count("profile-step-end");
  if (!o.profile) {
    if (given) throw ConfigError("--profile-step-start, --profile-step-end and --profile-ranks need --profile");
    return;
  }
  check_non_negative(static_cast<double>(o.profile_step_start), "profile-step-start");
  if (o.profile_step_end <= o.profile_step_start)
    throw ConfigError("--profile-step-end (" + std::to_string(o.profile_step_end) +
                      ") must exceed --profile-step-start (" + std::to_string(o.profile_step_start) + ")");
  o.profile_rank_ids.clear();
  for (const std::string& w : o.profile_ranks) {
    const int64_t r = convert<int64_t>("profile-ranks", w);
    if (r < 0) throw ConfigError("--profile-ranks: rank " + w + " must not be negative");
    if (r > std::numeric_limits<int>::max()) throw ConfigError("--profile-ranks: rank " + w + " is too large");
    o.profile_rank_ids.insert(static_cast<int>(r));
  }
  if (o.profile_rank_ids.empty()) o.profile_rank_ids.insert(0);
}

// Megatron's non-persistent checkpoint flags.
void validate_non_persistent(TrainOptions& o) {
  const std::string& type = o.non_persistent_ckpt_type;
  if (type == "in_memory")  // Megatron-LM lists it, then refuses it too
    throw ConfigError("--non-persistent-ckpt-type in_memory: not supported (nor by Megatron-LM); local keeps them "
                      "on each node's storage");
  if (!type.empty() && type != "global" && type != "local")
    throw ConfigError("--non-persistent-ckpt-type " + type + ": expected global or local");
  if (type == "local" && o.non_persistent_local_ckpt_dir.empty())
    throw ConfigError("--non-persistent-ckpt-type local needs --non-persistent-local-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-local-ckpt-dir needs --non-persistent-ckpt-type local");
  if (o.non_persistent_local_ckpt_algo != "fully_parallel" && o.non_persistent_local_ckpt_algo != "atomic")
    throw ConfigError("--non-persistent-local-ckpt-algo " + o.non_persistent_local_ckpt_algo +
                      ": expected fully_parallel or atomic");
  check_non_negative(static_cast<double>(o.non_persistent_save_interval), "non-persistent-save-interval");
  if (o.non_persistent_save_interval > 0 && type.empty())
    throw ConfigError("--non-persistent-save-interval needs --non-persistent-ckpt-type global or local (without "
                      "it --load would not look for them)");
  if (o.non_persistent_save_interval > 0 && o.save.empty())
    throw ConfigError("--non-persistent-save-interval needs --save");
  if (!o.non_persistent_global_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-global-ckpt-dir needs --non-persistent-ckpt-type global");
  // Megatron writes progress.txt into --save; without it there is none.
  if (o.log_progress && o.save.empty()) o.flags_without_effect.push_back("--log-progress (without --save)");
  // The other type's folder: no effect (Megatron reads the flag of the type given only).
  if (!o.non_persistent_global_ckpt_dir.empty() && type == "local")
    o.flags_without_effect.push_back("--non-persistent-global-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type == "global")
    o.flags_without_effect.push_back("--non-persistent-local-ckpt-dir");
  if (o.replication && type != "local")
    throw ConfigError("--replication needs --non-persistent-ckpt-type local (it copies the local checkpoints)");
  if (o.replication && !o.given_flags.count("replication-jump"))
    throw ConfigError("--replication needs --replication-jump (the ranks of a node, so that copies lie on others)");
  check_positive(o.replication_jump, "replication-jump");
  check_positive(o.replication_factor, "replication-factor");
  if (!o.replication)  // Megatron warns and goes on
    for (const char* f : {"replication-jump", "replication-factor"})
      if (o.given_flags.count(f)) o.flags_without_effect.push_back(std::string("--") + f);
}

void validate_run(TrainOptions& o) {
  check_positive(o.log_interval, "log-interval");
  if (o.given_flags.count("log-memory-interval")) {
    check_positive(o.log_memory_interval, "log-memory-interval");
    if (o.log_memory_interval % o.log_interval != 0)  // Megatron's assertion
      throw ConfigError("--log-memory-interval (" + std::to_string(o.log_memory_interval) +
                        ") must be a multiple of --log-interval (" + std::to_string(o.log_interval) + ")");
  }
  if (o.clip_grad < 0) throw ConfigError("--clip-grad must not be negative");
  if (o.has_weighted_split_paths() && o.mock_data)
    throw ConfigError("--mock-data and --train/--valid/--test-weighted-split-paths are alternatives: give one");
  if (o.has_data() && o.mock_data)
    throw ConfigError("--mock-data and --data-path/--train-data-path/--valid-data-path/--test-data-path are "
                      "alternatives: give one");
  for (const auto& [flag, given] : {std::pair{"eod-mask-loss", o.eod_mask_loss},
                                    {"reset-position-ids", o.reset_position_ids},
                                    {"reset-attention-mask", o.reset_attention_mask}})
    if (given && !o.has_data())
      throw ConfigError(std::string("--") + flag + " works on the documents of --data-path (ended by its "
                        "tokenizer's <|endoftext|>); synthetic data has no documents");
  if (o.tokenizer_type == "NullTokenizer" && o.null_tokenizer_vocab_size == 0 && o.has_data())
    throw ConfigError("--vocab-size is required for NullTokenizer (its ids are 0 to V - 1, V the end of document)");
  if (o.has_data() && o.vocab_file.empty() && o.tokenizer_type != "NullTokenizer")
    throw ConfigError(std::string("--vocab-file is required with --") +
                      (!o.data_path.empty()              ? "data-path"
                       : o.has_weighted_split_paths() ? "train-weighted-split-paths (or --valid-/--test-)"
                                                      : "train-data-path/--valid-data-path/--test-data-path"));
  if (!o.data_path.empty() && (!o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty()))
    throw ConfigError("--data-path and --train-data-path/--valid-data-path/--test-data-path are alternatives: give one");
  check_positive(o.tensor_model_parallel_size, "tensor-model-parallel-size");
  check_positive(o.pipeline_model_parallel_size, "pipeline-model-parallel-size");
  if (o.zero_stage < 0 || o.zero_stage > 2) throw ConfigError("--zero-stage must be 0, 1 or 2");
  if (!o.comm.empty() && o.comm != "nccl" && o.comm != "mpi")
    throw ConfigError("--comm: unknown communicator '" + o.comm + "' (expected nccl or mpi)");
  validate_recompute(o);
  check_positive(o.eval_interval, "eval-interval");
  check_non_negative(static_cast<double>(o.eval_iters), "eval-iters");
  check_positive(o.tensorboard_log_interval, "tensorboard-log-interval");
  check_positive(o.tensorboard_queue_size, "tensorboard-queue-size");
  if (o.timing_log_level < 0 || o.timing_log_level > 2)
    throw ConfigError("--timing-log-level must be 0, 1 or 2, got " + std::to_string(o.timing_log_level));
  parse_timing_log_option(o.timing_log_option);  // throws naming --timing-log-option
  validate_profile(o);
  check_non_negative(o.peak_tflops, "peak-tflops");
  check_non_negative(static_cast<double>(o.max_nan_iterations), "max-nan-iterations");
  check_non_negative(static_cast<double>(o.exit_interval), "exit-interval");
  check_non_negative(o.exit_duration_in_mins, "exit-duration-in-mins");
  check_non_negative(o.distributed_timeout_minutes, "distributed-timeout-minutes");
  check_non_negative(static_cast<double>(o.save_interval), "save-interval");
  check_non_negative(static_cast<double>(o.keep_last), "keep-last");
  if (o.mid_level_dataset_surplus) check_non_negative(*o.mid_level_dataset_surplus, "mid-level-dataset-surplus");
  if (o.full_validation && !o.has_data())
    throw ConfigError("--full-validation reads the validation data to its end: give --data-path or --valid-data-path "
                      "(synthetic tokens have no end)");
  if (o.multiple_validation_sets && o.has_weighted_split_paths())
    throw ConfigError("--multiple-validation-sets cuts --valid-data-path into its prefixes; with " +
                      o.weighted_split_paths_flags[1] + " each group is a validation set already: give one");
  if (o.multiple_validation_sets && !o.full_validation && !o.skip_train)  // Megatron's NotImplementedError
    throw ConfigError("--multiple-validation-sets needs --full-validation (or --skip-train), as Megatron's");
  if (o.multiple_validation_sets && !o.has_data())
    throw ConfigError("--multiple-validation-sets: the validation sets are the prefixes of --valid-data-path: give it");
  // Megatron's asserts with --save: positive, a multiple of --save-interval. --keep-last (not
  // Megatron's) prunes by the chain of previous checkpoints that these deletions cut.
  if (o.save_retain_interval != 0 && o.keep_last > 0)
    throw ConfigError("--save-retain-interval and --keep-last choose the checkpoints kept in two ways: give one");
  if (o.save_retain_interval < 0 ||
      (o.save_retain_interval != 0 && !o.save.empty() &&
       (o.save_interval <= 0 || o.save_retain_interval % o.save_interval != 0)))
    throw ConfigError("--save-retain-interval " + std::to_string(o.save_retain_interval) +
                      ": must be a positive multiple of --save-interval (" + std::to_string(o.save_interval) + ")");
  validate_non_persistent(o);
  // With --use-checkpoint-args the shape is complete only once the checkpoint is read.
  if (!o.use_checkpoint_args) validate_model_options(o);
}

}  // namespace

void validate_model_options(const TrainOptions& o) {
  const int P = o.pipeline_model_parallel_size, L = o.model.num_layers;
  if (L < 1) throw ConfigError("--num-layers must be positive, got " + std::to_string(L));
  const UnevenPipeline& uneven = o.uneven_pipeline;
  if (P > L && !uneven.any())
    throw ConfigError("--pipeline-model-parallel-size (" + std::to_string(P) + ") must not exceed --num-layers (" +
                      std::to_string(L) + ")");
  const int per_chunk = o.num_layers_per_virtual_pipeline_stage, chunks = o.num_virtual_stages_per_pipeline_rank;
  // Set on the command line or in the file (a given 0 included), or by hand in the options.
  const auto set = [&](const char* flag, int64_t value) { return value != 0 || o.given_flags.count(flag) > 0; };
  const bool by_layers = set("num-layers-per-virtual-pipeline-stage", per_chunk);
  const bool by_chunks = set("num-virtual-stages-per-pipeline-rank", chunks);
  if (!uneven.layout.empty() && (by_layers || by_chunks))
    throw ConfigError("--pipeline-model-parallel-layout gives the model chunks a stage itself: "
                      "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank go without it");
  if (by_layers || by_chunks) {
    const std::string flag =
        by_layers ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank";
    const int value = by_layers ? per_chunk : chunks;
    if (by_layers && by_chunks)
      throw ConfigError("--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank are "
                        "alternatives: give one");
    if (value < 1) throw ConfigError(flag + " must be positive");
    if (P == 1) throw ConfigError(flag + " needs --pipeline-model-parallel-size above 1");
    if (by_layers && (uneven.first_stage_layers > 0 || uneven.last_stage_layers > 0))
      throw ConfigError("--decoder-first/last-pipeline-num-layers with an interleaved schedule take "
                        "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
    const int counted = counted_layers(L, uneven);
    if (!uneven.any() || by_layers) {
      if (counted % (P * value) != 0)
        throw ConfigError("--num-layers (" + std::to_string(L) +
                          (counted != L ? ", " + std::to_string(counted) + " with " + counted_as_layers(uneven)
                                        : std::string()) +
                          ") must be a multiple of " +
                          "--pipeline-model-parallel-size (" + std::to_string(P) + ") x " + flag + " (" +
                          std::to_string(value) + ")");
    }
  }
  if (const std::string why = pipeline_split_error(o.pipeline_split()); !why.empty())
    throw ConfigError("pipeline split: " + why);
  if (o.microbatch_group_size > 0 && o.microbatch_group_size != P)
    throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage " + std::to_string(o.microbatch_group_size) +
                      ": not supported: trident's interleaved schedule runs a chunk's micro-batches in groups of "
                      "--pipeline-model-parallel-size (" + std::to_string(P) + "), Megatron's default");
  const int tp = o.tensor_model_parallel_size;
  if (o.sequence_parallel && tp > 1) {
    // Each TP rank takes a contiguous 1/tp of the micro-batch's B x T rows.
    const int64_t rows = static_cast<int64_t>(o.micro_batch_size) * o.model.seq_length;
    if (rows % tp != 0)
      throw ConfigError("--sequence-parallel: --micro-batch-size (" + std::to_string(o.micro_batch_size) +
                        ") x --seq-length (" + std::to_string(o.model.seq_length) +
                        ") must be a multiple of --tensor-model-parallel-size (" + std::to_string(tp) + ")");
    if (o.model.hidden_size % 4 != 0)
      throw ConfigError("--sequence-parallel: --hidden-size (" + std::to_string(o.model.hidden_size) +
                        ") must be a multiple of 4");
  }
  const int64_t H = o.model.hidden_size, heads = o.model.num_attention_heads;
  if (set("ffn-hidden-size", o.ffn_hidden_size) && o.ffn_hidden_size != 4 * H)
    throw ConfigError("--ffn-hidden-size (" + std::to_string(o.ffn_hidden_size) + ") must be 4 x --hidden-size " +
                      std::to_string(H) + " (" + std::to_string(4 * H) + "): GPT-2's MLP");
  if (set("kv-channels", o.kv_channels) && (heads <= 0 || o.kv_channels * heads != H))
    throw ConfigError("--kv-channels (" + std::to_string(o.kv_channels) + ") must be --hidden-size / " +
                      "--num-attention-heads (" + (heads > 0 ? std::to_string(H / heads) : std::string("?")) +
                      "): GPT-2's head width");
  o.model.validate(o.tensor_model_parallel_size);
}

namespace options_internal {

void validate_train_options(TrainOptions& o) {
  validate_batch_and_schedule(o);
  validate_weight_decay(o);
  validate_adam(o);
  validate_precision(o);
  if (o.disable_bf16_reduced_precision_matmul && o.model.dtype != DType::BF16)  // Megatron's acts with --bf16 only
    o.flags_without_effect.push_back("--disable-bf16-reduced-precision-matmul (without --bf16)");
  validate_run(o);
}

}  // namespace options_internal
}  // namespace trident
