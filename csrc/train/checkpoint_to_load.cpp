#include "train/checkpoint_to_load.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "ckpt/metadata.h"
#include "ckpt/offline_checkpoint.h"
#include "core/error.h"
#include "parallel/comm_strings.h"
#include "train/local_checkpoint.h"

namespace trident {
namespace fs = std::filesystem;

namespace {

nlohmann::json trainer_state_of(const fs::path& iteration_dir) {
  return read_metadata((iteration_dir / kMetadataFileName).string()).trainer_state;
}

bool marked_non_persistent(const nlohmann::json& trainer_state) {
  const auto it = trainer_state.find(kNonPersistentKey);
  return it != trainer_state.end() && it->is_boolean() && it->get<bool>();
}

// Why the latest non-persistent checkpoint `it` of `np` is not --load's to resume from ("" if
// it is): another run's (its --save is not --load), or one continuing a checkpoint newer than
// --load's latest, `latest` (its pointer was moved back; -1: no pointer).
std::string foreign_non_persistent(const TrainOptions& o, const fs::path& np, int64_t it, int64_t latest) {
  const nlohmann::json st = trainer_state_of(iteration_dir(np, it));
  const std::string where = iteration_dir(np, it).string();
  if (!marked_non_persistent(st)) return where + " is not a non-persistent checkpoint";
  if (const auto s = st.find(kNonPersistentSaveKey); s != st.end() && s->is_string() &&
                                                      !same_directory(s->get<std::string>(), o.load))
    return where + " was saved by a run saving into " + s->get<std::string>() + ", not --load " + o.load;
  if (const auto p = st.find(kPreviousPersistentKey);
      p != st.end() && p->is_number_integer() && p->get<int64_t>() > latest)
    return where + " continues iteration " + std::to_string(p->get<int64_t>()) + " of " + o.load + ", past its " +
           (latest >= 0 ? "latest, " + std::to_string(latest) : std::string("pointer")) + " (a rollback)";
  return "";
}

}  // namespace

std::string non_persistent_dir_flag(const TrainOptions& o) {
  if (o.local_checkpoints()) return "--non-persistent-local-ckpt-dir";
  return o.non_persistent_global_ckpt_dir.empty() ? "--save (its folder " + o.non_persistent_dir(o.save) + ")"
                                                  : "--non-persistent-global-ckpt-dir";
}

void check_non_persistent_dir(const TrainOptions& o, int world_rank) {
  const bool local = o.local_checkpoints();
  const fs::path np = local ? local_checkpoint_root(o, world_rank) : fs::path(o.non_persistent_dir(o.save));
  const std::string flag = non_persistent_dir_flag(o);
  std::vector<fs::path> folders{np};
  if (local) folders.emplace_back(o.non_persistent_local_ckpt_dir);  // the folder of every rank's
  for (const auto& [other, name] : {std::pair{o.save, "--save"}, std::pair{o.load, "--load"}})
    for (const fs::path& folder : folders)
      if (!other.empty() && same_directory(folder, other))
        throw ConfigError(flag + ": " + folder.string() + " is " + name +
                          "'s folder: its checkpoints would be replaced");
  try {
    if (const std::optional<int64_t> it = find_latest_iteration(np);
        it && !marked_non_persistent(trainer_state_of(iteration_dir(np, *it))))
      throw ConfigError(flag + ": " + iteration_dir(np, *it).string() +
                        " is not a non-persistent checkpoint; the non-persistent saves would replace it");
  } catch (const IoError& e) {
    throw ConfigError(flag + ": " + e.what());
  }
}

namespace {

// "" when rank 0's `mine` equals this rank's, else this rank's error: `what` and both values.
std::string differs_from_rank0(Comm& world, const std::string& mine, const std::string& what, const TrainOptions& o) {
  std::string rank0 = mine;
  broadcast_string(world, rank0, 0);
  if (mine == rank0) return "";
  const std::string where = o.non_persistent_ckpt_type.empty()
                                ? "does every rank read the same --load, on storage that every node shares?"
                            : o.local_checkpoints()
                                ? "does every rank read the same --load, on storage that every node shares? the local "
                                  "checkpoints were agreed on"
                                : "is the non-persistent folder on storage that every node shares?";
  return "--load: rank " + std::to_string(world.rank()) + " " + what + " " + mine + ", rank 0 " + rank0 + " (" +
         where + ")";
}

}  // namespace

bool is_non_persistent(const TrainOptions& o, const fs::path& iteration_dir) {
  const fs::path holder = containing_directory(iteration_dir);
  if (o.non_persistent_ckpt_type == "global") return same_directory(holder, o.non_persistent_dir(o.load));
  return o.local_checkpoints() && !o.local_checkpoint.root.empty() && same_directory(holder, o.local_checkpoint.root);
}

std::string checkpoint_choice_mismatch(Comm& world, const TrainOptions& o, const std::optional<fs::path>& dir) {
  // Paths may be spelled differently on each node: the folder kind and the iteration agree.
  std::string chosen = "none";
  if (dir) {
    fs::path d = dir->lexically_normal();  // its iter_NNNNNNN, also spelled with a final '/'
    if (!d.has_filename()) d = d.parent_path();
    chosen = (is_non_persistent(o, d) ? "the non-persistent " : "--load's ") + d.filename().string();
  }
  return differs_from_rank0(world, chosen, "finds", o);
}

std::string checkpoint_identity_mismatch(Comm& world, const TrainOptions& o, const CheckpointMetadata* m) {
  std::string identity = "none";
  if (m && m->trainer_state.contains(kLocalSaveTokenKey)) {  // local: each rank's own files, from one save
    identity =
        "iteration " + std::to_string(m->iteration) + " of save " + m->trainer_state.at(kLocalSaveTokenKey).dump();
  } else if (m) {
    Xxh3Hasher h;
    for (const FileRecord& f : m->files) {
      h.update(f.path.data(), f.path.size() + 1);  // (with its terminating NUL: names and sums stay apart)
      h.update(f.xxh3.data(), f.xxh3.size() + 1);
    }
    identity = "iteration " + std::to_string(m->iteration) + " with files of checksum " + h.hex();
  }
  return differs_from_rank0(world, identity, "reads a checkpoint at", o);
}

TrainOptions load_probe(const TrainOptions& o) {
  TrainOptions probe = o;
  probe.exit_on_missing_checkpoint = false;
  probe.ckpt_step = -1;
  probe.non_persistent_ckpt_type.clear();
  return probe;
}

std::optional<fs::path> checkpoint_to_load(const TrainOptions& o, std::string* note) {
  if (note) note->clear();
  const fs::path load = o.load;
  if (o.ckpt_step >= 0) return resolve_checkpoint_dir(load, o.ckpt_step, o.ckpt_step_flag);
  std::error_code ec;
  const bool exists = fs::exists(fs::status(load, ec));
  if (exists && !fs::is_directory(load, ec)) throw ConfigError("--load: not a directory: " + load.string());
  if (exists && fs::exists(load / kMetadataFileName, ec)) return resolve_checkpoint_dir(load, std::nullopt);
  // Megatron's rule, but for ties: the non-persistent checkpoint when it is newer than
  // --load's (Megatron takes it on a tie too; --load's holds the same state).
  const std::optional<int64_t> persistent = exists ? find_latest_iteration(load) : std::nullopt;
  const std::vector<int64_t> iterations = persistent ? std::vector<int64_t>{} : list_iterations(load);
  if (!iterations.empty())
    throw ConfigError("--load: " + load.string() + " holds " + iteration_dir_name(iterations.front()) +
                      (iterations.size() > 1 ? " .. " + iteration_dir_name(iterations.back()) : "") + " but no " +
                      kLatestFileName + ": give --ckpt-step N to load one of them");
  const bool local = o.local_checkpoints();
  const fs::path np = local ? fs::path(o.local_checkpoint.root) : fs::path(o.non_persistent_dir(o.load));
  const std::optional<int64_t> it = local                                   ? o.local_checkpoint.iteration
                                    : o.non_persistent_ckpt_type == "global" ? find_latest_iteration(np)
                                                                              : std::nullopt;
  if (it && (!persistent || *it > *persistent)) {
    // The latest as a plain number: an optional passed on drew a false -Wmaybe-uninitialized from GCC 12.
    const std::string foreign = foreign_non_persistent(o, np, *it, persistent.value_or(-1));
    if (foreign.empty()) return resolve_checkpoint_dir(np, *it, non_persistent_dir_flag(o));
    if (note) *note = foreign + ": not resumed from";
  }
  if (persistent) return resolve_checkpoint_dir(load, std::nullopt);
  if (o.exit_on_missing_checkpoint)
    throw ConfigError("--exit-on-missing-checkpoint: --load " + load.string() +
                      (exists ? " holds no checkpoint" : " does not exist"));
  return std::nullopt;
}

}  // namespace trident
