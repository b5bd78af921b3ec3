// trident-train: train GPT-2 with Megatron-compatible flags, on one process or under
// mpirun (one process per GPU; tensor x pipeline x data parallel).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/metadata.h"
#include "ckpt/save_dir_lock.h"
#include "core/error.h"
#include "kernels/backends.h"
#include "mpi_tool_main.h"
#include "parallel/collective_timeout.h"
#include "parallel/parallel_context.h"
#include "parallel/process_grid.h"
#include "train/canonical_export.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_to_load.h"
#include "train/trainer.h"

namespace trident {
namespace {

// --save is checked before training rather than at the first save, hours later, by rank 0
// (which creates the directory when saving), and every rank learns the verdict. An existing
// directory is locked now (ckpt/save_dir_lock.h): a second run saving into it stops here.
void check_save_dir(const std::string& save, ParallelContext& par) {
  run_on_rank0_for_all(par, [&] {
    try {
      check_checkpoint_root_usable(save);
      std::error_code ec;
      if (std::filesystem::is_directory(save, ec)) {
        const std::string note = hold_save_dir_lock(save);
        if (!note.empty()) std::cout << "trident-train: note: " << note << std::endl;
      }
    } catch (const IoError& e) {
      throw ConfigError("--save: " + std::string(e.what()));
    }
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
  const std::string taken = resolve_load(opt);
  if (!taken.empty() && par.world_rank() == 0) std::cout << "trident: --use-checkpoint-args: " << taken << std::endl;
  check_checkpoint_fits_run(opt);
}

int train(int argc, char** argv) {
  TrainOptions opt;
  if (!parse_train_options(argc, argv, opt)) return 0;
  // The layout is checked first (its errors name the parallel-size flags), then the
  // backend is made before the groups: NcclComm runs on its GPU, after its stream.
  const GridShape shape =
      make_grid_shape(job_world_size(), opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size);
  resolve_global_batch_size(opt, shape.dp);
  auto backend = make_backend(opt.device, {.allow_tf32 = !opt.no_tf32});
  set_collective_timeout(opt.distributed_timeout_minutes);
  auto parallel = make_parallel_context(opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size,
                                        resolve_comm_kind(opt.comm, *backend), backend.get(),
                                        flags_every_rank_shares(opt));
  if (!opt.save.empty()) check_save_dir(opt.save, *parallel);
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
              << ": Megatron's implementation switches, accepted and without effect here" << std::endl;
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
    for (const char* f : {"save-interval", "keep-last", "no-save-optim", "no-save-rng"})
      if (opt.given_flags.count(f)) names += (names.empty() ? "--" : " --") + std::string(f);
    if (!names.empty())
      std::cout << "trident-train: note: " << names << " without --save: no checkpoint is saved" << std::endl;
  }
  if (!opt.load.empty()) load_before_building(opt, *parallel);
  TrainData data = make_train_data(opt, parallel.get());
  Trainer trainer(opt, *backend, std::move(data.train), std::cout, parallel.get());
  trainer.set_record_history(false);
  trainer.set_evaluation_data(std::move(data.valid), std::move(data.test));
  if (!opt.load.empty()) trainer.load_checkpoint();
  trainer.train();
  if (!opt.save_canonical.empty())
    save_canonical_params(trainer.model(), trainer.parallel(), opt.virtual_pipeline_chunks(), opt.save_canonical);
  return 0;
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  return trident::run_mpi_tool("trident-train", &argc, &argv, [&] { return trident::train(argc, argv); });
}
