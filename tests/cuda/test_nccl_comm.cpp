// NcclComm on the GPU, and MpiComm staging real device buffers. Every test skips without
// a GPU. Run alone (a world of one: no MPI_Init, the NcclComm's host side is a LocalComm,
// so it runs where MPI's plugins are missing) and under mpirun -np 2 (tests/cuda/
// CMakeLists): NCCL refuses two ranks on one GPU, so with fewer GPUs than ranks the NCCL
// tests skip and only MpiComm's staging runs on the shared GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_backend.h"
#include "parallel/collective_timeout.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/parallel_context.h"

namespace trident {
namespace {

std::vector<int> everyone() {
  std::vector<int> all(mpi_world_size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// The world as an NcclComm: over MPI when it is initialised, else a group of one.
std::unique_ptr<Comm> nccl_world(const CudaStreamRef& ref) {
  if (!mpi_initialized()) return make_nccl_comm(make_local_comm(), ref.device, ref.stream);
  return make_nccl_comm(everyone(), ref.device, ref.stream);
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

class GpuComm : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = cuda_device_count();
    if (gpus == 0) GTEST_SKIP() << "no GPU visible";
    rank_ = mpi_world_rank();
    size_ = mpi_world_size();
    be_ = make_cuda_backend(rank_ % gpus);
    ref_ = cuda_stream_of(*be_);
    ASSERT_TRUE(ref_.valid());
  }
  bool nccl_possible() const { return size_ <= cuda_device_count(); }

  // Host floats -> device tensor of dtype t.
  Buffer upload(const std::vector<float>& v, DType t) {
    Buffer b = be_->empty(Shape{static_cast<int64_t>(v.size())}, t);
    std::vector<unsigned char> bytes(v.size() * dtype_size(t));
    for (size_t i = 0; i < v.size(); ++i) {
      if (t == DType::I32)
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(v[i]);
      else
        store_from_float(bytes.data(), t, i, v[i]);
    }
    be_->copy_from_host(b, bytes.data());
    return b;
  }
  std::vector<float> download(const Tensor& t) {
    std::vector<unsigned char> bytes(t.nbytes());
    be_->copy_to_host(bytes.data(), t);  // on the compute stream: after the comm's op
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = t.dtype == DType::I32 ? static_cast<float>(reinterpret_cast<int32_t*>(bytes.data())[i])
                                   : load_as_float(bytes.data(), t.dtype, i);
    return v;
  }

  // Every op of the Comm interface on device buffers, checked on the host.
  void exercise(Comm& c) {
    ASSERT_EQ(c.size(), size_);
    ASSERT_EQ(c.rank(), rank_);
    const float S = size_ * (size_ + 1) / 2.0f;
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
      std::vector<float> v(4099);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank_ + 1) * (i % 5));
      Buffer b = upload(v, t);
      c.allreduce(b, ReduceOp::Sum);
      std::vector<float> got = download(b);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], S * (i % 5)) << dtype_name(t) << " sum " << i;
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank_ * 3 + i % 4);
      Buffer m = upload(v, t);
      c.allreduce(m, ReduceOp::Max);
      got = download(m);
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_EQ(got[i], static_cast<float>((size_ - 1) * 3 + i % 4)) << dtype_name(t) << " max " << i;
    }
    // allgather, then in place.
    const int n = 1000;
    std::vector<float> in(n);
    for (int i = 0; i < n; ++i) in[i] = static_cast<float>(rank_ * 1000 + i);
    Buffer bin = upload(in, DType::F32), bout = be_->empty(Shape{n * size_}, DType::F32);
    c.allgather(bin, bout);
    std::vector<float> got = download(bout);
    for (int r = 0; r < size_; ++r)
      for (int i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], static_cast<float>(r * 1000 + i));
    std::vector<float> whole(n * size_, -1.f);
    for (int i = 0; i < n; ++i) whole[rank_ * n + i] = static_cast<float>(rank_ * 7 + i);
    Buffer bw = upload(whole, DType::F32);
    const Tensor mine(static_cast<float*>(bw.t().data) + rank_ * n, Shape{n}, DType::F32, Device::Cuda);
    c.allgather(mine, bw);
    got = download(bw);
    for (int r = 0; r < size_; ++r)
      for (int i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], static_cast<float>(r * 7 + i));
    // reduce_scatter (sum).
    std::vector<float> rs(n * size_);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i % 11 + rank_);
    Buffer brs = upload(rs, DType::F32), bro = be_->empty(Shape{n}, DType::F32);
    c.reduce_scatter(brs, bro);
    got = download(bro);
    for (int i = 0; i < n; ++i) {
      float expect = 0;
      for (int r = 0; r < size_; ++r) expect += static_cast<float>((rank_ * n + i) % 11 + r);
      ASSERT_EQ(got[i], expect) << i;
    }
    // broadcast from the last rank.
    Buffer bb = upload(std::vector<float>(333, static_cast<float>(rank_ + 1)), DType::BF16);
    c.broadcast(bb, size_ - 1);
    for (float x : download(bb)) ASSERT_EQ(x, static_cast<float>(size_));
    // A host buffer goes through MPI.
    float host = 1.0f;
    c.allreduce(Tensor(&host, Shape{1}, DType::F32, Device::Cpu), ReduceOp::Sum);
    EXPECT_EQ(host, static_cast<float>(size_));
    if (size_ > 1) {
      const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
      Buffer out = upload(std::vector<float>(777, static_cast<float>(rank_)), DType::F32);
      Buffer inb = be_->empty(Shape{777}, DType::F32);
      c.sendrecv(out, next, inb, prev);  // every rank sends first: must not deadlock
      for (float x : download(inb)) ASSERT_EQ(x, static_cast<float>(prev));
      if (rank_ == 0) c.send(out, 1);
      if (rank_ == 1) {
        c.recv(inb, 0);
        for (float x : download(inb)) ASSERT_EQ(x, 0.f);
      }
    }
    c.barrier();
  }

  int rank_ = 0, size_ = 1;
  std::unique_ptr<Backend> be_;
  CudaStreamRef ref_;
};

TEST_F(GpuComm, NcclEveryOp) {
  if (!nccl_possible()) GTEST_SKIP() << "NCCL needs one GPU per rank: " << size_ << " ranks, "
                                     << cuda_device_count() << " GPU(s)";
  auto c = nccl_world(ref_);
  ASSERT_TRUE(c);
  exercise(*c);
}

TEST_F(GpuComm, NcclOrdersAfterTheComputeStream) {
  if (!nccl_possible()) GTEST_SKIP() << "NCCL needs one GPU per rank";
  auto c = nccl_world(ref_);
  // Work queued on the compute stream (no sync in between) must land before the reduce,
  // and a compute-stream op right after must see the reduced values.
  const int64_t n = int64_t{1} << 24;
  Buffer b = be_->empty(Shape{n}, DType::F32);
  for (int rep = 0; rep < 3; ++rep) {
    be_->fill(b, 1.0f);
    be_->scale(b, static_cast<float>(rank_ + 2));
    c->allreduce(b, ReduceOp::Sum);
    be_->scale(b, 0.5f);
    const double expect = 0.5 * (size_ * (size_ + 1) / 2.0 + size_) * n;
    EXPECT_NEAR(be_->sum(b), expect, 1e-6 * expect);
  }
}

// Holds back the work queued after it on a stream.
void CUDART_CB sleep_50ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

TEST_F(GpuComm, NcclAsyncOpsOrderAtQueueAndAtWait) {
  if (!nccl_possible()) GTEST_SKIP() << "NCCL needs one GPU per rank";
  auto c = nccl_world(ref_);
  // Out-of-place ops, so that even a group of one copies. Each is queued behind a write that
  // the compute stream holds back for 50 ms (an op that did not wait for the compute stream
  // reads the old values), and moves 1 GiB, read back right after wait() on the compute
  // stream (a wait that did not hold the compute stream back reads the -1 still there).
  const int64_t chunk = (int64_t{1} << 28) / size_, n = chunk * size_;  // fp32: 1 GiB
  Buffer whole = be_->empty(Shape{n}, DType::F32), part = be_->empty(Shape{chunk}, DType::F32);
  auto last = [&](const Tensor& t) { return download(t.flat_slice(t.numel() - 1, 1))[0]; };
  auto fill_held_back = [&](const Tensor& b, float value) {
    ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(ref_.stream), sleep_50ms, nullptr), cudaSuccess);
    be_->fill(b, value);
  };
  const float S = size_ * (size_ + 1) / 2.0f;
  for (int rep = 0; rep < 2; ++rep) {
    be_->fill(whole, 0.0f);
    be_->fill(part, -1.0f);
    fill_held_back(whole, static_cast<float>(rank_ + 1));
    auto rs = c->reduce_scatter_async(whole, part);
    rs->wait();
    EXPECT_EQ(last(part), S) << "reduce_scatter_async";
    EXPECT_NEAR(be_->sum(part), static_cast<double>(S) * chunk, 1e-6 * S * chunk);

    be_->fill(part, 0.0f);
    be_->fill(whole, -1.0f);
    fill_held_back(part, static_cast<float>(rank_ + 1));
    auto ag = c->allgather_async(part, whole);
    ag->wait();
    EXPECT_EQ(last(whole), static_cast<float>(size_)) << "allgather_async";  // the last rank's block

    if (size_ > 1) {  // in place: a group of one leaves the buffer as it is
      be_->fill(whole, 0.0f);
      fill_held_back(whole, static_cast<float>(rank_ + 1));
      auto ar = c->allreduce_async(whole, ReduceOp::Sum);
      ar->wait();
      EXPECT_EQ(last(whole), S) << "allreduce_async";
      // ZeRO's gather: in place, this rank's block of the whole.
      be_->fill(whole, -1.0f);
      const Tensor mine = whole.t().flat_slice(rank_ * chunk, chunk);
      fill_held_back(mine, static_cast<float>(rank_ + 1));
      auto ip = c->allgather_async(mine, whole);
      ip->wait();
      EXPECT_EQ(last(whole), static_cast<float>(size_)) << "allgather_async in place";
      EXPECT_NEAR(be_->sum(whole), static_cast<double>(S) * chunk, 1e-6 * S * n);
    }
  }
}

void CUDART_CB sleep_10s(void*) { std::this_thread::sleep_for(std::chrono::seconds(10)); }

// --distributed-timeout-minutes on NCCL: an op that has not finished on the GPU long past
// the limit (here held back behind 10 s of compute-stream work) ends the process with the
// line naming it; without MPI that is _Exit(3).
TEST_F(GpuComm, NcclOpUnfinishedPastTheLimitEndsTheJob) {
  if (mpi_initialized()) GTEST_SKIP() << "a world of one: run without mpirun";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        set_collective_timeout(0.02);  // 1.2 s
        auto c = nccl_world(ref_);
        Buffer b = be_->empty(Shape{1024}, DType::F32);
        be_->fill(b, 1.0f);
        if (cudaLaunchHostFunc(static_cast<cudaStream_t>(ref_.stream), sleep_10s, nullptr) != cudaSuccess) std::exit(1);
        c->allreduce_async(b, ReduceOp::Sum)->wait();
        be_->synchronize();
        std::exit(0);
      },
      testing::ExitedWithCode(3), "in NCCL allreduce, longer than --distributed-timeout-minutes 0\\.02");
}

TEST_F(GpuComm, ParallelContextWithNccl) {
  if (!nccl_possible()) GTEST_SKIP() << "NCCL needs one GPU per rank";
  if (!mpi_initialized()) GTEST_SKIP() << "groups need MPI: run under mpirun";
  auto ctx = make_parallel_context(size_, 1, CommKind::Nccl, be_.get());
  ASSERT_TRUE(ctx->tp && ctx->world && ctx->dp && ctx->pp);
  exercise(*ctx->tp);
  EXPECT_EQ(resolve_comm_kind("", *be_), CommKind::Nccl);
  EXPECT_EQ(resolve_comm_kind("mpi", *be_), CommKind::Mpi);
}

TEST_F(GpuComm, MpiStagesDeviceBuffers) {
  // Several ranks may share the GPU here.
  if (!mpi_initialized()) GTEST_SKIP() << "needs MPI: run under mpirun";
  auto c = make_mpi_comm(everyone());
  ASSERT_TRUE(c);
  const float S = size_ * (size_ + 1) / 2.0f;
  for (DType t : {DType::F32, DType::BF16}) {
    std::vector<float> v(5000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank_ + 1) * (i % 3));
    Buffer b = upload(v, t);
    c->allreduce(b, ReduceOp::Sum);
    const std::vector<float> got = download(b);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], S * (i % 3)) << dtype_name(t);
  }
  const int n = 100;
  std::vector<float> in(n, static_cast<float>(rank_));
  Buffer bin = upload(in, DType::F32), bout = be_->empty(Shape{n * size_}, DType::F32);
  c->allgather(bin, bout);
  const std::vector<float> got = download(bout);
  for (int r = 0; r < size_; ++r) ASSERT_EQ(got[r * n], static_cast<float>(r));
  if (size_ > 1) {
    const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    Buffer out = upload(std::vector<float>(64, static_cast<float>(rank_)), DType::F32);
    Buffer inb = be_->empty(Shape{64}, DType::F32);
    c->sendrecv(out, next, inb, prev);
    for (float x : download(inb)) ASSERT_EQ(x, static_cast<float>(prev));
  }
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (trident::launched_by_mpi()) trident::mpi_init(&argc, &argv);
  if (trident::mpi_world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
