#include "parallel/mpi_comm.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"

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

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT;
    default: return MPI_UINT16_T;  // 16-bit floats travel as raw bits
  }
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
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

  void allreduce(const Tensor& t, ReduceOp op) override {
    host_only(t);
    if (size_ == 1) return;
    const MPI_Op mop = op == ReduceOp::Sum ? MPI_SUM : MPI_MAX;
    if (t.dtype == DType::F32 || t.dtype == DType::I32) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, static_cast<int>(t.numel()), mpi_type(t.dtype), mop, comm_));
      return;
    }
    // 16-bit: reduce in fp32, round once.
    to_f32(t);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, staging_.data(), static_cast<int>(t.numel()), MPI_FLOAT, mop, comm_));
    from_f32(t);
  }
  void allgather(const Tensor& in, const Tensor& out) override {
    host_only(in);
    host_only(out);
    TRIDENT_CHECK(out.nbytes() == in.nbytes() * size_, "allgather sizes");
    // `in` may already sit at this rank's place in `out` (ZeRO's parameter gather).
    const bool in_place = in.data == static_cast<char*>(out.data) + rank_ * in.nbytes();
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in.data, static_cast<int>(in.nbytes()), MPI_BYTE, out.data,
                            static_cast<int>(in.nbytes()), MPI_BYTE, comm_));
  }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    host_only(in);
    host_only(out);
    TRIDENT_CHECK(in.numel() == out.numel() * size_ && in.dtype == out.dtype, "reduce_scatter sizes");
    TRIDENT_CHECK(in.dtype == DType::F32, "reduce_scatter supports fp32 buffers");
    MPI_CHECK(MPI_Reduce_scatter_block(in.data, out.data, static_cast<int>(out.numel()), MPI_FLOAT, MPI_SUM, comm_));
  }
  void broadcast(const Tensor& t, int root) override {
    host_only(t);
    MPI_CHECK(MPI_Bcast(t.data, static_cast<int>(t.nbytes()), MPI_BYTE, root, comm_));
  }
  void send(const Tensor& t, int peer) override {
    host_only(t);
    MPI_CHECK(MPI_Send(t.data, static_cast<int>(t.nbytes()), MPI_BYTE, peer, 0, comm_));
  }
  void recv(const Tensor& t, int peer) override {
    host_only(t);
    MPI_CHECK(MPI_Recv(t.data, static_cast<int>(t.nbytes()), MPI_BYTE, peer, 0, comm_, MPI_STATUS_IGNORE));
  }
  void sendrecv(const Tensor& out, int send_peer, const Tensor& in, int recv_peer) override {
    host_only(out);
    host_only(in);
    MPI_CHECK(MPI_Sendrecv(out.data, static_cast<int>(out.nbytes()), MPI_BYTE, send_peer, 0, in.data,
                           static_cast<int>(in.nbytes()), MPI_BYTE, recv_peer, 0, comm_, MPI_STATUS_IGNORE));
  }
  void barrier() override { MPI_CHECK(MPI_Barrier(comm_)); }

 private:
  static void host_only(const Tensor& t) {
    TRIDENT_CHECK(t.device == Device::Cpu, "MpiComm works on host buffers");
  }
  void to_f32(const Tensor& t) {
    staging_.resize(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) staging_[i] = load_as_float(t.data, t.dtype, i);
  }
  void from_f32(const Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) store_from_float(t.data, t.dtype, i, staging_[i]);
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<float> staging_;  // grow-only
};

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
