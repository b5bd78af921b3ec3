// Comm's default asynchronous ops: the synchronous op, done before returning.
#include "parallel/comm.h"

namespace trident {
namespace {

class FinishedWork final : public CommWork {
 public:
  void wait() override {}
};

}  // namespace

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
