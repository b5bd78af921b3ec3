// Comm: collective and point-to-point communication within one process group.
// LocalComm is the world of one (no MPI); MpiComm and NcclComm implement the same
// interface for multi-process runs. Ops are in place where Megatron's are.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace trident {

enum class ReduceOp { Sum, Max };

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce(const Tensor& t, ReduceOp op) = 0;                // in place
  // out = size x in; `in` may be this rank's own block of `out` (gather in place).
  virtual void allgather(const Tensor& in, const Tensor& out) = 0;
  virtual void reduce_scatter(const Tensor& in, const Tensor& out) = 0;     // in = size x out, sum
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(const Tensor& t, int peer) = 0;
  // Sends `out` to `send_peer` while receiving `in` from `recv_peer`. The pipeline's
  // steady state uses it: two neighbours that both send first would otherwise deadlock.
  virtual void sendrecv(const Tensor& out, int send_peer, const Tensor& in, int recv_peer) = 0;
  virtual void barrier() = 0;
};

// A group of one: reductions are identities, gathers are copies.
std::unique_ptr<Comm> make_local_comm();

}  // namespace trident
