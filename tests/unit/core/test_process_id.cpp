// process_is_gone: a running process is not, one that never existed is, and so is one that has
// exited but waits to be reaped (a zombie: mpirun's ranks for a moment, every exited process in
// a container whose first process reaps nothing), which still takes kill(pid, 0).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "core/process_id.h"

namespace trident {
namespace {

// The state letter in /proc/<pid>/stat ('?' when unreadable).
char state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '?';
  const size_t close = line.rfind(')');
  return close + 2 < line.size() ? line[close + 2] : '?';
}

TEST(ProcessId, AZombieIsGoneAndARunningProcessIsNot) {
  EXPECT_FALSE(process_is_gone(::getpid()));
  EXPECT_FALSE(process_is_gone(0));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();  // until killed
    ::_exit(0);
  }
  EXPECT_FALSE(process_is_gone(child)) << "a running child";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  for (int i = 0; i < 500 && state_of(child) != 'Z'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(state_of(child), 'Z') << "the killed child, not reaped yet";
  EXPECT_EQ(::kill(child, 0), 0) << "a zombie still takes kill(pid, 0)";
  EXPECT_TRUE(process_is_gone(child)) << "a zombie";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(process_is_gone(child)) << "reaped";
}

}  // namespace
}  // namespace trident
