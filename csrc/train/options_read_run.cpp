// The run's flags into TrainOptions, by theme: the layout, activation recomputation,
// evaluation, logging, when the run stops, saving and loading checkpoints; the data's are
// options_read_data.cpp's. read_run_flags calls the readers in the order their errors fire.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/decimal.h"
#include "core/error.h"
#include "core/stop_signals.h"
#include "train/option_table.h"
#include "train/options_internal.h"
#include "train/tensorboard_tags.h"

namespace trident::options_internal {
using namespace train_flags;  // the flag table (option_table.h)
namespace {

// --phase-transition-iterations "T1,T2,...": iterations from 1, sorted as Megatron sorts them.
void read_phase_transitions(TrainOptions& o, const std::string& text) {
  o.phase_transition_iterations.clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string word = text.substr(begin, end - begin);
    const int64_t it = convert<int64_t>("phase-transition-iterations", word);
    if (it < 1)
      throw ConfigError("--phase-transition-iterations: " + strip_surrounding_space(word) +
                        " is not a positive iteration (a transition is the iteration a phase ends at)");
    o.phase_transition_iterations.push_back(it);
    begin = end + 1;
  }
  std::vector<int64_t>& t = o.phase_transition_iterations;
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());  // a repeated transition ends no phase of its own
}

// Megatron-DeepSpeed's --load-tag: DeepSpeed's checkpoint tag, global_stepN; trident's
// iteration folders, whatever --load's pointer says, are iter_NNNNNNN (a plain N too).
int64_t load_tag_iteration(const std::string& tag) {
  std::string digits = tag;
  for (const char* prefix : {"global_step", "iter_"})
    if (tag.rfind(prefix, 0) == 0) digits = tag.substr(std::string(prefix).size());
  const std::optional<int64_t> iteration = parse_digits(digits);
  if (!iteration)
    throw ConfigError("--load-tag " + tag + ": expected a checkpoint's iteration, as global_step1000 (DeepSpeed's "
                      "tag), iter_0001000 or 1000");
  return *iteration;
}

// BigScience's --eval-only VALUE (argparse type=bool): no training, only the validation and
// test evaluations, as --skip-train. Python's bool() of any non-empty string is True, so
// BigScience would not train on "--eval-only False" either: such a value is refused rather
// than read either way.
bool eval_only(const Flags& f) {
  std::string value;
  f.get("eval-only", value);
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (value.empty())  // Python's bool("") is False: BigScience trains
    throw ConfigError("--eval-only: expected True (an empty value, which BigScience reads as false: leave the flag "
                      "out to train)");
  throw ConfigError("--eval-only " + value + ": Megatron-DeepSpeed reads any value as true (Python's bool() of a "
                    "string) and would not train; give True, or leave the flag out to train");
}

// The device, the process grid and the pipeline's stages, ZeRO, and the communication.
void read_parallelism_flags(const Flags& f, TrainOptions& o) {
  f.get("device", o.device);
  f.get("tensor-model-parallel-size", o.tensor_model_parallel_size);
  f.get("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  f.get("num-layers-per-virtual-pipeline-stage", o.num_layers_per_virtual_pipeline_stage);
  f.get("num-virtual-stages-per-pipeline-rank", o.num_virtual_stages_per_pipeline_rank);
  f.get("microbatch-group-size-per-virtual-pipeline-stage", o.microbatch_group_size);
  if (f.has("microbatch-group-size-per-virtual-pipeline-stage")) {
    if (o.microbatch_group_size < 1)
      throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage must be positive");
    o.flags_without_effect.push_back("--microbatch-group-size-per-virtual-pipeline-stage");  // refused unless pp's
  }
  for (const auto& [flag, count] : {std::pair{"decoder-first-pipeline-num-layers", &o.uneven_pipeline.first_stage_layers},
                                    std::pair{"decoder-last-pipeline-num-layers", &o.uneven_pipeline.last_stage_layers}}) {
    f.get(flag, *count);
    if (f.has(flag) && *count < 1) throw ConfigError(std::string("--") + flag + " must be positive");
  }
  f.get("account-for-embedding-in-pipeline-split", o.uneven_pipeline.embedding_as_layer);
  f.get("account-for-loss-in-pipeline-split", o.uneven_pipeline.loss_as_layer);
  f.get("pipeline-model-parallel-layout", o.uneven_pipeline.layout);
  if (f.has("pipeline-model-parallel-layout") && o.uneven_pipeline.layout.empty())
    throw ConfigError("--pipeline-model-parallel-layout is empty");
  f.get("sequence-parallel", o.sequence_parallel);
  if (o.deepspeed_config.empty()) f.get("zero-stage", o.zero_stage);  // else the --deepspeed_config file's
  // Megatron's distributed optimizer shards the optimizer state and the fp32 master weights
  // over data parallel and reduce-scatters the gradients: ZeRO stage 1.
  if (f.has("use-distributed-optimizer")) {
    if (!f.has("zero-stage")) o.zero_stage = 1;
    else if (o.zero_stage == 0)
      throw ConfigError("--use-distributed-optimizer shards the optimizer state: --zero-stage 0 contradicts it");
  }
  if (f.has("overlap-grad-reduce") && f.has("no-overlap-grad-reduce"))
    throw ConfigError("--overlap-grad-reduce and --no-overlap-grad-reduce contradict each other");
  if (f.has("no-overlap-grad-reduce")) o.overlap_grad_reduce = false;
  f.get("overlap-param-gather", o.overlap_param_gather);
  if (o.overlap_param_gather && o.zero_stage == 0)
    throw ConfigError("--overlap-param-gather overlaps the gather of the parameters that ZeRO updates in shards: it "
                      "needs " + std::string(o.deepspeed_config.empty()
                                                 ? "--use-distributed-optimizer or --zero-stage 1|2"
                                                 : "the --deepspeed_config file's \"zero_optimization\" stage 1 or 2"));
  // As Megatron: a step whose gathers overlap the next forward but whose reductions are
  // waited for one by one is not a combination anyone measures; it is refused.
  if (o.overlap_param_gather && !o.overlap_grad_reduce)
    throw ConfigError("--overlap-param-gather needs the gradient reductions overlapped too: drop "
                      "--no-overlap-grad-reduce");
  f.get("comm", o.comm);
}

// A switch of Megatron's that stands for --recompute-granularity `granularity`
// (--checkpoint-activations, --recompute-activations): refused with another granularity.
// Whether it was given.
bool take_granularity_switch(const Flags& f, const char* flag, const char* granularity, TrainOptions& o) {
  if (!f.has(flag)) return false;
  if (!o.recompute_granularity.empty() && o.recompute_granularity != granularity)
    throw ConfigError(std::string("--") + flag + " means --recompute-granularity " + granularity + ", not '" +
                      o.recompute_granularity + "'");
  o.recompute_granularity = granularity;
  return true;
}

// Activation recomputation: Megatron's flags, and its older --checkpoint-activations and
// --recompute-activations, which stand for a granularity.
void read_recompute_flags(const Flags& f, TrainOptions& o) {
  f.get("recompute-granularity", o.recompute_granularity);
  f.get("recompute-method", o.recompute_method);
  f.get("recompute-num-layers", o.recompute_num_layers);
  if (take_granularity_switch(f, "checkpoint-activations", "full", o) && o.recompute_method.empty())
    o.recompute_method = "uniform";
  if (f.has("checkpoint-num-layers")) {
    f.get("checkpoint-num-layers", o.recompute_num_layers);
    if (o.recompute_num_layers <= 0) throw ConfigError("--checkpoint-num-layers must be positive");
  }
  take_granularity_switch(f, "recompute-activations", "selective", o);
}

// When and how the run validates, or whether it only evaluates (--skip-train).
void read_evaluation_flags(const Flags& f, TrainOptions& o) {
  f.get("eval-interval", o.eval_interval);
  f.get("eval-iters", o.eval_iters);
  for (const auto& [flag, field] : {std::pair{"eval-micro-batch-size", &o.eval_micro_batch_size},
                                    std::pair{"eval-global-batch-size", &o.eval_global_batch_size}})
    if (f.has(flag)) {
      int64_t v = 0;
      f.get(flag, v);
      *field = v;
    }
  if (f.has("start-eval-at-iter")) {
    int64_t start = 0;
    f.get("start-eval-at-iter", start);
    if (start < 0) throw ConfigError("--start-eval-at-iter must not be negative");
    o.start_eval_at_iter = start;
  }
  f.get("full-validation", o.full_validation);
  f.get("multiple-validation-sets", o.multiple_validation_sets);
  o.skip_train = f.has("skip-train");
}

// TensorBoard, the log line's fields and scalars, the timers, the profiler, and --log-progress.
void read_logging_flags(const Flags& f, TrainOptions& o) {
  f.get("tensorboard-dir", o.tensorboard_dir);
  f.get("tensorboard-log-interval", o.tensorboard_log_interval);
  f.get("tensorboard-queue-size", o.tensorboard_queue_size);
  // Megatron-DeepSpeed's scripts pass --deepspeed: their dashboards read its tags.
  if (f.has("deepspeed")) o.tensorboard_tags = "megatron-deepspeed";
  f.get("tensorboard-tags", o.tensorboard_tags);
  parse_tensorboard_tags(o.tensorboard_tags, "--tensorboard-tags");
  f.get("log-batch-size-to-tensorboard", o.log_batch_size_to_tensorboard);
  f.get("log-world-size-to-tensorboard", o.log_world_size_to_tensorboard);
  o.log_learning_rate_to_tensorboard = !f.has("no-log-learnig-rate-to-tensorboard");
  o.log_loss_scale_to_tensorboard = !f.has("no-log-loss-scale-to-tensorboard");
  f.get("log-memory-to-tensorboard", o.log_memory_to_tensorboard);
  f.get("log-optimizer-states-to-tensorboard", o.log_optimizer_states_to_tensorboard);
  f.get("log-energy", o.log_energy);
  f.get("log-throughput", o.log_throughput);
  f.get("log-params-norm", o.log_params_norm);
  f.get("log-num-zeros-in-grad", o.log_num_zeros_in_grad);
  f.get("timing-log-level", o.timing_log_level);
  f.get("timing-log-option", o.timing_log_option);
  f.get("log-timers-to-tensorboard", o.log_timers_to_tensorboard);
  f.get("log-validation-ppl-to-tensorboard", o.log_validation_ppl_to_tensorboard);
  f.get("profile", o.profile);
  f.get("profile-step-start", o.profile_step_start);
  f.get("profile-step-end", o.profile_step_end);
  o.log_progress = f.has("log-progress");
  f.get("peak-tflops", o.peak_tflops);
}

// Megatron's flags that change nothing here, in the note rank 0 prints; and --ckpt-format,
// one of them, whose value must still be one of Megatron's.
void note_flags_without_effect(const Flags& f, TrainOptions& o) {
  for (const FlagDef& d : flags_without_effect_defs())
    if (f.has(d.name)) o.flags_without_effect.push_back(std::string("--") + d.name);
  if (f.has("no-bias-gelu-fusion") && legacy_tanh_gelu(f))  // --use-legacy-models chose the GELU
    std::erase(o.flags_without_effect, std::string("--use-legacy-models"));
  // (word lists, which the command-line parser does not see)
  for (const auto& [flag, words] : o.words_without_effect) o.flags_without_effect.push_back("--" + flag);
  if (f.has("ckpt-format")) {  // noted (flags_without_effect_defs), but one of Megatron's
    std::string format;
    f.get("ckpt-format", format);
    if (format != "torch" && format != "torch_dist" && format != "zarr" && format != "torch_dcp" &&
        format != "fsdp_dtensor")
      throw ConfigError("--ckpt-format " + format + ": not one of Megatron's formats (torch, torch_dist, zarr, "
                        "torch_dcp, fsdp_dtensor)");
  }
}

// When the run stops before its last iteration (an exit interval, a phase's end, the kill
// switch, a signal, a time limit, a collective that waits too long, replicas that differ).
void read_stop_flags(const Flags& f, TrainOptions& o) {
  f.get("check-weight-hash-across-dp-replicas-interval", o.check_weight_hash_interval);
  if (f.has("check-weight-hash-across-dp-replicas-interval") && o.check_weight_hash_interval < 1)
    throw ConfigError("--check-weight-hash-across-dp-replicas-interval must be positive");
  f.get("exit-interval", o.exit_interval);
  if (f.has("phase-transition-iterations")) {
    std::string text;
    f.get("phase-transition-iterations", text);
    read_phase_transitions(o, text);
  }
  f.get("kill-switch-path", o.kill_switch_path);
  if (f.has("exit-signal")) {
    std::string name;
    f.get("exit-signal", name);
    o.exit_signal = catchable_signal_named(name);
    if (o.exit_signal == 0)
      throw ConfigError("--exit-signal " + name + ": expected one of " + catchable_signal_names());
  }
  f.get("exit-duration-in-mins", o.exit_duration_in_mins);
  f.get("distributed-timeout-minutes", o.distributed_timeout_minutes);
}

// Where, when and what the run saves: --save's checkpoints, the non-persistent ones and their
// replication, the canonical parameters at the end.
void read_save_flags(const Flags& f, TrainOptions& o) {
  f.get("save-canonical", o.save_canonical);
  f.get("save", o.save);
  f.get("save-interval", o.save_interval);
  f.get("keep-last", o.keep_last);
  f.get("save-retain-interval", o.save_retain_interval);
  f.get("non-persistent-save-interval", o.non_persistent_save_interval);
  f.get("non-persistent-ckpt-type", o.non_persistent_ckpt_type);
  f.get("non-persistent-global-ckpt-dir", o.non_persistent_global_ckpt_dir);
  f.get("non-persistent-local-ckpt-dir", o.non_persistent_local_ckpt_dir);
  f.get("non-persistent-local-ckpt-algo", o.non_persistent_local_ckpt_algo);
  o.replication = f.has("replication");
  f.get("replication-jump", o.replication_jump);
  f.get("replication-factor", o.replication_factor);
  f.get("no-save-optim", o.no_save_optim);
  f.get("no-save-rng", o.no_save_rng);
  f.get("async-save", o.async_save);
}

// Which checkpoint the run starts from: --load's (the pointer's, or --ckpt-step's / --load-tag's
// iteration), or --pretrained-checkpoint while --load holds none.
void read_checkpoint_to_load_flags(const Flags& f, TrainOptions& o) {
  f.get("load", o.load);
  f.get("pretrained-checkpoint", o.pretrained_checkpoint);
  if (f.has("pretrained-checkpoint") && o.pretrained_checkpoint.empty())
    throw ConfigError("--pretrained-checkpoint: expected a directory");
  f.get("ckpt-step", o.ckpt_step);
  if (f.has("ckpt-step") && o.ckpt_step < 0) throw ConfigError("--ckpt-step must not be negative");
  if (f.has("load-tag")) {
    std::string tag;
    f.get("load-tag", tag);
    const int64_t step = load_tag_iteration(tag);
    if (f.has("ckpt-step") && o.ckpt_step != step)
      throw ConfigError("--load-tag " + tag + " and --ckpt-step " + std::to_string(o.ckpt_step) +
                        " name different checkpoints: give one");
    o.ckpt_step = step;
    if (!f.has("ckpt-step")) o.ckpt_step_flag = "--load-tag " + tag;
  }
}

// What a loaded checkpoint gives the run (its optimizer, RNG, schedules, arguments), and what
// happens without one.
void read_load_flags(const Flags& f, TrainOptions& o) {
  f.get("no-load-optim", o.no_load_optim);
  f.get("no-load-rng", o.no_load_rng);
  f.get("finetune", o.finetune);
  f.get("no-load-lr-state", o.no_load_lr_state);
  f.get("exit-on-missing-checkpoint", o.exit_on_missing_checkpoint);
  f.get("use-checkpoint-args", o.use_checkpoint_args);
  f.get("use-mp-args-from-checkpoint-args", o.use_mp_args_from_checkpoint_args);
  if (o.use_mp_args_from_checkpoint_args && !o.use_checkpoint_args)  // Megatron reads it only there
    o.flags_without_effect.push_back("--use-mp-args-from-checkpoint-args (without --use-checkpoint-args)");
  // Megatron's masters after --no-load-optim come from the live model unless this flag asks for
  // the checkpoint's weights; trident's come from the weights just loaded, which are those.
  if (f.has("load-main-params-from-ckpt")) {
    if (!o.no_load_optim)  // Megatron's assertion
      throw ConfigError("--load-main-params-from-ckpt must be used with --no-load-optim");
    o.flags_without_effect.push_back("--load-main-params-from-ckpt");
  }
  for (const char* name : {"ckpt-step", "load-tag", "exit-on-missing-checkpoint", "use-checkpoint-args"})
    if (f.has(name) && o.load.empty()) throw ConfigError(std::string("--") + name + " needs --load");
  // Megatron's rule for a loaded checkpoint's scheduler: the two choices exclude each other
  // (OptimizerParamScheduler asserts "both override and use-checkpoint are set"), with or
  // without --load.
  for (const char* name : {"override-opt_param-scheduler", "override-lr-scheduler"})
    if (f.has(name)) o.override_opt_param_scheduler = true;
  for (const char* name : {"use-checkpoint-opt_param-scheduler", "use-checkpoint-lr-scheduler"})
    if (f.has(name)) o.use_checkpoint_opt_param_scheduler = true;
  if (o.override_opt_param_scheduler && o.use_checkpoint_opt_param_scheduler)
    throw ConfigError(std::string("--") +
                      (f.has("override-opt_param-scheduler") ? "override-opt_param-scheduler" : "override-lr-scheduler") +
                      " and --" +
                      (f.has("use-checkpoint-opt_param-scheduler") ? "use-checkpoint-opt_param-scheduler"
                                                                   : "use-checkpoint-lr-scheduler") +
                      " are mutually exclusive");
}

}  // namespace

// The readers' order is the order in which a user with several wrong flags sees the errors (a
// value that does not convert throws as it is read; each reader refuses what its flags alone
// can tell), so it stays as it was. The flags read here directly are those whose place in that
// order falls between two themes.
void read_run_flags(const Flags& f, TrainOptions& o) {
  f.get("seed", o.seed);
  f.get("log-interval", o.log_interval);
  f.get("log-memory-interval", o.log_memory_interval);
  f.get("log-device-memory-used", o.log_device_memory_used);
  read_parallelism_flags(f, o);
  read_recompute_flags(f, o);
  read_evaluation_flags(f, o);
  read_logging_flags(f, o);
  f.get("max-nan-iterations", o.max_nan_iterations);  // (a stop flag, read before --ckpt-format's check)
  note_flags_without_effect(f, o);
  read_stop_flags(f, o);
  read_save_flags(f, o);
  read_checkpoint_to_load_flags(f, o);
  if (f.has("eval-only")) o.skip_train = eval_only(f);  // BigScience's --skip-train (read_evaluation_flags)
  read_load_flags(f, o);
  read_data_flags(f, o);
  // A flag given an empty directory (as a script's unset variable gives it).
  if (f.has("save") && o.save.empty()) throw ConfigError("--save: expected a directory");
  if (f.has("load") && o.load.empty()) throw ConfigError("--load: expected a directory");
  if (f.has("tensorboard-dir") && o.tensorboard_dir.empty()) throw ConfigError("--tensorboard-dir: expected a directory");
}

}  // namespace trident::options_internal
