// Whether a checkpoint directory is one directory for every rank.
//
// Every rank writes its own files of a save into --save (each rank's flag, which nodes may spell
// differently), and rank 0 commits the save by renaming its folder and moving the latest
// pointer. On a directory that is not shared (node-local scratch, or ranks given different
// paths), each node's files land on its own disk, rank 0 commits only its own, and no
// checkpoint of the run can be loaded: the run is lost at its first resume. So at the start
// rank 0 writes a file of a fresh name into its directory and every rank must find it, with
// the same contents, in its own. (Megatron has no such check.)
#pragma once

#include <string>

#include "parallel/parallel_context.h"

namespace trident {

// The file rank 0 writes: kSharedDirProbePrefix + a save token (checkpoint_dir.h).
inline constexpr const char* kSharedDirProbePrefix = ".trident-shared-probe-";

// Collective. `dir` is this rank's path of the directory (rank 0's exists and is writable:
// checked before), `flag` names it in the error. Throws ConfigError naming the first rank that
// does not see rank 0's file (its host too), after rank 0 has removed the file. A rank waits up
// to `wait_seconds` for the file to appear: an NFS client trusts its cached "no such file" for a
// name it looked up before (the ranks look for --load, often --save's directory, before rank 0
// creates it) until the directory's cached attributes expire, 30 to 60 s by default (acdirmin,
// acdirmax). A shared directory passes at once; only one that is not waits the whole time.
// Nothing to check on one process.
void check_every_rank_sees_dir(const std::string& dir, const std::string& flag, ParallelContext& par,
                               double wait_seconds);

}  // namespace trident
