// Megatron's --log-energy on one rank: the device's energy counter read at the edges of what
// is counted (training), as Megatron-core's EnergyMonitor does, and the time it counted (its
// interval timer's). Evaluations and checkpoint saves are left out between pause() and
// resume(); lap() is what was counted since the last lap, total() every lap's joules. This
// rank's joules (the trainer sums the ranks).
#pragma once

#include <functional>
#include <optional>

namespace trident {

class EnergyMonitor {
 public:
  // `read`: the counter in joules (Backend::energy_joules; a failed reading counts nothing);
  // `seconds`: a monotonic clock (default: std::chrono::steady_clock).
  explicit EnergyMonitor(std::function<std::optional<double>()> read, std::function<double()> seconds = {});

  void resume();  // counting from now (no-op while counting)
  void pause();   // what was counted since resume() joins the lap (no-op while paused)
  struct Lap {
    double joules = 0, seconds = 0;
  };
  Lap lap();  // counted since the last lap (while counting: up to now); a new lap starts
  double total() const { return total_; }

 private:
  void count_to_now();  // adds the counter's and the clock's increase since the last reading

  std::function<std::optional<double>()> read_;
  std::function<double()> seconds_;
  bool counting_ = false;
  std::optional<double> last_joules_;  // the last reading while counting (none: it failed)
  double last_seconds_ = 0;
  Lap lap_;
  double total_ = 0;
};

// Pauses a monitor for a scope (nothing when null): evaluations and saves.
class EnergyPause {
 public:
  explicit EnergyPause(EnergyMonitor* m) : m_(m) {
    if (m_) m_->pause();
  }
  ~EnergyPause() {
    if (m_) m_->resume();
  }
  EnergyPause(const EnergyPause&) = delete;
  EnergyPause& operator=(const EnergyPause&) = delete;

 private:
  EnergyMonitor* m_;
};

}  // namespace trident
