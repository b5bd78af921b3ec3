#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <set>
#include <utility>

#include "ckpt/atomic_file.h"
#include "ckpt/metadata.h"
#include "ckpt/save_dir_lock.h"
#include "core/error.h"
#include "core/process_id.h"

namespace trident {

namespace fs = std::filesystem;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

namespace {

std::string errno_str(int e) { return std::strerror(e); }

// "iter_0000100" -> 100; nullopt for anything else.
std::optional<int64_t> parse_iter_name(const std::string& name) {
  if (name.rfind("iter_", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.size() < 7 || digits.size() > 18 || !all_digits(digits)) return std::nullopt;
  return std::stoll(digits);
}

// "iter_0000100.<kind>-<token>" -> 100 and the token, when the prefix is a valid iteration name.
struct SuffixedName {
  int64_t iteration = 0;
  std::string token;
};
std::optional<SuffixedName> parse_suffixed(const std::string& name, const std::string& kind) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || name.compare(dot, kind.size() + 2, "." + kind + "-") != 0) return std::nullopt;
  const std::optional<int64_t> iteration = parse_iter_name(name.substr(0, dot));
  if (!iteration) return std::nullopt;
  return SuffixedName{*iteration, name.substr(dot + kind.size() + 2)};
}

// fsync every regular file and directory under `dir`, then `dir` itself.
void fsync_tree(const fs::path& dir) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path p = it->path();
    if (it->is_regular_file(ec)) {
      const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw IoError(p.string() + ": cannot open to sync: " + errno_str(errno));
      const int rc = ::fsync(fd);
      const int e = errno;
      ::close(fd);
      if (rc != 0) throw_write_failure(p.string() + ": fsync failed: " + errno_str(e), e);
    } else if (it->is_directory(ec)) {
      fsync_dir(p.string());
    }
  }
  if (ec) throw IoError(dir.string() + ": cannot list directory: " + ec.message());
  fsync_dir(dir.string());
}

// Renames `dir` out of the committed namespace, then deletes it.
void delete_dir(const fs::path& root, const fs::path& dir, const std::string& name_for_del) {
  const fs::path del = root / (name_for_del + ".del-" + make_save_token());
  if (::rename(dir.c_str(), del.c_str()) != 0)
    throw IoError(dir.string() + ": cannot rename for deletion: " + errno_str(errno));
  fsync_dir(root.string());
  std::error_code ec;
  fs::remove_all(del, ec);
  if (ec) throw IoError(del.string() + ": cannot delete: " + ec.message());
}

// The host and pid a save token names ("<host>-<pid>-..."), or nullopt for a token of
// another form.
struct TokenWriter {
  std::string host;
  pid_t pid = 0;
};
std::optional<TokenWriter> token_writer(const std::string& token) {
  const size_t dash = token.find('-');
  if (dash == std::string::npos) return std::nullopt;
  const size_t dash2 = token.find('-', dash + 1);
  const std::string pid = token.substr(dash + 1, dash2 == std::string::npos ? std::string::npos : dash2 - dash - 1);
  if (!all_digits(pid) || pid.size() > 9) return std::nullopt;
  return TokenWriter{token.substr(0, dash), static_cast<pid_t>(std::stol(pid))};
}

// Whether the writer a save token names ran on this host and no longer runs. (A pid seen
// alive may be another process that reused it: then the directory is kept.) With
// `own_pid_gone`, this process's pid counts as gone too: for a locked temporary, whose lock
// a save of this process still holds, so that an unlocked one in this pid's name was left
// by an earlier process with the same pid (a container restarted with the same host name
// starts its ranks at the same pids).
bool named_writer_is_gone(const std::string& token, bool own_pid_gone = false) {
  const std::optional<TokenWriter> w = token_writer(token);
  return w && w->host == host_token() && ((own_pid_gone && w->pid == ::getpid()) || process_is_gone(w->pid));
}

// Removes `dir` and everything in it; whether that worked (best effort, no error).
bool remove_tree(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  return !ec;
}

// Locks the writer's lock file of temporary `dir` if nobody holds it. The lock file must
// exist, hold the writer's pid (an empty one may be a writer between creating and locking
// it) and still be the one at its path (not one the writer unlinked to commit). Returns the
// locked descriptor, to keep while the directory is removed, or -1.
int lock_abandoned_writer_lock(const fs::path& dir) {
  const fs::path lock = dir / kWriterLockFileName;
  const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat held {}, now {};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::fstat(fd, &held) != 0 || held.st_size == 0 ||
      ::stat(lock.c_str(), &now) != 0 || now.st_ino != held.st_ino || now.st_dev != held.st_dev) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether a live writer holds the lock of temporary `dir`.
bool writer_holds_lock(const fs::path& dir) {
  const int fd = ::open((dir / kWriterLockFileName).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// Creates and locks DIR/.writer.lock and writes this pid into it. Best effort: where the file
// system cannot lock, the temporary has no lock file and is never taken for abandoned.
int create_writer_lock(const fs::path& dir) {
  const fs::path lock = dir / kWriterLockFileName;
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
    ::unlink(lock.c_str());
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  if (iteration < 0) throw ConfigError("checkpoint iteration must be non-negative, got " + std::to_string(iteration));
  std::string d = std::to_string(iteration);
  if (d.size() < 7) d.insert(0, 7 - d.size(), '0');
  return "iter_" + d;
}

fs::path iteration_dir(const fs::path& root, int64_t iteration) { return root / iteration_dir_name(iteration); }
fs::path latest_file(const fs::path& root) { return root / kLatestFileName; }

std::string rank_dir_name(int tp_rank, int pp_rank, int pp) {
  char buf[64];
  if (pp <= 1) std::snprintf(buf, sizeof buf, "mp_rank_%02d", tp_rank);
  else std::snprintf(buf, sizeof buf, "mp_rank_%02d_%03d", tp_rank, pp_rank);
  return buf;
}

std::string make_save_token() {
  const auto ns = std::chrono::system_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
  return host_token() + "-" + unique_token() + "-" + std::to_string(ns % 1000000000000ll);
}

fs::path temp_iteration_dir(const fs::path& root, int64_t iteration, const std::string& token) {
  if (token.empty() || !std::all_of(token.begin(), token.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
      }))
    throw ConfigError("checkpoint save token '" + token + "' must be letters, digits and '-'");
  return root / (iteration_dir_name(iteration) + ".tmp-" + token);
}

TempIterationDir::TempIterationDir(const fs::path& root, int64_t iteration, const std::string& token)
    : root_(root), path_(temp_iteration_dir(root, iteration, token)), iteration_(iteration) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw_write_failure(root.string() + ": cannot create checkpoint directory: " + ec.message(), ec.value());
  save_lock_note_ = hold_save_dir_lock(root);
  removed_stale_ = remove_dead_writers_temporaries(root);
  if (::mkdir(path_.c_str(), 0755) != 0) {
    const int err = errno;
    throw_write_failure(path_.string() + ": cannot create temporary checkpoint directory: " + errno_str(err), err);
  }
  lock_fd_ = create_writer_lock(path_);
}

TempIterationDir::~TempIterationDir() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

TempIterationDir::TempIterationDir(TempIterationDir&& other) noexcept
    : root_(std::move(other.root_)),
      path_(std::move(other.path_)),
      iteration_(other.iteration_),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      committed_(other.committed_),
      removed_stale_(std::move(other.removed_stale_)),
      save_lock_note_(std::move(other.save_lock_note_)) {}

void TempIterationDir::commit() {
  // The files reach the disk first, the slow part (minutes for a large model), while the
  // lock file still marks the directory as a writer's: killed then, the directory is a dead
  // writer's that the next save removes. (Unlinked before, a kill left a directory without a
  // lock file, which nothing removes.)
  fsync_tree(path_);
  if (std::getenv("TRIDENT_TEST_CRASH_IN_COMMIT") != nullptr) std::_Exit(9);  // a test's kill at this point
  // Unlinking the lock file does not release the lock: a remover that opened it before
  // still cannot lock it, and one that opens it now finds no lock file and keeps out. It goes
  // just before the rename (the tree is synced already): a kill in between leaves a directory
  // without a lock file, which nothing removes.
  if (lock_fd_ >= 0) ::unlink((path_ / kWriterLockFileName).c_str());
  trident::commit(root_, iteration_, path_, /*synced=*/true);
  committed_ = true;
  if (lock_fd_ >= 0) ::close(std::exchange(lock_fd_, -1));
}

void TempIterationDir::discard() {
  if (committed_) return;
  // The lock file goes last, once everything else has: a directory left without it is one
  // that nothing removes, while a locked one whose writer is gone the next save removes.
  std::error_code ec;
  bool emptied = true;
  for (fs::directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename() != kWriterLockFileName) {
      std::error_code e;
      fs::remove_all(it->path(), e);
      emptied = emptied && !e;
    }
  if (!ec && emptied) {
    ::unlink((path_ / kWriterLockFileName).c_str());
    fs::remove(path_, ec);
  }
  if (lock_fd_ >= 0) ::close(std::exchange(lock_fd_, -1));
}

std::vector<fs::path> temporaries_of_other_writers(const fs::path& root, const std::string& own_token) {
  std::vector<fs::path> kept;
  std::error_code ec;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::optional<SuffixedName> s = parse_suffixed(name, "tmp");
    if (!s) s = parse_suffixed(name, "del");
    std::error_code ec2;
    if (s && s->token != own_token && it->is_directory(ec2)) kept.push_back(it->path());
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<fs::path> remove_dead_writers_temporaries(const fs::path& root) {
  std::vector<fs::path> temporaries, deletions, removed;
  std::error_code ec;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::optional<SuffixedName> s = parse_suffixed(name, "tmp");
    const bool temporary = s.has_value();
    if (!temporary) s = parse_suffixed(name, "del");
    std::error_code ec2;
    if (s && named_writer_is_gone(s->token, temporary) && it->is_directory(ec2))
      (temporary ? temporaries : deletions).push_back(it->path());
  }
  for (const fs::path& dir : temporaries) {
    const int lock = lock_abandoned_writer_lock(dir);
    if (lock < 0) continue;
    if (remove_tree(dir)) removed.push_back(dir);
    ::close(lock);
  }
  // A *.del-* directory has no lock: it is only ever renamed into being to be deleted, so
  // once its writer is gone nobody else touches it.
  for (const fs::path& dir : deletions)
    if (remove_tree(dir)) removed.push_back(dir);
  return removed;
}

OutputWriteGuard::~OutputWriteGuard() {
  if (released) return;
  std::error_code ec;
  if (!temp.empty()) fs::remove_all(temp, ec);
  // The output directory's lock file, when this write created it (also when the temporary
  // directory was never made: the lock is taken first).
  const fs::path root = !temp.empty() ? temp.parent_path() : !created.empty() ? created.front() : fs::path();
  if (!root.empty()) release_save_dir_lock(root);
  for (const fs::path& d : created)
    if (!fs::remove(d, ec)) break;  // not empty (or gone): the rest is not ours alone
}

void check_load_is_directory(const fs::path& load) {
  std::error_code ec;
  if (fs::is_directory(load, ec)) return;
  throw ConfigError((fs::exists(load, ec) ? "--load: not a directory: " : "--load: directory not found: ") +
                    load.string());
}

std::vector<fs::path> missing_directories(const fs::path& path) {
  std::vector<fs::path> missing;
  std::error_code ec;
  fs::path p = path.lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  for (; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  return missing;
}

std::vector<fs::path> remove_dead_writers_output_temporaries(const fs::path& output) {
  std::vector<fs::path> removed;
  const fs::path dir = output.parent_path().empty() ? fs::path(".") : output.parent_path();
  const std::string head = output.filename().string() + ".tmp-";
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code ec2;
    if (name.size() > head.size() && name.compare(0, head.size(), head) == 0 &&
        named_writer_is_gone(name.substr(head.size())) && it->is_directory(ec2))
      stale.push_back(it->path());
  }
  for (const fs::path& d : stale)
    if (remove_tree(d)) removed.push_back(d);
  return removed;
}

void check_checkpoint_root_usable(const fs::path& root) {
  std::error_code ec;
  fs::path existing = root.lexically_normal();
  while (!existing.empty() && !fs::exists(fs::symlink_status(existing, ec))) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  const bool is_root = existing == root.lexically_normal();
  const std::string in_the_way = is_root ? root.string() : "cannot create " + root.string() + ": " + existing.string();
  if (!fs::is_directory(existing, ec))
    throw IoError(in_the_way + (is_root ? " exists and" : "") + " is not a directory");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw IoError(in_the_way + " is not writable: " + errno_str(errno));
}

void write_latest_iteration(const fs::path& root, int64_t iteration) {
  if (iteration < 0) throw ConfigError("checkpoint iteration must be non-negative");
  write_file_atomic(latest_file(root).string(), std::to_string(iteration));
}

// Removes a directory this writer owns by renaming it to a *.del-* name first (prune() finishes
// what a crash interrupts).
void remove_own_dir(const fs::path& root, int64_t iteration, const fs::path& dir) {
  const fs::path del = root / (iteration_dir_name(iteration) + ".del-" + make_save_token());
  if (::rename(dir.c_str(), del.c_str()) == 0) {
    std::error_code ec;
    fs::remove_all(del, ec);
  }
}

void commit(const fs::path& root, int64_t iteration, const fs::path& temp_dir_in, bool synced) {
  fs::path temp_dir = temp_dir_in.lexically_normal();
  if (temp_dir.filename().empty()) temp_dir = temp_dir.parent_path();
  std::error_code ec;
  if (!fs::is_directory(temp_dir, ec))
    throw IoError(temp_dir.string() + ": temporary checkpoint directory does not exist");
  const std::string prefix = iteration_dir_name(iteration) + ".tmp-";
  if (temp_dir.filename().string().rfind(prefix, 0) != 0)
    throw IoError(temp_dir.string() + ": is not a temporary directory of iteration " + std::to_string(iteration) +
                  " (expected a name starting with " + prefix + ")");
  if (fs::weakly_canonical(temp_dir.parent_path(), ec) != fs::weakly_canonical(root, ec))
    throw IoError(temp_dir.string() + ": temporary checkpoint directory is not inside " + root.string());
  const fs::path final_dir = iteration_dir(root, iteration);
  if (!synced) fsync_tree(temp_dir);

  fs::path old_copy;  // the replaced copy of the same iteration, deleted after the pointer moved
  if (!fs::exists(fs::symlink_status(final_dir, ec))) {
    if (::rename(temp_dir.c_str(), final_dir.c_str()) != 0)
      throw IoError(final_dir.string() + ": cannot rename " + temp_dir.string() + " to it: " + errno_str(errno));
  } else {
    if (!fs::is_directory(final_dir, ec))
      throw IoError(final_dir.string() + ": exists and is not a directory; refusing to replace it");
    // Swap the complete new copy with the old one in one step.
    if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      old_copy = temp_dir;
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
      // No atomic exchange on this file system: move the old copy aside, then the new one in.
      old_copy = root / (iteration_dir_name(iteration) + ".old-" + make_save_token());
      if (::rename(final_dir.c_str(), old_copy.c_str()) != 0)
        throw IoError(final_dir.string() + ": cannot move the older copy aside: " + errno_str(errno));
      if (::rename(temp_dir.c_str(), final_dir.c_str()) != 0) {
        const int e = errno;
        ::rename(old_copy.c_str(), final_dir.c_str());  // put the old copy back
        throw IoError(final_dir.string() + ": cannot rename " + temp_dir.string() + " to it: " + errno_str(e));
      }
    } else {
      throw IoError(final_dir.string() + ": cannot exchange with " + temp_dir.string() + ": " + errno_str(errno));
    }
  }
  fsync_dir(root.string());
  try {
    write_latest_iteration(root, iteration);
  } catch (...) {
    // The pointer did not move (a full disk, say): the directory goes back to what it names, or
    // a first save's iteration folder would stand without a pointer, which --load refuses. The
    // new copy is removed, and an older copy of this iteration put back in its place. A pointer
    // that moved before the failure (its directory's sync failed) names the new copy: kept.
    std::optional<int64_t> named;
    try {
      named = find_latest_iteration(root);
    } catch (const std::exception&) {
    }
    if (named == iteration) throw;
    if (old_copy.empty()) {
      remove_own_dir(root, iteration, final_dir);
    } else if (old_copy == temp_dir) {  // exchanged: swap back, then the new copy goes
      if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0)
        remove_own_dir(root, iteration, temp_dir);
    } else {  // moved aside: the new copy out, the old one back
      const fs::path del = root / (iteration_dir_name(iteration) + ".del-" + make_save_token());
      if (::rename(final_dir.c_str(), del.c_str()) == 0) {
        ::rename(old_copy.c_str(), final_dir.c_str());
        std::error_code ec2;
        fs::remove_all(del, ec2);
      }
    }
    throw;
  }
  // Best effort: a failure here leaves a *.tmp-* / *.old-* directory that prune() removes.
  if (!old_copy.empty()) remove_own_dir(root, iteration, old_copy);
}

std::optional<int64_t> find_latest_iteration(const fs::path& root) {
  const fs::path file = latest_file(root);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::nullopt;
  const std::string raw = read_file(file.string());
  std::string s = raw;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t lead = 0;
  while (lead < s.size() && std::isspace(static_cast<unsigned char>(s[lead]))) ++lead;
  s = s.substr(lead);
  if (s == "release")
    throw IoError(file.string() + ": names a 'release' checkpoint, which trident does not load");
  if (!all_digits(s) || s.size() > 18) {
    std::string shown;
    for (char c : s.substr(0, 40)) shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';  // trimmed
    throw IoError(file.string() + ": garbled content '" + shown + "' (expected an iteration number)");
  }
  const int64_t it = std::stoll(s);
  const fs::path dir = iteration_dir(root, it);
  if (!fs::is_directory(dir, ec))
    throw IoError(file.string() + ": points to iteration " + std::to_string(it) + " but " + dir.string() +
                  " does not exist");
  return it;
}

int64_t latest_iteration(const fs::path& root) {
  const auto it = find_latest_iteration(root);
  if (!it) throw IoError(latest_file(root).string() + ": missing: no checkpoint to load in " + root.string());
  return *it;
}

fs::path containing_directory(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (!d.has_filename()) d = d.parent_path();
  return d.has_parent_path() ? d.parent_path() : fs::path(".");
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(a, ec1), cb = fs::weakly_canonical(b, ec2);
  return !ec1 && !ec2 && ca == cb;
}

std::vector<int64_t> list_iterations(const fs::path& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const auto n = parse_iter_name(it->path().filename().string());
    std::error_code ec2;
    if (n && it->is_directory(ec2)) out.push_back(*n);
  }
  if (ec) throw IoError(root.string() + ": cannot list checkpoint directory: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

PruneResult prune(const fs::path& root, int keep_last) {
  if (keep_last < 1) throw ConfigError("prune: keep_last must be at least 1, got " + std::to_string(keep_last));
  PruneResult res;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return res;
  const std::optional<int64_t> latest = find_latest_iteration(root);  // throws before any deletion
  const std::vector<int64_t> iters = list_iterations(root);
  std::set<int64_t> committed(iters.begin(), iters.end());

  // Stale temporaries first.
  std::vector<fs::path> stale;
  const std::string latest_tmp_prefix = std::string(kLatestFileName) + ".tmp-";
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (parse_suffixed(name, "tmp")) {
      if (!writer_holds_lock(it->path())) stale.push_back(it->path());  // another job's save goes on
    } else if (parse_suffixed(name, "del") || name.rfind(latest_tmp_prefix, 0) == 0) {
      stale.push_back(it->path());
    } else if (const auto old = parse_suffixed(name, "old"); old && committed.count(old->iteration)) {
      stale.push_back(it->path());
    }
  }
  if (ec) throw IoError(root.string() + ": cannot list checkpoint directory: " + ec.message());
  for (const auto& p : stale) {
    std::error_code ec2;
    fs::remove_all(p, ec2);
    if (ec2) throw IoError(p.string() + ": cannot delete stale temporary: " + ec2.message());
    res.removed_temporaries.push_back(p);
  }

  if (!latest) return res;  // without a pointer we cannot tell which one is good: keep all
  // The latest checkpoint's history, newest first: each checkpoint's previous one as its
  // metadata records it, or, where it does not say (checkpoints of older builds), the next
  // lower committed iteration. Ends at a checkpoint without one, one no longer there, or
  // one whose metadata cannot be read (everything older is then kept: never a guess).
  std::vector<int64_t> history;
  std::set<int64_t> in_history;
  for (std::optional<int64_t> at = latest; at && committed.count(*at) && in_history.insert(*at).second;) {
    history.push_back(*at);
    const PreviousCheckpoint previous = read_previous_checkpoint(iteration_dir(root, *at));
    if (previous.kind == PreviousCheckpoint::kRecorded) {
      at = previous.iteration;
    } else if (previous.kind == PreviousCheckpoint::kNotRecorded) {
      const auto lower = committed.lower_bound(*at);
      at = lower == committed.begin() ? std::nullopt : std::optional<int64_t>(*std::prev(lower));
    } else {
      at = std::nullopt;
    }
  }
  for (int64_t it : iters)
    if (!in_history.count(it)) res.abandoned_iterations.push_back(it);
  for (size_t i = static_cast<size_t>(keep_last); i < history.size(); ++i) {
    delete_dir(root, iteration_dir(root, history[i]), iteration_dir_name(history[i]));
    res.removed_iterations.push_back(history[i]);
  }
  std::sort(res.removed_iterations.begin(), res.removed_iterations.end());
  if (!res.removed_iterations.empty()) fsync_dir(root.string());
  return res;
}

RetiredIteration retire_iteration(const fs::path& root, int64_t iteration) {
  const fs::path dir = iteration_dir(root, iteration);
  std::error_code ec;
  if (fs::is_symlink(dir, ec)) return {RetiredIteration::kSymlink, {}};
  if (!fs::is_directory(dir, ec)) return {};
  const fs::path del = root / (iteration_dir_name(iteration) + ".del-" + make_save_token());
  if (::rename(dir.c_str(), del.c_str()) != 0)
    throw IoError(dir.string() + ": cannot rename for deletion: " + errno_str(errno));
  fsync_dir(root.string());
  return {RetiredIteration::kMoved, del};
}

PruneResult prune_all_but(const fs::path& root, int64_t latest) {
  PruneResult res = prune(root, 1);
  for (int64_t it : res.abandoned_iterations)
    if (it != latest) {
      delete_dir(root, iteration_dir(root, it), iteration_dir_name(it));
      res.removed_iterations.push_back(it);
    }
  res.abandoned_iterations.clear();
  std::sort(res.removed_iterations.begin(), res.removed_iterations.end());
  fsync_dir(root.string());
  return res;
}

}  // namespace trident
