// The trainer's reports besides its log line: peak and per-rank memory, the local
// checkpoints' disk space, --log-energy, the optimizer-state and zero-gradient statistics,
// --profile's capture window, --log-progress's events, and the data-parallel replicas' hash
// check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

#include "core/error.h"
#include "core/process_id.h"
#include "parallel/comm_strings.h"
#include "parallel/gather_words.h"
#include "train/checkpoint_space.h"
#include "train/checkpoint_to_load.h"
#include "train/local_checkpoint.h"
#include "train/local_replicas.h"
#include "train/progress_log.h"
#include "train/replica_check.h"
#include "train/trainer.h"

namespace trident {
namespace fs = std::filesystem;

void Trainer::start_energy_monitor() {
  energy_.reset();
  if (!opt_.log_energy) return;
  std::string why_none;
  const bool here = be_.energy_joules(&why_none).has_value();
  if (any_rank(*par_, !here)) {  // some device has no counter: none is logged, as the sums need every rank
    *out_ << "trident: note: --log-energy: " << (here ? "a rank's device has no energy counter" : why_none)
          << ": no energy logged" << std::endl;
    return;
  }
  energy_ = std::make_unique<EnergyMonitor>([this] { return be_.energy_joules(nullptr); });
}

// In rank order and in double.
double Trainer::energy_over_ranks(double joules) {
  double sum = 0;
  for (double j : gather_words(*par_->world, joules)) sum += j;
  return sum;
}

// Megatron-DeepSpeed's statistics of the Adam moments (exp_avg "momentum", exp_avg_sq
// "variance", and its square root) and the fp32 weights, in its order. Unlike Megatron-
// DeepSpeed, which adds up every rank's pieces (the TP-replicated parameters once per TP rank,
// the tied embedding twice, a replicated state once per DP rank unless --zero-stage 0), each
// parameter is counted once, so the values do not depend on the parallel layout. Reduced in
// float, as there.
std::vector<std::pair<std::string, double>> Trainer::optimizer_state_statistics() {
  const AdamWOptimizer::StateStats s =
      optimizer_->owned_state_stats([this](const ParamSpec& p) { return counted_here(p); });
  const MagnitudeStats &m = s.exp_avg, &v = s.exp_avg_sq, &w = s.weights;
  // sum (sqrt v)^2 = sum v, and the largest sqrt v is the root of the largest v.
  std::vector<float> sums = {static_cast<float>(v.sum_squares), static_cast<float>(v.sum_abs),
                             static_cast<float>(m.sum_squares), static_cast<float>(w.sum_squares),
                             static_cast<float>(v.sum_abs),     static_cast<float>(v.sum_sqrt_abs),
                             static_cast<float>(m.sum_abs),     static_cast<float>(w.sum_abs)};
  std::vector<float> maxima = {static_cast<float>(v.max_abs), static_cast<float>(m.max_abs),
                               static_cast<float>(w.max_abs)};
  // A maximum over ranks need not keep a NaN (MPI's and NCCL's are not defined on it): the
  // ranks count theirs in the sums, and a NaN anywhere makes that maximum NaN.
  for (const float x : maxima) sums.push_back(std::isnan(x) ? 1.0f : 0.0f);
  sum_over_model(Tensor(sums.data(), Shape{11}, DType::F32, Device::Cpu));
  sum_over_model(Tensor(maxima.data(), Shape{3}, DType::F32, Device::Cpu), ReduceOp::Max);
  for (int k = 0; k < 3; ++k)
    if (sums[8 + k] > 0) maxima[k] = std::nanf("");
  return {{"variance_l2", std::sqrt(sums[0])},
          {"variance_sqrt_l2", std::sqrt(sums[1])},
          {"momentum_l2", std::sqrt(sums[2])},
          {"weight_l2", std::sqrt(sums[3])},
          {"variance_l1", sums[4]},
          {"variance_sqrt_l1", sums[5]},
          {"momentum_l1", sums[6]},
          {"weight_l1", sums[7]},
          {"variance_abs_max", maxima[0]},
          {"variance_sqrt_abs_max", std::sqrt(maxima[0])},
          {"momentum_abs_max", maxima[1]},
          {"weight_abs_max", maxima[2]}};
}

// Zeros among the whole model's reduced gradients, exactly: a float sum (Megatron's) rounds
// counts above 2^24, so each rank's count travels as two int32 parts, count / 2^16 and
// count % 2^16. The first parts sum to at most the model's elements / 2^16, the second to
// less than the ranks x 2^16: both fit int32 up to 2^47 elements and 2^15 ranks.
int64_t Trainer::global_grad_zeros() {
  const int64_t zeros = optimizer_->owned_grad_zeros([this](const ParamSpec& s) { return counted_here(s); });
  constexpr int64_t kLow = int64_t{1} << 16;
  std::vector<int32_t> v = {static_cast<int32_t>(zeros / kLow), static_cast<int32_t>(zeros % kLow)};
  sum_over_model(Tensor(v.data(), Shape{2}, DType::I32, Device::Cpu));
  return static_cast<int64_t>(v[0]) * kLow + v[1];
}

// Peak device memory so far: rank 0's, and with pipeline stages every stage's (of rank 0's
// pipeline), which differ (embedding, LM head, warm-up depth). trident-plan predicts them.
void Trainer::report_peak_memory() {
  const int P = par_->grid.shape.pp;
  const std::vector<uint64_t> peaks = gather_words<uint64_t>(*par_->pp, be_.allocator().stats().peak_bytes_in_use);
  auto mib = [](uint64_t b) { return std::to_string(b / (1024.0 * 1024.0)); };
  std::string line = "trident: after the first iteration: " + mib(peaks[0]) + " MiB peak memory on rank 0";
  if (P > 1) {
    line += "; per pipeline stage:";
    for (int r = 0; r < P; ++r) line.append(" ").append(mib(peaks[r]));
    line += " MiB";
  }
  *out_ << line << std::endl;
}

void Trainer::report_memory() {
  const AllocatorStats m = be_.allocator().stats();
  constexpr uint64_t kNoDevice = ~uint64_t{0};
  const uint64_t device_used = opt_.log_device_memory_used ? be_.device_memory_used().value_or(kNoDevice) : kNoDevice;
  const std::vector<uint64_t> mine = {static_cast<uint64_t>(par_->grid.dp_rank), m.bytes_in_use, m.peak_bytes_in_use,
                                      m.bytes_reserved, m.peak_bytes_reserved, device_used};
  const std::vector<uint64_t> all = gather_words(*par_->world, mine);
  const size_t n = mine.size();
  auto mb = [](uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return std::string(text);
  };
  for (size_t r = 0; r * n < all.size(); ++r) {
    const uint64_t* v = all.data() + r * n;
    if (v[0] != 0) continue;  // as Megatron: the ranks of data-parallel rank 0
    *out_ << "[Rank " << r << "] (after " << iteration_ << " iterations) memory (MB) | allocated: " << mb(v[1])
          << " | max allocated: " << mb(v[2]) << " | reserved: " << mb(v[3]) << " | max reserved: " << mb(v[4])
          << (v[5] != kNoDevice ? " | total device memory used: " + mb(v[5]) : std::string()) << std::endl;
  }
}

namespace {

// The bytes of the local saves (iter_*) and copies (replica_*) already in `root`, which the
// first commit deletes.
uint64_t bytes_of_earlier_saves(const fs::path& root) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (fs::directory_iterator top(root, ec), end; !ec && top != end; top.increment(ec)) {
    const std::string name = top->path().filename().string();
    if (name.rfind("iter_", 0) == 0 || name.rfind(kReplicaPrefix, 0) == 0) bytes += bytes_under(top->path());
  }
  return bytes;
}

}  // namespace

std::string Trainer::local_checkpoint_space_warning() {
  const int me = par_->world_rank();
  const fs::path root = local_checkpoint_root(opt_, me);
  // Each rank's save (own files, and with --replication its copies of its clique's), what its
  // folder holds already, and the file system it is on.
  const std::vector<uint64_t> own = gather_words(*par_->world, local_save_bytes());
  uint64_t save = own[static_cast<size_t>(me)];
  if (opt_.replication)
    for (int other : replication_clique(me, par_->grid.shape.world, opt_.replication_jump, opt_.replication_factor))
      if (other != me) save += own[static_cast<size_t>(other)];
  const std::vector<uint64_t> all =
      gather_words(*par_->world,
                   std::vector<uint64_t>{save, bytes_of_earlier_saves(root), file_system_key(root.string())});
  // The ranks whose folders share this rank's disk (a node's ranks, usually) write together: a
  // save is written beside the previous one, which goes once every rank has committed, so the
  // disk must hold S at the first save and 2 S - E at the later ones (E: what lies there now,
  // deleted at the first commit).
  uint64_t S = 0, E = 0;
  int sharing = 0;
  for (size_t r = 0; 3 * r < all.size(); ++r)
    if (all[3 * r + 2] == all[3 * static_cast<size_t>(me) + 2] && all[3 * r + 2] != 0) {
      S += all[3 * r];
      E += all[3 * r + 1];
      ++sharing;
    }
  std::string mine;
  const std::optional<uint64_t> free = free_bytes(root.string());
  const uint64_t later = 2 * S > E ? 2 * S - E : 0;
  if (sharing > 0 && free && *free < std::max(S, later))
    mine = "rank " + std::to_string(me) + " (host " + host_name() + "): " + non_persistent_dir_flag(opt_) + " " +
           root.string() + ": the local saves of the " + std::to_string(sharing) + " rank" +
           (sharing > 1 ? "s" : "") + " on this file system take " + gigabytes(S) +
           (opt_.replication ? " (with their cliques' copies)" : "") + " each time, written before the previous " +
           "ones are deleted" + (E > 0 ? " (" + gigabytes(E) + " of earlier saves there now)" : "") + "; it has " +
           gigabytes(*free) + " free: the " + (*free < S ? "first" : "second") + " local save will fail";
  return first_failure(*par_->world, mine);
}

// --profile-ranks names global ranks: each must be one of the job's.
void Trainer::check_profile_ranks() {
  if (!opt_.profile) return;
  const int world = par_->grid.shape.world;
  for (int r : opt_.profile_rank_ids)
    if (r >= world)
      throw ConfigError("--profile-ranks: rank " + std::to_string(r) + " is not one of this job's " +
                        std::to_string(world) + " ranks");
  std::string ranks;
  for (int r : opt_.profile_rank_ids) {
    if (!ranks.empty()) ranks += ' ';
    ranks += std::to_string(r);
  }
  *out_ << "trident: --profile: the device profiler captures iterations " << opt_.profile_step_start + 1 << " to "
        << opt_.profile_step_end << " on rank" << (opt_.profile_rank_ids.size() > 1 ? "s " : " ") << ranks
        << " (run under nsys profile --capture-range=cudaProfilerApi)";
  // Megatron says nothing when the window lies past the run's end; a note saves a user the
  // wait for a capture that never comes.
  if (opt_.profile_step_start >= opt_.train_iters)
    *out_ << "; the run ends after iteration " << opt_.train_iters << ": nothing will be captured";
  else if (opt_.profile_step_end > opt_.train_iters)
    *out_ << "; the run ends after iteration " << opt_.train_iters << ", before --profile-step-end: the capture "
          << "ends with the process";
  *out_ << std::endl;
}

// Megatron's --profile: the capture starts before the iteration that follows
// --profile-step-start completed ones and stops after the one that completes
// --profile-step-end, on --profile-ranks; in between each iteration and each timer's phase is
// a named range.
void Trainer::profile_before_iteration() {
  if (!opt_.profile || iteration_ != opt_.profile_step_start || !opt_.profile_rank_ids.count(par_->grid.rank))
    return;
  profiling_ = true;
  timers_.set_ranges(true);
  if (!be_.profiler_start())
    log_ << "trident: rank " << par_->grid.rank << ": --profile: the " << be_.name()
         << " backend has no device profiler to start; only the ranges' calls are made" << std::endl;
}

void Trainer::profile_after_iteration() {
  if (!profiling_ || iteration_ != opt_.profile_step_end) return;
  be_.profiler_stop();
  timers_.set_ranges(false);
  profiling_ = false;
}

void Trainer::start_progress_log() {
  if (!progress_logged()) return;
  run_on_rank0_for_all(*par_, [&] {
    progress_start(opt_.save, par_->grid.shape.world);  // throws naming the line that does not read
    append_progress(opt_.save, par_->grid.shape.world, "Starting job");
  });
}

void Trainer::log_progress(const std::string& event) {
  if (!progress_logged() || par_->world_rank() != 0) return;
  try {
    append_progress(opt_.save, par_->grid.shape.world, event);
  } catch (const Error& e) {  // a diagnostic log: the run goes on
    *out_ << "trident: note: --log-progress: " << e.what() << std::endl;
  }
}

// Megatron's compute_throughputs_and_append_to_progress_log: this run's FLOPs over the time
// since the process started, and the FLOPs since the first start of this world size in the
// log over the time since then, per GPU.
void Trainer::log_saved_progress(bool async) {
  if (!progress_logged() || par_->world_rank() != 0) return;
  const double world = par_->grid.shape.world;
  const double job = (flops_so_far_ - flops_at_start_) / (minutes_since_start() * 60 * 1e12 * world);
  double cumulative = job;
  try {
    if (const std::optional<ProgressStart> start = progress_start(opt_.save, par_->grid.shape.world)) {
      const double s = std::chrono::duration<double>(std::chrono::system_clock::now() - start->time).count();
      cumulative = (flops_so_far_ - start->flops) / (s * 1e12 * world);
    }
  } catch (const Error& e) {  // another writer garbled it since the start: this run's own figure
    *out_ << "trident: note: --log-progress: " << e.what() << "; the cumulative throughput is this run's" << std::endl;
  }
  log_progress(saved_checkpoint_event(async, iteration_, job, cumulative, flops_so_far_,
                                      consumed_samples_ * static_cast<uint64_t>(opt_.model.seq_length)));
}

// Megatron asserts the same after its train_step. The ranks of a data-parallel group find the
// same difference (they compare the same gathered hashes); the lowest world rank that found
// one stops the job, in one line, and the others go on into the next iteration until its
// abort ends them.
void Trainer::check_replicas_agree() {
  if (par_->grid.shape.dp == 1) return;
  optimizer_->wait_for_all_params();  // --overlap-param-gather: the gathers of the last step
  const std::string why = replica_mismatch(be_, model().params(), *par_->dp);
  const int world = par_->world->size(), me = par_->world_rank();
  float lowest = why.empty() ? 0.0f : static_cast<float>(world - me);  // exact: ranks < 2^24
  par_->world->allreduce(Tensor(&lowest, Shape{1}, DType::F32, Device::Cpu), ReduceOp::Max);
  if (!why.empty() && static_cast<int>(lowest) == world - me)
    throw Error("--check-weight-hash-across-dp-replicas-interval: after iteration " + std::to_string(iteration_) +
                ", " + why + " (tensor-parallel rank " + std::to_string(par_->grid.tp_rank) + ", pipeline stage " +
                std::to_string(par_->grid.pp_rank) + ")");
}

}  // namespace trident
