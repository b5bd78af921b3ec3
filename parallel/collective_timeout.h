// The longest one rank may wait for the others (Megatron's --distributed-timeout-minutes,
// default 10): a rank whose peer is stuck (a deadlock, a stopped process, a hung GPU) or
// gone without an error would otherwise wait in its collective forever, and with it the
// whole job. MpiComm marks every blocking MPI call with a CollectiveWait; a watchdog thread
// ends the job (one line naming the rank, the op and the limit, then MPI_Abort) when one
// lasts longer than the limit. NcclComm applies the same limit to each op it queues, from
// the moment it is queued to the moment it finishes on the GPU (nccl_comm.cpp).
#pragma once

#include <chrono>
#include <string>

namespace trident {

// minutes <= 0: no limit. Set before the first collective (trident-train's flag).
void set_collective_timeout(double minutes);
// The limit; zero when there is none.
std::chrono::nanoseconds collective_timeout();
// The line that ends the job: "rank R waited M minutes in OP ...".
std::string collective_timeout_message(const char* op, std::chrono::nanoseconds waited);

// Marks the calling thread (the one that communicates: MPI_THREAD_FUNNELED) as waiting in
// `op` (a literal) from construction to destruction.
class CollectiveWait {
 public:
  explicit CollectiveWait(const char* op);
  ~CollectiveWait();
  CollectiveWait(const CollectiveWait&) = delete;
  CollectiveWait& operator=(const CollectiveWait&) = delete;
};

}  // namespace trident
