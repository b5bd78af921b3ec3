// Which checkpoint trident-train's --load names. Megatron-LM's rules, and trident-eval's for
// an iteration folder given directly:
//
//   --load DIR/iter_NNNNNNN        that checkpoint (a folder holding metadata.json);
//   --load DIR --ckpt-step N       DIR/iter_N whatever the pointer says, also without one
//                                  (Megatron: "checkpoint step to load model from");
//   --load DIR                     the iteration DIR/latest_checkpointed_iteration.txt names;
//   DIR missing, or holding no     no checkpoint: training starts from scratch (Megatron's
//   checkpoint at all              warning), or with --exit-on-missing-checkpoint an error;
//   DIR holding iter_* folders     an error: a run whose pointer is lost is not silently
//   but no pointer                 restarted from scratch, nor resumed from a guess;
//   --non-persistent-ckpt-type     (without --ckpt-step or an iteration folder) the latest
//     global                       non-persistent checkpoint (o.non_persistent_dir(load)) when
//                                  it is newer than DIR's (Megatron also takes it at the same
//                                  iteration, the same state: --save's keeps the history whole)
//                                  and it belongs to DIR: saved by a run saving into DIR, which
//                                  had continued from DIR's latest or an earlier checkpoint
//                                  (not from one that a rollback of DIR's pointer abandoned);
//     local                        the same for the rank's local checkpoint that every rank
//                                  holds (o.local_checkpoint: local_checkpoint.h).
#pragma once

#include <filesystem>
#include <optional>

#include "parallel/comm.h"
#include "train/options.h"

namespace trident {

struct CheckpointMetadata;

// The iteration folder to load for o.load (non-empty), or nullopt for none (see above).
// Throws ConfigError naming --load, --ckpt-step or --exit-on-missing-checkpoint, IoError
// naming a garbled pointer file.
// `note`, when given, gets why a non-persistent checkpoint was passed over ("" if none was).
std::optional<std::filesystem::path> checkpoint_to_load(const TrainOptions& o, std::string* note = nullptr);
// `o` asking only whether --load holds a persistent checkpoint (its latest; none is no error):
// what --pretrained-checkpoint's choice and --use-mp-args-from-checkpoint-args probe with.
TrainOptions load_probe(const TrainOptions& o);
// Whether `iteration_dir` (what checkpoint_to_load chose) is a non-persistent checkpoint,
// global or (this rank's) local.
bool is_non_persistent(const TrainOptions& o, const std::filesystem::path& iteration_dir);

// What a non-persistent checkpoint records in its trainer_state (metadata.h), besides its
// folder's previous one: that it is one, the --save of its run, and the --save checkpoint
// its run had continued from (null: none).
inline constexpr const char* kNonPersistentKey = "non_persistent";
inline constexpr const char* kNonPersistentSaveKey = "non_persistent_save_dir";
inline constexpr const char* kPreviousPersistentKey = "previous_persistent_checkpoint_iteration";

// "" when every rank of `world` chose what rank 0 chose (`dir`, from checkpoint_to_load: the
// same folder kind and iteration, or none), else this rank's one-line error. A --load (or
// non-persistent folder) that every node does not share would show each node another
// checkpoint. Collective over `world`.
std::string checkpoint_choice_mismatch(Comm& world, const TrainOptions& o, const std::optional<std::filesystem::path>& dir);
// Then, the chosen checkpoints opened (`m`: this rank's metadata, null when it has none): ""
// when every rank's is rank 0's (the same iteration and file checksums: node-local copies of
// one checkpoint agree; local checkpoints: the same save), else this rank's one-line error.
// Collective over `world`.
std::string checkpoint_identity_mismatch(Comm& world, const TrainOptions& o, const CheckpointMetadata* m);

// Rank 0's check before a run saves non-persistent checkpoints (local ones: each rank's, of
// its folder): their folder is neither --save nor --load, and holds non-persistent
// checkpoints only (the saves replace its checkpoints and move its pointer). ConfigError
// names the flag that set the folder.
void check_non_persistent_dir(const TrainOptions& o, int world_rank = 0);
// The flag that names o.non_persistent_dir(o.save) (local: the local folder), for messages.
std::string non_persistent_dir_flag(const TrainOptions& o);

}  // namespace trident
