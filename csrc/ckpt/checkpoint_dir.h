// The checkpoint directory protocol (Megatron's names):
//
//   DIR/iter_0000100/                      one committed checkpoint (7-digit iteration)
//   DIR/iter_0000100.tmp-<token>/          being written; never read
//   DIR/latest_checkpointed_iteration.txt  the iteration number (digits only, no newline)
//
// Saving: every rank writes into temp_iteration_dir(DIR, it, token) (one token for the
// whole job: rank 0 makes it with make_save_token() and broadcasts it); when all ranks have
// finished, one rank calls commit(), which fsyncs the files, renames the temporary
// directory to iter_NNNNNNN (swapping atomically with an older copy of the same iteration,
// which is deleted only afterwards) and then atomically rewrites the pointer. The pointer
// changes last, so a crash at any point leaves it naming a complete checkpoint.
//
// Nothing on an error path deletes or overwrites a committed checkpoint; deletion (prune,
// and commit() for a replaced copy) first renames a directory to iter_NNNNNNN.del-<token>
// (a fresh save token) so a crash mid-delete never leaves a half-deleted directory under a
// committed name.
//
// A save that dies (crash, kill, full disk) leaves its iter_NNNNNNN.tmp-<token> behind. The
// token starts with the writer's host and pid, and the writer holds an exclusive lock on
// TMP/.writer.lock until it commits; the kernel drops that lock however the writer ends. So
// the next save (TempIterationDir) removes exactly the temporaries whose writer provably is
// gone: written on this host, by a pid that no longer runs, with a lock file it can lock.
// It also removes the iter_NNNNNNN.del-<token> directories of such writers (a deletion that
// was interrupted; they need no lock, as nothing but their deletion ever uses them).
// Anything else (another host's, another job's still running, an older trident's without a
// lock file) is left for prune().
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace trident {

inline constexpr const char* kLatestFileName = "latest_checkpointed_iteration.txt";

std::string iteration_dir_name(int64_t iteration);  // "iter_0000100"
std::filesystem::path iteration_dir(const std::filesystem::path& root, int64_t iteration);
std::filesystem::path latest_file(const std::filesystem::path& root);
// Whether `s` is one or more decimal digits (the numbers in checkpoint file names).
bool all_digits(const std::string& s);

// Megatron's per-rank folder inside an iteration: "mp_rank_01" (pp == 1) or
// "mp_rank_01_002" (pp > 1: tp rank, then pp rank).
std::string rank_dir_name(int tp_rank, int pp_rank, int pp);

// A token unique to this save attempt, "<host>-<pid>-<counter>-<time>-<time>" (host: the
// host name's letters and digits, at most 32); letters, digits, '-' only.
std::string make_save_token();
// DIR/iter_NNNNNNN.tmp-<token>. Throws ConfigError for a token with other characters.
std::filesystem::path temp_iteration_dir(const std::filesystem::path& root, int64_t iteration,
                                         const std::string& token);

// The temporary directory of one save, held by the process that writes it (with many
// ranks: rank 0, which commits). Creating it creates DIR (if needed), takes DIR's lock for
// the rest of the process (save_dir_lock.h: another process saving into DIR is an IoError
// naming it), removes the temporaries in DIR left by dead writers
// (remove_dead_writers_temporaries), then creates the directory (which must not exist yet)
// and its locked .writer.lock. Throws IoError naming the directory. Destroying it releases
// the .writer.lock and leaves the directory as it is (discard() removes it).
class TempIterationDir {
 public:
  TempIterationDir(const std::filesystem::path& root, int64_t iteration, const std::string& token);
  ~TempIterationDir();
  TempIterationDir(TempIterationDir&& other) noexcept;
  TempIterationDir& operator=(TempIterationDir&&) = delete;
  TempIterationDir(const TempIterationDir&) = delete;
  TempIterationDir& operator=(const TempIterationDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Temporaries of dead writers that the constructor removed.
  const std::vector<std::filesystem::path>& removed_stale() const { return removed_stale_; }
  // hold_save_dir_lock's note (the file system cannot lock), the first time for DIR; else "".
  const std::string& save_lock_note() const { return save_lock_note_; }
  // Removes the lock file (it is no part of the checkpoint), then commit()s the directory.
  void commit();
  // A save that failed, or that its process gives up, with no other process writing into
  // it: removes the directory unless committed (its lock file last: what cannot be removed
  // stays locked, for the next save to remove once this process is gone).
  void discard();

 private:
  std::filesystem::path root_, path_;
  int64_t iteration_ = 0;
  int lock_fd_ = -1;
  bool committed_ = false;
  std::vector<std::filesystem::path> removed_stale_;
  std::string save_lock_note_;
};

// The name of the lock file a TempIterationDir's writer holds.
inline constexpr const char* kWriterLockFileName = ".writer.lock";

// Removes the iter_*.tmp-<token> and iter_*.del-<token> directories in `root` whose writer
// is provably gone (see the top of this file); best effort: one that cannot be removed is
// left. Returns those removed.
std::vector<std::filesystem::path> remove_dead_writers_temporaries(const std::filesystem::path& root);

// The iter_*.tmp-* and iter_*.del-* folders in `root` other than the one of save token
// `own_token`: after remove_dead_writers_temporaries, those it keeps (another host's, where a
// run may still write; a live or locked writer's here; one without a usable lock file).
// Sorted.
std::vector<std::filesystem::path> temporaries_of_other_writers(const std::filesystem::path& root,
                                                                const std::string& own_token);

// An offline writer's output (trident-convert): until released (the output committed), the
// destructor removes the temporary directory, then the directories of the output's path that
// this write created, innermost first, while empty; the output directory's lock file
// (save_dir_lock.h) goes when this write created it.
struct OutputWriteGuard {
  std::filesystem::path temp;                  // once created
  std::vector<std::filesystem::path> created;  // innermost first (missing_directories)
  bool released = false;
  ~OutputWriteGuard();
};

// The directories of `path` that do not exist yet, innermost first.
std::vector<std::filesystem::path> missing_directories(const std::filesystem::path& path);

// ConfigError naming --load when `load` is not a directory: missing, or a file.
void check_load_is_directory(const std::filesystem::path& load);

// Removes the folders `<output>.tmp-<save token>` beside `output` whose writer is gone (as
// remove_dead_writers_temporaries judges; trident-convert's Hugging Face export). Returns
// those removed.
std::vector<std::filesystem::path> remove_dead_writers_output_temporaries(const std::filesystem::path& output);

// Checks at startup that checkpoints can later be saved under `root`, creating nothing:
// `root` is a writable directory, or does not exist and its nearest existing ancestor is
// one. Throws IoError naming the path in the way.
void check_checkpoint_root_usable(const std::filesystem::path& root);

// Makes `temp_dir` (a directory in `root`) the committed checkpoint of `iteration` and points
// the latest file at it (`synced`: the caller has synced temp_dir's files). Throws IoError
// naming the path; on failure the previous checkpoints and pointer are intact, and when the
// pointer could not be written (a full disk) the new copy is removed: no iteration folder is
// left that the pointer does not account for.
void commit(const std::filesystem::path& root, int64_t iteration, const std::filesystem::path& temp_dir,
            bool synced = false);

// Atomically rewrites DIR/latest_checkpointed_iteration.txt (temp + fsync + rename + fsync dir).
void write_latest_iteration(const std::filesystem::path& root, int64_t iteration);

// The iteration the pointer names. Throws IoError naming the file when it is missing, garbled,
// or names a directory that does not exist.
int64_t latest_iteration(const std::filesystem::path& root);
// Same, but nullopt when there is no pointer file at all (a fresh run).
std::optional<int64_t> find_latest_iteration(const std::filesystem::path& root);

// The directory holding `dir` ("X" for "X/iter_0000010" and "X/iter_0000010/").
std::filesystem::path containing_directory(const std::filesystem::path& dir);

// Whether two paths name the same directory (however spelled: resolved through symlinks).
bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b);

// Committed iterations (directories named iter_ and 7+ digits), ascending.
std::vector<int64_t> list_iterations(const std::filesystem::path& root);

struct PruneResult {
  std::vector<int64_t> removed_iterations;  // ascending
  std::vector<std::filesystem::path> removed_temporaries;
  // Committed iterations outside the latest checkpoint's history, left alone (see prune).
  std::vector<int64_t> abandoned_iterations;  // ascending
};
// Keeps the newest `keep_last` (>= 1, else ConfigError) checkpoints of the history of the one
// the pointer names (that one, the one its run continued from, and so on: metadata.h's
// PreviousCheckpoint, or the next lower iteration where a checkpoint does not say) and
// deletes the older ones of that history; removes stale temporaries (*.tmp-* whose writer
// does not hold its lock, *.del-*, and *.old-* whose iteration is committed). Call it only
// when no save of this job is in progress.
//
// Other iterations belong to an abandoned continuation: the pointer was moved back (a
// rollback) and a run resumed from there, so the abandoned run's checkpoints lie above the
// pointer and, once the resumed run has saved past them, between its own. They are neither
// counted nor deleted (a rollback may be undone, and only a person can tell), but listed in
// abandoned_iterations for the caller to report; a later save of the same iteration number
// replaces such a directory (commit). A missing pointer keeps every committed iteration; a
// garbled pointer throws before anything is deleted.
PruneResult prune(const std::filesystem::path& root, int keep_last);
// prune(root, 1) for a folder that holds one writer's newest checkpoint only (a rank's local
// non-persistent ones), where the pointer names `latest`: the committed iterations outside
// its history go too (a resume from an older checkpoint leaves the newer ones there).
PruneResult prune_all_but(const std::filesystem::path& root, int64_t latest);
// Moves committed iteration `iteration` under `root` out of the committed namespace, to a
// *.del-* name (which prune() removes too), for the caller to delete: Megatron's
// --save-retain-interval deletes in the background. Nothing is moved when it is not there or
// is a symbolic link (which Megatron leaves alone). Throws IoError when the rename fails.
struct RetiredIteration {
  enum Kind { kMoved, kAbsent, kSymlink } kind = kAbsent;
  std::filesystem::path moved_to;  // kMoved
};
RetiredIteration retire_iteration(const std::filesystem::path& root, int64_t iteration);

}  // namespace trident
