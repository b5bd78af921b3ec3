#include "core/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <csignal>
#include <utility>
#include <vector>

namespace trident {
namespace {

// Atomic, not a volatile sig_atomic_t: the signal may be taken by another thread, which
// volatile does not order against the main thread's reads.
std::atomic<int> stop_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");
extern "C" void request_stop(int) { stop_requested = 1; }

int living = 0;  // StopSignals objects alive (made and destroyed on the main thread)

}  // namespace

struct StopSignals::Replaced {
  std::vector<std::pair<int, struct sigaction>> handlers;  // signal, the action it had
};

StopSignals::StopSignals(int also) {
  if (living++ > 0) return;  // an inner one: the outer one's handlers and request stay
  stop_requested = 0;  // first: a signal that comes as the handlers go in is not lost
  replaced_ = std::make_unique<Replaced>();
  struct sigaction stop {};
  stop.sa_handler = request_stop;
  sigemptyset(&stop.sa_mask);
  stop.sa_flags = SA_RESTART;  // a read or write under way goes on rather than failing with EINTR
  std::vector<int> signals = {SIGTERM, SIGINT};
  if (also != 0 && also != SIGTERM && also != SIGINT) signals.push_back(also);
  for (const int sig : signals) {
    struct sigaction before {};
    if (::sigaction(sig, &stop, &before) == 0) replaced_->handlers.emplace_back(sig, before);
  }
}

StopSignals::~StopSignals() {
  if (--living > 0) return;
  for (const auto& [sig, before] : replaced_->handlers) ::sigaction(sig, &before, nullptr);
}

bool stop_signal_received() { return stop_requested != 0; }

namespace {

// Those that end a process by default and that a scheduler or a person sends (not SIGKILL or
// SIGSTOP, which cannot be caught; not the faults of the process itself, SIGSEGV and the like;
// not SIGPROF and SIGALRM, which profilers and libraries use).
constexpr std::pair<const char*, int> kCatchable[] = {
    {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2},
    {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT}, {"SIGXCPU", SIGXCPU}, {"SIGPWR", SIGPWR},
};

}  // namespace

int catchable_signal_named(const std::string& name) {
  for (const auto& [n, number] : kCatchable)
    if (name == n) return number;
  return 0;
}

std::string catchable_signal_names() {
  std::string names;
  for (const auto& [n, number] : kCatchable) names += (names.empty() ? "" : ", ") + std::string(n);
  return names;
}

}  // namespace trident
