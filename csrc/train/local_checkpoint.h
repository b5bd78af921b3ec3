// Megatron's node-local non-persistent checkpoints (--non-persistent-ckpt-type local with
// --non-persistent-local-ckpt-dir LDIR): every --non-persistent-save-interval iterations each
// rank saves its part of the run's state into a folder of its own on its node's storage,
// LDIR/<world rank> (Megatron's layout), much faster than a folder that every node shares:
//
//   LDIR/<rank>/iter_NNNNNNN/                a trident checkpoint (checkpoint_dir.h) of this
//                                            rank's files only, its metadata.json listing them
//   LDIR/<rank>/latest_checkpointed_iteration.txt
//
// What a rank writes (--non-persistent-local-ckpt-algo; the checkpoint records which):
//   fully_parallel  Megatron's default. What the data-parallel ranks hold alike is split among
//                   them: each of the stage's parameters, and without ZeRO its optimizer state,
//                   is written by one rank of the group (fully_parallel_owners), and a load
//                   broadcasts it from there over the group. A ZeRO shard is its rank's own.
//   atomic          all the rank holds: its folder alone restores it.
// A save commits once every rank has written: each rank renames its folder into place, and
// once all have, deletes its previous one (Megatron keeps one). Each rank's metadata records
// the save's token, so that a load tells one save from another.
//
// A load takes the newest iteration that every rank holds from one save
// (resolve_local_checkpoint), written at the run's layout and dtype, when it is newer than
// --load's latest and belongs to --load's run (checkpoint_to_load.h). Otherwise (a node
// replaced and its folder lost, a rank that died before its commit, another layout) the run
// resumes from --load's, with a note saying why; so does one whose files turn out unreadable,
// when --load holds a checkpoint. With --replication (local_replicas.h) a rank without its own
// gets it back first from a copy that another rank keeps.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/metadata.h"
#include "core/dtype.h"
#include "parallel/parallel_context.h"
#include "parallel/process_grid.h"
#include "train/options.h"

namespace trident {

// What a local checkpoint's trainer_state records besides a non-persistent one's.
inline constexpr const char* kLocalSaveTokenKey = "local_save_token";
inline constexpr const char* kLocalAlgoKey = "local_algo";

// LDIR/<world rank>: the folder of `world_rank`'s local checkpoints.
std::filesystem::path local_checkpoint_root(const TrainOptions& o, int world_rank);

// Under fully_parallel, the data-parallel rank (of `dp`) that writes each parameter of a stage,
// given their element counts in order: the largest first, each to the rank with the fewest
// elements so far (the lowest rank on a tie), so every rank writes about 1/dp of them.
std::vector<int> fully_parallel_owners(const std::vector<int64_t>& numels, int dp);

// The layout a run's checkpoints record.
ParallelLayout checkpoint_layout(const TrainOptions& o, const GridShape& shape);

// Sets o.local_checkpoint (with --non-persistent-ckpt-type local and --load; else only marks it
// resolved): the newest local checkpoint that every rank holds from one save, when it was
// written at the run's layout and dtype. Unreadable folders and metadata count as none (said
// in the note): a local copy is only a shortcut. Collective over the world.
void resolve_local_checkpoint(TrainOptions& o, ParallelContext& par);

}  // namespace trident
