#include "core/stop_signals.h"

#include <atomic>
#include <csignal>

namespace trident {
namespace {

// Atomic, not a volatile sig_atomic_t: the signal may be taken by another thread, which
// volatile does not order against the main thread's reads.
std::atomic<int> stop_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
extern "C" void request_stop(int) { stop_requested = 1; }

int living = 0;  // StopSignals objects alive (made and destroyed on the main thread)

}  // namespace

StopSignals::StopSignals() {
  if (living++ > 0) return;  // an inner one: the outer one's handlers and request stay
  stop_requested = 0;  // first: a signal that comes as the handlers go in is not lost
  term_ = std::signal(SIGTERM, request_stop);
  int_ = std::signal(SIGINT, request_stop);
}

StopSignals::~StopSignals() {
  if (--living > 0) return;
  std::signal(SIGTERM, term_);
  std::signal(SIGINT, int_);
}

bool stop_signal_received() { return stop_requested != 0; }

}  // namespace trident
