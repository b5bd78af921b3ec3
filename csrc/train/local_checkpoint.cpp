#include "train/local_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "parallel/collective_timeout.h"
#include "parallel/comm_strings.h"
#include "train/local_replicas.h"

namespace trident {
namespace fs = std::filesystem;

fs::path local_checkpoint_root(const TrainOptions& o, int world_rank) {
  return fs::path(o.non_persistent_local_ckpt_dir) / std::to_string(world_rank);
}

std::vector<int> fully_parallel_owners(const std::vector<int64_t>& numels, int dp) {
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(dp), 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of the least loaded
    owner[i] = static_cast<int>(least - load.begin());
    *least += numels[i];
  }
  return owner;
}

namespace {

std::string layout_text(const ParallelLayout& l, DType dtype) { return layout_text(l) + ", " + dtype_name(dtype); }

// This rank's committed local checkpoints as "<iteration> <save token>" lines, newest first,
// its copies of other ranks' (--replication) as "replica <owner> <iteration> <save token>",
// then "problem <message>" where a folder or its metadata cannot be read (that one is not
// offered: a local copy is only a shortcut).
std::string held_saves(const fs::path& root) {
  std::ostringstream lines;
  std::string problem;
  const auto list = [&](const fs::path& folder, const std::string& prefix) {
    std::vector<int64_t> its;
    try {
      its = list_iterations(folder);
    } catch (const std::exception& e) {
      if (problem.empty()) problem = e.what();
    }
    for (auto it = its.rbegin(); it != its.rend(); ++it) {
      try {
        const CheckpointMetadata m = read_metadata((iteration_dir(folder, *it) / kMetadataFileName).string());
        const std::string token = m.trainer_state.value(kLocalSaveTokenKey, std::string());
        if (!token.empty()) lines << prefix << *it << ' ' << token << '\n';
      } catch (const std::exception& e) {  // also nlohmann's, for a field of another type
        if (problem.empty()) problem = e.what();
      }
    }
  };
  list(root, "");
  std::error_code ec;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kReplicaPrefix, 0) == 0 && all_digits(name.substr(std::strlen(kReplicaPrefix))))
      list(it->path(), "replica " + name.substr(std::strlen(kReplicaPrefix)) + " ");
  }
  if (!problem.empty()) lines << "problem " << problem << '\n';
  return lines.str();
}

struct Held {
  std::vector<std::string> saves;                      // "<iteration> <save token>", newest first
  std::vector<std::pair<int, std::string>> replicas;  // (owner, save)
  std::string problem;
};

Held parse_held(const std::string& text) {
  Held h;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("problem ", 0) == 0) {
      h.problem = line.substr(8);
    } else if (line.rfind("replica ", 0) == 0) {
      const size_t owner_end = line.find(' ', 8);
      h.replicas.emplace_back(std::stoi(line.substr(8, owner_end - 8)), line.substr(owner_end + 1));
    } else {
      h.saves.push_back(line);
    }
  }
  return h;
}

int64_t iteration_of(const std::string& save) { return std::stoll(save.substr(0, save.find(' '))); }

// Rank 0's plan from every rank's held_saves: the newest save that each rank holds itself or
// that another rank holds a copy of, and which copies go back to their owners.
struct LoadPlan {
  std::string save;  // "" for none
  // For each rank without its own: the ranks holding a copy, in rank order (the first that
  // sends a whole one restores it).
  std::vector<std::pair<int, std::vector<int>>> copies;
  std::string note;  // why none
};

LoadPlan plan_load(const std::vector<Held>& held, const fs::path& dir) {
  std::vector<std::string> candidates;
  for (const Held& h : held) {
    candidates.insert(candidates.end(), h.saves.begin(), h.saves.end());
    for (const auto& [owner, save] : h.replicas) candidates.push_back(save);
  }
  std::sort(candidates.begin(), candidates.end(), [](const std::string& a, const std::string& b) {
    return iteration_of(a) != iteration_of(b) ? iteration_of(a) > iteration_of(b) : a < b;
  });
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  LoadPlan plan;
  for (const std::string& save : candidates) {
    std::vector<std::pair<int, std::vector<int>>> copies;
    bool covered = true;
    for (size_t r = 0; r < held.size() && covered; ++r) {
      if (std::find(held[r].saves.begin(), held[r].saves.end(), save) != held[r].saves.end()) continue;
      std::vector<int> holders;
      for (size_t h = 0; h < held.size(); ++h)
        if (std::find(held[h].replicas.begin(), held[h].replicas.end(), std::pair{static_cast<int>(r), save}) !=
            held[h].replicas.end())
          holders.push_back(static_cast<int>(h));
      covered = !holders.empty();
      copies.emplace_back(static_cast<int>(r), std::move(holders));
    }
    if (!covered) continue;
    plan.save = save;
    plan.copies = copies;
    return plan;
  }
  // None held by all: say which rank lacks the newest that any rank holds, and what could not be read.
  const int64_t newest = candidates.empty() ? -1 : iteration_of(candidates.front());
  for (size_t r = 0; r < held.size() && newest >= 0 && plan.note.empty(); ++r)
    if (std::none_of(held[r].saves.begin(), held[r].saves.end(),
                     [&](const std::string& save) { return iteration_of(save) == newest; }))
      plan.note = "no local checkpoint in " + dir.string() + " is held by every rank: rank " + std::to_string(r) +
                  " has none of iteration " + std::to_string(newest) +
                  " (its node replaced, or its save not committed), nor a copy of it";
  if (newest >= 0 && plan.note.empty())
    plan.note = "the ranks' local checkpoints of iteration " + std::to_string(newest) + " in " + dir.string() +
                " come from different saves";
  for (size_t r = 0; r < held.size(); ++r)
    if (!held[r].problem.empty()) {
      plan.note += (plan.note.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + held[r].problem;
      break;
    }
  if (!plan.note.empty()) plan.note += "; not resumed from";
  return plan;
}

}  // namespace

ParallelLayout checkpoint_layout(const TrainOptions& o, const GridShape& shape) {
  return ParallelLayout{shape.tp, shape.pp, shape.dp, o.zero_stage, o.virtual_pipeline_chunks(), o.uneven_pipeline};
}

void resolve_local_checkpoint(TrainOptions& o, ParallelContext& par) {
  o.local_checkpoint = {};
  o.local_checkpoint.resolved = true;
  if (!o.local_checkpoints() || o.load.empty()) return;
  const CollectiveTimeoutSuspended io;  // ranks wait for the copies of others: no time limit
  Comm& world = *par.world;
  const int me = world.rank();
  const fs::path root = local_checkpoint_root(o, me);
  o.local_checkpoint.root = root.string();
  // Rank 0 plans from what every rank holds: "<iteration> <token>", a fresh save token for
  // the copies' folders, then "<owner> <holder> [<holder> ...]" lines.
  const std::string mine = held_saves(root);
  std::string plan_text, note;
  if (me != 0) {
    send_string(world, mine, 0);
  } else {
    std::vector<Held> held{parse_held(mine)};
    for (int r = 1; r < world.size(); ++r) held.push_back(parse_held(recv_string(world, r)));
    const LoadPlan plan = plan_load(held, o.non_persistent_local_ckpt_dir);
    note = plan.note;
    // Nothing to restore for a save no newer than --load's latest (which is resumed from).
    std::optional<int64_t> persistent;
    try {
      persistent = find_latest_iteration(o.load);
    } catch (const Error&) {  // a garbled pointer: the load says so
    }
    if (!plan.save.empty() && (!persistent || *persistent < iteration_of(plan.save))) {
      plan_text = plan.save + "\n" + make_save_token() + "\n";
      for (const auto& [owner, holders] : plan.copies) {
        plan_text += std::to_string(owner);
        for (const int holder : holders) plan_text += " " + std::to_string(holder);
        plan_text += "\n";
      }
    }
  }
  broadcast_string(world, plan_text, 0);
  broadcast_string(world, note, 0);
  o.local_checkpoint.note = note;
  if (plan_text.empty()) return;
  std::istringstream in(plan_text);
  std::string save, token;
  std::getline(in, save);
  std::getline(in, token);
  const int64_t iteration = iteration_of(save);
  // Copies go back to the ranks that lost theirs, one after another (each a pair of ranks): from
  // the first holder whose copy arrives whole, the next one tried after a failure (a file
  // that cannot be read, or one whose checksum differs from the copy's metadata.json).
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    int owner = 0;
    words >> owner;
    std::string failures;  // the holders' that failed, for the note
    bool restored = false;
    for (int holder = 0; !restored && words >> holder;) {
      std::string e;
      if (me == holder)
        e = exchange_checkpoint_folders(world, iteration_dir(replica_root(o, holder, owner), iteration), owner, {},
                                        0, -1, token);
      if (me == owner) e = exchange_checkpoint_folders(world, {}, -1, root, iteration, holder, token);
      const std::string failure = first_failure(world, e);
      restored = failure.empty();
      if (!restored) failures += (failures.empty() ? "" : "; ") + failure;
      if (me == 0 && restored)
        note += (note.empty() ? "" : "; ") + std::string("rank ") + std::to_string(owner) +
                "'s local checkpoint of iteration " + std::to_string(iteration) + " restored from rank " +
                std::to_string(holder) + "'s copy" + (failures.empty() ? "" : " (after: " + failures + ")");
    }
    if (!restored) {
      o.local_checkpoint.note = "restoring a local checkpoint from its copy failed: " + failures + "; not resumed from";
      return;
    }
  }
  // Rank 0 (its own checkpoint now there) checks the layout for all.
  std::string chosen;
  if (me == 0) {
    try {
      const fs::path where = iteration_dir(root, iteration);
      const CheckpointMetadata m = read_metadata((where / kMetadataFileName).string());
      const ParallelLayout layout = checkpoint_layout(o, par.grid.shape);
      if (m.model.num_layers == o.model.num_layers && same_layout(m.layout, layout, o.model) &&
          m.model.dtype == o.model.dtype) {
        chosen = std::to_string(iteration);
      } else {
        note = where.string() + " was written at " + layout_text(m.layout, m.model.dtype) + ", this run is " +
               layout_text(layout, o.model.dtype) + ": local checkpoints load only as they were written; not "
               "resumed from";
      }
    } catch (const std::exception& e) {
      note = std::string("local checkpoints not resumed from: ") + e.what();
    }
  }
  broadcast_string(world, chosen, 0);
  broadcast_string(world, note, 0);
  if (!chosen.empty()) o.local_checkpoint.iteration = iteration;
  o.local_checkpoint.note = note;
}

}  // namespace trident
