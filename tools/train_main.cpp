// trident-train: train GPT-2 with Megatron-compatible flags, on one process or under
// mpirun (one process per GPU; tensor x pipeline x data parallel).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "ckpt/save_dir_lock.h"
#include "core/error.h"
#include "core/stop_signals.h"
#include "data/tokenizer.h"
#include "kernels/backends.h"
#include "mpi_tool_main.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "parallel/parallel_context.h"
#include "parallel/process_grid.h"
#include "train/canonical_export.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_space.h"
#include "train/checkpoint_to_load.h"
#include "train/local_checkpoint.h"
#include "train/local_replicas.h"
#include "train/shared_save_dir.h"
#include "train/train_data.h"
#include "train/trainer.h"

namespace trident {
namespace {

// The --save directory as rank 0 holds it for the run: created (when missing) and locked at
// the start (ckpt/save_dir_lock.h), so that a second run saving into it stops at its start,
// not hours later at its first save. A directory this run created is removed again, with
// the directories above it that it created, when the run ends having saved nothing there
// (a failed start leaves nothing behind).
struct SaveDirHeld {
  std::vector<std::filesystem::path> created;  // innermost first
  ~SaveDirHeld() {
    namespace fs = std::filesystem;
    if (created.empty()) return;
    std::error_code ec;
    for (fs::directory_iterator it(created.front(), ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename() != kSaveLockFileName) return;  // a checkpoint or a temporary: kept
    OutputWriteGuard unmade;  // its destructor removes our lock file, then the directories made
    unmade.created = created;
  }
};

// --save (and the non-persistent checkpoints' folder) is checked before training rather than
// at the first save, hours later, by rank 0, and every rank learns the verdict. `flag` names
// the folder in errors.
void make_and_hold_save_dir(const std::string& save, const std::string& flag, SaveDirHeld& held, bool say_notes) {
  try {
    check_checkpoint_root_usable(save);
    held.created = missing_directories(save);
    std::error_code ec;
    std::filesystem::create_directories(save, ec);
    if (ec) throw_write_failure(save + ": cannot create the directory: " + ec.message(), ec.value());
    const std::string note = hold_save_dir_lock(save);
    if (!note.empty() && say_notes) std::cout << "trident-train: note: " << note << std::endl;
  } catch (const IoError& e) {
    throw_for_flag(flag + ": ", e);
  }
}

// Rank 0 makes and locks the directory; then every rank must see it as rank 0's (a directory
// every node shares: shared_save_dir.h).
void hold_save_dir(const std::string& save, const std::string& flag, ParallelContext& par, SaveDirHeld& held) {
  run_on_rank0_for_all(par, [&] { make_and_hold_save_dir(save, flag, held, true); });
  // (TRIDENT_TEST_SHARED_DIR_WAIT_S: a test's shorter wait for a directory that is not shared)
  const char* wait = std::getenv("TRIDENT_TEST_SHARED_DIR_WAIT_S");
  check_every_rank_sees_dir(save, flag, par, wait ? std::atof(wait) : 90.0);
}

// A directory without room for one checkpoint: said at the start, not at the first save. The
// vocabulary is the tokenizer's, as the data will make it (make_train_data), for the size.
void warn_if_no_room(const TrainOptions& opt, const std::string& dir, const std::string& flag, ParallelContext& par) {
  if (par.world_rank() != 0) return;
  TrainOptions sized = opt;
  try {
    if (sized.has_data()) make_run_tokenizer(sized);
  } catch (const std::exception&) {  // the data's own start reports it, on every rank
    return;
  }
  if (const std::string warning = checkpoint_space_warning(sized, dir, flag); !warning.empty())
    std::cout << "trident-train: warning: " << warning << std::endl;
}

// Local non-persistent checkpoints: each rank checks and holds its own folder, on its node.
void hold_local_checkpoint_dir(const TrainOptions& opt, ParallelContext& par, SaveDirHeld& held) {
  const int rank = par.world_rank();
  run_sharing_first_failure(*par.world, [&] {
    check_non_persistent_dir(opt, rank);
    if (opt.replication) replication_clique(rank, par.world->size(), opt.replication_jump, opt.replication_factor);
    make_and_hold_save_dir(local_checkpoint_root(opt, rank).string(), non_persistent_dir_flag(opt), held, rank == 0);
  });
}

// --save-canonical is written by rank 0 after training, into an existing directory: one
// that is missing or not writable fails now, not after the run (whose weights are then
// only in --save, if given).
void check_save_canonical(const std::string& path, ParallelContext& par) {
  run_on_rank0_for_all(par, [&] {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path file(path), dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    if (fs::is_directory(file, ec)) throw ConfigError("--save-canonical: " + path + " is a directory");
    if (!fs::is_directory(dir, ec))
      throw ConfigError("--save-canonical: " + path + ": the directory " + dir.string() + " does not exist");
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      throw ConfigError("--save-canonical: " + path + ": the directory " + dir.string() +
                        " is not writable: " + std::strerror(errno));
  });
}

// --load is resolved before the data and the model are built: a --load naming no usable
// checkpoint (train/checkpoint_to_load.h) fails in seconds, and --use-checkpoint-args shapes
// the model as Megatron does, reading its arguments first. Every rank reads the same files,
// so a bad one fails every rank alike (a configuration error).
void load_before_building(TrainOptions& opt, ParallelContext& par) {
  resolve_local_checkpoint(opt, par);  // what --load resumes from may be a local checkpoint
  const std::string taken = resolve_load(opt);
  if (!taken.empty() && par.world_rank() == 0) std::cout << "trident: --use-checkpoint-args: " << taken << std::endl;
  const RunStart start = check_checkpoint_fits_run(opt);  // which phase's data to build, and from where
  opt.start_iteration = start.iteration;
  opt.start_consumed_samples = start.consumed_samples;
  opt.start_applied_skip_ranges = start.applied_skip_ranges;
  opt.start_range_skipped_samples = start.range_skipped_samples;
}

// Megatron's --pretrained-checkpoint (its load_checkpoint): while --load holds no checkpoint,
// the run fine-tunes from the pretrained one, which then stands for --load everywhere (its
// checks, --use-checkpoint-args, --ckpt-step). Every rank must see the same: a --load that
// some ranks see a checkpoint in and others not stops the run.
void resolve_pretrained_checkpoint(TrainOptions& opt, ParallelContext& par) {
  if (opt.pretrained_checkpoint.empty()) return;
  const TrainOptions probe = load_probe(opt);  // --load as it stands: only whether it holds a checkpoint
  bool in_load = true;  // a --load that does not read is reported by its own checks
  try {
    in_load = !opt.load.empty() && checkpoint_to_load(probe).has_value();
  } catch (const InternalError&) {
    throw;
  } catch (const Error&) {
  }
  if (any_rank(par, in_load) && any_rank(par, !in_load))
    throw ConfigError("--load " + opt.load + ": some ranks see a checkpoint there and others none (a folder every "
                      "node does not share?): --pretrained-checkpoint cannot be chosen alike");
  if (in_load) return;
  TrainOptions pretrained = probe;
  pretrained.load = opt.pretrained_checkpoint;
  pretrained.ckpt_step = opt.ckpt_step;
  std::optional<std::filesystem::path> there;
  try {
    there = checkpoint_to_load(pretrained);
  } catch (const ConfigError& e) {  // named as the flag it came from
    std::string what = e.what();
    if (what.rfind("--load", 0) == 0) what = "--pretrained-checkpoint" + what.substr(6);
    throw ConfigError(what);
  }
  if (!there)
    throw ConfigError("--pretrained-checkpoint " + opt.pretrained_checkpoint + ": no checkpoint there, nor in --load" +
                      (opt.load.empty() ? std::string() : " " + opt.load));
  if (par.world_rank() == 0)
    std::cout << "trident: no checkpoint in --load" << (opt.load.empty() ? "" : " " + opt.load)
              << ": fine-tuning from --pretrained-checkpoint " << opt.pretrained_checkpoint << std::endl;
  opt.load = opt.pretrained_checkpoint;
  opt.pretrained_checkpoint.clear();
  opt.finetune = true;
  opt.exit_on_missing_checkpoint = true;  // Megatron: "No checkpoint found in load directory or pretrained directory"
}

int train(int argc, char** argv) {
  TrainOptions opt;
  if (!parse_train_options(argc, argv, opt)) return 0;
  // SIGTERM and SIGINT are requests to stop from here on (as Megatron's --exit-signal-handler,
  // installed at its initialisation): one during the start-up (loading a checkpoint, building
  // the data's index maps) ends the run before training, exit status 0.
  std::optional<StopSignals> stop_signals(std::in_place, opt.exit_signal);
  // --use-mp-args-from-checkpoint-args: the checkpoint's layout, before the grid is made.
  const std::string mp_taken = take_parallel_args(opt);
  // The layout is checked first (its errors name the parallel-size flags), then the
  // backend is made before the groups: NcclComm runs on its GPU, after its stream.
  const GridShape shape = [&] {
    try {
      return make_grid_shape(job_world_size(), opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size);
    } catch (const ConfigError& e) {
      if (mp_taken.empty()) throw;
      throw ConfigError(std::string(e.what()) + " (--use-mp-args-from-checkpoint-args took " + mp_taken + ")");
    }
  }();
  resolve_global_batch_size(opt, shape.dp);
  auto backend = make_backend(opt.device, backend_options(opt));
  set_collective_timeout(opt.distributed_timeout_minutes);
  auto parallel = make_parallel_context(opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size,
                                        resolve_comm_kind(opt.comm, *backend), backend.get(),
                                        flags_every_rank_shares(opt));
  if (!mp_taken.empty() && parallel->world_rank() == 0)
    std::cout << "trident: --use-mp-args-from-checkpoint-args: " << mp_taken << std::endl;
  if (!opt.save_canonical.empty()) check_save_canonical(opt.save_canonical, *parallel);
  // Megatron trains on mock data only when asked (--mock-data); trident keeps its synthetic
  // default for the quickstart, but says so.
  if (!opt.has_data() && !opt.mock_data && parallel->world_rank() == 0)
    std::cout << "trident-train: no --data-path: training on synthetic tokens (--mock-data silences this)"
              << std::endl;
  if (!opt.flags_without_effect.empty() && parallel->world_rank() == 0) {
    std::string names;
    for (const std::string& n : opt.flags_without_effect) names += (names.empty() ? "" : " ") + n;
    std::cout << "trident-train: note: " << names
              << ": accepted as Megatron accepts them, without effect here" << std::endl;
  }
  // Megatron drops --split when the splits come whole (its "Let split = None" warning).
  if (opt.given_flags.count("split") && opt.data_path.empty() && opt.has_data() && parallel->world_rank() == 0)
    std::cout << "trident-train: note: --split has no effect with --train-data-path/--valid-data-path/"
                 "--test-data-path: each split's data is read whole"
              << std::endl;
  // Saving flags without --save (Megatron is silent): a run stopped by --exit-interval or a
  // signal would otherwise end without the checkpoint its flags seem to ask for.
  if (opt.save.empty() && parallel->world_rank() == 0) {
    std::string names;
    for (const char* f : {"save-interval", "keep-last", "no-save-optim", "no-save-rng", "phase-transition-iterations"})
      if (opt.given_flags.count(f)) names += (names.empty() ? "--" : " --") + std::string(f);
    if (!names.empty())
      std::cout << "trident-train: note: " << names << " without --save: no checkpoint is saved" << std::endl;
  }
  resolve_pretrained_checkpoint(opt, *parallel);
  if (!opt.load.empty()) load_before_building(opt, *parallel);
  // After --load is resolved (which reads a missing --save/--load directory as missing), before
  // the data is built.
  std::error_code missing;
  opt.load_missing_at_start = !opt.load.empty() && !std::filesystem::exists(opt.load, missing);
  SaveDirHeld save_dir, non_persistent_dir;  // the second goes first: it may lie in the first
  if (!opt.save.empty()) {
    hold_save_dir(opt.save, "--save", *parallel, save_dir);
    warn_if_no_room(opt, opt.save, "--save", *parallel);
  }
  // (not for a run that saves none: --skip-train, or an interval the run does not reach)
  if (opt.non_persistent_save_interval > 0 && opt.local_checkpoints() && !opt.skip_train &&
      opt.non_persistent_save_interval < opt.train_iters) {
    hold_local_checkpoint_dir(opt, *parallel, non_persistent_dir);
  } else if (opt.non_persistent_save_interval > 0) {
    run_on_rank0_for_all(*parallel, [&] { check_non_persistent_dir(opt); });
    hold_save_dir(opt.non_persistent_dir(opt.save), non_persistent_dir_flag(opt), *parallel, non_persistent_dir);
    warn_if_no_room(opt, opt.non_persistent_dir(opt.save), non_persistent_dir_flag(opt), *parallel);
  }
  TrainData data = make_train_data(opt, parallel.get(), opt.skip_train ? DataUse::kEvaluationOnly : DataUse::kTraining);
  Trainer trainer(opt, *backend, std::move(data.train), std::cout, parallel.get());
  if (opt.non_persistent_save_interval > 0 && opt.local_checkpoints())
    if (const std::string warning = trainer.local_checkpoint_space_warning();
        !warning.empty() && parallel->world_rank() == 0)
      std::cout << "trident-train: warning: " << warning << std::endl;
  trainer.set_record_history(false);
  if (opt.has_weighted_split_paths())
    trainer.set_evaluation_data(std::move(data.valid_sets), std::move(data.test_sets));
  else if (opt.multiple_validation_sets)
    trainer.set_evaluation_data(std::move(data.valid_sets), std::move(data.test));
  else
    trainer.set_evaluation_data(std::move(data.valid), std::move(data.test));
  trainer.start_progress_log();
  if (!opt.load.empty()) trainer.load_checkpoint();
  trainer.train();
  stop_signals.reset();  // the export after training is not a run to stop: a signal ends it
  if (!opt.save_canonical.empty())
    save_canonical_params(trainer.model(), trainer.parallel(), opt.pipeline_split(), opt.save_canonical);
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_mpi_tool("trident-train", &argc, &argv, [&] { return trident::train(argc, argv); });
}
