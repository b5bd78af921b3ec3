// Megatron's --log-energy on one rank: the device's energy counter read at the edges of what
// is counted (training), as Megatron-core's EnergyMonitor does. Evaluations and checkpoint
// saves are left out between pause() and resume(); lap() is the energy counted since the last
// lap, total() everything counted. Joules, this rank's (the trainer sums the ranks).
#pragma once

#include <functional>
#include <optional>

namespace trident {

class EnergyMonitor {
 public:
  // `read`: the counter in joules (Backend::energy_joules); a failed reading counts nothing.
  explicit EnergyMonitor(std::function<std::optional<double>()> read) : read_(std::move(read)) {}

  void resume();  // counting from now (no-op while counting)
  void pause();   // the energy since resume() joins the lap (no-op while paused)
  double lap();   // counted since the last lap (while counting: up to now), then a new lap
  double total() const { return total_; }

 private:
  double since_last_reading();  // the counter's increase since last_, which moves to now

  std::function<std::optional<double>()> read_;
  std::optional<double> last_;  // the reading counting started from; none while paused
  double lap_ = 0, total_ = 0;
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
