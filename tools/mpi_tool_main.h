// main() for the tools that run one process per GPU under mpirun (trident-train,
// trident-eval): MPI is initialised when an MPI launcher started the process, the body
// runs inside run_tool (one error line, exit 2 or 3), and a failure ends the whole job so
// no rank is left blocked in a collective.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>

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
  const int rc = run_tool(tool, body, world_rank, world_size);
#ifdef TRIDENT_HAVE_MPI
  // A failure that is not a configuration error may have hit this rank alone: end the
  // whole job rather than leave the other ranks blocked in a collective. A configuration
  // error is normally seen by every rank, but one rank may see it alone (a file missing on
  // one node): leaving without MPI_Finalize makes mpirun end the job either way, and
  // keeps rank 0's one-line message instead of racing it with an abort.
  if (rc == 3 && world_size > 1) mpi_abort_job(rc);
  if (rc == 2 && world_size > 1) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(rc);
  }
#endif
  return rc;
}

}  // namespace trident
