// Comm: collective and point-to-point communication within one process group.
// LocalComm is the world of one (no MPI); MpiComm and NcclComm implement the same
// interface for multi-process runs. Ops are in place where Megatron's are.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace trident {

enum class ReduceOp { Sum, Max };

// The completion of an asynchronous op (Comm::allreduce_async, reduce_scatter_async).
class CommWork {
 public:
  virtual ~CommWork() = default;
  // From here on the caller's later work sees the op's result and may use its buffers
  // again. On a GPU the compute stream waits for the op and the host does not block. A
  // CommWork destroyed without wait() is abandoned (only when a step is being unwound).
  virtual void wait() = 0;
};

// One point-to-point transfer of an exchange.
struct P2pTransfer {
  bool send = true;  // else receive into `tensor`
  Tensor tensor;
  int peer = 0;
  // MpiComm matches messages on it (the pipeline keeps activations and gradients apart);
  // NcclComm has no tags: between two ranks it pairs the transfers in the order posted.
  int tag = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of each of the group's ranks, where known (MPI); empty otherwise.
  virtual std::vector<int> world_ranks() const { return {}; }
  virtual void allreduce(const Tensor& t, ReduceOp op) = 0;                // in place
  // out = size x in; `in` may be this rank's own block of `out` (gather in place).
  virtual void allgather(const Tensor& in, const Tensor& out) = 0;
  virtual void reduce_scatter(const Tensor& in, const Tensor& out) = 0;     // in = size x out, sum
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Posts every transfer at once and returns when all are done (Megatron's
  // batch_isend_irecv), so neighbours whose transfers cross, both sending first, do not
  // deadlock. Buffers are all on the host or all on the device.
  virtual void exchange(const std::vector<P2pTransfer>& transfers) = 0;
  virtual void barrier() = 0;

  // Asynchronous forms, for the gradient reductions that overlap the backward pass and the
  // parameter gathers that overlap the next forward: the op
  // is queued after the caller's work so far and may run while the caller goes on. Until
  // the returned work's wait() the caller must neither read nor write the buffers, and they
  // must outlive the op (persistent buffers: no allocator block is held for it). NcclComm
  // runs them on its communication stream; the default runs the op at once and returns
  // finished work (MpiComm, LocalComm).
  virtual std::unique_ptr<CommWork> allreduce_async(const Tensor& t, ReduceOp op);
  virtual std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& in, const Tensor& out);
  // The updated parameters' gather after a ZeRO step (--overlap-param-gather).
  virtual std::unique_ptr<CommWork> allgather_async(const Tensor& in, const Tensor& out);

  void send(const Tensor& t, int peer) { exchange({{true, t, peer}}); }
  void recv(const Tensor& t, int peer) { exchange({{false, t, peer}}); }
  // Sends `out` to `send_peer` while receiving `in` from `recv_peer`.
  void sendrecv(const Tensor& out, int send_peer, const Tensor& in, int recv_peer) {
    exchange({{true, out, send_peer}, {false, in, recv_peer}});
  }
};

// The transfers of a sendrecv whose sides may be absent: `out` to `send_peer` and `in` from
// `recv_peer`, each only where its peer is given (>= 0) and its tensor holds data.
std::vector<P2pTransfer> optional_sendrecv(const Tensor& out, int send_peer, const Tensor& in, int recv_peer);

// A group of one: reductions are identities, gathers are copies.
std::unique_ptr<Comm> make_local_comm();

// A group of `size` that moves nothing: this process plays rank `rank` of it alone, every
// collective and exchange returns at once and leaves the buffers as they are (a gather
// writes nothing). For dry runs that measure a rank's memory (trident-plan), never for
// numbers.
std::unique_ptr<Comm> make_null_comm(int size, int rank);

}  // namespace trident
