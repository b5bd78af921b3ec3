// trident-train's options: Megatron flag names, optionally from a YAML file given with
// --config (one file; same keys, without the dashes; the command line wins over the file).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "model/config.h"
#include "parallel/pipeline_split.h"
#include "train/batch_schedule.h"
#include "train/data_skip_ranges.h"
#include "train/weighted_split_paths.h"
#include "train/deepspeed_config.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/weight_decay_schedule.h"

namespace trident {

struct TrainOptions {
  ModelConfig model;  // --fp16 / --bf16 set model.dtype (F32 when neither)
  int micro_batch_size = 4;
  // 0 (not given): Megatron's micro_batch_size x data-parallel size. Parsing sets
  // micro_batch_size and global_batch_size_is_default; resolve_global_batch_size multiplies
  // by the data-parallel size once the layout is known.
  int global_batch_size = 0;
  bool global_batch_size_is_default = false;
  // --rampup-batch-size START INCR SAMPLES (batch_schedule.h; sample-based runs only): the words,
  // and the numbers parsing reads from them (rampup_start 0: no ramp-up).
  std::vector<std::string> rampup_batch_size;
  int64_t rampup_start = 0, rampup_increment = 0;
  uint64_t rampup_samples = 0;
  // --step-batch-size-schedule "T0:B0 T1:B1 ..." (batch_schedule.h; sample-based runs only):
  // the words, and the steps parsing reads from them (empty: none). The global batch
  // (global_batch_size) is then the last step's.
  std::vector<std::string> step_batch_size_schedule;
  std::vector<BatchStep> batch_steps;
  // Megatron's --iterations-to-skip N ...: the words, and the 1-based iterations they name,
  // whose global batch is read past without a step (Trainer::skip_iteration).
  std::vector<std::string> iterations_to_skip_words;
  // Megatron's list-valued flags that change nothing here (--cuda-graph-scope, --cp-comm-type,
  // ...): each given one's words, read so that a launcher's list does not stop the run.
  std::map<std::string, std::vector<std::string>> words_without_effect;
  std::set<int64_t> iterations_to_skip;
  // BigScience's --skip-train-iteration-range A-B ...: the words, and the ranges parsing reads
  // from them (data_skip_ranges.h): the data of iterations A to B is read past when the run
  // reaches A, without a step or any count advancing.
  std::vector<std::string> skip_train_iteration_range_words;
  std::vector<IterationRange> skip_train_iteration_ranges;

  // ---- Length of training and LR schedule (Megatron): iteration-based (--train-iters,
  // --lr-warmup-iters, --lr-decay-iters) or sample-based (--train-samples,
  // --lr-warmup-samples, --lr-decay-samples), never mixed; --lr-warmup-fraction
  // (warm-up = fraction x decay) works with either instead of the warm-up count.
  int64_t train_iters = 100;  // sample-based: train_samples / global batch (floor), or the ramp-up's or steps' count
  bool train_iters_is_default = false;  // parsing without --train-iters: error messages say so
  bool sample_based = false;  // set by --train-samples
  uint64_t train_samples = 0;  // --train-samples; resolved: the run's samples either way
  double lr = 1.5e-4, min_lr = 0.0;
  double lr_warmup_init = 0;  // --lr-warmup-init: the warm-up's first rate
  // Megatron-core's --decoupled-lr and --decoupled-min-lr: the peak and final rates of the
  // word embedding (the input layer, and the LM head tied to it) on the same schedule; the
  // final one defaults to --min-lr. Not given: the embedding trains at --lr like the others
  // (--decoupled-min-lr alone changes nothing, as in Megatron).
  std::optional<double> decoupled_lr, decoupled_min_lr;
  std::string lr_decay_style = "linear";
  int64_t lr_warmup_iters = 0;
  int64_t lr_decay_iters = 0;  // 0: train_iters (iteration-based)
  uint64_t lr_warmup_samples = 0;
  uint64_t lr_decay_samples = 0;  // 0: train_samples (sample-based)
  // --lr-decay-style WSD: the final anneal's length (one of the two, as the run counts) and shape.
  int64_t lr_wsd_decay_iters = 0;
  uint64_t lr_wsd_decay_samples = 0;
  std::string lr_wsd_decay_style = "exponential";
  double lr_warmup_fraction = -1;  // < 0: not given
  // Megatron-DeepSpeed's token counts (lr_schedule.h): the warm-up (--lr-warmup-tokens,
  // instead of the warm-up in samples or iterations) and the decay (--lr-decay-tokens, which
  // ends the decay instead of the decay in samples or iterations; that one still has to
  // exceed the warm-up and sets a --lr-warmup-fraction) counted in tokens, and
  // --train-tokens, a stop once the run has consumed that many tokens (or at --train-iters,
  // which it needs, whichever comes first). Not given: none.
  std::optional<uint64_t> lr_warmup_tokens, lr_decay_tokens, train_tokens;
  bool counts_tokens() const { return lr_warmup_tokens || lr_decay_tokens || train_tokens; }
  // Resolved by resolve_schedule() (parse_train_options calls it): the schedule in
  // samples, which is all the trainer reads.
  double warmup_samples = 0;   // fractional with --lr-warmup-fraction, as in Megatron
  uint64_t decay_samples = 0;
  uint64_t wsd_decay_samples = 0;

  // Double, as Megatron's: the checkpoint's scheduler state and its messages show 0.1, not
  // 0.10000000149011612 (the optimizer applies it in fp32).
  double weight_decay = 0.01;
  float clip_grad = 1.0f;
  // Megatron's weight-decay schedule (weight_decay_schedule.h): from --start-weight-decay to
  // --end-weight-decay over the run; < 0: --weight-decay. Constant needs start == end.
  double start_weight_decay = -1, end_weight_decay = -1;
  std::string weight_decay_incr_style = "constant";
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_eps = 1e-8f;
  uint64_t seed = 1234;
  int log_interval = 100;
  // --log-memory-interval: every rank of data-parallel rank 0 reports its memory every N
  // iterations (Megatron's report_memory lines); 0 (not given): after the first iteration only.
  int64_t log_memory_interval = 0;
  bool log_device_memory_used = false;  // and the device's memory in use, every process's (CUDA)
  std::string device = "auto";
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  // Interleaved pipeline (Megatron): each stage runs several model chunks.
  // --num-layers-per-virtual-pipeline-stage N gives num_layers / (pp x N) chunks,
  // --num-virtual-stages-per-pipeline-rank the count itself; 0: not given.
  int num_layers_per_virtual_pipeline_stage = 0;
  int num_virtual_stages_per_pipeline_rank = 0;
  // --microbatch-group-size-per-virtual-pipeline-stage (0: not given): accepted at the
  // pipeline size, the group trident's interleaved schedule runs (Megatron's default).
  int microbatch_group_size = 0;
  // --recompute-modules' words (Megatron's selective recomputation): core_attn alone is taken.
  std::vector<std::string> recompute_modules;
  int virtual_pipeline_chunks() const;  // 1 without interleaving
  // Megatron's uneven stages: --decoder-first/last-pipeline-num-layers,
  // --account-for-embedding/loss-in-pipeline-split (parallel/pipeline_split.h).
  UnevenPipeline uneven_pipeline;
  PipelineSplit pipeline_split() const;  // the layers of every stage and chunk
  // --sequence-parallel (Megatron): LayerNorm/dropout regions on 1/tp of the rows each;
  // ignored without tensor parallelism, as Megatron ignores it.
  bool sequence_parallel = false;
  int zero_stage = 0;  // 1: optimizer state sharded over DP; 2: gradients too
  // --overlap-grad-reduce (Megatron's, here the default; --no-overlap-grad-reduce turns it
  // off): the gradient reductions run while backward goes on.
  bool overlap_grad_reduce = true;
  // --overlap-param-gather (Megatron): the updated parameters' all-gathers after a ZeRO
  // step run while the next forward goes on, each layer waited for just before it is read.
  bool overlap_param_gather = false;
  std::string comm;     // --comm: "nccl" or "mpi"; empty: nccl with the CUDA backend when built, else mpi
  bool no_tf32 = false;  // --no-tf32: fp32 GEMMs in plain fp32 instead of on TF32 tensor cores
  // --disable-bf16-reduced-precision-matmul (Megatron's; with --bf16): bf16 GEMMs reduce split-K
  // partial sums in fp32 only.
  bool disable_bf16_reduced_precision_matmul = false;
  // Activation recomputation, Megatron's flags: granularity "" (none), "full" or
  // "selective"; method "uniform" or "block" (full only); layers per group (uniform) or
  // recomputed layers per stage (block).
  std::string recompute_granularity;
  std::string recompute_method;
  int recompute_num_layers = 1;

  // ---- Mixed precision (Megatron's flags and defaults).
  bool accumulate_allreduce_grads_in_fp32 = false;
  double loss_scale = 0;  // > 0: static scale; 0: dynamic for fp16 (none for bf16 / fp32)
  double initial_loss_scale = 4294967296.0;  // 2^32
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  // fp16 with dynamic scaling under --deepspeed at ZeRO stage 0: DeepSpeed's FP16_Optimizer's
  // scaler rules (LossScaleKind::DeepSpeedFused) instead of Megatron's.
  bool deepspeed_fp16_optimizer = false;

  // ---- Evaluation, logging, health.
  int64_t eval_interval = 1000;  // iterations between validation runs
  int64_t eval_iters = 100;      // validation iterations per run (0: no validation)
  // Megatron's --start-eval-at-iter N: the periodic validations only at iterations >= N (none:
  // from the first multiple of eval_interval); the final one always.
  std::optional<int64_t> start_eval_at_iter;
  // Megatron's --eval-micro-batch-size and --eval-global-batch-size: trident evaluates with the
  // training's batch sizes, so these are accepted only equal to them (checked once the global
  // batch is known: resolve_global_batch_size).
  std::optional<int64_t> eval_micro_batch_size, eval_global_batch_size;
  std::string tensorboard_dir;   // empty: no TensorBoard
  int64_t tensorboard_log_interval = 1;
  int64_t tensorboard_queue_size = 1000;  // Megatron's default; add_scalar waits when it is full
  // Whose scalar names: "megatron" (Megatron-LM's "lm loss", "lm loss vs samples") or
  // "megatron-deepspeed" ("lm-loss-training/lm loss", ... " vs tokens"; default with --deepspeed).
  std::string tensorboard_tags = "megatron";
  bool log_batch_size_to_tensorboard = false;  // Megatron's "batch-size" scalars
  bool log_world_size_to_tensorboard = false;  // Megatron's "world-size" scalars
  bool log_learning_rate_to_tensorboard = true;  // off: --no-log-learnig-rate-to-tensorboard (sic)
  bool log_loss_scale_to_tensorboard = true;     // off: --no-log-loss-scale-to-tensorboard
  bool log_memory_to_tensorboard = false;      // Megatron's "mem-*" scalars (rank 0's allocator)
  bool log_optimizer_states_to_tensorboard = false;  // Megatron-DeepSpeed's "optimizer/*" scalars
  // Megatron's --log-energy: the GPUs' energy (NVML) per iteration and power in the log line,
  // iter-energy/gpu and power/gpu scalars, the training's total at its end.
  bool log_energy = false;
  // Megatron's --log-throughput: its "throughput per GPU (TFLOP/s/GPU)" field (its FLOPs:
  // megatron_flops_per_iteration).
  bool log_throughput = false;
  bool log_params_norm = false;                // Megatron's "params norm" field and scalar
  bool log_num_zeros_in_grad = false;          // Megatron's "num zeros" field and scalar
  int64_t timing_log_level = 0;                // Megatron's timers (train/timers.h): 0, 1 or 2
  std::string timing_log_option = "minmax";    // minmax, max or all
  bool log_validation_ppl_to_tensorboard = false;  // Megatron's "lm loss validation ppl" scalars
  bool log_timers_to_tensorboard = false;      // the timers as <name>-time scalars
  // Megatron's --profile: the device profiler captures iterations profile_step_start + 1 to
  // profile_step_end (1-based) on the global ranks listed (--profile-ranks' words; resolved:
  // profile_rank_ids, {0} when none are given).
  bool profile = false;
  int64_t profile_step_start = 10, profile_step_end = 12;
  std::vector<std::string> profile_ranks;
  std::set<int> profile_rank_ids;
  // Megatron's --ffn-hidden-size and --kv-channels (0: not given); GPT-2 fixes both, so a
  // given value must be 4 x hidden and hidden / heads.
  int64_t ffn_hidden_size = 0, kv_channels = 0;
  double peak_tflops = 0;        // per device, for MFU; 0: peak_tflops_for_device's table
  // Stop after more than this many iterations in a row with a NaN/inf loss or, without a
  // dynamic loss scaler to recover, a NaN/inf gradient norm (Trainer::count_unusable_iteration).
  int64_t max_nan_iterations = 10;
  // Megatron's --check-weight-hash-across-dp-replicas-interval N: every N iterations the
  // data-parallel replicas' parameters must be equal (train/replica_check.h); 0: never.
  int64_t check_weight_hash_interval = 0;
  int64_t exit_interval = 0;        // stop when iteration % exit_interval == 0 (0: never)
  // Megatron-core's --phase-transition-iterations "T1,T2,...": the iterations (sorted) where the
  // run's training data changes; at each the run saves and exits (train/training_phases.h).
  std::vector<int64_t> phase_transition_iterations;
  // Where the run starts, which chooses its training phase and where that phase's data starts:
  // its checkpoint's iteration and consumed samples (trident-train reads them from --load
  // before building the data; 0 without one, or with --finetune).
  int64_t start_iteration = 0;
  uint64_t start_consumed_samples = 0;
  // And the skip ranges it has applied and the samples they read past (data_skip_ranges.h):
  // the training data is built for those and for the ranges still to come.
  std::vector<IterationRange> start_applied_skip_ranges;
  uint64_t start_range_skipped_samples = 0;
  // BigScience's --kill-switch-path FILE: a run that finds the file at its start ends without
  // training; one that finds it after an iteration saves (with --save) and ends there, as a
  // stop signal does (empty: none). Every rank looks; any rank that sees it stops them all.
  std::string kill_switch_path;
  // Megatron's --exit-signal NAME: one more signal that asks the run to stop as SIGTERM and
  // SIGINT do (finish the iteration, save, exit 0), e.g. SIGUSR1 that a scheduler sends before
  // the time limit (core/stop_signals.h); 0: none.
  int exit_signal = 0;
  // --skip-train (Megatron's): no training; the validation and test evaluations of the
  // loaded (or initial) model, without TensorBoard scalars, and no checkpoint.
  bool skip_train = false;
  bool log_progress = false;  // Megatron's --log-progress: SAVE/progress.txt (train/progress_log.h)
  // Stop (after saving with --save) once any rank has run this many minutes since its start,
  // checked after every iteration, as Megatron; 0: never.
  double exit_duration_in_mins = 0;
  // --distributed-timeout-minutes (Megatron's): the longest wait in one collective or
  // transfer before the job ends (parallel/collective_timeout.h); 0: no limit.
  double distributed_timeout_minutes = 10;
  std::string save_canonical;       // safetensors file of canonical fp32 parameters, written at the end

  // ---- Checkpoints (Megatron's flags).
  std::string save, load;       // directories; empty: none
  // Megatron's --pretrained-checkpoint: while --load holds no checkpoint, the run fine-tunes
  // from this one (as with --finetune); once it has saved into --load, restarts resume there.
  std::string pretrained_checkpoint;
  int64_t save_interval = 0;    // iterations between saves; 0: only at the end (with --save)
  bool async_save = false;  // --async-save: write checkpoints from a host copy in the background
  int64_t keep_last = 0;        // checkpoints kept under --save; 0: keep all
  // Megatron's --save-retain-interval: after a save commits, the previous persistent checkpoint
  // (the one --save's tracker named) is deleted unless its iteration is a multiple of this; 0: off.
  int64_t save_retain_interval = 0;
  // Megatron's non-persistent checkpoints: every --non-persistent-save-interval iterations
  // (not a --save-interval one) a checkpoint replaces the previous one in their own folder,
  // and --load resumes from the newer of it and --load's own. The "global" type keeps them in
  // a folder every node shares; "local" each rank's part in a folder of its node
  // (train/local_checkpoint.h); "" without them.
  int64_t non_persistent_save_interval = 0;
  std::string non_persistent_ckpt_type;
  std::string non_persistent_global_ckpt_dir;  // empty: <--save or --load>/non_persistent
  std::string non_persistent_local_ckpt_dir;   // "local": each rank's folder is <it>/<world rank>
  std::string non_persistent_local_ckpt_algo = "fully_parallel";  // or "atomic" (local_checkpoint.h)
  bool local_checkpoints() const { return non_persistent_ckpt_type == "local"; }
  // Megatron's --replication of them (train/local_replicas.h): cliques of --replication-factor
  // ranks --replication-jump apart, each keeping every member's.
  bool replication = false;
  int replication_jump = 1, replication_factor = 2;
  // Not a flag: with local ones, the checkpoint to resume from that every rank holds, agreed
  // once all ranks have started (train/local_checkpoint.h: resolve_local_checkpoint).
  struct LocalCheckpointToLoad {
    bool resolved = false;
    std::optional<int64_t> iteration;  // none: no local checkpoint to resume from
    std::string root;                  // this rank's folder of them
    std::string note;                  // why local ones were passed over ("" if none was)
  };
  LocalCheckpointToLoad local_checkpoint;
  // The global type's folder for checkpoints under `base` (--save or --load).
  std::string non_persistent_dir(const std::string& base) const;
  bool no_load_optim = false, no_load_rng = false, finetune = false;
  bool no_load_lr_state = false;  // Megatron-DeepSpeed's: the optimizer loads, the schedules start at step 0
  // Megatron's --full-validation: every validation reads the whole validation split once (one
  // epoch, from its start), in as many whole global batches as it holds; --eval-iters then
  // sizes the test only.
  bool full_validation = false;
  // Megatron's --multiple-validation-sets (with --full-validation or --skip-train): each
  // prefix of --valid-data-path, given without weights, is evaluated alone and reported as
  // "validation-<k>" (a --data-path's validation split is one set, "validation-0").
  bool multiple_validation_sets = false;
  // Megatron's: --no-save-optim leaves the optimizer state (with the learning-rate schedule
  // and the loss scale) out of the checkpoints, --no-save-rng the RNG state (the dropout
  // seed); loading such a checkpoint then needs --no-load-optim / --no-load-rng (or --finetune).
  bool no_save_optim = false, no_save_rng = false;
  // Which checkpoint --load names and what happens without one: train/checkpoint_to_load.h.
  int64_t ckpt_step = -1;  // --ckpt-step N: load iteration N, not the pointer's (-1: not given)
  std::string ckpt_step_flag = "--ckpt-step";  // or "--load-tag global_stepN", for messages
  bool exit_on_missing_checkpoint = false;
  // --use-checkpoint-args: model-shape flags not given take the loaded checkpoint's values
  // (train/checkpoint_args.h).
  bool use_checkpoint_args = false;
  // With it, --use-mp-args-from-checkpoint-args: the checkpoint's tensor and pipeline sizes and
  // model chunks replace the flags' (take_parallel_args).
  bool use_mp_args_from_checkpoint_args = false;
  // A loaded checkpoint's LR schedule (max_lr, min_lr, warm-up and decay in samples, decay
  // style) against the command line's, as Megatron's OptimizerParamScheduler.load_state_dict:
  // by default a difference is an error; --override-opt_param-scheduler (Megatron-DeepSpeed:
  // --override-lr-scheduler) takes the command line's, --use-checkpoint-opt_param-scheduler
  // (--use-checkpoint-lr-scheduler) the checkpoint's. Mutually exclusive.
  bool override_opt_param_scheduler = false, use_checkpoint_opt_param_scheduler = false;

  // Data: --data-path (Megatron's words: a prefix, weight-prefix pairs, or prefixes) cut by
  // --split, or a blend per split (--train-data-path, --valid-data-path, --test-data-path),
  // or synthetic tokens when all are empty: asked for with --mock-data (Megatron's flag),
  // else with a note on rank 0 (the quickstart and tests train that way).
  bool mock_data = false;
  // --eod-mask-loss: targets whose input token is the end-of-document id (eod_token, the
  // tokenizer's, set with the data) are not trained on nor counted, as Megatron's loss_mask.
  bool eod_mask_loss = false;
  int32_t eod_token = -1;
  // --reset-position-ids, --reset-attention-mask (Megatron's): a sample's documents end after
  // each eod_token of its input; positions restart at 0 in each, and attention stays inside
  // each (data/documents.h).
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
  // --calculate-per-token-loss: the gradient is the global batch's summed loss over its kept
  // targets divided by their count (Megatron-core's), instead of the mean of the micro-batches'
  // means; the same unless --eod-mask-loss leaves micro-batches with different counts.
  bool calculate_per_token_loss = false;
  // Megatron's implementation switches that were given (--DDP-impl, --data-impl, the fusion
  // switches, ...): accepted so that its scripts run unchanged, without effect here; rank 0
  // names them in a note.
  std::vector<std::string> flags_without_effect;
  std::vector<std::string> data_path, train_data_path, valid_data_path, test_data_path;
  // How errors name them: the flags, or --data-args-path / --per-split-data-args-path's file.
  std::string data_path_flag = "--data-path";
  std::array<std::string, 3> split_data_path_flags = {"--train-data-path", "--valid-data-path", "--test-data-path"};
  // BigScience's --train/--valid/--test-weighted-split-paths (train/weighted_split_paths.h),
  // instead of the above: per split, the words given (one group each, or read from the -path
  // flag's file), how errors name them, and the groups parsed from them.
  std::array<std::vector<std::string>, 3> weighted_split_paths;
  std::array<std::string, 3> weighted_split_paths_flags = {
      "--train-weighted-split-paths", "--valid-weighted-split-paths", "--test-weighted-split-paths"};
  std::array<std::vector<WeightedSplitGroup>, 3> weighted_split_groups;
  bool has_weighted_split_paths() const {
    return !weighted_split_groups[0].empty() || !weighted_split_groups[1].empty() || !weighted_split_groups[2].empty();
  }
  bool has_data() const {
    return !data_path.empty() || !train_data_path.empty() || !valid_data_path.empty() || !test_data_path.empty() ||
           has_weighted_split_paths();
  }
  std::string vocab_file, merge_file, tokenizer_type = "GPT2BPETokenizer";
  // --tokenizer-type NullTokenizer: the --vocab-size given (its ids; the tokenizer's
  // vocabulary is one more, the end of document); 0 otherwise.
  int64_t null_tokenizer_vocab_size = 0;
  std::string split = "969, 30, 1";
  // Megatron-core's --mid-level-dataset-surplus (data/blend.h's blended_dataset_samples).
  std::optional<double> mid_level_dataset_surplus;
  std::string data_cache_path;

  // Megatron-DeepSpeed's --deepspeed --deepspeed_config FILE (train/deepspeed_config.h): the
  // file, whose precision, loss scaling, clipping and ZeRO stage parsing has put in the fields
  // above (and its micro batch where --micro-batch-size is not given), and its batch keys,
  // which resolve_global_batch_size checks as DeepSpeed does at the data-parallel size.
  std::string deepspeed_config;
  DeepSpeedBatch deepspeed_batch;

  // Every flag the command line or the --config file gave, by name ("num-layers").
  std::set<std::string> given_flags;
  // Set by trident-train before it creates --save (the same directory as --load, usually):
  // --load did not exist at the start, for the trainer's "does not exist" warning.
  bool load_missing_at_start = false;
};

// Parses argv (and the YAML file named by --config). A flag on the command line replaces the
// file's value of that flag and of its alternatives (e.g. --train-samples the file's
// --train-iters, --lr-warmup-samples its --lr-warmup-iters). Throws ConfigError naming the
// flag or key for anything unknown, malformed or inconsistent, with the file's line for a
// value from the file; a key given twice in the file is an error. Returns false after
// printing --help.
bool parse_train_options(int argc, const char* const* argv, TrainOptions& out);

// Checks the model shape against the layout (--num-layers against the pipeline stages,
// ModelConfig::validate at the tensor-parallel size); ConfigError naming the flag.
// parse_train_options calls it, except with --use-checkpoint-args (take_checkpoint_args).
void validate_model_options(const TrainOptions& o);

// Fills the resolved schedule fields from the flag fields: iteration-based sets
// train_samples = train_iters x global batch, decay_samples = (lr_decay_iters or
// train_iters) x global batch, warmup_samples = lr_warmup_iters x global batch;
// sample-based sets train_iters = train_samples / global batch (with a batch ramp-up or
// steps: train_iters_of_samples), decay_samples =
// lr_decay_samples or train_samples, warmup_samples = lr_warmup_samples; a
// --lr-warmup-fraction gives warmup_samples = fraction x decay_samples. Idempotent, so
// code that fills TrainOptions by hand (tests) may call it too. Throws ConfigError naming
// the flag when the schedule is impossible. Needs global_batch_size > 0.
void resolve_schedule(TrainOptions& o);

// Megatron's default global batch, micro batch x data-parallel size, when --global-batch-size
// was not given (global_batch_size_is_default); then the schedule is resolved again. With
// --deepspeed, DeepSpeed's check of the file's batch keys (check_deepspeed_batch) first. Call
// it once the data-parallel size is known, before anything reads the global batch.
void resolve_global_batch_size(TrainOptions& o, int data_parallel_size);

// The validations that Megatron sizes the validation split for (get_train_valid_test_num_samples:
// one every --eval-interval iterations over --train-iters, and the final one, less
// --start-eval-at-iter / --eval-interval of them, at least the final one; its rule, so that the
// split is built, and its samples are ordered, as Megatron's). The run's own count may differ by
// one (an evaluation at --start-eval-at-iter itself): reads are checked against the data built,
// as Megatron reads.
int64_t sized_validations(const TrainOptions& o);

// The training samples a run reads in all, which its training data is sized for: --train-samples,
// or iteration-based the iterations' batches (a batch ramp-up's last batch may pass
// --train-samples: then what the run reads).
uint64_t run_training_samples(const TrainOptions& o);

// Whether the periodic validation runs after `iteration` (a multiple of --eval-interval, not
// before --start-eval-at-iter).
bool validates_after(const TrainOptions& o, int64_t iteration);
// How many iterations in (after, upto] validates_after holds for.
int64_t periodic_validations(const TrainOptions& o, int64_t after, int64_t upto);

// What every rank of a job must have been given, as "--flag value" lines for
// make_parallel_context's check: the layout, the model's shape, the batch and schedule, the
// precision and optimizer settings, and the switches that add collectives (saving, loading,
// evaluation, TensorBoard, logging). Not the paths of data or files, which nodes may mount
// at different places.
std::string flags_every_rank_shares(const TrainOptions& o);

// What sets the global batch, for messages: "--global-batch-size", or with
// --step-batch-size-schedule its last batch.
std::string global_batch_flag(const TrainOptions& o);

// The backend's choices the run's flags make (--no-tf32, --disable-bf16-reduced-precision-matmul).
BackendOptions backend_options(const TrainOptions& o);

// The schedule from the resolved fields (in samples, with the token counts given).
LrSchedule make_lr_schedule(const TrainOptions& o);
// The global batch of each iteration (--rampup-batch-size, --step-batch-size-schedule); a
// constant one (varies() false) without either.
BatchSchedule make_batch_schedule(const TrainOptions& o);
// Megatron's weight-decay schedule over the run's samples (train_samples), in samples.
WeightDecaySchedule make_weight_decay_schedule(const TrainOptions& o);

// Megatron's choice of scaler: --loss-scale S > 0 with fp16 or bf16: Constant(S); fp16
// otherwise: Dynamic(--initial-loss-scale, --min-loss-scale, --loss-scale-window,
// --hysteresis, growth 2, backoff 0.5), or DeepSpeedFused with the same but the hysteresis
// under --deepspeed at ZeRO stage 0; bf16 and fp32: None.
LossScalerConfig make_loss_scaler_config(const TrainOptions& o);

}  // namespace trident
