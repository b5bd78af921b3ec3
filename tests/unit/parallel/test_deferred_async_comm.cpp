// The checking wrapper of asynchronous ops (parallel/deferred_async_comm.h) over a group
// of one: between queuing and wait() every buffer of the op reads as NaN and writes are
// lost; wait() delivers the op on the input as it was when queued. Synchronous ops pass
// through untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "parallel/deferred_async_comm.h"

namespace trident {
namespace {

Tensor host_f32(std::vector<float>& v) {
  return Tensor(v.data(), Shape{static_cast<int64_t>(v.size())}, DType::F32, Device::Cpu);
}

TEST(DeferredAsyncComm, AllreduceBufferIsNanUntilWait) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<float> g = {1.5f, -2.0f, 3.25f};
  auto work = comm->allreduce_async(host_f32(g), ReduceOp::Sum);
  for (float x : g) EXPECT_TRUE(std::isnan(x));  // a read before the wait
  work->wait();
  EXPECT_EQ(g, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  work->wait();  // a second wait does nothing
  EXPECT_EQ(g, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(DeferredAsyncComm, AWriteBeforeTheWaitThrowsAtTheWait) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<float> g = {1.5f, -2.0f, 3.25f};
  auto work = comm->allreduce_async(host_f32(g), ReduceOp::Sum);
  g[1] = 100.0f;
  EXPECT_THROW(work->wait(), InternalError);
}

TEST(DeferredAsyncComm, ABufferOfAnOpNotWaitedForCannotBeQueuedAgain) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<float> staging = {1, 2, 3, 4}, a = {0, 0, 0, 0}, b = {0, 0};
  auto first = comm->reduce_scatter_async(host_f32(staging), host_f32(a));
  // The next bucket reuses the staging before the first reduction is done (a race on a GPU).
  EXPECT_THROW(comm->allreduce_async(Tensor(staging.data() + 2, Shape{2}, DType::F32, Device::Cpu), ReduceOp::Sum),
               InternalError);
  EXPECT_THROW(comm->allreduce_async(host_f32(a), ReduceOp::Sum), InternalError);  // the output too
  first->wait();
  auto second = comm->reduce_scatter_async(Tensor(staging.data(), Shape{2}, DType::F32, Device::Cpu), host_f32(b));
  second->wait();
  EXPECT_EQ(b, (std::vector<float>{1, 2}));
  // A work dropped without waiting frees its buffers as well.
  { auto dropped = comm->allreduce_async(host_f32(a), ReduceOp::Sum); }
  comm->allreduce_async(host_f32(a), ReduceOp::Sum)->wait();
}

TEST(DeferredAsyncComm, ReduceScatterPoisonsInputAndOutputUntilWait) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<float> in = {4.0f, 5.0f}, out = {0.0f, 0.0f};
  auto work = comm->reduce_scatter_async(host_f32(in), host_f32(out));
  for (float x : in) EXPECT_TRUE(std::isnan(x));
  for (float x : out) EXPECT_TRUE(std::isnan(x));
  work->wait();
  EXPECT_EQ(out, (std::vector<float>{4.0f, 5.0f}));
  EXPECT_EQ(in, (std::vector<float>{4.0f, 5.0f}));
}

TEST(DeferredAsyncComm, AllgatherInPlacePoisonsTheWholeOutputUntilWait) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<float> params = {1.0f, 2.0f, 3.0f};
  auto work = comm->allgather_async(host_f32(params), host_f32(params));  // a group of one: in is all of out
  for (float x : params) EXPECT_TRUE(std::isnan(x));
  work->wait();
  EXPECT_EQ(params, (std::vector<float>{1.0f, 2.0f, 3.0f}));
}

TEST(DeferredAsyncComm, SixteenBitBuffersReadAsNan) {
  auto comm = make_deferred_async_comm(make_local_comm());
  std::vector<uint16_t> h = {0x3c00, 0x4000};  // fp16 1.0, 2.0
  auto work = comm->allreduce_async(Tensor(h.data(), Shape{2}, DType::F16, Device::Cpu), ReduceOp::Sum);
  for (size_t i = 0; i < h.size(); ++i) EXPECT_TRUE(std::isnan(load_as_float(h.data(), DType::F16, i)));
  for (size_t i = 0; i < h.size(); ++i) EXPECT_TRUE(std::isnan(load_as_float(h.data(), DType::BF16, i)));
  work->wait();
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3c00, 0x4000}));
}

TEST(DeferredAsyncComm, SynchronousOpsPassThrough) {
  auto comm = make_deferred_async_comm(make_local_comm());
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> in = {7.0f}, out = {0.0f};
  comm->reduce_scatter(host_f32(in), host_f32(out));
  EXPECT_EQ(out[0], 7.0f);
  std::vector<float> g = {2.0f};
  comm->allreduce(host_f32(g), ReduceOp::Sum);
  EXPECT_EQ(g[0], 2.0f);
}

TEST(DeferredAsyncComm, TheEnvironmentSwitchIsExactlyOne) {
  unsetenv("TRIDENT_CHECK_ASYNC_COMM");
  EXPECT_FALSE(check_async_comm_requested());
  setenv("TRIDENT_CHECK_ASYNC_COMM", "0", 1);
  EXPECT_FALSE(check_async_comm_requested());
  setenv("TRIDENT_CHECK_ASYNC_COMM", "1", 1);
  EXPECT_TRUE(check_async_comm_requested());
  unsetenv("TRIDENT_CHECK_ASYNC_COMM");
}

}  // namespace
}  // namespace trident
