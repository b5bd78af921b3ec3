#include "parallel/comm_watchdog.h"

#include <sstream>
#include <utility>

namespace trident {

CommWatchdog::CommWatchdog(std::chrono::milliseconds interval, OnFailure on_failure, StallLimit stall_limit)
    : interval_(interval), on_failure_(std::move(on_failure)), stall_limit_(std::move(stall_limit)) {
  thread_ = std::thread([this] { run(); });
  if (!stall_limit_) return;
  try {
    monitor_ = std::thread([this] { monitor(); });
  } catch (...) {  // no second thread: stop the first before the exception leaves
    stop_ = true;
    wake_.notify_all();
    thread_.join();
    throw;
  }
}

CommWatchdog::~CommWatchdog() {
  stop_ = true;  // without mu_, which a stuck check holds; the thread sees it within an interval
  wake_.notify_all();
  thread_.join();
  {
    std::lock_guard<std::mutex> lock(monitor_mu_);
    monitor_stop_ = true;
  }
  monitor_wake_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

int CommWatchdog::add(Check check) {
  std::lock_guard<std::mutex> lock(mu_);
  checks_.emplace(next_id_, std::move(check));
  return next_id_++;
}

void CommWatchdog::remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  checks_.erase(id);
}

void CommWatchdog::report(const std::string& what) {
  if (reported_.exchange(true)) return;  // once, whichever thread sees a failure first
  on_failure_(what);
}

void CommWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, interval_, [this] { return stop_.load(); });
    if (stop_ || reported_) continue;
    std::string what;
    for (const auto& [id, check] : checks_) {
      check_since_ns_ = steady_now_ns();
      what = check();
      check_since_ns_ = 0;
      if (!what.empty()) break;
    }
    if (what.empty()) continue;
    // Unlocked: on_failure may end the process, whose exit handlers may destroy this.
    lock.unlock();
    report(what);
    lock.lock();
  }
}

void CommWatchdog::monitor() {
  std::unique_lock<std::mutex> lock(monitor_mu_);
  while (!monitor_stop_) {
    monitor_wake_.wait_for(lock, interval_, [this] { return monitor_stop_; });
    if (monitor_stop_ || reported_) continue;
    const int64_t since = check_since_ns_.load();
    const int64_t limit_ns = since == 0 ? 0 : stall_limit_().count();
    if (limit_ns <= 0) continue;
    const int64_t stuck_ns = steady_now_ns() - since;
    if (stuck_ns <= limit_ns || check_since_ns_.load() != since) continue;  // returned in time
    std::ostringstream what;
    what.setf(std::ios::fixed);
    what.precision(1);
    what << "a communication watchdog check (CUDA and NCCL queries) has not returned for " << stuck_ns / 1e9
         << " s, longer than the limit of " << limit_ns / 1e9
         << " s: the GPU, its driver or NCCL is stuck";
    lock.unlock();
    report(what.str());
    lock.lock();
  }
}

}  // namespace trident
