// Comm's default asynchronous ops: the synchronous op, done before returning.
#include "parallel/comm.h"

namespace trident {
namespace {

class FinishedWork final : public CommWork {
 public:
  void wait() override {}
};

}  // namespace

std::vector<P2pTransfer> optional_sendrecv(const Tensor& out, int send_peer, const Tensor& in, int recv_peer) {
  const bool send = send_peer >= 0 && out.numel() > 0, receive = recv_peer >= 0 && in.numel() > 0;
  // Sized, then filled: gcc 12 warns wrongly on push_back of a P2pTransfer (-Wstringop-overflow).
  std::vector<P2pTransfer> t(static_cast<size_t>(send) + static_cast<size_t>(receive));
  size_t k = 0;
  if (send) t[k++] = P2pTransfer{true, out, send_peer};
  if (receive) t[k++] = P2pTransfer{false, in, recv_peer};
  return t;
}

std::unique_ptr<CommWork> Comm::allreduce_async(const Tensor& t, ReduceOp op) {
  allreduce(t, op);
  return std::make_unique<FinishedWork>();
}

std::unique_ptr<CommWork> Comm::reduce_scatter_async(const Tensor& in, const Tensor& out) {
  reduce_scatter(in, out);
  return std::make_unique<FinishedWork>();
}

std::unique_ptr<CommWork> Comm::allgather_async(const Tensor& in, const Tensor& out) {
  allgather(in, out);
  return std::make_unique<FinishedWork>();
}

}  // namespace trident
