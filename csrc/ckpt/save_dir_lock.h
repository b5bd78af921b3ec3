// One run saves into a checkpoint directory at a time.
//
// Two runs saving into one DIR (a job launched twice, a requeued job started while the first
// still runs, a conversion --overwrite into a directory a run is training into) overwrite
// each other's checkpoints and latest pointer, and each one's --keep-last deletes the
// other's. A process that saves into DIR therefore holds an exclusive lock (flock) on
// DIR/.trident-save.lock until it exits: trident-train's rank 0 from its start (creating DIR
// when missing, tools/train_main.cpp), trident-convert while it writes. The kernel drops the lock however
// the process ends, so a killed run never blocks the next one. The file holds the holder's
// program, pid, host and start for the refused run's message, and stays (removing it would
// let a run that opened it before the removal and one that creates it anew both lock).
// Megatron has no such guard.
//
// Where the file system cannot lock (flock fails with ENOLCK, EOPNOTSUPP, ENOSYS or
// EINVAL: Lustre mounted without -o flock), nothing is refused and the caller gets a note
// to show once.
#pragma once

#include <filesystem>
#include <string>

namespace trident {

inline constexpr const char* kSaveLockFileName = ".trident-save.lock";

// Takes the lock of `root` (an existing directory) unless this process holds it already.
// Throws IoError naming the holder when another process holds it, or naming the file when it
// cannot be created. Returns a note to show when the file system cannot lock (the first time
// for `root`), else "".
std::string hold_save_dir_lock(const std::filesystem::path& root);

// For an output that a failed write leaves as it found it (OutputWriteGuard): drops this
// process's lock of `root` and removes the lock file if this process created it.
void release_save_dir_lock(const std::filesystem::path& root);

}  // namespace trident
