// NcclComm: the Comm interface on device buffers through NCCL, one ncclComm_t per group.
//
// - The group's first rank makes the ncclUniqueId and broadcasts it over an MPI
//   communicator of the same group, which the NcclComm keeps: host buffers (the trainer's
//   scalars, checkpoint metadata) go through that MpiComm, device buffers through NCCL.
//   (A group of one may use a LocalComm instead, so NCCL can be tested without MPI.)
// - Device ops run on a communication stream of their own. An event orders each op after
//   the work already queued on the backend's compute stream, and a second event makes the
//   compute stream wait for the op, so callers see the ops in program order, as with
//   MpiComm, without the host blocking; a later copy to the host on the compute stream
//   (Backend::copy_to_host) therefore sees the result.
// - allreduce (Sum, Max) for f32, f16, bf16 and i32; allgather (in place when `in` is this
//   rank's block of `out`), reduce_scatter (sum), broadcast; exchange (and send, recv,
//   sendrecv) as NCCL point-to-point in one ncclGroupStart/End: between two ranks NCCL
//   pairs the transfers in the order posted (tags are ignored; the pipeline schedules keep
//   both sides' orders the same). 16-bit sums reduce in NCCL's own
//   arithmetic (not through fp32 as MpiComm does), so results may differ in the last bit.
// - Any NCCL or CUDA failure prints the call, file and line and aborts the whole job; an
//   asynchronous NCCL error (a broken link, a lost peer: the collective never returns) is
//   caught by a watchdog thread polling ncclCommGetAsyncError (job_watchdog,
//   collective_timeout.h: every quarter of the timeout, 10 ms to 1 s), which prints it and
//   aborts the job. The same thread ends the
//   job when an op has not finished on the GPU --distributed-timeout-minutes after it was
//   queued (a peer stuck without an error). A rank failing with an exception leaves the
//   communicator to the process's end rather than wait for ops whose peers never come.
// - allreduce_async, reduce_scatter_async and allgather_async (the gradient buckets'
//   reductions, ZeRO's parameter gathers) are queued the same way, but the compute stream
//   waits for them only at CommWork::wait(), through an event of their own, so the backward
//   (forward) goes on while they run. Their buffers are persistent (gradients, parameters,
//   the optimizer's staging and shard), so no allocator block has to be held for the
//   communication stream. The communication stream has the highest priority.
//
// Real only when the build has CUDA, NCCL and MPI (TRIDENT_HAVE_NCCL); otherwise the
// factories throw ConfigError naming --comm.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm.h"

namespace trident {

// True when this build has NcclComm.
bool nccl_built();

// An NcclComm over the group of `group` (its host communicator, kept for host buffers and
// to carry the unique id: an MpiComm from make_mpi_comm, or a LocalComm for a group of one
// without MPI), for tensors of CUDA device `device` whose work is queued on
// `compute_stream` (a cudaStream_t: kernels/cuda/cuda_backend.h, cuda_stream_of).
// Collective over the group only (ncclCommInitRank blocks until every member has called),
// so a caller making several groups first makes all their MpiComms (collective over the
// world), then wraps them in the same order on every rank. Throws ConfigError naming
// --comm when the build has no NCCL.
std::unique_ptr<Comm> make_nccl_comm(std::unique_ptr<Comm> group, int device, void* compute_stream);

// make_mpi_comm(world_ranks) then make_nccl_comm: one group at a time (tests, the world).
// Collective over the world; ranks outside `world_ranks` get nullptr.
std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>& world_ranks, int device, void* compute_stream);

}  // namespace trident
