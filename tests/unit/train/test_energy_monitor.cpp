// --log-energy's accounting (train/energy_monitor.h) against a scripted counter: what lies
// between pause() and resume() is left out, laps add up to the total, failed readings and a
// counter that goes back count nothing.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "train/energy_monitor.h"

namespace trident {
namespace {

// A counter that returns the scripted readings in order (nullopt: a failed reading).
struct Script {
  std::vector<std::optional<double>> readings;
  size_t next = 0;
  std::optional<double> operator()() {
    EXPECT_LT(next, readings.size()) << "read more often than scripted";
    return next < readings.size() ? readings[next++] : std::nullopt;
  }
};

TEST(EnergyMonitor, PausesLeaveOutWhatLiesBetween) {
  Script s{{100.0, 130.0, 180.0, 200.0, 260.0, 300.0}};
  EnergyMonitor m([&] { return s(); });
  m.resume();                     // 100
  EXPECT_EQ(m.lap(), 30.0);       // 130
  m.pause();                      // 180: +50
  m.resume();                     // 200 (20 J while paused: not counted)
  m.resume();                     // counting already: no reading
  EXPECT_EQ(m.lap(), 50.0 + 60);  // 260
  m.pause();                      // 300: +40
  m.pause();                      // paused already: no reading
  EXPECT_EQ(m.lap(), 40.0);       // paused: no reading
  EXPECT_EQ(m.total(), 180.0);
  EXPECT_EQ(s.next, s.readings.size());
}

TEST(EnergyMonitor, FailedReadingsAndACounterGoingBackCountNothing) {
  Script s{{std::nullopt, 10.0, 25.0, std::nullopt, 40.0, 5.0, 9.0}};
  EnergyMonitor m([&] { return s(); });
  m.resume();                // no reading: not counting
  EXPECT_EQ(m.lap(), 0.0);   // nothing read
  m.resume();                // 10
  EXPECT_EQ(m.lap(), 15.0);  // 25
  EXPECT_EQ(m.lap(), 0.0);   // failed: the next reading still counts from 25
  EXPECT_EQ(m.lap(), 15.0);  // 40
  EXPECT_EQ(m.lap(), 0.0);   // 5: went back (a driver reload)
  EXPECT_EQ(m.lap(), 4.0);   // 9
  EXPECT_EQ(m.total(), 34.0);
}

}  // namespace
}  // namespace trident
