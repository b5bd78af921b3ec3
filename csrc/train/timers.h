// Megatron's timers: wall-clock time of the phases of an iteration, per rank, printed after
// the log line as the minimum and maximum over the ranks (--timing-log-level 1|2,
// --timing-log-option minmax|max|all) and written as "<name>-time" TensorBoard scalars
// (--log-timers-to-tensorboard, the maximum), each averaged over the iterations since the
// last print or write.
//
// Megatron's names and levels (what trident's iteration has of them):
//   1: forward-backward (the schedule and the gradients' reductions), embedding-grads-all-reduce
//      (the tied embedding's two copies), all-grads-sync (the data-parallel reductions' end),
//      optimizer (everything after forward-backward), optimizer-clip-main-grad (the global
//      norm, which is also trident's inf/NaN check: no optimizer-unscale-and-check-inf),
//      optimizer-count-zeros, optimizer-inner-step (the fused unscale, clip, AdamW and copy to
//      the 16-bit parameters: no optimizer-copy-main-to-model-params), params-all-gather (ZeRO).
//   2: forward-compute, backward-compute, batch-generator (inside forward-compute), and the
//      pipeline's transfers (forward-recv, forward-send, backward-recv, backward-send, and
//      Megatron's names for their combinations).
// A timer waits for the device at its start and stop (as Megatron's synchronize), so level 2
// costs time on a GPU and takes the overlap of communication with computation away.
//
// While a --profile capture runs (set_ranges), every scope is also a named range on the
// profiler's timeline (NVTX), whatever the level: the ranges wait for nothing.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace trident {

class Backend;
class Comm;

enum class TimerId {
  ForwardBackward,
  ForwardCompute,
  BackwardCompute,
  BatchGenerator,
  ForwardRecv,
  ForwardSend,
  BackwardRecv,
  BackwardSend,
  ForwardSendForwardRecv,
  ForwardSendBackwardRecv,
  BackwardSendForwardRecv,
  BackwardSendBackwardRecv,
  ForwardBackwardSendForwardBackwardRecv,
  EmbeddingGradsAllReduce,
  AllGradsSync,
  ParamsAllGather,
  OptimizerClipMainGrad,
  OptimizerCountZeros,
  OptimizerInnerStep,
  Optimizer,
  kCount
};
inline constexpr size_t kTimerCount = static_cast<size_t>(TimerId::kCount);

const char* timer_name(TimerId id);  // Megatron's: "forward-backward", ...
int timer_level(TimerId id);         // 1 or 2

// How the times of the ranks are printed (--timing-log-option).
enum class TimingLogOption { MinMax, Max, All };
TimingLogOption parse_timing_log_option(const std::string& s);  // ConfigError naming --timing-log-option

// The printed block: Megatron's format, times in ms. `per_rank_ms[rank][timer]`; a timer
// that is 0 on every rank is left out (and one that is 0 on some rank is left out of its
// minimum, as Megatron filters); "" when no timer ran.
std::string format_timers(const std::vector<std::array<double, kTimerCount>>& per_rank_ms, TimingLogOption option);

// The timers that ran on some rank with their maximum over the ranks (Megatron's
// TensorBoard scalars), in TimerId's order.
std::vector<std::pair<const char*, double>> timer_maxima(const std::vector<std::array<double, kTimerCount>>& per_rank);

class Timers {
 public:
  // `level` 0 times nothing. `backend` is synchronized at each start and stop.
  Timers(int level, Backend* backend);

  // Times `id` from construction to destruction when its level is enabled, and marks it as
  // a range while ranges are on; else nothing.
  class Scope {
   public:
    Scope(Timers* timers, TimerId id);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timers* timers_;
    Backend* ranged_;  // the backend the range was pushed on, or null
    TimerId id_;
    std::chrono::steady_clock::time_point start_;
  };
  bool enabled(TimerId id) const { return timer_level(id) <= level_; }
  bool any() const { return level_ > 0; }
  // Whether scopes push ranges on the backend (--profile's capture; off at first).
  void set_ranges(bool on) { ranges_ = on; }

  // Every rank's milliseconds per timer since the last take of `which` (0: the log line's,
  // 1: TensorBoard's; each has its own sums), divided by `iterations`; resets those sums.
  // Collective over `world` (null: one process).
  std::vector<std::array<double, kTimerCount>> take(Comm* world, int which, double iterations);

 private:
  void add(TimerId id, double ms);
  int level_;
  Backend* backend_;
  bool ranges_ = false;
  std::array<std::array<double, kTimerCount>, 2> ms_{};
};

}  // namespace trident
