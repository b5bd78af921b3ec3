// Megatron's timers: the printed block (its format: names padded with dots to 48 columns,
// two decimals, min/max over the ranks that ran the timer), the levels, the averages.
#include "train/timers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <string>
#include <vector>

#include "core/error.h"

namespace trident {
namespace {

using PerRank = std::vector<std::array<double, kTimerCount>>;

std::array<double, kTimerCount> times(std::initializer_list<std::pair<TimerId, double>> values) {
  std::array<double, kTimerCount> a{};
  for (const auto& [id, ms] : values) a[static_cast<size_t>(id)] = ms;
  return a;
}

// Three ranks; rank 2 never ran forward-recv (a first stage), and no rank ran the optimizer's
// count-zeros: those are left out of the minimum and of the block.
PerRank three_ranks() {
  return {times({{TimerId::ForwardBackward, 120.456}, {TimerId::Optimizer, 3.5}, {TimerId::ForwardRecv, 1.004}}),
          times({{TimerId::ForwardBackward, 100.0}, {TimerId::Optimizer, 4.25}, {TimerId::ForwardRecv, 2.5}}),
          times({{TimerId::ForwardBackward, 110.0}, {TimerId::Optimizer, 3.0}})};
}

TEST(Timers, MinMaxBlockIsMegatrons) {
  EXPECT_EQ(format_timers(three_ranks(), TimingLogOption::MinMax),
            "(min, max) time across ranks (ms):\n"
            "    forward-backward ...............................: (100.00, 120.46)\n"
            "    forward-recv ...................................: (1.00, 2.50)\n"
            "    optimizer ......................................: (3.00, 4.25)");
}

TEST(Timers, MaxAndAllBlocksAreMegatrons) {
  EXPECT_EQ(format_timers(three_ranks(), TimingLogOption::Max),
            "max time across ranks (ms):\n"
            "    forward-backward ...............................: 120.46\n"
            "    forward-recv ...................................: 2.50\n"
            "    optimizer ......................................: 4.25");
  EXPECT_EQ(format_timers(three_ranks(), TimingLogOption::All),
            "times across ranks (ms):\n"
            "  forward-backward:\n"
            "     rank  0: 120.46\n"
            "     rank  1: 100.00\n"
            "     rank  2: 110.00\n"
            "  forward-recv:\n"
            "     rank  0: 1.00\n"
            "     rank  1: 2.50\n"
            "  optimizer:\n"
            "     rank  0: 3.50\n"
            "     rank  1: 4.25\n"
            "     rank  2: 3.00");
  EXPECT_EQ(format_timers(PerRank(2), TimingLogOption::MinMax), "");
  const auto maxima = timer_maxima(three_ranks());
  ASSERT_EQ(maxima.size(), 3u);
  EXPECT_STREQ(maxima[0].first, "forward-backward");
  EXPECT_DOUBLE_EQ(maxima[0].second, 120.456);
  EXPECT_STREQ(maxima[2].first, "optimizer");
  EXPECT_DOUBLE_EQ(maxima[2].second, 4.25);
}

// The longest name (43 characters) still fills Megatron's 48 columns: a space, 4 dots.
TEST(Timers, LongestNameFillsTheColumns) {
  const std::string block =
      format_timers({times({{TimerId::ForwardBackwardSendForwardBackwardRecv, 1.0}})}, TimingLogOption::Max);
  EXPECT_EQ(block, "max time across ranks (ms):\n    forward-backward-send-forward-backward-recv ....: 1.00");
}

// Level 1 times only level-1 timers; each take averages over the iterations given and
// starts that sum again, the log's and TensorBoard's apart; level 0 times nothing.
TEST(Timers, LevelsAndTheTwoSums) {
  Timers timers(1, nullptr);
  EXPECT_TRUE(timers.enabled(TimerId::ForwardBackward));
  EXPECT_FALSE(timers.enabled(TimerId::ForwardCompute));
  for (int i = 0; i < 2; ++i) {
    const Timers::Scope fb(&timers, TimerId::ForwardBackward);
    const Timers::Scope fc(&timers, TimerId::ForwardCompute);
    usleep(20000);
  }
  PerRank log = timers.take(nullptr, 0, 2);
  ASSERT_EQ(log.size(), 1u);
  const double fb = log[0][static_cast<size_t>(TimerId::ForwardBackward)];
  EXPECT_GE(fb, 19.0);  // ms an iteration: two sleeps of 20 ms over 2 iterations
  EXPECT_LT(fb, 200.0);
  EXPECT_EQ(log[0][static_cast<size_t>(TimerId::ForwardCompute)], 0.0);
  EXPECT_EQ(timers.take(nullptr, 0, 1)[0][static_cast<size_t>(TimerId::ForwardBackward)], 0.0);  // started again
  const double tb = timers.take(nullptr, 1, 1)[0][static_cast<size_t>(TimerId::ForwardBackward)];
  EXPECT_NEAR(tb, 2 * fb, 0.5);  // TensorBoard's sum was not taken: both iterations, not averaged
  Timers off(0, nullptr);
  EXPECT_FALSE(off.any());
  { const Timers::Scope fb(&off, TimerId::ForwardBackward); }
  EXPECT_EQ(format_timers(off.take(nullptr, 0, 1), TimingLogOption::MinMax), "");
}

TEST(Timers, LogOptionNamesTheFlag) {
  EXPECT_EQ(parse_timing_log_option("all"), TimingLogOption::All);
  try {
    parse_timing_log_option("median");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "--timing-log-option: unknown option 'median' (expected minmax, max or all)");
  }
}

}  // namespace
}  // namespace trident
