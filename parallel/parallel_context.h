// ParallelContext: this process's place in the grid and its communicators. A single
// process gets a grid of one and LocalComms, so callers never special-case it.
#pragma once

#include <memory>

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

// With MPI initialised: splits MPI_COMM_WORLD into the grid's groups (collective).
// Without: a world of one (tp and pp must be 1).
std::unique_ptr<ParallelContext> make_parallel_context(int tp, int pp);

}  // namespace trident
