// MpiComm: the Comm interface over an MPI communicator. Host buffers (the CPU backend) go
// straight to MPI. Device buffers (the CUDA backend with --comm mpi) are staged: copied to
// a pinned host buffer once the device is idle, sent through MPI, copied back; slow, but
// it lets several ranks share one GPU in tests. fp16/bf16 reductions are done in fp32
// through a staging buffer, so every dtype reduces identically.
#pragma once

#include <cstdint>
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
// The same from a watchdog thread: never returns through exit() (whose handlers would
// destroy the watchdog on its own thread) even if MPI_Abort returns; _Exit instead, also
// when MPI_Abort has not ended the process within 30 s.
[[noreturn]] void mpi_abort_job_from_watchdog(int code);

// How MpiComm reaches device buffers. A build with CUDA installs hooks on the CUDA runtime
// (to_host and to_device wait for all work queued on the device first; alloc_host is
// cudaMallocHost); without CUDA there are none and a device buffer is an InternalError.
// Tests may install their own (host memory posing as device memory) before making comms;
// a comm keeps the free_host of the buffers it allocated.
struct DeviceCopyHooks {
  void (*to_host)(void* host, const void* device, size_t bytes) = nullptr;
  void (*to_device)(void* device, const void* host, size_t bytes) = nullptr;
  void* (*alloc_host)(size_t bytes) = nullptr;
  void (*free_host)(void* p) = nullptr;
};
void set_mpi_device_copy_hooks(const DeviceCopyHooks& hooks);
DeviceCopyHooks mpi_device_copy_hooks();

// MPI counts are ints. MpiComm's all-reduce, broadcast and point-to-point transfers send a
// larger buffer in pieces of at most this many elements (an all-reduce) or bytes, and at
// most 1 GiB; its all-gather and reduce-scatter refuse more with a one-line error.
// INT32_MAX by default; tests lower it to exercise the pieces on small buffers (every rank
// the same).
void set_mpi_max_count(int64_t count);

// A Comm over the ranks `world_ranks` (in that order) of MPI_COMM_WORLD. Collective: every
// rank of the world calls it with the same list; ranks outside the list get nullptr.
std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks);

}  // namespace trident
