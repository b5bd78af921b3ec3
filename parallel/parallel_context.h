// ParallelContext: this process's place in the grid and its communicators. A single
// process gets a grid of one and LocalComms, so callers never special-case it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/backend.h"
#include "parallel/comm.h"
#include "parallel/process_grid.h"

namespace trident {

struct ParallelContext {
  ProcessGrid grid;
  std::unique_ptr<Comm> world, tp, dp, pp;
  // First and last stage of this pipeline (they both hold the tied word embedding);
  // null on the stages in between. A group of one when pp == 1.
  std::unique_ptr<Comm> embedding;

  int world_rank() const { return grid.rank; }
  int world_size() const { return grid.shape.world; }
};

// Whether `local` is true on any rank of the world (collective: every rank must call it).
bool any_rank(ParallelContext& par, bool local);

// Runs `step` on world rank 0 only (what rank 0 alone does, such as creating the directory it
// writes to) and makes its failure every rank's: rank 0 rethrows its error, the others throw
// its message as a ConfigError, so the job stops as one instead of leaving them waiting in a
// later collective. Collective: every rank must call it. The others' wait has no
// --distributed-timeout-minutes limit (collective_timeout.h); rank 0's wait for them, after
// its step, has.
void run_on_rank0_for_all(ParallelContext& par, const std::function<void()>& step);

// Which Comm carries the groups under MPI: MpiComm (host buffers; device buffers are
// staged through pinned host memory) or NcclComm (device buffers on a communication
// stream; host buffers through MPI).
enum class CommKind { Mpi, Nccl };

// trident-train's --comm: "mpi", "nccl", or "" for the default: nccl when `backend` is
// the CUDA backend and the build has NCCL, else mpi. Throws ConfigError naming --comm for
// an unknown value, or nccl without NCCL or without the CUDA backend.
CommKind resolve_comm_kind(const std::string& flag, const Backend& backend);

// With MPI initialised: splits MPI_COMM_WORLD into the grid's groups (collective); with
// kind Nccl each group is an NcclComm on `backend`'s GPU and compute stream (backend
// must then be the CUDA backend itself, not a wrapper). Without MPI: a world of one (tp
// and pp must be 1) of LocalComms, whatever `kind` says.
//
// `shared_flags` ("--flag value" lines): what every rank must have been started with. Ranks
// started with other flags (an MPMD launch, a node's environment) would split the world
// into groups that do not match, and crash or hang in MPI; before any split, every rank
// compares its lines with rank 0's and the job stops with one ConfigError naming the first
// rank and flag that differ.
std::unique_ptr<ParallelContext> make_parallel_context(int tp, int pp, CommKind kind = CommKind::Mpi,
                                                       Backend* backend = nullptr,
                                                       const std::string& shared_flags = "");

// This process as world rank `rank` of a grid of `shape` on its own, its groups null comms
// (make_null_comm): a dry run of that rank (trident-plan). No MPI.
std::unique_ptr<ParallelContext> make_dry_run_context(const GridShape& shape, int rank);

}  // namespace trident
