#include "train/local_checkpoint.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "ckpt/checkpoint_dir.h"
#include "core/error.h"
#include "parallel/comm_strings.h"

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

std::string layout_text(const ParallelLayout& l, DType dtype) {
  std::string s = "tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp) +
                  ", zero " + std::to_string(l.zero_stage);
  if (l.virtual_pipeline_chunks > 1) s += ", " + std::to_string(l.virtual_pipeline_chunks) + " model chunks a stage";
  return s + ", " + dtype_name(dtype);
}

// This rank's committed local checkpoints as "<iteration> <save token>" lines, newest first,
// then "problem <message>" where a folder or its metadata cannot be read (that one is not
// offered: a local copy is only a shortcut).
std::string held_saves(const fs::path& root) {
  std::ostringstream lines;
  std::vector<int64_t> its;
  try {
    its = list_iterations(root);
  } catch (const std::exception& e) {
    return std::string("problem ") + e.what() + '\n';
  }
  std::string problem;
  for (auto it = its.rbegin(); it != its.rend(); ++it) {
    try {
      const CheckpointMetadata m = read_metadata((iteration_dir(root, *it) / kMetadataFileName).string());
      const std::string token = m.trainer_state.value(kLocalSaveTokenKey, std::string());
      if (!token.empty()) lines << *it << ' ' << token << '\n';
    } catch (const std::exception& e) {  // also nlohmann's, for a field of another type
      if (problem.empty()) problem = e.what();
    }
  }
  if (!problem.empty()) lines << "problem " << problem << '\n';
  return lines.str();
}

struct Held {
  std::vector<std::string> saves;  // "<iteration> <save token>", newest first
  std::string problem;
};

Held parse_held(const std::string& text) {
  Held h;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("problem ", 0) == 0) h.problem = line.substr(8);
    else h.saves.push_back(line);
  }
  return h;
}

int64_t iteration_of(const std::string& save) { return std::stoll(save.substr(0, save.find(' '))); }

struct LocalCheckpointChoice {
  std::optional<int64_t> iteration;
  std::string note;
};

// Rank 0's choice from every rank's held_saves: the iteration, or none and the note.
LocalCheckpointChoice choose(const std::vector<Held>& held, const TrainOptions& o, const ParallelLayout& layout,
                             DType dtype) {
  const fs::path dir = o.non_persistent_local_ckpt_dir;
  LocalCheckpointChoice out;
  for (const std::string& save : held[0].saves) {
    bool everywhere = true;
    for (size_t r = 1; r < held.size() && everywhere; ++r)
      everywhere = std::find(held[r].saves.begin(), held[r].saves.end(), save) != held[r].saves.end();
    if (!everywhere) continue;
    const fs::path where = iteration_dir(local_checkpoint_root(o, 0), iteration_of(save));
    const CheckpointMetadata m = read_metadata((where / kMetadataFileName).string());
    if (m.layout == layout && m.model.dtype == dtype) {
      out.iteration = iteration_of(save);
      return out;
    }
    out.note = where.string() + " was written at " + layout_text(m.layout, m.model.dtype) + ", this run is " +
               layout_text(layout, dtype) + ": local checkpoints load only as they were written; not resumed from";
    return out;
  }
  // None held by all: say which rank lacks the newest that any rank holds, and what could not be read.
  int64_t newest = -1;
  for (const Held& h : held)
    for (const std::string& save : h.saves) newest = std::max(newest, iteration_of(save));
  for (size_t r = 0; r < held.size() && newest >= 0 && out.note.empty(); ++r)
    if (std::none_of(held[r].saves.begin(), held[r].saves.end(),
                     [&](const std::string& save) { return iteration_of(save) == newest; }))
      out.note = "no local checkpoint in " + dir.string() + " is held by every rank: rank " + std::to_string(r) +
                 " has none of iteration " + std::to_string(newest) +
                 " (its node replaced, or its save not committed)";
  if (newest >= 0 && out.note.empty())
    out.note = "the ranks' local checkpoints of iteration " + std::to_string(newest) + " in " + dir.string() +
               " come from different saves";
  for (size_t r = 0; r < held.size(); ++r)
    if (!held[r].problem.empty()) {
      out.note += (out.note.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + held[r].problem;
      break;
    }
  if (!out.note.empty()) out.note += "; not resumed from";
  return out;
}

}  // namespace

ParallelLayout checkpoint_layout(const TrainOptions& o, const GridShape& shape) {
  return ParallelLayout{shape.tp, shape.pp, shape.dp, o.zero_stage, o.virtual_pipeline_chunks()};
}

void resolve_local_checkpoint(TrainOptions& o, ParallelContext& par) {
  o.local_checkpoint = {};
  o.local_checkpoint.resolved = true;
  if (!o.local_checkpoints() || o.load.empty()) return;
  Comm& world = *par.world;
  o.local_checkpoint.root = local_checkpoint_root(o, world.rank()).string();
  const std::string mine = held_saves(o.local_checkpoint.root);
  std::string chosen, note;
  if (world.rank() != 0) {
    send_string(world, mine, 0);
  } else {
    std::vector<Held> held{parse_held(mine)};
    for (int r = 1; r < world.size(); ++r) held.push_back(parse_held(recv_string(world, r)));
    try {
      const LocalCheckpointChoice c = choose(held, o, checkpoint_layout(o, par.grid.shape), o.model.dtype);
      if (c.iteration) chosen = std::to_string(*c.iteration);
      note = c.note;
    } catch (const std::exception& e) {  // rank 0's metadata unreadable since it was listed
      note = std::string("local checkpoints not resumed from: ") + e.what();
    }
  }
  broadcast_string(world, chosen, 0);
  broadcast_string(world, note, 0);
  if (!chosen.empty()) o.local_checkpoint.iteration = std::stoll(chosen);
  o.local_checkpoint.note = note;
}

}  // namespace trident
