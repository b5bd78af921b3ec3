// MpiComm's staging of device buffers, without a GPU: the device copy hooks are replaced
// by fakes on host memory that count their calls, and tensors are marked Device::Cuda.
// Checks every op's result and that device buffers went through the hooks while host
// buffers did not. Runs as a world of one and under mpirun -np 2 (tests/cuda/CMakeLists).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "parallel/mpi_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/parallel_context.h"

namespace trident {
namespace {

struct Counts {
  int to_host = 0, to_device = 0, allocs = 0, frees = 0;
};
Counts counts;

void fake_to_host(void* h, const void* d, size_t n) {
  ++counts.to_host;
  std::memcpy(h, d, n);
}
void fake_to_device(void* d, const void* h, size_t n) {
  ++counts.to_device;
  std::memcpy(d, h, n);
}
void* fake_alloc(size_t n) {
  ++counts.allocs;
  return std::malloc(n);
}
void fake_free(void* p) {
  ++counts.frees;
  std::free(p);
}

class MpiStaging : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = mpi_device_copy_hooks();
    set_mpi_device_copy_hooks({fake_to_host, fake_to_device, fake_alloc, fake_free});
    counts = {};
    std::vector<int> all(mpi_world_size());
    std::iota(all.begin(), all.end(), 0);
    comm_ = make_mpi_comm(all);
    ASSERT_TRUE(comm_);
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  void TearDown() override {
    comm_.reset();
    set_mpi_device_copy_hooks(saved_);
  }
  // "Device" memory: host memory that the tensor claims is on the GPU.
  Tensor dev(std::vector<float>& v) { return Tensor(v.data(), Shape{(int64_t)v.size()}, DType::F32, Device::Cuda); }

  DeviceCopyHooks saved_;
  std::unique_ptr<Comm> comm_;
  int rank_ = 0, size_ = 1;
};

TEST_F(MpiStaging, AllreduceSumAndMaxThroughTheHost) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank_ + 1) * (i % 13));
  comm_->allreduce(dev(v), ReduceOp::Sum);
  const float ranks_sum = size_ * (size_ + 1) / 2.0f;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], ranks_sum * (i % 13)) << i;
  if (size_ > 1) {
    EXPECT_EQ(counts.to_host, 1);
    EXPECT_EQ(counts.to_device, 1);
  }
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank_ * 10 + i % 3);
  comm_->allreduce(dev(v), ReduceOp::Max);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<float>((size_ - 1) * 10 + i % 3));
}

TEST_F(MpiStaging, Bf16AllreduceRoundsOnce) {
  std::vector<uint16_t> bits(64);
  for (size_t i = 0; i < bits.size(); ++i) store_from_float(bits.data(), DType::BF16, i, 0.5f * (i + 1));
  comm_->allreduce(Tensor(bits.data(), Shape{64}, DType::BF16, Device::Cuda), ReduceOp::Sum);
  for (size_t i = 0; i < bits.size(); ++i)
    EXPECT_EQ(load_as_float(bits.data(), DType::BF16, i), 0.5f * (i + 1) * size_) << i;
}

TEST_F(MpiStaging, HostBuffersSkipTheHooks) {
  std::vector<float> v(16, 1.0f);
  comm_->allreduce(Tensor(v.data(), Shape{16}, DType::F32, Device::Cpu), ReduceOp::Sum);
  for (float x : v) EXPECT_EQ(x, static_cast<float>(size_));
  EXPECT_EQ(counts.to_host + counts.to_device + counts.allocs, 0);
}

TEST_F(MpiStaging, AllgatherCopyAndInPlace) {
  const int n = 5;
  std::vector<float> in(n), out(n * size_, -1.f);
  for (int i = 0; i < n; ++i) in[i] = rank_ * 100.f + i;
  comm_->allgather(dev(in), dev(out));
  for (int r = 0; r < size_; ++r)
    for (int i = 0; i < n; ++i) ASSERT_EQ(out[r * n + i], r * 100.f + i);
  // In place: this rank's block of `out` is the input.
  std::vector<float> buf(n * size_, -1.f);
  for (int i = 0; i < n; ++i) buf[rank_ * n + i] = rank_ * 7.f + i;
  const Tensor whole = dev(buf);
  const Tensor mine(buf.data() + rank_ * n, Shape{n}, DType::F32, Device::Cuda);
  comm_->allgather(mine, whole);
  for (int r = 0; r < size_; ++r)
    for (int i = 0; i < n; ++i) ASSERT_EQ(buf[r * n + i], r * 7.f + i);
}

TEST_F(MpiStaging, ReduceScatterAndBroadcast) {
  const int n = 3;
  std::vector<float> in(n * size_), out(n, 0.f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i + rank_);
  comm_->reduce_scatter(dev(in), dev(out));
  for (int i = 0; i < n; ++i) {
    float expect = 0;
    for (int r = 0; r < size_; ++r) expect += static_cast<float>(rank_ * n + i + r);
    ASSERT_EQ(out[i], expect);
  }
  std::vector<float> b(7, static_cast<float>(rank_));
  comm_->broadcast(dev(b), size_ - 1);
  for (float x : b) ASSERT_EQ(x, static_cast<float>(size_ - 1));
}

TEST_F(MpiStaging, SendRecvAndSendrecvRing) {
  if (size_ < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
  std::vector<float> out(9, static_cast<float>(rank_)), in(9, -1.f);
  comm_->sendrecv(dev(out), next, dev(in), prev);
  for (float x : in) ASSERT_EQ(x, static_cast<float>(prev));
  std::vector<float> msg(4, 42.f + rank_), got(4, 0.f);
  if (rank_ == 0) {
    comm_->send(dev(msg), 1);
  } else if (rank_ == 1) {
    comm_->recv(dev(got), 0);
    for (float x : got) ASSERT_EQ(x, 42.f);
  }
}

// Buffers past MPI's int count (lowered here to 7 items): the all-reduce (fp32, and bf16
// through its fp32 staging), the broadcast and the point-to-point transfers go in pieces
// and arrive whole; the all-gather and the reduce-scatter, which MPI cannot take in pieces,
// refuse with one line that names the op (on every rank: the sizes are the same).
TEST_F(MpiStaging, BuffersPastTheIntCountGoInPieces) {
  set_mpi_max_count(7);
  struct Restore {
    ~Restore() { set_mpi_max_count(INT32_MAX); }
  } restore;
  const float ranks_sum = size_ * (size_ + 1) / 2.0f;
  std::vector<float> v(100);  // 15 pieces of at most 7 floats
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank_ + 1) * i);
  comm_->allreduce(dev(v), ReduceOp::Sum);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], ranks_sum * static_cast<float>(i)) << i;
  std::vector<uint16_t> bits(50);
  for (size_t i = 0; i < bits.size(); ++i) store_from_float(bits.data(), DType::BF16, i, 0.5f * (i + 1));
  comm_->allreduce(Tensor(bits.data(), Shape{50}, DType::BF16, Device::Cuda), ReduceOp::Sum);
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(load_as_float(bits.data(), DType::BF16, i), 0.5f * (i + 1) * size_) << i;
  std::vector<float> b(33);  // 132 bytes: 19 pieces
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rank_ * 1000 + i);
  comm_->broadcast(dev(b), size_ - 1);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], static_cast<float>((size_ - 1) * 1000 + i)) << i;
  if (size_ >= 2) {
    const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    std::vector<float> out(25), in(25, -1.f);  // 100 bytes: 15 pieces each way
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(rank_ * 100 + i);
    comm_->sendrecv(dev(out), next, dev(in), prev);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], static_cast<float>(prev * 100 + i)) << i;
  }
  std::vector<float> in(5), gathered(5 * size_), scattered(5);
  try {
    comm_->allgather(dev(in), dev(gathered));
    ADD_FAILURE() << "an all-gather past the int count did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("all-gather"), std::string::npos) << e.what();
  }
  std::vector<float> whole(8 * size_);
  EXPECT_ANY_THROW(comm_->reduce_scatter(dev(whole), dev(scattered = std::vector<float>(8))));
}

// A receive that gets fewer bytes than it expects (the stages disagree on a shape) is an
// error naming the sender; MPI itself accepts a shorter message. Host buffers.
TEST_F(MpiStaging, ShortReceiveIsAnError) {
  if (size_ < 2) GTEST_SKIP() << "needs two ranks (mpirun -np 2)";
  std::vector<float> sent(5, 1.f), expected(8, 0.f);
  if (rank_ == 0) {
    comm_->send(Tensor(sent.data(), Shape{5}, DType::F32, Device::Cpu), 1);
  } else if (rank_ == 1) {
    try {
      comm_->recv(Tensor(expected.data(), Shape{8}, DType::F32, Device::Cpu), 0);
      ADD_FAILURE() << "a receive of 20 bytes where 32 were expected did not throw";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("got 20 bytes where 32 were expected"), std::string::npos) << e.what();
    }
  }
  comm_->barrier();
}

TEST_F(MpiStaging, StagingBuffersAreReusedAndFreed) {
  std::vector<float> v(256, 1.f);
  for (int i = 0; i < 5; ++i) comm_->broadcast(dev(v), 0);
  EXPECT_LE(counts.allocs, 1);  // grow-only: one allocation for five calls of one size
  const int allocs = counts.allocs;
  comm_.reset();
  EXPECT_EQ(counts.frees, allocs);
}

// --comm's resolution with the CPU backend: MPI by default, NCCL refused naming --comm.
TEST(CommKind, CpuBackendDefaultsToMpiAndRefusesNccl) {
  auto cpu = make_cpu_backend();
  EXPECT_EQ(resolve_comm_kind("", *cpu), CommKind::Mpi);
  EXPECT_EQ(resolve_comm_kind("mpi", *cpu), CommKind::Mpi);
  try {
    resolve_comm_kind("nccl", *cpu);
    ADD_FAILURE() << "--comm nccl accepted with the CPU backend";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--comm nccl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_comm_kind("gloo", *cpu), ConfigError);
}

}  // namespace
}  // namespace trident

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  trident::mpi_init(&argc, &argv);
  // Only rank 0 prints gtest's report (every rank runs every test).
  if (trident::mpi_world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
