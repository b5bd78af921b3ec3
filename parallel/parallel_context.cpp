#include "parallel/parallel_context.h"

#include "core/error.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace trident {

std::unique_ptr<ParallelContext> make_parallel_context(int tp, int pp) {
  auto ctx = std::make_unique<ParallelContext>();
#ifdef TRIDENT_HAVE_MPI
  if (mpi_initialized()) {
    ctx->grid = ProcessGrid(make_grid_shape(mpi_world_size(), tp, pp), mpi_world_rank());
    const GridShape shape = ctx->grid.shape;
    // Creating a communicator is collective over the world: every rank walks the world in
    // the same order and creates each group once, when it meets the group's first member,
    // keeping the one it belongs to.
    auto split = [&](std::vector<int> (ProcessGrid::*members_of)() const) {
      std::unique_ptr<Comm> mine;
      for (int r = 0; r < shape.world; ++r) {
        const std::vector<int> members = (ProcessGrid(shape, r).*members_of)();
        if (members.front() != r) continue;
        if (auto comm = make_mpi_comm(members)) mine = std::move(comm);
      }
      return mine;
    };
    std::vector<int> everyone(shape.world);
    for (int r = 0; r < shape.world; ++r) everyone[r] = r;
    ctx->world = make_mpi_comm(everyone);
    ctx->tp = split(&ProcessGrid::tp_group);
    ctx->dp = split(&ProcessGrid::dp_group);
    ctx->pp = split(&ProcessGrid::pp_group);
    ctx->embedding = split(&ProcessGrid::embedding_group);
    return ctx;
  }
#endif
  ctx->grid = ProcessGrid(make_grid_shape(1, tp, pp), 0);
  ctx->world = make_local_comm();
  ctx->tp = make_local_comm();
  ctx->dp = make_local_comm();
  ctx->pp = make_local_comm();
  ctx->embedding = make_local_comm();
  return ctx;
}

}  // namespace trident
