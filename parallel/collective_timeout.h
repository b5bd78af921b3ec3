// The longest one rank may wait for the others (Megatron's --distributed-timeout-minutes,
// default 10): a rank whose peer is stuck (a deadlock, a stopped process, a hung GPU) or
// gone without an error would otherwise wait in its collective forever, and with it the
// whole job.
// - MpiComm marks each collective and transfer it makes with a CollectiveWait; a watchdog
//   thread ends the job when one lasts longer than the limit: one line ("trident: waited
//   M minutes in OP, longer than --distributed-timeout-minutes L: ... (rank R): ending the
//   job"), then MPI_Abort.
// - NcclComm applies the same limit to each op it queues, from the moment it is queued to
//   the moment it finishes on the GPU (nccl_comm.cpp).
// - Waits while one rank does I/O for all (building the dataset caches, a checkpoint save
//   or load: CollectiveTimeoutSuspended) have no limit: their length follows the data, the
//   model and the filesystem, not the peers' health (Megatron's users raise the timeout
//   for them instead).
#pragma once

#include <chrono>
#include <string>

#include "parallel/comm_watchdog.h"

namespace trident {

// The process's watchdog thread, started on first use: it holds this limit's check and
// NcclComm's (asynchronous errors, ops past the limit), and ends the job on the first
// failure: one line, then MPI_Abort (or _Exit without MPI), never exit() from its thread.
// It polls every quarter of the limit in force at its start, between 10 ms and 1 s. A check
// that has not returned for longer than the limit (a CUDA or NCCL call stuck in the
// driver; even while CollectiveTimeoutSuspended, when the checks make no such calls) ends
// the job the same way, from a second thread that makes no such calls.
CommWatchdog& job_watchdog();

// minutes <= 0: no limit. Set before the first collective (trident-train's and
// trident-eval's flag).
void set_collective_timeout(double minutes);
// The limit in force: zero when there is none, or while suspended.
std::chrono::nanoseconds collective_timeout();
// The line that ends the job.
std::string collective_timeout_message(const char* op, std::chrono::nanoseconds waited);

// Marks the calling thread (the one that communicates: MPI_THREAD_FUNNELED) as waiting in
// `op` (a string that lives as long as the process: a literal, or a WaitNames name) from
// construction to destruction. Nests (the inner wait counts).
class CollectiveWait {
 public:
  explicit CollectiveWait(const char* op);
  ~CollectiveWait();
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;

 private:
  int64_t outer_since_ns_;
  const char* outer_op_;
};

// No limit for the waits (and NCCL ops queued) while one lives: one rank's I/O for all.
// Nests.
class CollectiveTimeoutSuspended {
 public:
  CollectiveTimeoutSuspended();
  ~CollectiveTimeoutSuspended();
  CollectiveTimeoutSuspended(const CollectiveTimeoutSuspended&) = delete;
  CollectiveTimeoutSuspended& operator=(const CollectiveTimeoutSuspended&) = delete;
};

}  // namespace trident
