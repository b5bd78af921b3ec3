// NcclComm (see nccl_comm.h): NCCL collectives and point-to-point on a communication
// stream ordered against the backend's compute stream by events; host buffers through the
// group's host communicator (MpiComm, or LocalComm for a group of one).
#include "parallel/nccl_comm.h"

#include "core/error.h"

#ifdef TRIDENT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/collective_timeout.h"
#include "parallel/mpi_comm.h"
#include "parallel/wait_names.h"
#endif

namespace trident {

#ifndef TRIDENT_HAVE_NCCL

bool nccl_built() { return false; }

std::unique_ptr<Comm> make_nccl_comm(std::unique_ptr<Comm>, int, void*) {
  throw ConfigError("--comm nccl: this build has no NCCL (it needs CUDA, NCCL and MPI); use --comm mpi");
}

std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>&, int, void*) {
  throw ConfigError("--comm nccl: this build has no NCCL (it needs CUDA, NCCL and MPI); use --comm mpi");
}

#else

namespace {

// A failed NCCL or CUDA call cannot be recovered from and the other ranks would wait in
// their collectives forever: name the call and end the whole job.
[[noreturn]] void die(const char* what, const char* msg, const char* call, const char* file, int line) {
  std::fprintf(stderr, "trident: %s error %s in %s at %s:%d (rank %d)\n", what, msg, call, file, line,
               mpi_world_rank());
  mpi_abort_job(3);
}

#define NCCL_CHECK(call)                                                          \
  do {                                                                            \
    const ncclResult_t trident_nr_ = (call);                                      \
    if (trident_nr_ != ncclSuccess)                                               \
      die("NCCL", ncclGetErrorString(trident_nr_), #call, __FILE__, __LINE__);    \
  } while (0)

#define NCCL_CUDA_CHECK(call)                                                     \
  do {                                                                            \
    const cudaError_t trident_ce_ = (call);                                       \
    if (trident_ce_ != cudaSuccess)                                               \
      die("CUDA", cudaGetErrorString(trident_ce_), #call, __FILE__, __LINE__);    \
  } while (0)

std::string nccl_async_failure(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
  if (r != ncclSuccess) return std::string("ncclCommGetAsyncError failed: ") + ncclGetErrorString(r);
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return std::string("NCCL asynchronous error: ") + ncclGetErrorString(async);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
  }
  throw InternalError("NcclComm: unsupported dtype");
}

class NcclComm final : public Comm {
 public:
  NcclComm(std::unique_ptr<Comm> host, int device, cudaStream_t compute)
      : host_(std::move(host)), device_(device), compute_(compute), names_("NCCL", host_->world_ranks()) {
    activate();
    // Group rank 0 makes the id; the group's MPI communicator carries it to the others.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (host_->rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    static_assert(sizeof(ncclUniqueId) % sizeof(int32_t) == 0, "ncclUniqueId size");
    host_->broadcast(Tensor(&id, Shape{static_cast<int64_t>(sizeof(id) / sizeof(int32_t))}, DType::I32, Device::Cpu),
                     0);
    NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
    // The highest priority: a reduction overlapping the backward gets SMs as soon as
    // blocks of the backward's GEMMs retire, instead of after the whole queue of them.
    int least = 0, greatest = 0;
    NCCL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    NCCL_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    watchdog_id_ = job_watchdog().add([this] {
      const std::string failed = nccl_async_failure(comm_);
      return failed.empty() ? overdue_op() : failed;
    });
  }

  ~NcclComm() override {
    // Best effort: at exit the CUDA context may already be gone, so errors are ignored.
    // While an exception unwinds (a rank failing mid-step, on its way to MPI_Abort), ops may
    // be queued whose peers never come, and tearing NCCL down (even ncclCommAbort, on one
    // rank alone) may wait for them: leave the communicator, stream and events to the
    // process's end.
    if (watchdog_id_ >= 0) job_watchdog().remove(watchdog_id_);  // before the communicator goes
    if (std::uncaught_exceptions() > 0) return;
    if (cudaSetDevice(device_) == cudaSuccess && stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    for (const QueuedOp& op : ops_) cudaEventDestroy(op.done);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    if (compute_ready_) cudaEventDestroy(compute_ready_);
    if (comm_done_) cudaEventDestroy(comm_done_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::vector<int> world_ranks() const override { return host_->world_ranks(); }

  void allreduce(const Tensor& t, ReduceOp op) override {
    if (on_host(t)) return host_->allreduce(t, op);
    if (t.numel() == 0) return;
    Ordered o(*this, names_.op("allreduce"));
    NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), nccl_type(t.dtype),
                             op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_));
  }

  void allgather(const Tensor& in, const Tensor& out) override {
    if (on_host(in, out)) return host_->allgather(in, out);
    TRIDENT_CHECK(out.nbytes() == in.nbytes() * static_cast<size_t>(size()), "NcclComm allgather: out ",
                  out.shape.str(), " is not ", size(), " x in ", in.shape.str());
    if (in.nbytes() == 0) return;
    // In place when `in` is this rank's block of `out`: NCCL detects sendbuff ==
    // recvbuff + rank * sendcount itself, so the same call serves both cases.
    Ordered o(*this, names_.op("allgather"));
    NCCL_CHECK(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_));
  }

  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    if (on_host(in, out)) return host_->reduce_scatter(in, out);
    TRIDENT_CHECK(in.numel() == out.numel() * size() && in.dtype == out.dtype, "NcclComm reduce_scatter: in ",
                  in.shape.str(), " is not ", size(), " x out ", out.shape.str());
    if (out.numel() == 0) return;
    Ordered o(*this, names_.op("reduce-scatter"));
    NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), nccl_type(out.dtype), ncclSum,
                                 comm_, stream_));
  }

  void broadcast(const Tensor& t, int root) override {
    if (on_host(t)) return host_->broadcast(t, root);
    if (t.nbytes() == 0) return;
    Ordered o(*this, names_.op("broadcast"));
    NCCL_CHECK(ncclBroadcast(t.data, t.data, t.nbytes(), ncclUint8, root, comm_, stream_));
  }

  void exchange(const std::vector<P2pTransfer>& transfers) override {
    if (transfers.empty()) return;
    const bool host = on_host(transfers[0].tensor);
    for (const P2pTransfer& x : transfers)
      TRIDENT_CHECK(on_host(x.tensor) == host, "NcclComm: an exchange with buffers on the host and on the GPU");
    if (host) return host_->exchange(transfers);
    Ordered o(*this, names_.exchange(transfers));
    // One group: NCCL posts every transfer before waiting on any. Between two ranks it pairs
    // sends and receives in the order posted (no tags).
    NCCL_CHECK(ncclGroupStart());
    for (const P2pTransfer& x : transfers) {
      if (x.tensor.nbytes() == 0) continue;
      if (x.send)
        NCCL_CHECK(ncclSend(x.tensor.data, x.tensor.nbytes(), ncclUint8, x.peer, comm_, stream_));
      else
        NCCL_CHECK(ncclRecv(x.tensor.data, x.tensor.nbytes(), ncclUint8, x.peer, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
  }

  // The gradient reductions of the backward pass and the parameter gathers of the next
  // forward: queued like the ops above, but the compute stream waits for them only at the
  // work's wait(), so the backward (forward) goes on.
  std::unique_ptr<CommWork> allreduce_async(const Tensor& t, ReduceOp op) override {
    if (on_host(t) || t.numel() == 0) return Comm::allreduce_async(t, op);
    comm_after_compute();
    NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), nccl_type(t.dtype),
                             op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_));
    track(names_.op("allreduce"));
    return std::make_unique<NcclWork>(compute_, stream_);
  }

  std::unique_ptr<CommWork> reduce_scatter_async(const Tensor& in, const Tensor& out) override {
    if (on_host(in, out) || out.numel() == 0) return Comm::reduce_scatter_async(in, out);
    TRIDENT_CHECK(in.numel() == out.numel() * size() && in.dtype == out.dtype, "NcclComm reduce_scatter: in ",
                  in.shape.str(), " is not ", size(), " x out ", out.shape.str());
    comm_after_compute();
    NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), nccl_type(out.dtype), ncclSum,
                                 comm_, stream_));
    track(names_.op("reduce-scatter"));
    return std::make_unique<NcclWork>(compute_, stream_);
  }

  std::unique_ptr<CommWork> allgather_async(const Tensor& in, const Tensor& out) override {
    if (on_host(in, out) || in.nbytes() == 0) return Comm::allgather_async(in, out);
    TRIDENT_CHECK(out.nbytes() == in.nbytes() * static_cast<size_t>(size()), "NcclComm allgather: out ",
                  out.shape.str(), " is not ", size(), " x in ", in.shape.str());
    comm_after_compute();
    NCCL_CHECK(ncclAllGather(in.data, out.data, in.nbytes(), ncclUint8, comm_, stream_));
    track(names_.op("allgather"));
    return std::make_unique<NcclWork>(compute_, stream_);
  }

  void barrier() override {
    // Every device op queued so far has finished, then every rank has reached here.
    activate();
    NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    NCCL_CHECK(async);
    host_->barrier();
  }

 private:
  // The communication stream waits for the compute stream's work queued so far.
  void comm_after_compute() {
    activate();
    NCCL_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_));
    NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
  }

  // Brackets one device op: the communication stream waits for the compute stream's work
  // so far; on leaving, the compute stream waits for the op.
  struct Ordered {
    Ordered(NcclComm& c, const char* what) : c_(c), what_(what) { c_.comm_after_compute(); }
    ~Ordered() {
      c_.track(what_);
      NCCL_CUDA_CHECK(cudaEventRecord(c_.comm_done_, c_.stream_));
      NCCL_CUDA_CHECK(cudaStreamWaitEvent(c_.compute_, c_.comm_done_, 0));
    }
    Ordered(const Ordered&) = delete;
    Ordered& operator=(const Ordered&) = delete;
    NcclComm& c_;
    const char* what_;
  };

  // --distributed-timeout-minutes: every op queued gets an event after it; the watchdog
  // drops the finished ones and reports the oldest still running past the limit (a peer
  // stuck or gone: NCCL itself would spin forever without an error).
  // The event is recorded outside ops_mu_: a record can block when the stream's launch
  // queue is full (a stuck peer), and the watchdog must still be able to look.
  void track(const char* what) {
    if (collective_timeout().count() <= 0) return;
    const auto queued = std::chrono::steady_clock::now();
    cudaEvent_t e = nullptr;
    {
      std::lock_guard<std::mutex> lock(ops_mu_);
      drop_finished_ops();
      if (!spare_events_.empty()) {
        e = spare_events_.back();
        spare_events_.pop_back();
      }
    }
    if (e == nullptr) NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventRecord(e, stream_));
    std::lock_guard<std::mutex> lock(ops_mu_);
    ops_.push_back({e, queued, what});
  }
  // Under ops_mu_. The error of a failed query is the watchdog's to report.
  cudaError_t drop_finished_ops() {
    while (!ops_.empty()) {
      const cudaError_t r = cudaEventQuery(ops_.front().done);
      if (r != cudaSuccess) return r;
      spare_events_.push_back(ops_.front().done);
      ops_.pop_front();
    }
    return cudaSuccess;
  }
  // The watchdog's check (its own thread): "" or what is overdue.
  std::string overdue_op() {
    // Skips this poll while the main thread holds the lock (never waits for it).
    std::unique_lock<std::mutex> lock(ops_mu_, std::try_to_lock);
    if (!lock.owns_lock() || collective_timeout().count() <= 0) return "";
    if (cudaSetDevice(device_) != cudaSuccess) return "";
    const cudaError_t r = drop_finished_ops();
    if (r != cudaSuccess && r != cudaErrorNotReady) return std::string("CUDA error ") + cudaGetErrorString(r);
    if (ops_.empty()) return "";
    const auto waited = std::chrono::steady_clock::now() - ops_.front().queued;
    if (waited <= collective_timeout()) return "";
    return collective_timeout_message(ops_.front().what, std::chrono::duration_cast<std::chrono::nanoseconds>(waited));
  }

  // An asynchronous op's completion: an event recorded on the communication stream after
  // the op, which wait() makes the compute stream wait for. One event per op (creating one
  // allocates no device memory); destroying it while the op runs is allowed, CUDA frees it
  // when the op is done.
  class NcclWork final : public CommWork {
   public:
    NcclWork(cudaStream_t compute, cudaStream_t comm) : compute_(compute) {
      NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
      NCCL_CUDA_CHECK(cudaEventRecord(done_, comm));
    }
    ~NcclWork() override { cudaEventDestroy(done_); }
    NcclWork(const NcclWork&) = delete;
    NcclWork& operator=(const NcclWork&) = delete;
    // No cudaSetDevice: a stream wait on an event needs no current device (one per process).
    void wait() override { NCCL_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0)); }

   private:
    cudaStream_t compute_;
    cudaEvent_t done_ = nullptr;
  };

  void activate() {
    int cur = -1;
    NCCL_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != device_) NCCL_CUDA_CHECK(cudaSetDevice(device_));
  }
  // Both on the host (MpiComm's path) or both on the GPU (NCCL's); a mix is a bug.
  static bool on_host(const Tensor& a) { return a.device == Device::Cpu; }
  static bool on_host(const Tensor& a, const Tensor& b) {
    TRIDENT_CHECK(a.device == b.device, "NcclComm: one buffer on the host and one on the GPU");
    return a.device == Device::Cpu;
  }

  std::unique_ptr<Comm> host_;  // the group's host communicator (MpiComm or LocalComm)
  int device_;
  cudaStream_t compute_;
  WaitNames names_;  // what a timeout calls each op (after host_: made from its world ranks)
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr, comm_done_ = nullptr;
  ncclComm_t comm_ = nullptr;
  int watchdog_id_ = -1;  // its check in job_watchdog() (collective_timeout.h)
  struct QueuedOp {
    cudaEvent_t done;  // recorded after the op on stream_
    std::chrono::steady_clock::time_point queued;
    const char* what;
  };
  std::mutex ops_mu_;  // the watchdog's thread reads ops_ too
  std::deque<QueuedOp> ops_;  // queued, not yet seen finished, oldest first
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Comm> make_nccl_comm(std::unique_ptr<Comm> group, int device, void* compute_stream) {
  if (!group) return nullptr;
  TRIDENT_CHECK(device >= 0, "make_nccl_comm: no CUDA device (the backend is not CUDA)");
  return std::make_unique<NcclComm>(std::move(group), device, static_cast<cudaStream_t>(compute_stream));
}

std::unique_ptr<Comm> make_nccl_comm(const std::vector<int>& world_ranks, int device, void* compute_stream) {
  return make_nccl_comm(make_mpi_comm(world_ranks), device, compute_stream);  // collective over the world
}

#endif

}  // namespace trident
