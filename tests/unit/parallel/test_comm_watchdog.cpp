// CommWatchdog: a failing check is reported once, from the watchdog's thread, within a few
// intervals; healthy checks never are; a removed check never runs again (remove waits for a
// check in progress); destruction stops the thread. With a stall limit, a check that does
// not return is reported once it has run past the limit (not before), once in all.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "parallel/comm_watchdog.h"

namespace trident {
namespace {

using namespace std::chrono_literals;

// Waits up to 2 s for `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 400 && !done(); ++i) std::this_thread::sleep_for(5ms);
  return done();
}

TEST(CommWatchdog, ReportsTheFirstFailureOnceFromItsThread) {
  std::atomic<int> reports{0};
  std::string what;
  std::thread::id reporter;
  std::atomic<bool> broken{false};
  std::atomic<int> healthy_polls{0};  // outlives the watchdog that reads it
  {
    CommWatchdog w(5ms, [&](const std::string& s) {
      what = s;
      reporter = std::this_thread::get_id();
      ++reports;
    });
    w.add([&] {
      ++healthy_polls;
      return std::string();
    });
    w.add([&] { return broken ? std::string("link down on comm 1") : std::string(); });
    ASSERT_TRUE(eventually([&] { return healthy_polls > 3; }));
    EXPECT_EQ(reports, 0);
    broken = true;
    ASSERT_TRUE(eventually([&] { return reports > 0; }));
    std::this_thread::sleep_for(50ms);  // ten more intervals: no second report
  }
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(what, "link down on comm 1");
  EXPECT_NE(reporter, std::this_thread::get_id());
}

TEST(CommWatchdog, RemovedCheckNeverRunsAgain) {
  std::atomic<int> reports{0};
  CommWatchdog w(1ms, [&](const std::string&) { ++reports; });
  std::atomic<int> polls{0};
  std::atomic<bool> removed{false}, ran_after_removal{false};
  const int id = w.add([&] {
    if (removed) ran_after_removal = true;
    ++polls;
    std::this_thread::sleep_for(2ms);  // remove() may arrive mid-check: it must wait
    return std::string();
  });
  ASSERT_TRUE(eventually([&] { return polls > 2; }));
  w.remove(id);
  removed = true;
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(ran_after_removal);
  EXPECT_EQ(reports, 0);
}

TEST(CommWatchdog, ReportsACheckStuckPastTheStallLimit) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> reports{0}, polls{0};
  std::string what;
  std::atomic<bool> release{false};
  std::atomic<int64_t> stuck_at_ns{0}, reported_at_ns{0};
  const auto ns = [] { return Clock::now().time_since_epoch().count(); };
  {
    CommWatchdog w(
        5ms,
        [&](const std::string& s) {
          what = s;
          reported_at_ns = ns();
          ++reports;
        },
        [] { return std::chrono::nanoseconds(100ms); });
    struct Release {  // declared after w: releases the stuck check before w waits for it,
      std::atomic<bool>& flag;  // also when an assertion below returns early
      ~Release() { flag = true; }
    } release_at_exit{release};
    w.add([&] {
      if (++polls == 3) {  // the third poll hangs (a call stuck in the driver) until released
        stuck_at_ns = ns();
        while (!release) std::this_thread::sleep_for(1ms);
        return std::string("the stuck check's own failure");
      }
      return std::string();
    });
    ASSERT_TRUE(eventually([&] { return reports > 0; }));
    release = true;
    std::this_thread::sleep_for(30ms);  // the check returns a failure: not reported again
  }
  EXPECT_EQ(reports, 1);
  EXPECT_NE(what.find("has not returned for"), std::string::npos) << what;
  // Not before the limit (less the moment between the watchdog's own start mark and the
  // check's, on a loaded machine).
  EXPECT_GE(reported_at_ns - stuck_at_ns, std::chrono::nanoseconds(95ms).count());
  EXPECT_EQ(polls, 3);  // no poll while stuck, none after the report
}

TEST(CommWatchdog, NoStallLimitNoReport) {
  std::atomic<int> reports{0}, polls{0};
  {
    CommWatchdog w(
        1ms, [&](const std::string&) { ++reports; }, [] { return std::chrono::nanoseconds(0); });
    w.add([&] {
      ++polls;
      std::this_thread::sleep_for(20ms);  // slow, and there is no limit now
      return std::string();
    });
    ASSERT_TRUE(eventually([&] { return polls > 3; }));
  }
  EXPECT_EQ(reports, 0);
}

}  // namespace
}  // namespace trident
