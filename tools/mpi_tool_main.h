// main() for the tools that run one process per GPU under mpirun (trident-train,
// trident-eval): MPI is initialised when an MPI launcher started the process, the body
// runs inside run_tool (one error line, exit 2 or 3), and a failure aborts the whole job so
// no rank is left blocked in a collective.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "launcher_env.h"
#include "tool_main.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace trident {

// Processes in the job (1 without MPI).
inline int job_world_size() {
#ifdef TRIDENT_HAVE_MPI
  return mpi_world_size();
#else
  return 1;
#endif
}

inline int run_mpi_tool(const char* tool, int* argc, char*** argv, const std::function<int()>& body) {
#ifdef TRIDENT_HAVE_MPI
  if (launched_by_mpi()) mpi_init(argc, argv);
  const int world_rank = mpi_world_rank(), world_size = mpi_world_size();
#else
  (void)argc;
  (void)argv;
  const int world_rank = 0, world_size = 1;
#endif
  // A launcher that starts processes without MPI (srun --mpi=none, MVAPICH's mpirun_rsh)
  // would run N copies of a one-process job, all writing the same files: rank 0 says so, the
  // others leave without a word.
  const int launched = launcher_world_size();
  if (world_size == 1 && launched > 1) {
    if (launcher_world_rank() != 0) return 2;
    return run_tool(tool, [&]() -> int {
      throw ConfigError("the launcher started " + std::to_string(launched) + " processes without MPI: run " +
                        std::string(tool) + " as one process, or as one MPI job (mpirun, or srun with PMI/PMIx)");
    });
  }
  const int rc = run_tool(tool, body, world_rank, world_size);
#ifdef TRIDENT_HAVE_MPI
  // Any failure may have hit this rank alone while the others wait for it in a collective:
  // end the whole job. Leaving with exit() is not enough, as not every launcher ends a job
  // when one of its ranks exits (mpirun --mca orte_abort_on_non_zero_status 0, some srun
  // setups). MPI_Abort keeps the exit status (2 for a configuration error, 3 otherwise) as
  // the job's (Open MPI's mpirun returns it). run_tool has printed the error line: rank 0 at
  // once, and another rank only after a wait that rank 0's abort normally cuts short when
  // every rank saw the same error, so the job prints it once.
  if (rc != 0 && world_size > 1) mpi_abort_job(rc);
#endif
  return rc;
}

}  // namespace trident
