// StopSignals: SIGTERM, SIGINT and the one more signal asked for (Megatron's --exit-signal) set
// the request; an inner StopSignals changes nothing; the handlers that were there before come
// back whole (sigaction's flags too) when the outermost goes.
#include <gtest/gtest.h>

#include <signal.h>

#include <csignal>

#include "core/stop_signals.h"

namespace trident {
namespace {

int seen = 0;
extern "C" void remember(int, siginfo_t*, void*) { ++seen; }

// The action of `sig` now.
struct sigaction action_of(int sig) {
  struct sigaction a {};
  ::sigaction(sig, nullptr, &a);
  return a;
}

TEST(StopSignals, TheSignalAskedForStopsAsSigtermDoes) {
  {
    const StopSignals outer(SIGUSR1);
    EXPECT_FALSE(stop_signal_received());
    std::raise(SIGUSR1);
    EXPECT_TRUE(stop_signal_received());
  }
  {
    const StopSignals outer;
    EXPECT_FALSE(stop_signal_received());  // a new outermost clears the request
    std::raise(SIGTERM);
    EXPECT_TRUE(stop_signal_received());
    const StopSignals inner(SIGUSR2);  // neither clears nor installs
    EXPECT_TRUE(stop_signal_received());
  }
}

// Megatron's default --exit-signal, SIGTERM, keeps both SIGTERM and SIGINT stopping the run
// (each checked as installed before it is raised: a bug fails the test, not kills it).
TEST(StopSignals, SigtermOrSigintAskedForKeepsBoth) {
  for (const int also : {SIGTERM, SIGINT}) {
    const StopSignals stop(also);
    for (const int sig : {SIGTERM, SIGINT}) {
      ASSERT_NE(action_of(sig).sa_handler, SIG_DFL) << also << " " << sig;
      ASSERT_NE(action_of(sig).sa_handler, SIG_IGN) << also << " " << sig;
    }
    std::raise(also == SIGTERM ? SIGINT : SIGTERM);
    EXPECT_TRUE(stop_signal_received());
  }
}

TEST(StopSignals, TheHandlersBeforeComeBackWhole) {
  seen = 0;
  struct sigaction mine {};
  mine.sa_sigaction = remember;
  sigemptyset(&mine.sa_mask);
  mine.sa_flags = SA_SIGINFO;
  struct sigaction before_usr2 {}, before_term {};
  ASSERT_EQ(::sigaction(SIGUSR2, &mine, &before_usr2), 0);
  ASSERT_EQ(::sigaction(SIGTERM, &mine, &before_term), 0);
  {
    const StopSignals stop(SIGUSR2);
    EXPECT_EQ(action_of(SIGUSR2).sa_flags & SA_SIGINFO, 0);  // ours now
    std::raise(SIGUSR2);
    EXPECT_EQ(seen, 0);
    EXPECT_TRUE(stop_signal_received());
  }
  for (const int sig : {SIGUSR2, SIGTERM}) {
    const struct sigaction back = action_of(sig);
    EXPECT_NE(back.sa_flags & SA_SIGINFO, 0) << sig;
    EXPECT_EQ(back.sa_sigaction, &remember) << sig;
  }
  std::raise(SIGUSR2);
  EXPECT_EQ(seen, 1);
  ::sigaction(SIGUSR2, &before_usr2, nullptr);
  ::sigaction(SIGTERM, &before_term, nullptr);
}

TEST(StopSignals, SignalNames) {
  EXPECT_EQ(catchable_signal_named("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(catchable_signal_named("SIGPWR"), SIGPWR);
  EXPECT_EQ(catchable_signal_named("SIGKILL"), 0);
  EXPECT_EQ(catchable_signal_named("SIGALRM"), 0);
  EXPECT_EQ(catchable_signal_named("USR1"), 0);
}

}  // namespace
}  // namespace trident
