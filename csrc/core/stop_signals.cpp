#include "core/stop_signals.h"

#include <atomic>
#include <csignal>
#include <utility>

namespace trident {
namespace {

// Atomic, not a volatile sig_atomic_t: the signal may be taken by another thread, which
// volatile does not order against the main thread's reads.
std::atomic<int> stop_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
extern "C" void request_stop(int) { stop_requested = 1; }

int living = 0;  // StopSignals objects alive (made and destroyed on the main thread)

}  // namespace

StopSignals::StopSignals(int also) {
  if (living++ > 0) return;  // an inner one: the outer one's handlers and request stay
  stop_requested = 0;  // first: a signal that comes as the handlers go in is not lost
  term_ = std::signal(SIGTERM, request_stop);
  int_ = std::signal(SIGINT, request_stop);
  if (also != 0 && also != SIGTERM && also != SIGINT) {
    also_ = also;
    also_handler_ = std::signal(also, request_stop);
  }
}

StopSignals::~StopSignals() {
  if (--living > 0) return;
  std::signal(SIGTERM, term_);
  std::signal(SIGINT, int_);
  if (also_ != 0) std::signal(also_, also_handler_);
}

bool stop_signal_received() { return stop_requested != 0; }

int catchable_signal_named(const std::string& name) {
  // Those that end a process by default and that a scheduler or a person sends (not SIGKILL
  // or SIGSTOP, which cannot be caught; not the faults of the process itself, SIGSEGV and the
  // like; not SIGPROF, which profilers use).
  static const std::pair<const char*, int> kSignals[] = {
      {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
      {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM}, {"SIGXCPU", SIGXCPU}, {"SIGPWR", SIGPWR},
  };
  for (const auto& [n, number] : kSignals)
    if (name == n) return number;
  return 0;
}

}  // namespace trident
