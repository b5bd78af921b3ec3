#include "parallel/collective_timeout.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>

#ifdef TRIDENT_HAVE_MPI
#include "parallel/mpi_comm.h"
#endif

namespace trident {
namespace {

std::atomic<int64_t> g_timeout_ns{std::chrono::nanoseconds(std::chrono::minutes(10)).count()};
std::atomic<int> g_suspended{0};
// The current wait: its start (0: none) and its op.
std::atomic<int64_t> g_since_ns{0};
std::atomic<const char*> g_op{nullptr};

}  // namespace

CommWatchdog& job_watchdog() {
  // Never destroyed: the destructor joins the checking thread, and at exit a check stuck in
  // the driver would hang that join when no limit is set to report it (0 minutes). The
  // thread ends with the process; its checks read only atomics by then (NcclComm removes its
  // own when destroyed).
  static CommWatchdog* const watchdog = [] {
#ifdef TRIDENT_HAVE_MPI
    const int rank = mpi_world_rank();  // asked once, from the communicating thread
#else
    const int rank = 0;
#endif
    const auto limit = collective_timeout();
    const auto interval = limit.count() <= 0
                              ? std::chrono::milliseconds(1000)
                              : std::clamp<std::chrono::milliseconds>(
                                    std::chrono::duration_cast<std::chrono::milliseconds>(limit / 4),
                                    std::chrono::milliseconds(10), std::chrono::seconds(1));
    auto w = std::make_unique<CommWatchdog>(interval, [rank](const std::string& what) {
      std::fprintf(stderr, "trident: %s (rank %d): ending the job\n", what.c_str(), rank);
#ifdef TRIDENT_HAVE_MPI
      mpi_abort_job_from_watchdog(3);
#else
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(3);
#endif
    }, [] {  // a check stuck longer than the limit ends the job too, suspended or not: while
             // one rank does I/O, NcclComm's check makes no CUDA call and returns at once
      return std::chrono::nanoseconds(g_timeout_ns.load());
    });
    w->add([] {
      const int64_t since = g_since_ns.load(), limit_ns = collective_timeout().count();
      if (since == 0 || limit_ns <= 0) return std::string();
      const int64_t waited = steady_now_ns() - since;
      if (waited <= limit_ns || g_since_ns.load() != since) return std::string();  // over in time
      return collective_timeout_message(g_op.load(), std::chrono::nanoseconds(waited));
    });
    return w.release();
  }();
  return *watchdog;
}

void set_collective_timeout(double minutes) {
  // Past a year is no limit (and would overflow the nanoseconds); a positive limit below a
  // nanosecond is one, not none (0 means no limit).
  g_timeout_ns = minutes > 0 && minutes < 525600 ? std::max<int64_t>(1, static_cast<int64_t>(minutes * 60e9)) : 0;
}

std::chrono::nanoseconds collective_timeout() {
  return std::chrono::nanoseconds(g_suspended.load() > 0 ? 0 : g_timeout_ns.load());
}

std::string collective_timeout_message(const char* op, std::chrono::nanoseconds waited) {
  const double seconds = std::chrono::duration<double>(waited).count();
  std::ostringstream limit;  // as given: 10, 0.05
  limit << std::chrono::duration<double>(collective_timeout()).count() / 60;
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << "waited " << seconds / 60 << " minutes (";
  s.precision(1);
  s << seconds << " s) in " << (op ? op : "a collective") << ", longer than --distributed-timeout-minutes "
    << limit.str() << ": another rank, or this rank's GPU, is stuck or gone";
  return s.str();
}

CollectiveWait::CollectiveWait(const char* op) : outer_since_ns_(g_since_ns.load()), outer_op_(g_op.load()) {
  if (collective_timeout().count() <= 0) {
    g_since_ns = 0;
    return;
  }
  job_watchdog();  // started by the first wait
  g_op = op;
  g_since_ns = steady_now_ns();
}

CollectiveWait::~CollectiveWait() {
  g_since_ns = 0;  // before the op changes, so the watchdog never pairs a start with another op
  g_op = outer_op_;
  g_since_ns = outer_since_ns_;
}

CollectiveTimeoutSuspended::CollectiveTimeoutSuspended() { ++g_suspended; }
CollectiveTimeoutSuspended::~CollectiveTimeoutSuspended() { --g_suspended; }

}  // namespace trident
