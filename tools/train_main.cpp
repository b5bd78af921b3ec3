// trident-train: train GPT-2 with Megatron-compatible flags, on one process or under
// mpirun (one process per GPU; tensor x pipeline x data parallel).
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "kernels/backends.h"
#include "parallel/parallel_context.h"
#include "parallel/process_grid.h"
#include "tool_main.h"
#include "train/canonical_export.h"
#include "train/trainer.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace {

// Launched by mpirun (or another PMI launcher)?
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef TRIDENT_HAVE_MPI
  if (launched_by_mpi()) trident::mpi_init(&argc, &argv);
  const int world_rank = trident::mpi_world_rank(), world_size = trident::mpi_world_size();
#else
  const int world_rank = 0, world_size = 1;
#endif
  const int rc = trident::run_tool(
      "trident-train",
      [&] {
        trident::TrainOptions opt;
        if (!trident::parse_train_options(argc, argv, opt)) return 0;
        // The layout is checked first (its errors name the parallel-size flags), then the
        // backend is made before the groups: NcclComm runs on its GPU, after its stream.
        trident::make_grid_shape(world_size, opt.tensor_model_parallel_size, opt.pipeline_model_parallel_size);
        auto backend = trident::make_backend(opt.device, {.allow_tf32 = !opt.no_tf32});
        auto parallel = trident::make_parallel_context(opt.tensor_model_parallel_size,
                                                       opt.pipeline_model_parallel_size,
                                                       trident::resolve_comm_kind(opt.comm, *backend), backend.get());
        trident::TrainData data = trident::make_train_data(opt);
        trident::Trainer trainer(opt, *backend, std::move(data.train), std::cout, parallel.get());
        trainer.set_evaluation_data(std::move(data.valid), std::move(data.test));
        if (!opt.load.empty()) trainer.load_checkpoint();
        trainer.train();
        if (!opt.save_canonical.empty())
          trident::save_canonical_params(trainer.model(), trainer.parallel(), opt.save_canonical);
        return 0;
      },
      world_rank, world_size);
#ifdef TRIDENT_HAVE_MPI
  // A failure that is not a configuration error may have hit this rank alone: end the
  // whole job rather than leave the other ranks blocked in a collective. A configuration
  // error is normally seen by every rank, but one rank may see it alone (a file missing on
  // one node): leaving without MPI_Finalize makes mpirun end the job either way, and
  // keeps rank 0's one-line message instead of racing it with an abort.
  if (rc == 3 && world_size > 1) trident::mpi_abort_job(rc);
  if (rc == 2 && world_size > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(rc);
  }
#endif
  return rc;
}
