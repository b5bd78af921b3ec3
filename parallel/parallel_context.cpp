#include "parallel/parallel_context.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "parallel/deferred_async_comm.h"
#include "parallel/nccl_comm.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif
#ifdef TRIDENT_HAVE_NCCL
#include "kernels/cuda/cuda_backend.h"
#endif

namespace trident {

CommKind resolve_comm_kind(const std::string& flag, const Backend& backend) {
  const bool cuda = backend.device() == Device::Cuda;
  if (flag.empty()) return cuda && nccl_built() ? CommKind::Nccl : CommKind::Mpi;
  if (flag == "mpi") return CommKind::Mpi;
  if (flag != "nccl") throw ConfigError("--comm: unknown communicator '" + flag + "' (expected nccl or mpi)");
  if (!nccl_built()) throw ConfigError("--comm nccl: this build has no NCCL (it needs CUDA, NCCL and MPI)");
  if (!cuda) throw ConfigError("--comm nccl needs the CUDA backend (--device cuda)");
  return CommKind::Nccl;
}

namespace {

// The first of `mine`'s lines that differs from rank 0's `theirs`, as "--flag mine (rank 0:
// theirs)"; "" when all agree.
std::string first_difference(const std::string& mine, const std::string& theirs) {
  std::istringstream a(mine), b(theirs);
  std::string la, lb;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la)), more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) return "";
    if (more_a && more_b && la == lb) continue;
    const std::string flag_a = la.substr(0, la.find(' ')), flag_b = lb.substr(0, lb.find(' '));
    if (more_a && more_b && flag_a == flag_b)
      return la + " (rank 0: " + lb.substr(std::min(lb.size(), flag_b.size() + 1)) + ")";
    return (more_a ? la : "(nothing)") + " (rank 0: " + (more_b ? lb : "(nothing)") + ")";
  }
}

void check_every_rank_shares(Comm& world, const std::string& shared_flags) {
  std::string rank0 = shared_flags;
  broadcast_string(world, rank0, 0);
  const std::string diff = first_difference(shared_flags, rank0);
  const std::string mine = diff.empty() ? "" : "rank " + std::to_string(world.rank()) +
                                                   " was started with other flags than rank 0: " + diff;
  if (const std::string failure = first_failure(world, mine); !failure.empty()) throw ConfigError(failure);
}

}  // namespace

std::unique_ptr<ParallelContext> make_parallel_context(int tp, int pp, [[maybe_unused]] CommKind kind,
                                                       [[maybe_unused]] Backend* backend,
                                                       [[maybe_unused]] const std::string& shared_flags) {
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
    if (!shared_flags.empty()) check_every_rank_shares(*ctx->world, shared_flags);
    ctx->tp = split(&ProcessGrid::tp_group);
    ctx->dp = split(&ProcessGrid::dp_group);
    ctx->pp = split(&ProcessGrid::pp_group);
    ctx->embedding = split(&ProcessGrid::embedding_group);
    if (kind == CommKind::Nccl) {
#ifdef TRIDENT_HAVE_NCCL
      TRIDENT_CHECK(backend != nullptr, "make_parallel_context: CommKind::Nccl needs the backend");
      const CudaStreamRef ref = cuda_stream_of(*backend);
      if (!ref.valid()) throw ConfigError("--comm nccl needs the CUDA backend (--device cuda)");
      // Every MPI group exists now; wrapping is collective within each group only, and
      // every rank wraps its groups in the same order, so no two ranks wait on each other.
      for (std::unique_ptr<Comm>* c : {&ctx->world, &ctx->tp, &ctx->dp, &ctx->pp, &ctx->embedding})
        if (*c) *c = make_nccl_comm(std::move(*c), ref.device, ref.stream);
#else
      throw ConfigError("--comm nccl: this build has no NCCL (it needs CUDA, NCCL and MPI)");
#endif
    }
    // The optimizer's gradient reductions are the asynchronous ops (deferred_async_comm.h).
    if (check_async_comm_requested()) ctx->dp = make_deferred_async_comm(std::move(ctx->dp));
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

std::unique_ptr<ParallelContext> make_dry_run_context(const GridShape& shape, int rank) {
  auto ctx = std::make_unique<ParallelContext>();
  ctx->grid = ProcessGrid(shape, rank);
  const ProcessGrid& g = ctx->grid;
  ctx->world = make_null_comm(shape.world, rank);
  ctx->tp = make_null_comm(shape.tp, g.tp_rank);
  ctx->dp = make_null_comm(shape.dp, g.dp_rank);
  ctx->pp = make_null_comm(shape.pp, g.pp_rank);
  // As make_parallel_context: the first and last stage, a group of one without pipelining.
  if (shape.pp == 1) ctx->embedding = make_null_comm(1, 0);
  else if (g.first_stage() || g.last_stage()) ctx->embedding = make_null_comm(2, g.first_stage() ? 0 : 1);
  return ctx;
}

bool any_rank(ParallelContext& par, bool local) {
  float v = local ? 1.0f : 0.0f;
  par.world->allreduce(Tensor(&v, Shape{1}, DType::F32, Device::Cpu), ReduceOp::Max);
  return v > 0;
}

void run_on_rank0_for_all(ParallelContext& par, const std::function<void()>& step) {
  // The others wait for rank 0 as long as its step takes. Rank 0 then waits for them under the
  // limit: they are normally there already, and one that is not (stuck in its own I/O before
  // this point) ends the job after --distributed-timeout-minutes instead of hanging it.
  std::optional<CollectiveTimeoutSuspended> waiting_for_rank0;
  if (par.world_rank() != 0) waiting_for_rank0.emplace();
  const bool mine = par.world_rank() == 0;
  run_sharing_first_failure(*par.world, [&] {
    if (mine) step();
  });
}

}  // namespace trident
