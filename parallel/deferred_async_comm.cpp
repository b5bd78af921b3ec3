#include "parallel/deferred_async_comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.h"

namespace trident {
namespace {

const unsigned char kPoison = 0xFF;  // all bytes 0xFF: NaN in f32, f16 and bf16

bool overlap(const Tensor& a, const Tensor& b) {
  const char *a0 = static_cast<const char*>(a.data), *b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

bool still_poisoned(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data);
  return std::all_of(p, p + t.nbytes(), [](unsigned char c) { return c == kPoison; });
}

class DeferredAsyncComm final : public Comm {
 public:
  explicit DeferredAsyncComm(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::vector<int> world_ranks() const override { return inner_->world_ranks(); }
  void allreduce(const Tensor& t, ReduceOp op) override { inner_->allreduce(t, op); }
  void allgather(const Tensor& in, const Tensor& out) override { inner_->allgather(in, out); }
  void reduce_scatter(const Tensor& in, const Tensor& out) override { inner_->reduce_scatter(in, out); }
  void broadcast(const Tensor& t, int root) override { inner_->broadcast(t, root); }
  void exchange(const std::vector<P2pTransfer>& transfers) override { inner_->exchange(transfers); }
  void barrier() override { inner_->barrier(); }

  std::unique_ptr<CommWork> allreduce_async(const Tensor& t, ReduceOp op) override {
    if (t.device != Device::Cpu) return inner_->allreduce_async(t, op);
    return std::make_unique<Work>(*this, t, std::vector<Tensor>{t}, [this, t, op] { inner_->allreduce(t, op); });
  }

  // `in` may be this rank's block of `out` (ZeRO's gather in place): poisoned with the rest.
  std::unique_ptr<CommWork> allgather_async(const Tensor& in, const Tensor& out) override {
    if (in.device != Device::Cpu) return inner_->allgather_async(in, out);
    const bool in_place = overlap(in, out);
    return std::make_unique<Work>(*this, in, in_place ? std::vector<Tensor>{out} : std::vector<Tensor>{in, out},
                                  [this, in, out] { inner_->allgather(in, out); });
  }

  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& in, const Tensor& out) override {
    if (in.device != Device::Cpu) return inner_->reduce_scatter_async(in, out);
    return std::make_unique<Work>(*this, in, std::vector<Tensor>{in, out},
                                  [this, in, out] { inner_->reduce_scatter(in, out); });
  }

 private:
  // One deferred op: its input's bytes as queued, its buffers poisoned until wait().
  class Work final : public CommWork {
   public:
    Work(DeferredAsyncComm& comm, const Tensor& input, std::vector<Tensor> buffers, std::function<void()> op)
        : comm_(comm),
          input_(input),
          saved_(static_cast<const char*>(input.data), static_cast<const char*>(input.data) + input.nbytes()),
          buffers_(std::move(buffers)),
          op_(std::move(op)) {
      for (const Tensor& b : buffers_)
        for (const Busy& busy : comm_.busy_)
          if (overlap(b, busy.buffer))
            throw InternalError("an asynchronous op's buffer is used by another one that was not waited for");
      for (const Tensor& b : buffers_) {
        std::memset(b.data, kPoison, b.nbytes());
        comm_.busy_.push_back({this, b});
      }
    }
    ~Work() override { release(); }
    void wait() override {
      if (!op_) return;
      release();
      for (const Tensor& b : buffers_)
        if (!still_poisoned(b))
          throw InternalError("an asynchronous op's buffer was written before the op was waited for");
      std::memcpy(input_.data, saved_.data(), saved_.size());
      std::exchange(op_, nullptr)();
    }

   private:
    void release() {
      if (released_) return;
      released_ = true;
      auto& busy = comm_.busy_;
      busy.erase(std::remove_if(busy.begin(), busy.end(), [this](const Busy& x) { return x.op == this; }), busy.end());
    }
    DeferredAsyncComm& comm_;
    Tensor input_;
    std::vector<char> saved_;
    std::vector<Tensor> buffers_;
    std::function<void()> op_;
    bool released_ = false;
  };

  std::unique_ptr<Comm> inner_;
  struct Busy {
    const Work* op;
    Tensor buffer;
  };
  std::vector<Busy> busy_;  // the buffers of the ops not yet waited for
};

}  // namespace

std::unique_ptr<Comm> make_deferred_async_comm(std::unique_ptr<Comm> inner) {
  if (!inner) return nullptr;
  return std::make_unique<DeferredAsyncComm>(std::move(inner));
}

bool check_async_comm_requested() {
  const char* v = std::getenv("TRIDENT_CHECK_ASYNC_COMM");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace trident
