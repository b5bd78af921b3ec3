// The training loop of one rank: its pipeline stage's schedule (1F1B, or interleaved over
// model chunks) over the micro-batches of its data-parallel slice, the embedding-group and
// data-parallel gradient reductions, loss scaling (fp16), global-norm clipping, AdamW
// (ZeRO-sharded when asked), Megatron's LR schedule, periodic evaluation, the Megatron-style
// log line and TensorBoard scalars. One process is the layout tp = pp = dp = 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "data/gpt_dataset.h"
#include "model/gpt2.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_split.h"
#include "train/energy_monitor.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/weight_decay_schedule.h"
#include "train/optimizer.h"
#include "train/options.h"
#include "train/tensorboard_tags.h"
#include "train/timers.h"
#include "train/training_phases.h"

namespace trident {

class ShardedCheckpointReader;
class TensorBoardWriter;
struct CheckpointMetadata;
struct PendingSave;
class SnapshotArena;

struct IterationResult {
  double loss = 0, acc = 0, grad_norm = 0, ms = 0;
  int global_batch = 0;  // samples of this iteration (a ramp-up's or a step's when the batch varies)
  double loss_scale = 0;  // after this iteration's scaler update (1 without a scaler)
  // The rate the update used: the scheduler's rate before its step (Megatron's param_group lr).
  double lr = 0;
  double weight_decay = 0;  // the same for the weight decay (Megatron's param_group weight_decay)
  // The scheduler's rate after this iteration, which Megatron's log line and TensorBoard show:
  // the scheduler steps only after a successful update, so on a skipped iteration it is lr.
  double logged_lr = 0;
  // --decoupled-lr: the word embedding's rates, as lr and logged_lr (Megatron's decoupled
  // learning rate); none without it.
  std::optional<double> decoupled_lr, logged_decoupled_lr;
  // --log-num-zeros-in-grad: the zeros among the (reduced) gradients of the update; NaN
  // without the flag or without an update (Megatron's None).
  double num_zeros = NAN;
  bool skipped = false;   // inf/NaN gradients or a NaN loss: no update
  bool nan_loss = false;  // the loss was inf/NaN (Megatron's "nan iteration")
};

struct EvalResult {
  double loss = 0, acc = 0, tokens = 0;
  bool timed_out = false;  // stopped part-way for --exit-duration-in-mins (no loss then)
  bool stopped = false;    // stopped part-way by SIGTERM/SIGINT during training (no loss then)
};

// The checks of a resume that need only the checkpoint's metadata.json and the flags (the
// model's shape but for the tokenizer's vocabulary, the optimizer and RNG states the flags
// load, an iteration before --train-iters, the learning-rate schedule), for the checkpoint
// --load names: run before the datasets are built, whose index maps take minutes on a large
// corpus, so that a mistaken resume fails in seconds (Megatron loads its checkpoint first).
// Throws ConfigError or IoError as Trainer::load_checkpoint does; nothing to check without
// a checkpoint. Returns where the run starts: the checkpoint's iteration and consumed samples
// (0 without one, or with --finetune), for TrainOptions::start_iteration and
// start_consumed_samples.
struct RunStart {
  int64_t iteration = 0;
  uint64_t consumed_samples = 0;
  std::vector<IterationRange> applied_skip_ranges;  // and their samples (data_skip_ranges.h)
  uint64_t range_skipped_samples = 0;
};
RunStart check_checkpoint_fits_run(const TrainOptions& o);

// Megatron's --full-validation: a validation set's whole global batches (a last partial one is
// left out).
int64_t full_validation_iterations(uint64_t samples, int64_t global_batch_size);

class Trainer {
 public:
  // `train_data` yields samples of seq_length + 1 tokens; `log` receives the log lines
  // (written by world rank 0 only). `parallel` null means one process.
  Trainer(const TrainOptions& opt, Backend& backend, std::unique_ptr<SampleSource> train_data, std::ostream& log,
          ParallelContext* parallel = nullptr);
  ~Trainer();

  // Validation and test splits for --eval-interval / --eval-iters and the end of training.
  void set_evaluation_data(std::unique_ptr<SampleSource> valid, std::unique_ptr<SampleSource> test);
  // --multiple-validation-sets: each set evaluated alone, reported as validation-<k>.
  void set_evaluation_data(std::vector<std::unique_ptr<SampleSource>> valid_sets, std::unique_ptr<SampleSource> test);
  // BigScience's weighted split groups: each validation and test set evaluated alone and
  // reported under its group's name (opt.weighted_split_groups).
  void set_evaluation_data(std::vector<std::unique_ptr<SampleSource>> valid_sets,
                           std::vector<std::unique_ptr<SampleSource>> test_sets);

  IterationResult train_iteration();  // one iteration over the global batch
  // --non-persistent-ckpt-type local: "" when every file system holding local checkpoints has
  // room for the saves of all its ranks while their previous ones are kept (with --replication,
  // their cliques' copies too), else a warning line naming the first rank on one short of room.
  // Collective over the world.
  std::string local_checkpoint_space_warning();
  // Up to train_iters iterations (fewer when --train-tokens is reached first), logging every
  // log_interval; with --skip-train only the final evaluations.
  void train();
  // Mean loss over `iterations` global batches of `data` from sample `first_sample`, with
  // no dropout and no effect on training state. Collective over all ranks.
  EvalResult evaluate(const SampleSource& data, uint64_t first_sample, int64_t iterations);
  const std::vector<IterationResult>& history() const { return history_; }
  // Whether train_iteration keeps every result in history() (on by default, for the tests;
  // trident-train turns it off: a million iterations would hold ~90 MB a rank).
  void set_record_history(bool on) { record_history_ = on; }
  // The stage's model; with an interleaved pipeline its first chunk. Its params() hold
  // every chunk's parameters.
  Gpt2Model& model() { return *chunks_.front(); }
  ParallelContext& parallel() { return *par_; }
  int64_t iteration() const { return iteration_; }
  uint64_t consumed_samples() const { return consumed_samples_; }
  uint64_t consumed_tokens() const { return consumed_tokens_; }
  // The LR schedule's position (samples of the successful updates, its token count).
  const LrPosition& scheduler_position() const { return scheduler_; }
  uint64_t scheduler_samples() const { return scheduler_.samples; }
  const LossScaler& loss_scaler() const { return scaler_; }
  const AdamWOptimizer& optimizer() const { return *optimizer_; }
  // The layers of each of this stage's model chunks (one without an interleaved pipeline).
  std::vector<LayerRange> chunk_layers() const;

  // Checkpoints (trainer_checkpoint.cpp; loading in trainer_checkpoint_load.cpp). Collective
  // over all ranks.
  // Writes DIR/iter_NNNNNNN (opt.save) and makes it the latest; prunes to --keep-last. With
  // --async-save the files are written in the background and the commit waits for
  // finish_save. A non-persistent save goes to opt.non_persistent_dir(opt.save) and, once
  // committed, deletes the one before it there.
  enum class SaveKind { kPersistent, kNonPersistent };
  void save_checkpoint(SaveKind kind = SaveKind::kPersistent);
  // Commits a save whose files are written: with wait, once they are (waiting); without,
  // only when every rank's are already (a collective: all ranks call it together).
  void finish_save(bool wait);
  // Restores the checkpoint opt.load names (train/checkpoint_to_load.h: the latest, an
  // iteration folder, --ckpt-step's, or a newer non-persistent one), written under any layout (parameters; optimizer
  // state, loss scale and LR schedule position unless --no-load-optim/--finetune; counters
  // unless --finetune; dropout seed unless --no-load-rng/--finetune: a checkpoint without
  // one of these is a ConfigError naming the flags). With the optimizer state, the
  // checkpoint's LR and weight-decay schedule parameters must equal the command line's unless
  // --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler picks one (a
  // ConfigError naming the field otherwise), and a run of another dtype takes its
  // parameters from the checkpoint's fp32 master weights. Every rank must succeed before any
  // goes on: a failure on one is a ConfigError with its message on all. The data must cover
  // the rest of the run (checked before any tensor is read). Returns false, and training
  // starts from scratch, when there is no checkpoint to load (a warning, as Megatron).
  bool load_checkpoint();
  // --log-progress: appends "Starting job" to --save's progress.txt (Megatron writes it before
  // building and loading the model), after checking that the log reads: a garbled one stops
  // the run here, before any training is lost. Collective.
  void start_progress_log();

 private:
  // Fills tokens_ and targets_ (and positions_, document_starts_ where the run resets them)
  // with the micro-batch's samples; returns the targets it keeps
  // (all B T but those --eod-mask-loss masks).
  int64_t load_micro_batch(const SampleSource& data, uint64_t first_sample);
  // The targets of `samples` samples from `first_sample` that load_micro_batch would keep.
  int64_t kept_targets(const SampleSource& data, uint64_t first_sample, uint64_t samples);
  int32_t masked_after() const;  // the input token whose target is masked (-1: none)
  void check_profile_ranks();
  // "" when this layout can run iterations of `global_batch` samples, else why not.
  std::string batch_fits_layout(int64_t global_batch) const;
  // --step-batch-size-schedule: the steps still to come (from consumed_samples_) fit the layout.
  void check_batch_steps_to_come() const;
  // --phase-transition-iterations: the run's iteration (loaded) lies in the phase its training
  // data was built for (TrainOptions::start_iteration's); then says which phase it trains.
  void check_training_phase() const;
  void profile_before_iteration();  // --profile: starts the capture at its first iteration
  void profile_after_iteration();   // and stops it after its last
  CheckpointMetadata checkpoint_metadata(SaveKind kind, const std::filesystem::path& root, const std::string& token);
  // Under a local checkpoint's fully_parallel `local_algo` with dp > 1, the data-parallel rank
  // that writes (and on load broadcasts) each of the stage's parameters and, without ZeRO, its
  // optimizer state (local_checkpoint.h); else empty: each rank has all it needs.
  std::vector<int> shared_state_owners(const std::string& local_algo);
  uint64_t local_save_bytes();  // of this rank's local checkpoint (trainer_checkpoint.cpp)
  void broadcast_shared_state(const std::vector<int>& owners);  // collective over the DP group
  // --replication: the copies of `save` within `clique` (this rank's); collective over it.
  void replicate_local_save(const PendingSave& save, const std::vector<int>& clique);
  void commit_save();
  LossStats run_steps(const std::vector<PipeStep>& steps, int micro_batches, const SampleSource& data,
                      uint64_t first_sample, bool training, float grad_scale);
  void set_dropout_seed(uint64_t seed);
  void report_peak_memory();  // collective over the pipeline
  // Megatron's report_memory lines (--log-memory-interval; --log-device-memory-used adds the
  // device's memory in use where there is a device), printed by rank 0 for every rank of
  // data-parallel rank 0, in rank order: collective over the world.
  void report_memory();
  double global_norm_sq(bool of_params);  // of the gradients, or of the parameters; collective
  int64_t global_grad_zeros();            // --log-num-zeros-in-grad; collective
  // --log-energy: the monitor when every rank's device has an energy counter, else a note
  // (collective); the sum of every rank's `joules` (collective, in double).
  void start_energy_monitor();
  double energy_over_ranks(double joules);
  // --log-optimizer-states-to-tensorboard's 12 scalars (names and values); collective.
  std::vector<std::pair<std::string, double>> optimizer_state_statistics();
  bool counted_here(const ParamSpec& s) const;
  void sum_over_model(const Tensor& host_values, ReduceOp op = ReduceOp::Sum);
  void reduce_loss_stats(LossStats& s);
  // Megatron's block and scalars of one evaluation; `set_name` "validation", "validation-<k>"
  // (--multiple-validation-sets), or "validation" again for the test set's, as Megatron words it.
  void log_evaluation(const std::string& where, const EvalResult& r, bool to_tensorboard = true,
                      const std::string& set_name = "validation");
  // The validation and test evaluations at the end of the run (or of --skip-train); false
  // when one ran out of time (--exit-duration-in-mins), which ends the run without its line.
  bool final_evaluations(bool to_tensorboard);
  // train()'s steps, in the order it takes them; TrainLoop (trainer_loop.cpp) holds what it keeps
  // from one iteration to the next. Those marked collective run on every rank alike.
  struct TrainLoop;
  void print_run_header() const;  // the layout's line and the model's
  // --skip-train (Megatron's): the final evaluations alone, without TensorBoard scalars.
  void evaluate_only();
  // A stop asked for before the first iteration (a signal during the start-up, the kill
  // switch): says so and writes out the TensorBoard events. Collective.
  bool stopped_before_training();
  // Megatron's save before the first iteration of a larger global batch (a ramp-up's or a step's).
  void save_before_batch_grows(TrainLoop& loop);
  // The iteration's TensorBoard scalars and, every --log-interval and at the end, its log line,
  // which ends the log interval. Collective (norms, timers, energy).
  void log_iteration(const IterationResult& r, TrainLoop& loop);
  void timers_to_tensorboard();  // --log-timers-to-tensorboard's "<name>-time" scalars; collective
  void write_iteration_scalars(const IterationResult& r, double params_norm,
                               const std::vector<std::pair<std::string, double>>& optimizer_states,
                               const TrainLoop& loop);  // rank 0's, at --tensorboard-log-interval
  // Megatron's iteration line and the timers' block (collective: energy, timers); a
  // StorageError when the log can no longer be written.
  void print_iteration_line(const IterationResult& r, double params_norm, const TrainLoop& loop);
  // --eval-interval's validation after the iteration; false when it ends the run (out of
  // time, or a signal: loop.stopped_by_signal then).
  bool validate_during_training(TrainLoop& loop);
  // --save-interval's and --non-persistent-save-interval's saves after the iteration, and the
  // commit of an --async-save once written everywhere.
  void save_after_iteration(bool saving);
  // Whether the run stops after the iteration, saying why: a signal or the kill switch (both
  // set loop.stopped_by_signal), --exit-duration-in-mins, --exit-interval, or the end of a
  // --phase-transition-iterations phase. Collective.
  bool exit_requested(TrainLoop& loop);
  // After the loop: the energy line, the final save, and a complete run's final evaluations
  // and "done" line.
  void end_training(const TrainLoop& loop);
  // Whether the run ends complete, its final evaluations run: false when it stopped early
  // (no final evaluation then).
  bool ends_complete(bool stopped_by_signal);
  void say_out_of_time(const std::string& when) const;  // --exit-duration-in-mins' exit line
  // Whether training is over: --train-iters reached, or --train-tokens consumed.
  bool training_done() const;
  // --phase-transition-iterations: the training phase of the run at `iteration`
  // (train/training_phases.h); a single phase without the flag.
  TrainingPhase phase_at(int64_t iteration) const;
  // Megatron's --iterations-to-skip: whether the next iteration is one, and passing it (its
  // global batch read past: consumed, not trained on; no LR step, no FLOPs).
  bool skip_next_iteration() const;
  // --skip-train-iteration-range: reading past a range's data before iteration_ + 1
  // (train/data_skip_ranges.h).
  void skip_range(const IterationRange& r);
  // The training data's next sample: the consumed samples and those the skip ranges read past.
  uint64_t train_data_position() const { return consumed_samples_ + range_skipped_samples_; }
  // A validation's iterations of set `k`: --eval-iters, or with --full-validation the set's
  // whole global batches; summed over the sets, what one validation reads.
  int64_t validation_iterations(size_t k) const;
  int64_t validation_iterations() const;
  // "validation", "validation-<k>", or a weighted split group's name.
  std::string validation_set_name(size_t k) const;
  // How the log names test set k: "validation" (Megatron's line), or its group's name.
  std::string test_set_name(size_t k) const;
  // Where every validation set starts reading: 0 with --full-validation, else
  // validation_set_position of the samples consumed.
  uint64_t validation_start() const;
  // trident::validation_set_position of this run's validation sets.
  uint64_t validation_set_position(uint64_t consumed_valid) const;
  void skip_iteration();
  // --kill-switch-path: whether any rank sees the file (collective when set).
  bool kill_switch_found() const;
  // Rank 0's TensorBoard scalars under --tensorboard-tags' names (needs tensorboard_), and
  // the run's position for them.
  MegatronScalars scalars();
  RunPosition run_position() const;
  void count_unusable_iteration(const IterationResult& r);
  // --check-weight-hash-across-dp-replicas-interval: stops the run when a data-parallel
  // replica's parameters differ (train/replica_check.h).
  void check_replicas_agree();
  // --log-progress: appends `event` to --save's progress.txt (world rank 0), and a save's
  // throughput event (train/progress_log.h); a log that fails to read or write then is a note.
  void log_progress(const std::string& event);
  void retire_checkpoint(const std::filesystem::path& root, int64_t iteration);
  void join_retirement();
  void log_saved_progress(bool async);
  bool progress_logged() const { return opt_.log_progress && !opt_.save.empty(); }  // Megatron's: into --save
  // --exit-duration-in-mins: whether any rank has run out of time (collective when set), on
  // the minutes since this process started (Megatron counts from its program's start).
  bool out_of_time() const;
  static double minutes_since_start();
  // ConfigError unless the data covers the run from this position (trainer.cpp).
  // `range_skipped`: the samples skip ranges read past before `iteration`.
  void check_data_covers_run(int64_t iteration, uint64_t consumed, uint64_t consumed_valid,
                             uint64_t range_skipped = 0) const;
  // load_checkpoint's reading part (no collectives); returns shared_state_owners of the
  // checkpoint, for broadcast_shared_state once every rank has read.
  std::vector<int> restore_checkpoint(ShardedCheckpointReader& ckpt);
  // The micro-batches of this rank's share of a global batch, and their schedule.
  void set_micro_batches(int micro_batches);

  TrainOptions opt_;
  Backend& be_;
  std::unique_ptr<SampleSource> data_;
  std::vector<std::unique_ptr<SampleSource>> tests_;  // the test sets (none: no test)
  std::vector<std::unique_ptr<SampleSource>> valid_;  // the validation sets (none: no validation)
  std::ostream& log_;
  std::ostream* out_;  // log_ on world rank 0, a null stream elsewhere
  std::unique_ptr<ParallelContext> own_parallel_;
  ParallelContext* par_;
  BatchSchedule batch_schedule_;
  int micro_batches_ = 0, full_micro_batches_ = 1;
  std::vector<int> activation_slots_;  // per model chunk
  std::vector<PipeStep> schedule_steps_;
  std::vector<PipeStep> evaluation_steps_;  // forward only, of a full batch
  // The stage's model chunks (one without an interleaved pipeline), sharing one ParamStore.
  std::vector<std::unique_ptr<Gpt2Model>> chunks_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  LrSchedule schedule_;
  WeightDecaySchedule wd_schedule_;
  LossScaler scaler_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<EnergyMonitor> energy_;  // --log-energy, when every rank's device has a counter
  TensorBoardTags tensorboard_tags_ = TensorBoardTags::kMegatron;  // --tensorboard-tags, parsed once
  Timers timers_;                      // --timing-log-level
  bool profiling_ = false;             // this rank's --profile capture is on
  int timed_since_tensorboard_ = 0;    // iterations in timers_' TensorBoard sums
  std::vector<int32_t> sample_, tokens_, targets_;  // host staging, sized once
  // --reset-position-ids / --reset-attention-mask: each token's position in its document and
  // its document's first position ([B, T], sized once; empty without the flags).
  std::vector<int32_t> positions_, document_starts_;
  int64_t iteration_ = 0;
  uint64_t consumed_samples_ = 0, consumed_valid_samples_ = 0;
  uint64_t skipped_samples_ = 0;  // of --iterations-to-skip's iterations (Megatron's skipped_train_samples)
  // --skip-train-iteration-range's: the ranges applied (checkpoints keep them) and the samples
  // they read past, which consumed_samples_ does not count.
  std::vector<IterationRange> applied_skip_ranges_;
  uint64_t range_skipped_samples_ = 0;
  // Megatron-DeepSpeed's consumed_train_tokens: every iteration's samples x the sequence
  // length it trained with (a resume may change --seq-length).
  uint64_t consumed_tokens_ = 0;
  // The model FLOPs of every iteration trained, over the run's checkpoints (Megatron's
  // num_floating_point_operations_so_far), and their count when this process started.
  double flops_so_far_ = 0, flops_at_start_ = 0;
  // The LR schedule's position: the samples of the iterations that updated the model
  // (Megatron's OptimizerParamScheduler.num_steps; it steps only after a successful update),
  // while consumed_samples_ counts every iteration; and its token count (lr_schedule.h).
  LrPosition scheduler_;
  int64_t skipped_iterations_ = 0, nan_iterations_ = 0;
  int64_t consecutive_unusable_ = 0;   // for --max-nan-iterations (count_unusable_iteration)
  int64_t consecutive_overflows_ = 0;  // of those, fp16 overflows at a constant loss scale
  int64_t last_saved_iteration_ = -1;  // of a persistent save
  // --async-save: the host memory of the state's copies (before pending_save_, which is
  // destroyed first: its writer reads them), and a save not committed yet.
  std::unique_ptr<SnapshotArena> snapshot_arena_;
  std::unique_ptr<PendingSave> pending_save_;
  std::thread retirement_;  // rank 0: --save-retain-interval's removal of a checkpoint's files
  // The folders whose other writers' checkpoint temporaries were named (at their first save).
  std::set<std::string> noted_other_writers_;
  bool abandoned_reported_ = false;  // --keep-last found an abandoned continuation's iterations (said once)
  // The checkpoint in --save this run continues from (the one it loaded, or after a resume
  // from a non-persistent checkpoint the one that run had continued from; then its last
  // persistent save), recorded in each save for prune(); none for a run from scratch.
  std::optional<int64_t> previous_checkpoint_;
  std::vector<IterationResult> history_;
  bool record_history_ = true;
};

// Where each of `sets` validation sets reads, of `consumed_valid` samples counted over all sets
// (as BigScience's and Megatron's consumed_valid_samples count them). Megatron's sets (and one
// set) read from that count; BigScience's weighted split groups each read their own next
// samples, as much at every validation, and start a run at their share of the count
// (BigScience's consumed_valid_samples // len(valid_ds)), so a resumed run validates on the
// uninterrupted run's samples.
uint64_t validation_set_position(const TrainOptions& opt, uint64_t consumed_valid, size_t sets);

}  // namespace trident
