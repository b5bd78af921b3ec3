// Megatron's --replication of local checkpoints (local_checkpoint.h): each rank's local
// checkpoint is also kept by the other ranks of its clique, so that a rank whose folder is lost
// (its node replaced) gets it back from one of them when the run resumes.
//
// Cliques (--replication-jump J, --replication-factor F; nvidia-resiliency-ext's
// CliqueReplicationStrategy): for each b < J the ranks b, b + J, b + 2J, ... are cut into
// groups of F consecutive ones; the world size must be a multiple of J x F. J is meant to be
// the ranks a node holds, so that a clique's ranks lie on F different nodes.
//
// A holder keeps the copy of rank r's checkpoint as a checkpoint folder of its own,
// LDIR/<holder>/replica_<r>/iter_NNNNNNN (the files of r's iter_NNNNNNN, its metadata.json
// included), committed and pruned as r's own.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "train/options.h"

namespace trident {

// The ranks of `rank`'s clique, in order (itself among them). ConfigError naming the flags
// when the world size is no multiple of jump x factor.
std::vector<int> replication_clique(int rank, int world, int jump, int factor);

// LDIR/<holder>/replica_<owner>: where `holder` keeps its copies of `owner`'s checkpoints.
inline constexpr const char* kReplicaPrefix = "replica_";
std::filesystem::path replica_root(const TrainOptions& o, int holder, int owner);

// Sends the checkpoint folder `dir` (its metadata.json and the files it lists) to `send_to` while
// receiving the one `receive_from` sends into a new checkpoint folder of `iteration` under
// `into_root`, committed there only when it arrived whole (every file its metadata.json lists,
// of the checksum listed there: checkpoint_dir.h, checksum.h); either side may be
// absent (`dir` empty: nothing to send; `into_root` empty: nothing to receive). Files travel in
// pieces of at most 64 MiB. Returns "" or what failed on this side (a file that cannot be read
// or written, a path outside the folder), having kept the exchange going to its end, so that
// its peer never waits for what does not come; `*storage_failed` (when given) says whether that
// was a StorageError (this side's disk full). Point-to-point over `c`.
std::string exchange_checkpoint_folders(Comm& c, const std::filesystem::path& dir, int send_to,
                                        const std::filesystem::path& into_root, int64_t iteration, int receive_from,
                                        const std::string& token, bool* storage_failed = nullptr);

// Removes this rank's folders of copies (replica_<owner>) whose owner is not in `clique`
// (every one without --replication): left by a run with other cliques.
void remove_stale_copies(const TrainOptions& o, int rank, const std::vector<int>& clique);

}  // namespace trident
