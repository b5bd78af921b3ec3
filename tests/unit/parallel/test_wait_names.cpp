// What a timeout's line calls a wait: the op and the world ranks it waits for; and names
// that outlive the communicator that made them (the watchdog thread may be printing one
// while the main thread destroys the communicator).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/wait_names.h"

namespace trident {
namespace {

TEST(WaitNames, NameTheOpAndTheRanks) {
  WaitNames names("MPI", {0, 2, 4, 6});
  EXPECT_STREQ(names.op("allreduce"), "MPI allreduce among world ranks 0 2 4 6");
  EXPECT_EQ(names.op("allreduce"), names.op("allreduce"));  // made once
  const std::vector<P2pTransfer> transfers = {{false, Tensor(), 1, 0}, {true, Tensor(), 3, 1}};
  EXPECT_STREQ(names.exchange(transfers), "MPI point-to-point transfers with world rank 2 (receive), 6 (send)");
  std::vector<int> many;
  for (int r = 0; r < 20; ++r) many.push_back(r);
  EXPECT_STREQ(WaitNames("NCCL", many).op("barrier"),
               "NCCL barrier among world ranks 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 and 4 more");
  EXPECT_STREQ(WaitNames("MPI", {}).op("broadcast"), "MPI broadcast");
}

TEST(WaitNames, NamesOutliveTheirMaker) {
  const char* op = nullptr;
  const char* exchange = nullptr;
  {
    WaitNames names("NCCL", {5, 7});
    op = names.op("allgather");
    exchange = names.exchange({{true, Tensor(), 1, 0}});
  }
  WaitNames other("MPI", {1});
  EXPECT_STREQ(other.op("barrier"), "MPI barrier among world rank 1");
  EXPECT_STREQ(op, "NCCL allgather among world ranks 5 7");
  EXPECT_STREQ(exchange, "NCCL point-to-point transfers with world rank 7 (send)");
}

}  // namespace
}  // namespace trident
