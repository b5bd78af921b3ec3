#include "train/energy_monitor.h"

#include <chrono>

namespace trident {

EnergyMonitor::EnergyMonitor(std::function<std::optional<double>()> read, std::function<double()> seconds)
    : read_(std::move(read)), seconds_(std::move(seconds)) {
  if (!seconds_)
    seconds_ = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
}

void EnergyMonitor::count_to_now() {
  const double now_seconds = seconds_();
  lap_.seconds += now_seconds - last_seconds_;
  last_seconds_ = now_seconds;
  const std::optional<double> now = read_();
  if (!now) return;  // the next reading counts from the last good one
  // A counter that went back (a driver reload) counts nothing.
  if (last_joules_ && *now > *last_joules_) lap_.joules += *now - *last_joules_;
  last_joules_ = now;
}

void EnergyMonitor::resume() {
  if (counting_) return;
  counting_ = true;
  last_seconds_ = seconds_();
  last_joules_ = read_();
}

void EnergyMonitor::pause() {
  if (!counting_) return;
  count_to_now();
  counting_ = false;
}

EnergyMonitor::Lap EnergyMonitor::lap() {
  if (counting_) count_to_now();
  const Lap lap = lap_;
  total_ += lap.joules;
  lap_ = Lap{};
  return lap;
}

}  // namespace trident
