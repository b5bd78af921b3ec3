// --distributed-timeout-minutes: a wait in one collective longer than the limit ends the
// process with one line naming the op and the limit (exit 3; under MPI, MPI_Abort); shorter
// waits, and waits with no limit, do not.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "parallel/collective_timeout.h"

namespace trident {
namespace {

TEST(CollectiveTimeoutDeathTest, AWaitPastTheLimitEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        set_collective_timeout(0.002);  // 120 ms
        const CollectiveWait wait("MPI allreduce");
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::exit(0);
      },
      testing::ExitedWithCode(3),
      "trident: waited 0\\.0[0-9] minutes \\([0-9]+\\.[0-9] s\\) in MPI allreduce, longer than --distributed-timeout-minutes "
      "0\\.002: another rank, or this rank's GPU, is stuck or gone \\(rank 0\\): ending the job");
}

TEST(CollectiveTimeoutDeathTest, WaitsWithinTheLimitOrWithoutOneGoOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        set_collective_timeout(0.01);  // 600 ms
        for (int i = 0; i < 8; ++i) {  // 8 waits of 200 ms: 1.6 s in all
          const CollectiveWait wait("MPI barrier");
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        set_collective_timeout(0);
        {
          const CollectiveWait wait("MPI barrier");
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        }
        std::exit(0);
      },
      testing::ExitedWithCode(0), "");
}

// One rank's I/O for all (dataset caches, checkpoints) has no limit; a wait nested in
// another counts on its own and gives the outer one back.
TEST(CollectiveTimeoutDeathTest, SuspendedWaitsAndNestedWaits) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        set_collective_timeout(0.005);  // 300 ms
        {
          const CollectiveTimeoutSuspended io;
          const CollectiveWait wait("MPI allreduce");
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        }
        {
          const CollectiveWait outer("MPI barrier");
          { const CollectiveWait inner("MPI broadcast"); }
          std::this_thread::sleep_for(std::chrono::seconds(5));  // the outer wait is still watched
        }
        std::exit(0);
      },
      testing::ExitedWithCode(3), "in MPI barrier, longer than --distributed-timeout-minutes 0\\.005");
}

TEST(CollectiveTimeout, DefaultIsMegatronsTenMinutes) {
  EXPECT_EQ(collective_timeout(), std::chrono::minutes(10));
  set_collective_timeout(2.5);
  EXPECT_EQ(collective_timeout(), std::chrono::seconds(150));
  set_collective_timeout(0);
  EXPECT_EQ(collective_timeout().count(), 0);
  set_collective_timeout(1e12);  // past a year: no limit (nor an overflow)
  EXPECT_EQ(collective_timeout().count(), 0);
  set_collective_timeout(1e-30);  // positive: the shortest limit, not none
  EXPECT_EQ(collective_timeout().count(), 1);
  set_collective_timeout(10);
  {
    const CollectiveTimeoutSuspended io;
    EXPECT_EQ(collective_timeout().count(), 0);
  }
  EXPECT_EQ(collective_timeout(), std::chrono::minutes(10));
}

}  // namespace
}  // namespace trident
