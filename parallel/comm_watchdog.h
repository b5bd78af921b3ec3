// CommWatchdog: a background thread that polls registered checks (NCCL's asynchronous
// errors, one check per communicator) and reports the first failure once, through a
// callback that ends the job. A collective stuck on a failed link or a lost peer never
// returns to the thread that launched it, and every host wait then blocks behind it, so
// only another thread can notice the error and end the job instead of letting it hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

class CommWatchdog {
 public:
  using Check = std::function<std::string()>;              // "" while healthy, else what failed
  using OnFailure = std::function<void(const std::string&)>;  // called once, from the watchdog's thread, unlocked

  CommWatchdog(std::chrono::milliseconds interval, OnFailure on_failure);
  ~CommWatchdog();  // stops the thread (a check in progress finishes first)
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  int add(Check check);  // polled until remove(id); returns its id
  void remove(int id);   // after it returns the check is not running and never runs again

 private:
  void run();

  const std::chrono::milliseconds interval_;
  const OnFailure on_failure_;
  std::mutex mu_;  // held while checks run, so remove() waits for a check in progress
  std::condition_variable wake_;
  std::map<int, Check> checks_;
  int next_id_ = 0;
  bool stop_ = false, failed_ = false;
  std::thread thread_;
};

}  // namespace trident
