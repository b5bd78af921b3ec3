// CommWatchdog: a background thread that polls registered checks (NCCL's asynchronous
// errors, one check per communicator) and reports the first failure once, through a
// callback that ends the job. A collective stuck on a failed link or a lost peer never
// returns to the thread that launched it, and every host wait then blocks behind it, so
// only another thread can notice the error and end the job instead of letting it hang.
//
// A check can itself get stuck: NcclComm's queries CUDA events and NCCL's error state, and
// a call into a wedged driver need not return. With a stall limit, a second thread that
// makes no such calls (PyTorch's NCCL heartbeat monitor) reports a check that has not
// returned for longer than the limit, through the same callback, once for both threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

// The steady clock in nanoseconds: the watchdogs' time stamps, kept in atomics.
inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class CommWatchdog {
 public:
  using Check = std::function<std::string()>;              // "" while healthy, else what failed
  using OnFailure = std::function<void(const std::string&)>;  // called once, from a watchdog thread, unlocked
  using StallLimit = std::function<std::chrono::nanoseconds()>;  // asked at each look; <= 0: no limit now

  // Without stall_limit, no second thread: a stuck check goes unnoticed.
  CommWatchdog(std::chrono::milliseconds interval, OnFailure on_failure, StallLimit stall_limit = {});
  // Stops the checking thread, then the monitor (which goes on watching a check in
  // progress meanwhile: one stuck past the limit is still reported).
  ~CommWatchdog();
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  int add(Check check);  // polled until remove(id); returns its id
  void remove(int id);   // after it returns the check is not running and never runs again

 private:
  void run();
  void monitor();  // the stall limit's thread: never takes mu_, which a stuck check holds
  void report(const std::string& what);  // the first report of either thread only

  const std::chrono::milliseconds interval_;
  const OnFailure on_failure_;
  const StallLimit stall_limit_;
  std::mutex mu_;  // held while checks run, so remove() waits for a check in progress
  std::condition_variable wake_;
  std::map<int, Check> checks_;
  int next_id_ = 0;
  std::atomic<bool> stop_{false};  // set without mu_: a stuck check holds it
  std::atomic<bool> reported_{false};
  std::atomic<int64_t> check_since_ns_{0};  // steady-clock start of the check running now; 0: none
  std::mutex monitor_mu_;
  std::condition_variable monitor_wake_;
  bool monitor_stop_ = false;
  std::thread thread_, monitor_;
};

}  // namespace trident
