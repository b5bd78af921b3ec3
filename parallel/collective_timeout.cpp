#include "parallel/collective_timeout.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#include "parallel/comm_watchdog.h"
#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace trident {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_timeout_ns{std::chrono::nanoseconds(std::chrono::minutes(10)).count()};
// The current wait: its start (0: none) and its op.
std::atomic<int64_t> g_since_ns{0};
std::atomic<const char*> g_op{nullptr};

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// Started by the first wait; polls a quarter of the limit apart, at most every second.
void start_watchdog() {
  static std::unique_ptr<CommWatchdog> watchdog = [] {
#ifdef TRIDENT_HAVE_MPI
    const int rank = mpi_world_rank();  // asked once, from the communicating thread
#else
    const int rank = 0;
#endif
    const auto limit = collective_timeout();
    const auto interval = std::min<std::chrono::milliseconds>(
        std::chrono::seconds(1), std::max<std::chrono::milliseconds>(
                                     std::chrono::milliseconds(10),
                                     std::chrono::duration_cast<std::chrono::milliseconds>(limit / 4)));
    auto w = std::make_unique<CommWatchdog>(interval, [rank](const std::string& what) {
      std::fprintf(stderr, "trident: %s (rank %d): ending the job\n", what.c_str(), rank);
      std::fflush(stdout);
      std::fflush(stderr);
#ifdef TRIDENT_HAVE_MPI
      if (mpi_initialized()) mpi_abort_job(3);
#endif
      std::_Exit(3);
    });
    w->add([] {
      const int64_t since = g_since_ns.load(), limit_ns = g_timeout_ns.load();
      if (since == 0 || limit_ns <= 0) return std::string();
      const int64_t waited = now_ns() - since;
      if (waited <= limit_ns) return std::string();
      return collective_timeout_message(g_op.load(), std::chrono::nanoseconds(waited));
    });
    return w;
  }();
  (void)watchdog;
}

}  // namespace

void set_collective_timeout(double minutes) {
  g_timeout_ns = minutes > 0 ? static_cast<int64_t>(minutes * 60e9) : 0;
}

std::chrono::nanoseconds collective_timeout() { return std::chrono::nanoseconds(g_timeout_ns.load()); }

std::string collective_timeout_message(const char* op, std::chrono::nanoseconds waited) {
  std::ostringstream s;
  s.precision(3);
  s << "waited " << std::chrono::duration<double>(waited).count() / 60 << " minutes in " << (op ? op : "a collective")
    << ", longer than --distributed-timeout-minutes " << std::chrono::duration<double>(collective_timeout()).count() / 60
    << ": another rank is stuck or gone";
  return s.str();
}

CollectiveWait::CollectiveWait(const char* op) {
  if (g_timeout_ns.load() <= 0) return;
  start_watchdog();
  g_op = op;
  g_since_ns = now_ns();
}

CollectiveWait::~CollectiveWait() { g_since_ns = 0; }

}  // namespace trident
