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
    // Every rank creates every group of each kind in the same order (collective calls).
    const ProcessGrid& g = ctx->grid;
    for (int p = 0; p < g.shape.pp; ++p)
      for (int d = 0; d < g.shape.dp; ++d) {
        ProcessGrid member(g.shape, g.rank_of(0, d, p));
        auto comm = make_mpi_comm(member.tp_group());
        if (g.pp_rank == p && g.dp_rank == d) ctx->tp = std::move(comm);
      }
    for (int p = 0; p < g.shape.pp; ++p)
      for (int t = 0; t < g.shape.tp; ++t) {
        ProcessGrid member(g.shape, g.rank_of(t, 0, p));
        auto comm = make_mpi_comm(member.dp_group());
        if (g.pp_rank == p && g.tp_rank == t) ctx->dp = std::move(comm);
      }
    for (int d = 0; d < g.shape.dp; ++d)
      for (int t = 0; t < g.shape.tp; ++t) {
        ProcessGrid member(g.shape, g.rank_of(t, d, 0));
        auto comm = make_mpi_comm(member.pp_group());
        if (g.dp_rank == d && g.tp_rank == t) ctx->pp = std::move(comm);
      }
    return ctx;
  }
#endif
  ctx->grid = ProcessGrid(make_grid_shape(1, tp, pp), 0);
  ctx->tp = make_local_comm();
  ctx->dp = make_local_comm();
  ctx->pp = make_local_comm();
  return ctx;
}

}  // namespace trident
