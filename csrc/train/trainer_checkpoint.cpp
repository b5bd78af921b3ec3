// Trainer checkpoints, saving: every rank writes its own files into one temporary directory
// (see ckpt/sharded_checkpoint.h for the layout), rank 0 writes metadata.json with every
// file's checksum and commits (rename, then the latest pointer), so a crash at any point
// leaves the previous checkpoint as the latest. Loading is in trainer_checkpoint_load.cpp.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <exception>
#include <system_error>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/sharded_checkpoint.h"
#include "core/error.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "train/checkpoint_to_load.h"
#include "train/local_checkpoint.h"
#include "train/local_replicas.h"
#include "train/pending_save.h"
#include "train/scheduler_state.h"
#include "train/trainer.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

// A tensor to save: read in place on the CPU; from a device, copied piece by piece straight
// into the file writer's staging buffer (no host copy of the whole state).
StTensorRef tensor_ref(Backend& be, std::string name, StDType dtype, std::vector<int64_t> shape, const Tensor& t) {
  StTensorRef r{std::move(name), dtype, std::move(shape), nullptr};
  if (t.device == Device::Cpu) {
    r.data = t.data;
  } else {
    r.fill = [&be, t](void* dst, uint64_t offset, size_t len) {
      const auto n = static_cast<int64_t>(len / dtype_size(t.dtype));  // whole elements (safetensors.h)
      be.copy_to_host(dst, Tensor(static_cast<char*>(t.data) + offset, Shape{n}, t.dtype, t.device));
    };
  }
  return r;
}

// Test hooks, right after a rank has written its files, before the checkpoint is committed:
// TRIDENT_TEST_CRASH_IN_SAVE=<world rank> kills that rank; TRIDENT_TEST_SIGNAL_IN_SAVE=<signal>
// sends every rank that signal (a second SIGTERM while the stop's save is written).
void save_test_hooks(int rank) {
  const char* v = std::getenv("TRIDENT_TEST_CRASH_IN_SAVE");
  if (v != nullptr && std::atoi(v) == rank) std::_Exit(9);
  if (const char* sig = std::getenv("TRIDENT_TEST_SIGNAL_IN_SAVE")) std::raise(std::atoi(sig));
}

// Test hook: TRIDENT_TEST_SLOW_ASYNC_WRITE_S=<seconds> holds --async-save's writer that long
// before it writes (a slow or hung disk).
void slow_async_write_test_hook() {
  if (const char* v = std::getenv("TRIDENT_TEST_SLOW_ASYNC_WRITE_S"))
    std::this_thread::sleep_for(std::chrono::seconds(std::atoi(v)));
}

// What prune() left outside the latest checkpoint's history, said once per run: which
// directories, and why they stay.
std::string abandoned_note(const fs::path& root, int64_t latest, const std::vector<int64_t>& abandoned) {
  std::string names;
  for (int64_t it : abandoned) names += (names.empty() ? "" : ", ") + iteration_dir_name(it);
  return "trident: --keep-last: " + names + " in " + root.string() + " are not in the history of the latest " +
         "checkpoint (iteration " + std::to_string(latest) + "), left by an abandoned continuation: kept and not " +
         "counted (a save of the same iteration replaces one); delete them by hand if they are not wanted";
}

}  // namespace

SnapshotArena::~SnapshotArena() {
  // On the way out of an error the process ends: unlocking could wait for a device that
  // never finishes (as Backend::abandon_all_memory leaves its memory).
  // release() cannot throw: munmap and Backend::unpin_host_memory report nothing.
  if (std::uncaught_exceptions() == 0) release();
}

void SnapshotArena::release() {
  if (!base_) return;
  if (pinned_) device_->unpin_host_memory(base_);
  ::munmap(base_, capacity_);
  base_ = nullptr;
  capacity_ = 0;
  pinned_ = false;
}

char* SnapshotArena::reserve(size_t bytes) {
  if (bytes <= capacity_) return base_;
  release();
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t len = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    throw IoError("--async-save: cannot map " + std::to_string(len) +
                  " bytes of host memory for a copy of the state: " + std::strerror(errno));
  ::madvise(m, len, MADV_HUGEPAGE);  // advice: without transparent huge pages, plain pages
  base_ = static_cast<char*>(m);
  capacity_ = len;
  pinned_ = device_ && device_->pin_host_memory(base_, len);
  return base_;
}

void PendingSave::take_snapshot(SnapshotArena& arena) {
  auto bytes_of = [](const StTensorRef& t) { return static_cast<size_t>(numel_of(t.shape)) * st_dtype_size(t.dtype); };
  auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };  // each copy 64-byte aligned
  size_t total = 0;
  for (const File& f : files)
    for (const StTensorRef& t : f.tensors) total += aligned(bytes_of(t));
  char* copy = arena.reserve(total);
  for (File& f : files)
    for (StTensorRef& t : f.tensors) {
      const size_t bytes = bytes_of(t);
      if (t.fill) t.fill(copy, 0, bytes);  // a device tensor: one copy of the whole
      else std::memcpy(copy, t.data, bytes);
      t.data = copy;
      t.fill = nullptr;
      copy += aligned(bytes);
    }
}

void PendingSave::write_files() {
  std::ostringstream lines;
  for (const File& f : files) {
    const WrittenFile w = write_safetensors((temp / f.rel).string(), f.tensors, file_metadata);
    lines << f.rel << ' ' << w.size << ' ' << w.xxh3 << '\n';
    bytes += w.size;
  }
  records = lines.str();
  save_test_hooks(rank);
}

void Trainer::save_checkpoint(SaveKind kind) {
  finish_save(/*wait=*/true);  // one save at a time: the previous one is committed first
  const CollectiveTimeoutSuspended io;  // ranks wait for each other's writes: no time limit
  auto save = std::make_unique<PendingSave>();
  save->start = std::chrono::steady_clock::now();
  save->iteration = iteration_;
  save->persistent = kind == SaveKind::kPersistent;
  save->local = !save->persistent && opt_.local_checkpoints();
  const ProcessGrid& grid = par_->grid;
  save->root = save->persistent ? fs::path(opt_.save)
               : save->local    ? local_checkpoint_root(opt_, grid.rank)
                                : fs::path(opt_.non_persistent_dir(opt_.save));
  optimizer_->wait_for_all_params();  // --overlap-param-gather: the gathers of the last step
  Comm& world = *par_->world;
  const fs::path root = save->root;
  std::string token = grid.rank == 0 ? make_save_token() : "";
  broadcast_string(world, token, 0);
  save->temp = temp_iteration_dir(root, iteration_, token);
  save->token = token;
  save->rank = grid.rank;
  save->sole_writer = grid.shape.world == 1 || save->local;
  if (grid.rank == 0 || save->local) {  // rank 0 (local: each rank) holds the temporary directory until the commit
    const TempIterationDir& temp_dir = save->temp_dir.emplace(root, iteration_, token);
    if (!temp_dir.save_lock_note().empty()) *out_ << "trident: note: " << temp_dir.save_lock_note() << std::endl;
    for (const fs::path& stale : temp_dir.removed_stale())
      *out_ << "trident: removed " << stale.string() << ", left by a save whose process is gone" << std::endl;
    // Said once a run: only this host's dead writers can be told apart from live ones.
    if (noted_other_writers_.insert(root.string()).second) {
      for (const fs::path& other : temporaries_of_other_writers(root, token))
        *out_ << "trident: note: " << other.string() << " is kept: its save or deletion may still run (on "
              << "another host, or here in another process), or died without the lock file that proves it "
              << "gone; delete it when no job writes to " << root.string() << std::endl;
    }
  }
  world.barrier();
  const std::string rank_dir = rank_dir_name(grid.tp_rank, grid.pp_rank, grid.shape.pp);
  std::error_code mkdir_error;  // a full disk or inode table: one line, as a failed write
  fs::create_directories(save->temp / rank_dir, mkdir_error);
  if (mkdir_error)
    throw_write_failure((save->temp / rank_dir).string() + ": cannot create the directory: " + mkdir_error.message(),
                        mkdir_error.value());
  save->file_metadata = rank_file_metadata(grid.shape.tp, grid.tp_rank, grid.pp_rank, grid.dp_rank);
  const ParamStore& P = model().params();
  // What the data-parallel ranks hold alike (the parameters; without ZeRO, the optimizer
  // state) goes into a global checkpoint from DP rank 0; into a local one from every rank, or
  // split among them (fully_parallel).
  const std::vector<int> owners =
      save->local ? shared_state_owners(opt_.non_persistent_local_ckpt_algo) : std::vector<int>{};
  const auto writes_shared = [&](size_t param) {
    return save->local ? owners.empty() || owners[param] == grid.dp_rank : grid.dp_rank == 0;
  };
  const std::vector<LocalParam>& params = P.list();
  if (save->local || grid.dp_rank == 0) {
    PendingSave::File& f = save->files.emplace_back(PendingSave::File{rank_dir + "/" + kModelFileName, {}});
    for (size_t i = 0; i < params.size(); ++i) {
      const LocalParam& p = params[i];
      if (writes_shared(i))
        f.tensors.push_back(
            tensor_ref(be_, p.spec.name, to_st_dtype(P.param(p).dtype), shape_vec(p.shape), P.param(p)));
    }
  }
  if (!opt_.no_save_optim && (optimizer_->sharded() || save->local || grid.dp_rank == 0)) {
    const ShardPlan& plan = optimizer_->plan();
    PendingSave::File& f =
        save->files.emplace_back(PendingSave::File{rank_dir + "/" + optimizer_file_name(grid.dp_rank), {}});
    for (size_t i = 0; i < params.size(); ++i) {
      const LocalParam& p = params[i];
      if (!optimizer_->sharded() && !writes_shared(i)) continue;  // a ZeRO shard is the rank's own
      for (const ShardPiece& s : plan.owned_pieces(FlatRange{p.offset, p.offset + p.numel()}))
        for (int k = 0; k < 3; ++k) {
          const Tensor src = optimizer_->state_slice(static_cast<AdamWOptimizer::State>(k), s);
          f.tensors.push_back(tensor_ref(be_,
                                         optimizer_piece_key(p.spec.name, kOptimizerStates[k], s.flat_begin - p.offset),
                                         StDType::F32, {s.size()}, src));
        }
    }
  }
  if (grid.rank == 0 || save->local) save->metadata = checkpoint_metadata(kind, root, token);
  if (save->persistent) last_saved_iteration_ = iteration_;
  if (!opt_.async_save) {
    save->write_files();
    pending_save_ = std::move(save);
    commit_save();
    return;
  }
  if (!snapshot_arena_) snapshot_arena_ = std::make_unique<SnapshotArena>(&be_);
  save->take_snapshot(*snapshot_arena_);
  save->waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - save->start).count();
  PendingSave& s = *save;
  s.writer = std::thread([&s] {
    try {
      slow_async_write_test_hook();
      s.write_files();
    } catch (...) {
      s.error = std::current_exception();
    }
    s.written.store(true, std::memory_order_release);
  });
  pending_save_ = std::move(save);
  if (pending_save_->persistent) log_saved_progress(/*async=*/true);
  *out_ << "trident: saving " << (pending_save_->persistent ? "" : "non-persistent ") << "checkpoint at iteration "
        << iteration_ << " in the background (training waited "
        << pending_save_->waited_s << " s for a copy of the state"
        << (snapshot_arena_->pinned() ? " in page-locked host memory" : "") << ")" << std::endl;
}

// --replication: each rank of a clique sends its committed local checkpoint to every other
// one (a round a distance around the clique) and keeps theirs. A copy that failed ends the
// job, as a failed save does, once every round is through.
void Trainer::replicate_local_save(const PendingSave& save, const std::vector<int>& clique) {
  const int me = par_->grid.rank, size = static_cast<int>(clique.size());
  const int at = static_cast<int>(std::find(clique.begin(), clique.end(), me) - clique.begin());
  std::string error;
  bool storage = false;  // the first error was this rank's disk filling up
  for (int step = 1; step < size; ++step) {
    const int to = clique[(at + step) % size], from = clique[(at - step + size) % size];
    bool full = false;
    const std::string e = exchange_checkpoint_folders(*par_->world, iteration_dir(save.root, save.iteration), to,
                                                      replica_root(opt_, me, from), save.iteration, from, save.token,
                                                      &full);
    if (error.empty() && !e.empty()) {
      error = "--replication: " + e;
      storage = full;
    }
  }
  if (storage) throw StorageError(error);
  if (!error.empty()) throw IoError(error);
}

// The tensor bytes save_checkpoint writes into this rank's local checkpoint (its choice of
// parameters and optimizer pieces, above, summed instead of written).
uint64_t Trainer::local_save_bytes() {
  const ParamStore& P = model().params();
  const std::vector<LocalParam>& params = P.list();
  const std::vector<int> owners = shared_state_owners(opt_.non_persistent_local_ckpt_algo);
  const auto writes_shared = [&](size_t i) { return owners.empty() || owners[i] == par_->grid.dp_rank; };
  uint64_t bytes = 0;
  for (size_t i = 0; i < params.size(); ++i)
    if (writes_shared(i)) bytes += static_cast<uint64_t>(params[i].numel()) * dtype_size(opt_.model.dtype);
  if (opt_.no_save_optim) return bytes;
  const ShardPlan& plan = optimizer_->plan();
  for (size_t i = 0; i < params.size(); ++i) {
    const LocalParam& p = params[i];
    if (!optimizer_->sharded() && !writes_shared(i)) continue;
    for (const ShardPiece& s : plan.owned_pieces(FlatRange{p.offset, p.offset + p.numel()}))
      bytes += 3 * sizeof(float) * static_cast<uint64_t>(s.size());
  }
  return bytes;
}

std::vector<int> Trainer::shared_state_owners(const std::string& local_algo) {
  if (local_algo != "fully_parallel" || par_->grid.shape.dp == 1) return {};
  std::vector<int64_t> numels;
  for (const LocalParam& p : model().params().list()) numels.push_back(p.numel());
  return fully_parallel_owners(numels, par_->grid.shape.dp);
}

// The metadata of a checkpoint of the present state into `root`, its files to come (rank 0's;
// of a local one, each rank's).
CheckpointMetadata Trainer::checkpoint_metadata(SaveKind kind, const fs::path& root, const std::string& token) {
  CheckpointMetadata m;
  m.model = opt_.model;
  m.iteration = iteration_;
  m.consumed_samples = static_cast<int64_t>(consumed_samples_);
  m.layout = checkpoint_layout(opt_, par_->grid.shape);
  m.trainer_state = {{"consumed_valid_samples", consumed_valid_samples_},
                     {"skipped_train_samples", skipped_samples_},  // Megatron's name
                     {"consumed_train_tokens", consumed_tokens_},
                     {"skipped_iterations", skipped_iterations_},
                     {"nan_iterations", nan_iterations_},
                     {"num_floating_point_operations_so_far", flops_so_far_},  // Megatron's name
                     {"global_batch_size", opt_.global_batch_size},
                     {kSampleOrderKey, kSampleOrder},
                     {kDataSeedKey, opt_.seed}};
  if (!applied_skip_ranges_.empty()) {  // --skip-train-iteration-range's (data_skip_ranges.h)
    nlohmann::json ranges = nlohmann::json::array();
    for (const IterationRange& r : applied_skip_ranges_) ranges.push_back({r.first, r.last});
    m.trainer_state[kAppliedSkipRangesKey] = ranges;
    m.trainer_state[kSkippedRangeSamplesKey] = range_skipped_samples_;
  }
  if (!opt_.no_save_optim) {  // Megatron's --no-save-optim also leaves out the scheduler
    const LossScalerState ls = scaler_.state();
    m.trainer_state["optimizer_steps"] = optimizer_->steps_taken();
    m.trainer_state[kAdamKey] = {{"beta1", opt_.adam_beta1}, {"beta2", opt_.adam_beta2}, {"eps", opt_.adam_eps}};
    // Megatron's name: the LR schedule's position in samples of successful updates.
    m.trainer_state["opt_param_scheduler"] = scheduler_state({schedule_, wd_schedule_}, scheduler_);
    // Only a dynamic scaler has a state (Megatron's ConstantGradScaler saves nothing): a
    // bf16 or fp32 run's "scale 1" would otherwise replace --initial-loss-scale when an
    // fp16 run resumes from it.
    if (scaler_.dynamic()) {
      m.trainer_state["loss_scaler"] = {{"scale", ls.scale}, {"growth_tracker", ls.growth_tracker},
                                        {"hysteresis_tracker", ls.hysteresis_tracker}};
      // DeepSpeed's fused scaler counts its clean steps past the window (it grows at each
      // multiple): an export to Megatron's scaler needs the window to convert the count.
      if (scaler_.kind() == LossScaleKind::DeepSpeedFused) {
        m.trainer_state["loss_scaler"]["style"] = "deepspeed_fused";
        m.trainer_state["loss_scaler"]["window"] = make_loss_scaler_config(opt_).growth_interval;
      }
    }
  }
  if (!opt_.no_save_rng) m.trainer_state[kRngStateKey] = model().dropout_seed();
  const auto iteration_or_null = [](std::optional<int64_t> it) {
    return it ? nlohmann::json(*it) : nlohmann::json(nullptr);
  };
  if (kind == SaveKind::kPersistent) {
    m.trainer_state[kPreviousCheckpointKey] = iteration_or_null(previous_checkpoint_);
  } else {
    // Its folder's history is simply the order of the saves, whichever run made them, so
    // that the commit's prune deletes the one before. The persistent history it continues
    // goes on record for a resume from it.
    m.trainer_state[kPreviousCheckpointKey] = iteration_or_null(find_latest_iteration(root));
    m.trainer_state[kNonPersistentKey] = true;
    if (opt_.local_checkpoints()) {
      m.trainer_state[kLocalSaveTokenKey] = token;
      m.trainer_state[kLocalAlgoKey] = opt_.non_persistent_local_ckpt_algo;
    }
    std::error_code ec;
    const fs::path save = fs::weakly_canonical(opt_.save, ec);
    m.trainer_state[kNonPersistentSaveKey] = (ec ? fs::absolute(opt_.save) : save).string();
    m.trainer_state[kPreviousPersistentKey] = iteration_or_null(previous_checkpoint_);
  }
  return m;
}

void Trainer::finish_save(bool wait) {
  if (!pending_save_) return;
  if (!wait) {  // Megatron's maybe_finalize_async_save: commit once every rank's writer is done
    if (any_rank(*par_, !pending_save_->written.load(std::memory_order_acquire))) return;
  }
  const CollectiveTimeoutSuspended io;  // ranks wait for each other's writes: no time limit
  if (pending_save_->writer.joinable()) pending_save_->writer.join();
  // A rank whose write failed ends the job (the others wait for it below).
  if (pending_save_->error) std::rethrow_exception(pending_save_->error);
  commit_save();
}

// Rank 0 collects every file's record, writes the metadata and commits; of a local save,
// each rank its own, and once all have committed, each deletes its previous one.
void Trainer::commit_save() {
  PendingSave& save = *pending_save_;
  int64_t retired = -1;  // rank 0: the checkpoint --save-retain-interval deletes, or -1
  const ProcessGrid& grid = par_->grid;
  Comm& world = *par_->world;
  const fs::path root = save.root;
  // The previous --save-retain-interval removal, if still running, is waited for here, where
  // every rank waits for this commit without a time limit: waited for after the barrier below,
  // it would hold rank 0 while the others' next collective counts down to a false "stuck".
  if (grid.rank == 0) join_retirement();
  if (grid.rank != 0 && !save.local) {
    send_string(world, save.records, 0);
  } else {
    std::string all = save.records;
    if (!save.local)
      for (int r = 1; r < grid.shape.world; ++r) all += recv_string(world, r);
    CheckpointMetadata& m = *save.metadata;
    std::istringstream in(all);
    FileRecord f;
    while (in >> f.path >> f.size >> f.xxh3) m.files.push_back(f);
    write_metadata((save.temp / kMetadataFileName).string(), m);
  }
  float megabytes = static_cast<float>(save.bytes / 1e6);  // also the barrier before the commit
  world.allreduce(Tensor(&megabytes, Shape{1}, DType::F32, Device::Cpu), ReduceOp::Sum);
  if (save.local) {
    save.temp_dir->commit();
    world.barrier();  // a load takes the newest save that every rank holds: keep the previous until then
    std::vector<int> clique{grid.rank};  // the ranks whose copies this rank keeps, itself included
    if (opt_.replication) {
      clique = replication_clique(grid.rank, grid.shape.world, opt_.replication_jump, opt_.replication_factor);
      replicate_local_save(save, clique);
      world.barrier();  // every copy is there before any older save goes
      for (int owner : clique)
        if (owner != grid.rank) prune_all_but(replica_root(opt_, grid.rank, owner), save.iteration);
    }
    remove_stale_copies(opt_, grid.rank, clique);
    prune_all_but(root, save.iteration);
  } else if (grid.rank == 0) {
    // Megatron's --save-retain-interval: the checkpoint the tracker named before this save goes
    // once this one is committed, unless its iteration is a multiple of the interval.
    if (save.persistent && opt_.save_retain_interval > 0) {
      try {
        retired = find_latest_iteration(root).value_or(-1);
      } catch (const IoError&) {  // a pointer that does not read names nothing to delete
      }
      // Megatron's rule, and never a newer checkpoint than this (another run's, past a rollback).
      if (retired <= 0 || retired >= save.iteration || retired % opt_.save_retain_interval == 0) retired = -1;
    }
    save.temp_dir->commit();
    if (!save.persistent) {
      prune(root, 1);  // Megatron keeps one non-persistent checkpoint
    } else if (opt_.keep_last > 0) {
      const PruneResult pruned = prune(root, static_cast<int>(opt_.keep_last));
      if (!pruned.abandoned_iterations.empty() && !std::exchange(abandoned_reported_, true))
        *out_ << abandoned_note(root, save.iteration, pruned.abandoned_iterations) << std::endl;
    }
  }
  world.barrier();
  if (save.persistent) previous_checkpoint_ = save.iteration;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - save.start).count();
  *out_ << "trident: saved " << (save.persistent ? "" : save.local ? "local non-persistent " : "non-persistent ")
        << "checkpoint at iteration " << save.iteration << " to " << iteration_dir(root, save.iteration).string()
        << (save.local ? " (each rank's in " + opt_.non_persistent_local_ckpt_dir + "/<rank>" +
                             (opt_.replication ? ", with copies of its clique's" : "") + ")"
                       : "")
        << ": "
        << megabytes / 1e3 << " GB in " << s << " s ("
        << megabytes / 1e3 / s << " GB/s)";
  if (opt_.async_save) *out_ << "; training waited " << save.waited_s << " s";
  *out_ << std::endl;
  if (save.persistent && opt_.async_save) log_progress("Saved async checkpoint\tIteration: " + std::to_string(save.iteration));
  else if (save.persistent) log_saved_progress(/*async=*/false);
  if (retired > 0) retire_checkpoint(root, retired);
  pending_save_.reset();
}

// Megatron's deletion for --save-retain-interval, on rank 0 after the save committed: a failure
// is a note, never the run's end (Megatron ignores it too).
void Trainer::retire_checkpoint(const fs::path& root, int64_t iteration) {
  RetiredIteration r;
  try {
    r = retire_iteration(root, iteration);
  } catch (const Error& e) {
    *out_ << "trident: note: --save-retain-interval: " << e.what() << std::endl;
    return;
  }
  if (r.kind == RetiredIteration::kSymlink)
    *out_ << "trident: --save-retain-interval: not deleting checkpoint at iteration " << iteration << " from "
          << root.string() << ": a symbolic link" << std::endl;
  if (r.kind != RetiredIteration::kMoved) return;
  *out_ << "trident: deleted checkpoint at iteration " << iteration << " from " << root.string()
        << " (--save-retain-interval " << opt_.save_retain_interval << ")" << std::endl;
  log_progress("Deleted checkpoint\tIteration: " + std::to_string(iteration));
  // Its files go in the background, as Megatron's thread deletes them, so that the ranks do
  // not wait for a large removal at their next collective; one at a time (commit_save waited
  // for the previous one).
  const auto remove = [dir = r.moved_to] {
    std::error_code ec;
    fs::remove_all(dir, ec);  // what a failure leaves is a *.del-* folder (a later save of this host removes it)
  };
  try {
    retirement_ = std::thread(remove);
  } catch (const std::system_error&) {  // no thread to be had: remove it here
    remove();
  }
}

void Trainer::join_retirement() {
  if (retirement_.joinable()) retirement_.join();
}

}  // namespace trident
