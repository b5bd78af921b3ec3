// MpiComm: the Comm interface over an MPI communicator, on host buffers (the CPU backend,
// or device buffers staged through the host by the caller). fp16/bf16 reductions are done
// in fp32 through a staging buffer, so every dtype reduces identically.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"

namespace trident {

// Initialises MPI once per process (MPI_THREAD_FUNNELED) and finalises it at exit.
// Installs an error handler so that any MPI failure aborts the whole job.
void mpi_init(int* argc, char*** argv);
bool mpi_initialized();
int mpi_world_rank();
int mpi_world_size();
// Ends every rank of the job (MPI_Abort with `code`) after flushing this rank's output;
// used when one rank fails so the others never hang.
[[noreturn]] void mpi_abort_job(int code);

// A Comm over the ranks `world_ranks` (in that order) of MPI_COMM_WORLD. Collective: every
// rank of the world calls it with the same list; ranks outside the list get nullptr.
std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks);

}  // namespace trident
