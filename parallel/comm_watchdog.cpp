#include "parallel/comm_watchdog.h"

#include <utility>

namespace trident {

CommWatchdog::CommWatchdog(std::chrono::milliseconds interval, OnFailure on_failure)
    : interval_(interval), on_failure_(std::move(on_failure)), thread_([this] { run(); }) {}

CommWatchdog::~CommWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
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

void CommWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, interval_, [this] { return stop_; });
    if (stop_ || failed_) continue;
    std::string what;
    for (const auto& [id, check] : checks_) {
      what = check();
      if (!what.empty()) break;
    }
    if (what.empty()) continue;
    failed_ = true;  // report once, even if on_failure returns
    // Unlocked: on_failure may end the process, whose exit handlers may destroy this.
    lock.unlock();
    on_failure_(what);
    lock.lock();
  }
}

}  // namespace trident
