// CommWatchdog: a failing check is reported once, from the watchdog's thread, within a few
// intervals; healthy checks never are; a removed check never runs again (remove waits for a
// check in progress); destruction stops the thread.
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

}  // namespace
}  // namespace trident
