// --log-energy's accounting (train/energy_monitor.h) against a scripted counter and clock:
// what lies between pause() and resume() is left out of the joules and the seconds, laps add
// up to the total, failed readings and a counter that goes back count nothing.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "train/energy_monitor.h"

namespace trident {
namespace {

// Returns the scripted values in order (nullopt: a failed reading).
template <typename T>
struct Script {
  std::vector<T> values;
  size_t next = 0;
  T operator()() {
    EXPECT_LT(next, values.size()) << "read more often than scripted";
    return next < values.size() ? values[next++] : T{};
  }
};

TEST(EnergyMonitor, PausesLeaveOutWhatLiesBetween) {
  Script<std::optional<double>> joules{{100.0, 130.0, 180.0, 200.0, 260.0, 300.0}};
  Script<double> clock{{0.0, 1.0, 3.0, 10.0, 11.0, 15.0}};
  EnergyMonitor m([&] { return joules(); }, [&] { return clock(); });
  m.resume();  // 100 J at 0 s
  EnergyMonitor::Lap l = m.lap();  // 130 J at 1 s
  EXPECT_EQ(l.joules, 30.0);
  EXPECT_EQ(l.seconds, 1.0);
  m.pause();   // 180 J at 3 s: +50 J, +2 s
  m.resume();  // 200 J at 10 s: the 20 J and 7 s while paused are not counted
  m.resume();  // counting already: no reading
  l = m.lap();  // 260 J at 11 s
  EXPECT_EQ(l.joules, 50.0 + 60.0);
  EXPECT_EQ(l.seconds, 2.0 + 1.0);
  m.pause();  // 300 J at 15 s
  m.pause();  // paused already: no reading
  l = m.lap();  // paused: no reading
  EXPECT_EQ(l.joules, 40.0);
  EXPECT_EQ(l.seconds, 4.0);
  EXPECT_EQ(m.total(), 180.0);
  EXPECT_EQ(joules.next, joules.values.size());
  EXPECT_EQ(clock.next, clock.values.size());
}

TEST(EnergyMonitor, FailedReadingsAndACounterGoingBackCountNothing) {
  Script<std::optional<double>> joules{{std::nullopt, 10.0, 25.0, std::nullopt, 40.0, 5.0, 9.0}};
  EnergyMonitor m([&] { return joules(); }, [] { return 0.0; });
  m.resume();                       // failed: counting from the next good reading
  EXPECT_EQ(m.lap().joules, 0.0);   // 10
  EXPECT_EQ(m.lap().joules, 15.0);  // 25
  EXPECT_EQ(m.lap().joules, 0.0);   // failed: the next reading still counts from 25
  EXPECT_EQ(m.lap().joules, 15.0);  // 40
  EXPECT_EQ(m.lap().joules, 0.0);   // 5: went back (a driver reload)
  EXPECT_EQ(m.lap().joules, 4.0);   // 9
  EXPECT_EQ(m.total(), 34.0);
}

}  // namespace
}  // namespace trident
