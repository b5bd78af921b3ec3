#include "train/timers.h"

#include <algorithm>
#include <cstdio>

#include "core/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parallel/comm.h"

namespace trident {
namespace {

struct TimerDef {
  const char* name;
  int level;
};
// In TimerId's order, which is the order of Megatron's timers_to_log.
constexpr std::array<TimerDef, kTimerCount> kTimers = {{
    {"forward-backward", 1},
    {"forward-compute", 2},
    {"backward-compute", 2},
    {"batch-generator", 2},
    {"forward-recv", 2},
    {"forward-send", 2},
    {"backward-recv", 2},
    {"backward-send", 2},
    {"forward-send-forward-recv", 2},
    {"forward-send-backward-recv", 2},
    {"backward-send-forward-recv", 2},
    {"backward-send-backward-recv", 2},
    {"forward-backward-send-forward-backward-recv", 2},
    {"embedding-grads-all-reduce", 1},
    {"all-grads-sync", 1},
    {"params-all-gather", 1},
    {"optimizer-clip-main-grad", 1},
    {"optimizer-count-zeros", 1},
    {"optimizer-inner-step", 1},
    {"optimizer", 1},
}};

// Megatron's "\n    <name> ........: " with the name and its dots filling 48 columns.
std::string dotted(const char* name) {
  std::string s = "\n    ";
  s += name;
  s += ' ';
  const size_t width = 5 + 48;
  if (s.size() < width) s.append(width - s.size(), '.');
  s += ": ";
  return s;
}

}  // namespace

const char* timer_name(TimerId id) { return kTimers[static_cast<size_t>(id)].name; }
int timer_level(TimerId id) { return kTimers[static_cast<size_t>(id)].level; }

TimingLogOption parse_timing_log_option(const std::string& s) {
  if (s == "minmax") return TimingLogOption::MinMax;
  if (s == "max") return TimingLogOption::Max;
  if (s == "all") return TimingLogOption::All;
  throw ConfigError("--timing-log-option: unknown option '" + s + "' (expected minmax, max or all)");
}

std::string format_timers(const std::vector<std::array<double, kTimerCount>>& per_rank_ms, TimingLogOption option) {
  std::string out;
  for (size_t t = 0; t < kTimerCount; ++t) {
    const char* name = kTimers[t].name;
    if (option == TimingLogOption::All) {
      bool named = false;
      for (size_t r = 0; r < per_rank_ms.size(); ++r) {
        if (per_rank_ms[r][t] <= 0) continue;
        if (!named) out += "\n  " + std::string(name) + ":";
        named = true;
        char line[96];
        std::snprintf(line, sizeof line, "\n     rank %2d: %.2f", static_cast<int>(r), per_rank_ms[r][t]);
        out += line;
      }
      continue;
    }
    double lo = 0, hi = 0;
    bool seen = false;
    for (const auto& rank : per_rank_ms) {
      if (rank[t] <= 0) continue;
      lo = seen ? std::min(lo, rank[t]) : rank[t];
      hi = seen ? std::max(hi, rank[t]) : rank[t];
      seen = true;
    }
    if (!seen) continue;
    char times[96];
    if (option == TimingLogOption::Max)
      std::snprintf(times, sizeof times, "%.2f", hi);
    else
      std::snprintf(times, sizeof times, "(%.2f, %.2f)", lo, hi);
    out += dotted(name);
    out += times;
  }
  if (out.empty()) return out;
  const char* head = option == TimingLogOption::All   ? "times across ranks (ms):"
                     : option == TimingLogOption::Max ? "max time across ranks (ms):"
                                                      : "(min, max) time across ranks (ms):";
  return head + out;
}

std::vector<std::pair<const char*, double>> timer_maxima(const std::vector<std::array<double, kTimerCount>>& per_rank) {
  std::vector<std::pair<const char*, double>> out;
  for (size_t t = 0; t < kTimerCount; ++t) {
    double hi = 0;
    for (const auto& rank : per_rank) hi = std::max(hi, rank[t]);
    if (hi > 0) out.emplace_back(kTimers[t].name, hi);
  }
  return out;
}

Timers::Timers(int level, Backend* backend) : level_(level), backend_(backend) {}

Timers::Scope::Scope(Timers* timers, TimerId id)
    : timers_(timers && timers->enabled(id) ? timers : nullptr),
      ranged_(timers && timers->ranges_ ? timers->backend_ : nullptr),
      id_(id) {
  if (ranged_) ranged_->range_push(timer_name(id));
  if (!timers_) return;
  if (timers_->backend_) timers_->backend_->synchronize();
  start_ = std::chrono::steady_clock::now();
}

Timers::Scope::~Scope() {
  if (timers_) {
    if (timers_->backend_) timers_->backend_->synchronize();
    timers_->add(id_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
  }
  if (ranged_) ranged_->range_pop();
}

void Timers::add(TimerId id, double ms) {
  for (auto& sums : ms_) sums[static_cast<size_t>(id)] += ms;
}

std::vector<std::array<double, kTimerCount>> Timers::take(Comm* world, int which, double iterations) {
  const int ranks = world ? world->size() : 1, me = world ? world->rank() : 0;
  std::vector<float> all(static_cast<size_t>(ranks) * kTimerCount, 0.0f);
  for (size_t t = 0; t < kTimerCount; ++t)
    all[static_cast<size_t>(me) * kTimerCount + t] = static_cast<float>(ms_[which][t] / iterations);
  ms_[which].fill(0.0);
  if (world && ranks > 1) {
    const auto n = static_cast<int64_t>(kTimerCount);
    world->allgather(Tensor(all.data() + me * kTimerCount, Shape{n}, DType::F32, Device::Cpu),
                     Tensor(all.data(), Shape{n * ranks}, DType::F32, Device::Cpu));
  }
  std::vector<std::array<double, kTimerCount>> per_rank(ranks);
  for (int r = 0; r < ranks; ++r)
    for (size_t t = 0; t < kTimerCount; ++t) per_rank[r][t] = all[static_cast<size_t>(r) * kTimerCount + t];
  return per_rank;
}

}  // namespace trident
