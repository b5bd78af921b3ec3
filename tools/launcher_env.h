// What an MPI launcher (mpirun, mpiexec, srun with PMI) tells a process through its
// environment, read before (or without) MPI_Init: whether an MPI launcher started it, and
// the size of the job and this process's rank in it (also from launchers that start
// processes without MPI: srun --mpi=none, MVAPICH's mpirun_rsh).
#pragma once

#include <cstdlib>
#include <initializer_list>

namespace trident {

// Launched by mpirun (or another PMI launcher)?
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

// The first of `vars` that is set to a non-negative integer; `fallback` when none is.
inline int first_env_integer(std::initializer_list<const char*> vars, int fallback) {
  for (const char* v : vars)
    if (const char* s = std::getenv(v)) {
      char* end = nullptr;
      const long n = std::strtol(s, &end, 10);
      if (end != s && *end == '\0' && n >= 0) return static_cast<int>(n);
    }
  return fallback;
}

// Processes the launcher started in this job (1 without one): Open MPI, MPICH and Intel MPI
// (PMI), MVAPICH, a Slurm job step (srun).
inline int launcher_world_size() {
  return first_env_integer({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"}, 1);
}

// This process's rank in that job (0 without one).
inline int launcher_world_rank() {
  return first_env_integer({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}, 0);
}

}  // namespace trident
