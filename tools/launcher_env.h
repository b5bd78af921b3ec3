// What an MPI launcher (mpirun, mpiexec, srun with PMI) tells a process through its
// environment, read before (or without) MPI_Init: whether a launcher started it.
#pragma once

#include <cstdlib>

namespace trident {

// Launched by mpirun (or another PMI launcher)?
inline bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace trident
