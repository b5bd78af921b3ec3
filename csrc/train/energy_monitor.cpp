#include "train/energy_monitor.h"

namespace trident {

double EnergyMonitor::since_last_reading() {
  const std::optional<double> now = read_();
  if (!now) return 0.0;
  const double gained = last_ ? *now - *last_ : 0.0;
  last_ = now;
  return gained > 0 ? gained : 0.0;  // a counter that went back (a driver reload) counts nothing
}

void EnergyMonitor::resume() {
  if (last_) return;
  last_ = read_();
}

void EnergyMonitor::pause() {
  if (!last_) return;
  lap_ += since_last_reading();
  last_.reset();
}

double EnergyMonitor::lap() {
  if (last_) lap_ += since_last_reading();
  const double lap = lap_;
  total_ += lap;
  lap_ = 0;
  return lap;
}

}  // namespace trident
