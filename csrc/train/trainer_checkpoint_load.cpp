// Trainer checkpoints, loading: the checkpoint --load names is checked against the run before
// any data is built (check_checkpoint_fits_run), then every rank rebuilds the canonical tensors
// from the files of whatever layout wrote them and takes its own slice and shard. Saving is in
// trainer_checkpoint.cpp.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "train/checkpoint_to_load.h"
#include "train/local_checkpoint.h"
#include "train/scheduler_state.h"
#include "train/trainer.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

// --skip-train-iteration-range's ranges a checkpoint has applied (metadata.json's check has
// made sure of their form).
std::vector<IterationRange> applied_skip_ranges(const nlohmann::json& trainer_state) {
  std::vector<IterationRange> ranges;
  for (const nlohmann::json& r : trainer_state.value(kAppliedSkipRangesKey, nlohmann::json::array()))
    ranges.push_back({r[0].get<int64_t>(), r[1].get<int64_t>()});
  return ranges;
}

// Whether a load restores the optimizer state (and with it the LR schedule and loss scale).
bool loads_optimizer_state(const TrainOptions& o) { return !o.no_load_optim && !o.finetune; }

// What a resume needs of checkpoint `dir` that its metadata alone tells: the model's shape
// (`run` is this run's), the states the flags load, an iteration this run can still train
// from, and the schedule (returned: the one to train with; `out` takes the notes of
// --override-opt_param-scheduler / --use-checkpoint-opt_param-scheduler). `o` has its
// schedule resolved (resolve_schedule).
ParamSchedules check_resume(const CheckpointMetadata& meta, bool has_optimizer_state, const ModelConfig& run,
                            const TrainOptions& o, const fs::path& dir, std::ostream& out) {
  check_same_model_shape(meta.model, run, dir);
  const nlohmann::json& st = meta.trainer_state;
  // As Megatron (its legacy checkpoints): a state asked for but not saved (--no-save-optim,
  // --no-save-rng, a conversion without it) is an error naming the flags that skip it.
  const bool load_optimizer = loads_optimizer_state(o), load_rng = !o.no_load_rng && !o.finetune;
  if (load_optimizer && !has_optimizer_state)
    throw ConfigError("--load: " + dir.string() + " has no optimizer state (use --no-load-optim or --finetune)");
  if (load_rng && !st.contains(kRngStateKey))
    throw ConfigError("--load: " + dir.string() + " has no RNG state (use --no-load-rng or --finetune)");
  // As Megatron's check_checkpoint_args: the phases' boundaries count iterations of one batch.
  if (const int64_t saved_batch = st.value("global_batch_size", int64_t{0});
      !o.phase_transition_iterations.empty() && !o.finetune && saved_batch > 0 && saved_batch != o.global_batch_size)
    throw ConfigError("--load: " + dir.string() + " was written at --global-batch-size " + std::to_string(saved_batch) +
                      ", this run's is " + std::to_string(o.global_batch_size) +
                      ": --phase-transition-iterations counts its phases in iterations of one global batch");
  // Megatron would train nothing and only evaluate; a run that ends before its checkpoint
  // is a mistyped --train-iters (or --train-samples) rather than a request.
  if (!o.finetune && !o.skip_train && meta.iteration > o.train_iters)
    throw ConfigError("--load: " + dir.string() + " is at iteration " + std::to_string(meta.iteration) +
                      ", past this run's last iteration " + std::to_string(o.train_iters) + " (" +
                      (o.sample_based ? "--train-samples " + std::to_string(o.train_samples)
                                      : "--train-iters " + std::to_string(o.train_iters)) +
                      "): nothing to train; a larger value continues the run");
  // As Megatron, the scheduler's state (its position and its parameters) loads with the
  // optimizer's: with --no-load-optim or --finetune (or Megatron-DeepSpeed's
  // --no-load-lr-state) the command line's schedule starts at 0.
  const ParamSchedules cli{make_lr_schedule(o), make_weight_decay_schedule(o)};
  if (!load_optimizer || o.no_load_lr_state) return cli;
  const ParamSchedules schedules = schedules_after_load(cli, st, o, dir, out);
  check_decay_start_known(schedules.lr, st, dir);
  return schedules;
}

// A resume at consumed samples N reads the samples from position N of the order its flags give:
// the checkpoint's run's order only with the same --seed (and a trident build that took
// Megatron's order, or a Megatron import). Otherwise samples already trained on may come again
// and others be skipped this epoch: a note says so (Megatron does not check either).
void note_sample_order(const nlohmann::json& st, const fs::path& dir, uint64_t seed, std::ostream& out) {
  const auto order = st.find(kSampleOrderKey);
  if (order == st.end() || *order != kSampleOrder) {
    out << "trident: note: " << dir.string() << " was written by a trident build that shuffled the data its own "
        << "way; this build orders the samples as Megatron does (numpy's RandomState), so the run goes on at the "
        << "same position of another order: samples already trained on may come again this epoch, and others be "
        << "skipped" << std::endl;
    return;
  }
  const auto saved = st.find(kDataSeedKey);
  if (saved != st.end() && saved->is_number_unsigned() && saved->get<uint64_t>() != seed)
    out << "trident: note: " << dir.string() << "'s run ordered its samples with --seed " << saved->dump()
        << "; this run's --seed " << seed << " orders them otherwise: samples already trained on may come again "
        << "this epoch, and others be skipped" << std::endl;
}

// Megatron restores Adam's betas and epsilon with the optimizer's state; trident takes its
// flags': a note names a difference.
void note_adam_hyperparameters(const nlohmann::json& st, const fs::path& dir, const TrainOptions& o,
                               std::ostream& out) {
  const auto adam = st.find(kAdamKey);
  if (adam == st.end() || !adam->is_object()) return;
  const auto differs = [&](const char* key, float flag) {
    const auto v = adam->find(key);
    return v != adam->end() && v->is_number() && static_cast<float>(v->get<double>()) != flag;
  };
  if (differs("beta1", o.adam_beta1) || differs("beta2", o.adam_beta2) || differs("eps", o.adam_eps))
    out << "trident: note: " << dir.string() << "'s optimizer ran with Adam betas (" << adam->value("beta1", 0.0)
        << ", " << adam->value("beta2", 0.0) << "), eps " << adam->value("eps", 0.0) << "; this run takes --adam-beta1 "
        << o.adam_beta1 << " --adam-beta2 " << o.adam_beta2 << " --adam-eps " << o.adam_eps << std::endl;
}

}  // namespace

RunStart check_checkpoint_fits_run(const TrainOptions& given) {
  const std::optional<fs::path> dir = checkpoint_to_load(given);
  if (!dir) return {};
  const ShardedCheckpointReader ckpt(*dir);  // reads metadata.json only
  TrainOptions o = given;
  resolve_schedule(o);
  // With a data path the tokenizer sets the vocabulary later; the load checks it then.
  ModelConfig run = o.model;
  if (o.has_data()) run.vocab_size = ckpt.metadata().model.vocab_size;
  std::ostringstream notes;  // said at the load itself
  check_resume(ckpt.metadata(), ckpt.has_optimizer_state(), run, o, *dir, notes);
  if (o.finetune) return {};
  const CheckpointMetadata& m = ckpt.metadata();
  return {m.iteration, static_cast<uint64_t>(m.consumed_samples), applied_skip_ranges(m.trainer_state),
          m.trainer_state.value(kSkippedRangeSamplesKey, uint64_t{0})};
}

bool Trainer::load_checkpoint() {
  const CollectiveTimeoutSuspended io;  // ranks wait for each other's reads: no time limit
  const auto start = std::chrono::steady_clock::now();
  std::optional<fs::path> dir;
  std::unique_ptr<ShardedCheckpointReader> ckpt;
  std::string error, passed_over;
  if (!opt_.local_checkpoint.resolved) resolve_local_checkpoint(opt_, *par_);
  try {
    dir = checkpoint_to_load(opt_, &passed_over);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string mismatch = checkpoint_choice_mismatch(*par_->world, opt_, dir);
  if (error.empty()) error = mismatch;
  const auto unless_failed = [&](auto&& step) {
    if (!error.empty() || !dir) return;
    try {
      step();
    } catch (const InternalError&) {
      throw;
    } catch (const Error& e) {
      error = e.what();
    }
  };
  unless_failed([&] { ckpt = std::make_unique<ShardedCheckpointReader>(*dir); });
  // The same iteration in each rank's --load may still be two checkpoints.
  const std::string other = checkpoint_identity_mismatch(*par_->world, opt_, ckpt ? &ckpt->metadata() : nullptr);
  if (error.empty()) error = other;
  std::vector<int> shared_owners;  // a fully_parallel local checkpoint's: broadcast below
  unless_failed([&] { shared_owners = restore_checkpoint(*ckpt); });
  // A test's signal during the start-up (a long load): TRIDENT_TEST_SIGNAL_IN_LOAD=<signal>.
  if (const char* sig = std::getenv("TRIDENT_TEST_SIGNAL_IN_LOAD")) std::raise(std::atoi(sig));
  // Each rank reads only the files holding its slices, so a corrupt file fails the ranks
  // that read it alone. Agree first: no rank reports a checkpoint loaded, or trains on,
  // while another failed; all fail with the first failing rank's message (a bad checkpoint
  // is bad input: one line from rank 0, exit 2).
  if (const std::string failure = first_failure(*par_->world, error); !failure.empty()) {
    // A local copy is only a shortcut: one that cannot be read gives way to --load's latest
    // (which overwrites all a restore set). Every rank agrees: the failure is everyone's.
    const bool local = dir && opt_.local_checkpoints() && is_non_persistent(opt_, *dir);
    std::error_code ec;
    if (!local || !fs::exists(latest_file(opt_.load), ec)) throw ConfigError(failure);
    opt_.local_checkpoint.iteration.reset();
    opt_.local_checkpoint.note = failure + "; the local checkpoint is passed over";
    return load_checkpoint();
  }
  if (!shared_owners.empty()) broadcast_shared_state(shared_owners);
  for (const std::string& note : {opt_.local_checkpoint.note, passed_over})
    if (!note.empty()) *out_ << "trident: note: " << note << std::endl;
  if (!dir) {  // as Megatron: no checkpoint to load, so train from the initial weights
    std::error_code ec;
    if (!opt_.load_missing_at_start && fs::exists(opt_.load, ec))
      *out_ << "trident: no checkpoint in " << opt_.load << " yet (no " << kLatestFileName
            << "); starting from scratch" << std::endl;
    else
      *out_ << "trident: warning: --load " << opt_.load << " does not exist; no checkpoint loaded, starting "
            << "from scratch" << std::endl;
    return false;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const CheckpointMetadata& m = ckpt->metadata();
  // The saves continue this checkpoint's history when they go to its directory and go on
  // from its iteration (a fine-tune starts a history of its own).
  const bool non_persistent = is_non_persistent(opt_, *dir);
  if (!opt_.save.empty() && !opt_.finetune && same_directory(containing_directory(*dir), opt_.save))
    previous_checkpoint_ = m.iteration;
  // Resumed from a non-persistent checkpoint of the same run: the saves to --save continue
  // the --save checkpoint that run had continued from.
  if (non_persistent && !opt_.save.empty() && !opt_.finetune && same_directory(opt_.load, opt_.save)) {
    const auto it = m.trainer_state.find(kPreviousPersistentKey);
    if (it != m.trainer_state.end() && it->is_number_integer()) previous_checkpoint_ = it->get<int64_t>();
  }
  // Its state is not in --save yet: the run's end saves it there even without training.
  if (non_persistent) last_saved_iteration_ = -1;
  double gigabytes = 0;
  for (const FileRecord& f : m.files) gigabytes += static_cast<double>(f.size) / 1e9;
  *out_ << "trident: loaded " << (non_persistent ? "non-persistent " : "") << "checkpoint " << dir->string() << " ("
        << gigabytes << " GB, iteration " << m.iteration
        << ", written at " << layout_text(m.layout) << ")"
        << (range_skipped_samples_ == 0 || opt_.finetune
                ? std::string()
                : ", its training data read from " + std::to_string(consumed_samples_ + range_skipped_samples_) + " (" +
                      std::to_string(range_skipped_samples_) + " samples past its consumed ones: "
                      "--skip-train-iteration-range)")
        << (loads_optimizer_state(opt_) ? ""
            : schedule_.counts_tokens()
                ? " without optimizer state (learning-rate schedule from step 0, its token count from the consumed "
                  "tokens after the first iteration)"
                : " without optimizer state (learning-rate schedule from step 0)")
        << (!loads_optimizer_state(opt_) || !opt_.no_load_lr_state ? ""
            : schedule_.counts_tokens()
                ? " with the learning-rate and weight-decay schedule from step 0 (--no-load-lr-state; its token count "
                  "from the consumed tokens after the first iteration)"
                : " with the learning-rate and weight-decay schedule from step 0 (--no-load-lr-state)")
        << (opt_.finetune ? " to fine-tune" : "") << " in " << s << " s (" << gigabytes / s << " GB/s on rank 0)"
        << std::endl;
  return true;
}

std::vector<int> Trainer::restore_checkpoint(ShardedCheckpointReader& ckpt) {
  optimizer_->wait_for_all_params();  // no gather may land on the loaded parameters
  const fs::path& dir = ckpt.dir();
  const CheckpointMetadata& meta = ckpt.metadata();
  const nlohmann::json& st = meta.trainer_state;
  const bool load_optimizer = loads_optimizer_state(opt_), load_rng = !opt_.no_load_rng && !opt_.finetune;
  // Checked before any tensor is read; every rank reads the same metadata and options, so
  // every rank fails alike. (check_checkpoint_fits_run ran the same checks before the data
  // was built, but with the vocabulary the tokenizer has since given.)
  const ParamSchedules schedules = check_resume(meta, ckpt.has_optimizer_state(), opt_.model, opt_, dir, *out_);
  schedule_ = schedules.lr;
  wd_schedule_ = schedules.wd;
  if (!opt_.finetune) {
    // The data the run's skip ranges read past stays read past, with or without the flag now.
    applied_skip_ranges_ = applied_skip_ranges(st);
    range_skipped_samples_ = st.value(kSkippedRangeSamplesKey, uint64_t{0});
    if (range_skipped_samples_ > 0 && !opt_.phase_transition_iterations.empty())
      throw ConfigError("--phase-transition-iterations: " + dir.string() + " read past " +
                        std::to_string(range_skipped_samples_) + " samples (--skip-train-iteration-range), which "
                        "would move the phases' data");
    try {
      check_data_covers_run(meta.iteration, static_cast<uint64_t>(meta.consumed_samples),
                            st.value("consumed_valid_samples", uint64_t{0}), range_skipped_samples_);
    } catch (const ConfigError& e) {
      const int64_t saved_batch = st.value("global_batch_size", int64_t{0});
      if (saved_batch == 0 || saved_batch == opt_.global_batch_size) throw;
      throw ConfigError(std::string(e.what()) + "; the checkpoint was written at --global-batch-size " +
                        std::to_string(saved_batch));
    }
  }

  const ProcessGrid& grid = par_->grid;
  const int tp = grid.shape.tp;
  ParamStore& P = model().params();
  // The model files hold the parameters in the checkpoint's dtype; a run of another dtype
  // takes them from a 16-bit checkpoint's fp32 master weights instead, whenever it has them
  // (--finetune and --no-load-optim too): an fp32 run loading a 16-bit checkpoint would
  // otherwise continue from rounded weights.
  const bool from_masters = ckpt.has_optimizer_state() && meta.model.dtype != DType::F32 &&
                            meta.model.dtype != opt_.model.dtype;
  // A local checkpoint of fully_parallel holds what the data-parallel ranks share split among
  // them (local_checkpoint.h): each rank reads its part here, and broadcast_shared_state
  // sends it over the group once every rank has read.
  const std::vector<int> owners = shared_state_owners(st.value(kLocalAlgoKey, std::string()));
  const auto reads_shared = [&](size_t param) { return owners.empty() || owners[param] == grid.dp_rank; };
  load_model_parameters(ckpt, P, be_, from_masters, reads_shared);
  const std::vector<LocalParam>& params = P.list();
  if (load_optimizer) {
    const ShardPlan& plan = optimizer_->plan();
    for (size_t i = 0; i < params.size(); ++i) {
      const LocalParam& p = params[i];
      // Only the pieces this rank's ZeRO shard owns are read (from the files holding them).
      const std::vector<ShardPiece> pieces = plan.owned_pieces(FlatRange{p.offset, p.offset + p.numel()});
      if (pieces.empty()) continue;
      if (!optimizer_->sharded() && !reads_shared(i)) continue;  // another rank's part
      IndexRanges owned;
      for (const ShardPiece& s : pieces) owned.push_back({s.flat_begin - p.offset, s.flat_end - p.offset});
      for (int k = 0; k < 3; ++k) {
        // In fp32 runs the parameters just loaded are the master weights.
        if (k == AdamWOptimizer::kMaster && optimizer_->master_is_params()) continue;
        const std::vector<float> local =
            ckpt.optimizer_slice(p.spec, kOptimizerStates[k], tp, grid.tp_rank, grid.dp_rank, owned);
        for (const ShardPiece& s : pieces)
          be_.copy_from_host(optimizer_->state_slice(static_cast<AdamWOptimizer::State>(k), s),
                             local.data() + (s.flat_begin - p.offset));
      }
    }
  } else if (owners.empty()) {  // else once the parameters are whole (broadcast_shared_state)
    optimizer_->master_from_params();
  }
  // Megatron returns the FLOPs so far whatever --finetune says (its --log-progress counts on).
  flops_so_far_ = flops_at_start_ = st.value("num_floating_point_operations_so_far", 0.0);
  if (!opt_.finetune) {
    iteration_ = meta.iteration;
    consumed_samples_ = static_cast<uint64_t>(meta.consumed_samples);
    // As Megatron: the LR schedule's state belongs to the optimizer's, so without it the
    // schedule starts again at step 0 (warm-up included) while the iteration carries on.
    // Megatron-DeepSpeed's consumed_train_tokens; before it was saved, every sample had the
    // checkpoint's sequence length.
    consumed_tokens_ = st.value("consumed_train_tokens", consumed_samples_ * static_cast<uint64_t>(meta.model.seq_length));
    // Megatron-DeepSpeed's --no-load-lr-state: the optimizer's state, the schedule's from step 0.
    scheduler_ = load_optimizer && !opt_.no_load_lr_state
                     ? saved_scheduler_position(schedule_, st, consumed_samples_, consumed_tokens_)
                     : schedule_.step(LrPosition{}, 0, 0);
    consumed_valid_samples_ = st.value("consumed_valid_samples", uint64_t{0});
    skipped_samples_ = st.value("skipped_train_samples", uint64_t{0});
    if (opt_.has_data() && consumed_samples_ > 0) note_sample_order(st, dir, opt_.seed, *out_);
    skipped_iterations_ = st.value("skipped_iterations", int64_t{0});
    nan_iterations_ = st.value("nan_iterations", int64_t{0});
    if (load_optimizer) {
      optimizer_->set_steps_taken(st.value("optimizer_steps", int64_t{0}));
      note_adam_hyperparameters(st, dir, opt_, *out_);
      // Checkpoints written before the state was kept to dynamic scalers have one from
      // every run; only an fp16 run's can be a dynamic scaler's.
      const bool saved_dynamic = st.contains("loss_scaler") && meta.model.dtype == DType::F16;
      if (saved_dynamic && scaler_.dynamic()) {
        const nlohmann::json& ls = st["loss_scaler"];
        scaler_.set_state(LossScalerState{ls.value("scale", 1.0), ls.value("growth_tracker", int64_t{0}),
                                          ls.value("hysteresis_tracker", int64_t{0})});
      } else if (scaler_.dynamic()) {  // as Megatron, which warns and keeps its initial scale
        *out_ << "trident: " << dir.string() << " has no dynamic loss-scaler state (written by a "
              << dtype_name(meta.model.dtype) << " run): the loss scale starts at --initial-loss-scale "
              << scaler_.scale() << std::endl;
      }
    }
  }
  if (load_rng) set_dropout_seed(st[kRngStateKey].get<uint64_t>());
  last_saved_iteration_ = iteration_;
  return owners;
}

void Trainer::broadcast_shared_state(const std::vector<int>& owners) {
  ParamStore& P = model().params();
  const std::vector<LocalParam>& params = P.list();
  Comm& dp = *par_->dp;
  for (size_t i = 0; i < params.size(); ++i) dp.broadcast(P.param(params[i]), owners[i]);
  if (!loads_optimizer_state(opt_)) {
    optimizer_->master_from_params();
    return;
  }
  if (optimizer_->sharded()) return;  // each rank's shard was in its own files
  const ShardPlan& plan = optimizer_->plan();
  for (size_t i = 0; i < params.size(); ++i) {
    const LocalParam& p = params[i];
    for (const ShardPiece& s : plan.owned_pieces(FlatRange{p.offset, p.offset + p.numel()}))
      for (int k = 0; k < 3; ++k)
        if (k != AdamWOptimizer::kMaster || !optimizer_->master_is_params())
          dp.broadcast(optimizer_->state_slice(static_cast<AdamWOptimizer::State>(k), s), owners[i]);
  }
}

}  // namespace trident
