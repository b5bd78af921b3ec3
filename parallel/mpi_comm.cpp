#include "parallel/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/collective_timeout.h"
#include "parallel/wait_names.h"

#ifdef TRIDENT_MPI_CUDA_STAGING
#include <cuda_runtime_api.h>
#endif

namespace trident {
namespace {

#define MPI_CHECK(call)                                                                       \
  do {                                                                                        \
    int rc_ = (call);                                                                         \
    if (rc_ != MPI_SUCCESS) {                                                                 \
      char msg_[MPI_MAX_ERROR_STRING];                                                        \
      int len_ = 0;                                                                           \
      MPI_Error_string(rc_, msg_, &len_);                                                     \
      std::fprintf(stderr, "trident: MPI error in %s (%s:%d): %s\n", #call, __FILE__, __LINE__, msg_); \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                           \
    }                                                                                         \
  } while (0)

int64_t g_max_count = INT32_MAX;  // set_mpi_max_count
// A piece's bytes stay at most 1 GiB whatever its element size: some MPI implementations
// compute a message's bytes in an int internally.
constexpr int64_t kMaxPieceBytes = int64_t{1} << 30;

// Calls f(offset, count) for consecutive pieces of at most g_max_count (and 1 GiB) of n
// items of item_bytes each (none when n is 0).
template <typename F>
void for_each_piece(int64_t n, size_t item_bytes, F&& f) {
  const int64_t step = std::min(g_max_count, std::max<int64_t>(1, kMaxPieceBytes / static_cast<int64_t>(item_bytes)));
  for (int64_t at = 0; at < n; at += step) f(at, static_cast<int>(std::min(step, n - at)));
}

// The int count of an op MPI cannot take in pieces: a one-line error past the limit.
int whole_count(int64_t n, const char* op) {
  TRIDENT_CHECK(n <= g_max_count, "MpiComm: ", op, " of ", n, " items exceeds MPI's int count (", g_max_count,
                "): use NCCL, or smaller tensors (fewer layers a stage, a larger tensor-parallel size)");
  return static_cast<int>(n);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT;
    default: return MPI_UINT16_T;  // 16-bit floats travel as raw bits
  }
}

// Pinned host memory for staging device buffers, grow-only, freed by the hooks that made it.
class HostStage {
 public:
  HostStage() = default;
  HostStage(const HostStage&) = delete;
  HostStage& operator=(const HostStage&) = delete;
  ~HostStage() {
    if (p_ && free_) free_(p_);
  }
  void* get(size_t bytes, const DeviceCopyHooks& h) {
    if (bytes <= cap_) return p_;
    if (p_ && free_) free_(p_);
    p_ = h.alloc_host(bytes);
    TRIDENT_CHECK(p_ != nullptr, "MpiComm: could not allocate ", bytes, " bytes of pinned host memory");
    cap_ = bytes;
    free_ = h.free_host;
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
  void (*free_)(void*) = nullptr;
};

// The world rank of each rank of `comm`.
std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(static_cast<size_t>(size)), global(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) local[i] = i;
  MPI_Group_translate_ranks(group, size, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return global;
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    world_ranks_ = world_ranks_of(comm_, size_);
    names_ = WaitNames("MPI", world_ranks_);
  }
  ~MpiComm() override {
    if (comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Comm_free(&comm_);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<int> world_ranks() const override { return world_ranks_; }

  // Each op: host buffers take the host path directly; device buffers are staged through
  // pinned host memory around the same host path.
  void allreduce(const Tensor& t, ReduceOp op) override {
    const CollectiveWait wait(names_.op("allreduce"));
    if (!on_device(t)) return allreduce_host(t, op);
    if (size_ == 1) return;
    const Tensor h = stage(a_, t, true);
    allreduce_host(h, op);
    unstage(t, h);
  }
  void allgather(const Tensor& in, const Tensor& out) override {
    const CollectiveWait wait(names_.op("allgather"));
    if (!on_device(in, out)) return allgather_host(in, out);
    TRIDENT_CHECK(out.nbytes() == in.nbytes() * size_, "allgather sizes");
    const bool in_place = in.data == static_cast<char*>(out.data) + rank_ * in.nbytes();
    // In place: the whole of `out` goes to the host, `in` being this rank's block of it.
    const Tensor ho = stage(b_, out, in_place);
    const Tensor hi = in_place ? Tensor(static_cast<char*>(ho.data) + rank_ * in.nbytes(), in.shape, in.dtype,
                                        Device::Cpu)
                               : stage(a_, in, true);
    allgather_host(hi, ho);
    unstage(out, ho);
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    const CollectiveWait wait(names_.op("reduce-scatter"));
    if (!on_device(in, out)) return reduce_scatter_host(in, out);
    const Tensor hi = stage(a_, in, true), ho = stage(b_, out, false);
    reduce_scatter_host(hi, ho);
    unstage(out, ho);
  }
  void broadcast(const Tensor& t, int root) override {
    const CollectiveWait wait(names_.op("broadcast"));
    if (!on_device(t)) return broadcast_host(t, root);
    const Tensor h = stage(a_, t, rank_ == root);
    broadcast_host(h, root);
    if (rank_ != root) unstage(t, h);
  }
  void exchange(const std::vector<P2pTransfer>& transfers) override {
    const CollectiveWait wait(names_.exchange(transfers));
    const size_t n = transfers.size();
    while (p2p_stages_.size() < n) p2p_stages_.emplace_back();
    std::vector<Tensor> host(n);
    std::vector<MPI_Request> requests;  // a transfer's pieces each
    std::vector<int> receive_bytes;     // per request: the bytes a receive expects, -1 for a send
    for (size_t i = 0; i < n; ++i) {
      const P2pTransfer& x = transfers[i];
      host[i] = on_device(x.tensor) ? stage(p2p_stages_[i], x.tensor, x.send) : x.tensor;
      // A transfer past MPI's int count goes in pieces under the same tag: MPI delivers the
      // messages of one sender, tag and communicator in order, and both sides cut alike.
      char* base = static_cast<char*>(host[i].data);
      for_each_piece(static_cast<int64_t>(host[i].nbytes()), 1, [&](int64_t at, int count) {
        MPI_Request& r = requests.emplace_back();
        receive_bytes.push_back(x.send ? -1 : count);
        if (x.send)
          MPI_CHECK(MPI_Isend(base + at, count, MPI_BYTE, x.peer, x.tag, comm_, &r));
        else
          MPI_CHECK(MPI_Irecv(base + at, count, MPI_BYTE, x.peer, x.tag, comm_, &r));
      });
    }
    std::vector<MPI_Status> statuses(requests.size());
    MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), statuses.data()));
    // MPI accepts a shorter message into a receive (a longer one is an error): a sender and a
    // receiver that disagree on a size would otherwise go unnoticed, and with pieces the
    // next exchange's messages would fill the rest.
    for (size_t k = 0; k < statuses.size(); ++k) {
      if (receive_bytes[k] < 0) continue;
      int got = 0;
      MPI_CHECK(MPI_Get_count(&statuses[k], MPI_BYTE, &got));
      TRIDENT_CHECK(got == receive_bytes[k], "MpiComm: a point-to-point receive from rank ", statuses[k].MPI_SOURCE,
                    " got ", got, " bytes where ", receive_bytes[k], " were expected (the stages disagree on a shape)");
    }
    for (size_t i = 0; i < n; ++i)
      if (!transfers[i].send && on_device(transfers[i].tensor)) unstage(transfers[i].tensor, host[i]);
  }
  void barrier() override {
    const CollectiveWait wait(names_.op("barrier"));
    MPI_CHECK(MPI_Barrier(comm_));
  }

 private:
  // ---- the host path -------------------------------------------------------------------
  void allreduce_host(const Tensor& t, ReduceOp op) {
    if (size_ == 1) return;
    const MPI_Op mop = op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
    // 16-bit: reduced in fp32 (staging_), rounded once.
    const bool widened = t.dtype != DType::F32 && t.dtype != DType::I32;
    if (widened) to_f32(t);
    char* data = widened ? reinterpret_cast<char*>(staging_.data()) : static_cast<char*>(t.data);
    const MPI_Datatype type = widened ? MPI_FLOAT : mpi_type(t.dtype);
    const size_t size = widened ? sizeof(float) : dtype_size(t.dtype);
    // In pieces past MPI's int count (element-wise: the pieces reduce independently).
    for_each_piece(t.numel(), size, [&](int64_t at, int count) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + at * size, count, type, mop, comm_));
    });
    if (widened) from_f32(t);
  }
  void allgather_host(const Tensor& in, const Tensor& out) {
    TRIDENT_CHECK(out.nbytes() == in.nbytes() * size_, "allgather sizes");
    // `in` may already sit at this rank's place in `out` (ZeRO's parameter gather).
    const bool in_place = in.data == static_cast<char*>(out.data) + rank_ * in.nbytes();
    const int bytes = whole_count(static_cast<int64_t>(in.nbytes()), "all-gather (bytes a rank)");
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in.data, bytes, MPI_BYTE, out.data, bytes, MPI_BYTE, comm_));
  }
  void reduce_scatter_host(const Tensor& in, const Tensor& out) {
    TRIDENT_CHECK(in.numel() == out.numel() * size_ && in.dtype == out.dtype, "reduce_scatter sizes");
    if (in.dtype == DType::F32) {
      MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, whole_count(out.numel(), "reduce-scatter"), MPI_FLOAT,
                                         MPI_SUM, comm_));
      return;
    }
    // 16-bit (sequence parallelism's activations): reduce in fp32, round once, as allreduce.
    TRIDENT_CHECK(in.dtype == DType::F16 || in.dtype == DType::BF16, "reduce_scatter of ", dtype_name(in.dtype));
    to_f32(in);
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, staging_.data(), whole_count(out.numel(), "reduce-scatter"),
                                       MPI_FLOAT, MPI_SUM, comm_));
    from_f32(out);  // this rank's block sits at the start of the staging buffer
  }
  void broadcast_host(const Tensor& t, int root) {
    for_each_piece(static_cast<int64_t>(t.nbytes()), 1, [&](int64_t at, int count) {
      MPI_CHECK(MPI_Bcast(static_cast<char*>(t.data) + at, count, MPI_BYTE, root, comm_));
    });
  }
  // ---- staging of device buffers --------------------------------------------------------
  static bool on_device(const Tensor& t) { return t.device != Device::Cpu; }
  static bool on_device(const Tensor& a, const Tensor& b) {
    TRIDENT_CHECK(a.device == b.device, "MpiComm: one buffer on the host and one on the device");
    return on_device(a);
  }
  // A host view of device tensor `t` in `buf`, holding t's bytes when `copy`.
  Tensor stage(HostStage& buf, const Tensor& t, bool copy) {
    const DeviceCopyHooks h = mpi_device_copy_hooks();
    TRIDENT_CHECK(h.to_host && h.to_device && h.alloc_host && h.free_host,
                  "MpiComm: a device buffer, but this build has no CUDA to stage it through the host");
    void* p = buf.get(t.nbytes() == 0 ? 1 : t.nbytes(), h);
    if (copy && t.nbytes() > 0) h.to_host(p, t.data, t.nbytes());
    return Tensor(p, t.shape, t.dtype, Device::Cpu);
  }
  static void unstage(const Tensor& t, const Tensor& h) {
    if (t.nbytes() > 0) mpi_device_copy_hooks().to_device(t.data, h.data, t.nbytes());
  }

  void to_f32(const Tensor& t) {
    staging_.resize(static_cast<size_t>(t.numel()));
    to_floats(t.data, t.dtype, staging_.data(), t.numel());
  }
  void from_f32(const Tensor& t) {
    if (t.dtype == DType::F16) return floats_to_halves(staging_.data(), static_cast<uint16_t*>(t.data), t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) store_from_float(t.data, t.dtype, i, staging_[i]);
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;  // of this comm's ranks
  WaitNames names_{"MPI", {}};    // set once world_ranks_ is known
  std::vector<float> staging_;  // grow-only
  HostStage a_, b_;             // pinned copies of device buffers (first and second operand)
  std::deque<HostStage> p2p_stages_;  // one per transfer of an exchange
};

#ifdef TRIDENT_MPI_CUDA_STAGING
#define STAGE_CUDA_CHECK(call)                                                                      \
  do {                                                                                              \
    const cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "trident: CUDA error %s in %s (%s:%d)\n", cudaGetErrorString(e_), #call, \
                   __FILE__, __LINE__);                                                             \
      mpi_abort_job(3);                                                                             \
    }                                                                                               \
  } while (0)

// The backend's compute stream is a non-blocking stream that MpiComm does not know: wait
// for the whole device before reading a buffer or overwriting one a kernel may still read.
void cuda_to_host(void* host, const void* device, size_t bytes) {
  STAGE_CUDA_CHECK(cudaDeviceSynchronize());
  STAGE_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}
void cuda_to_device(void* device, const void* host, size_t bytes) {
  STAGE_CUDA_CHECK(cudaDeviceSynchronize());
  STAGE_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  STAGE_CUDA_CHECK(cudaDeviceSynchronize());
}
void* cuda_alloc_host(size_t bytes) {
  void* p = nullptr;
  STAGE_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}
void cuda_free_host(void* p) { cudaFreeHost(p); }  // at exit the context may be gone: ignore errors

DeviceCopyHooks default_hooks() { return {cuda_to_host, cuda_to_device, cuda_alloc_host, cuda_free_host}; }
#else
DeviceCopyHooks default_hooks() { return {}; }
#endif

DeviceCopyHooks& hooks() {
  static DeviceCopyHooks h = default_hooks();
  return h;
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

void mpi_init(int* argc, char*** argv) {
  if (mpi_initialized()) return;
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  std::atexit(finalize_at_exit);
}

bool mpi_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

int mpi_world_rank() {
  int r = 0;
  if (mpi_initialized()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_world_size() {
  int s = 1;
  if (mpi_initialized()) MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void mpi_abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

void mpi_abort_job_from_watchdog(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialized()) {
    // MPI is initialised MPI_THREAD_FUNNELED, so MPI_Abort from this thread is outside the
    // standard (Open MPI and MPICH accept it), and it could block on a lock that the stuck
    // main thread holds. Should it neither end the process nor return, a timer does: a rank
    // gone with a non-zero status makes mpirun end the job.
    try {
      std::thread([code] {
        std::this_thread::sleep_for(std::chrono::seconds(30));
        std::_Exit(code);
      }).detach();
    } catch (...) {  // no thread to be had: MPI_Abort alone
    }
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

void set_mpi_device_copy_hooks(const DeviceCopyHooks& h) { hooks() = h; }

void set_mpi_max_count(int64_t count) {
  TRIDENT_CHECK(count >= 1 && count <= INT32_MAX, "set_mpi_max_count: ", count, " is not in [1, INT32_MAX]");
  g_max_count = count;
}
DeviceCopyHooks mpi_device_copy_hooks() { return hooks(); }

std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks) {
  MPI_Group world_group, group;
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  MPI_CHECK(MPI_Group_incl(world_group, static_cast<int>(world_ranks.size()), world_ranks.data(), &group));
  MPI_Comm comm = MPI_COMM_NULL;
  // Collective over the world: ranks outside `world_ranks` get MPI_COMM_NULL.
  MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, group, &comm));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  if (comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiComm>(comm);
}

}  // namespace trident
