#include "ckpt/save_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "core/process_id.h"

namespace trident {
namespace fs = std::filesystem;
namespace {

using DirId = std::pair<dev_t, ino_t>;

// This process's locks, by directory (a second open and flock of the same file in one process
// would conflict with the first): the descriptor (-1 where the file system cannot lock) and
// whether this process created the file.
struct HeldLock {
  int fd = -1;
  bool created = false;
};
std::mutex held_mu;
std::map<DirId, HeldLock>& held_locks() {
  static std::map<DirId, HeldLock> held;
  return held;
}

DirId dir_id(const fs::path& root) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw IoError(root.string() + ": cannot lock the checkpoint directory: not a directory");
  return {st.st_dev, st.st_ino};
}

// "trident-train pid 1234 on host node7 since 2026-12-02 08:30:00 UTC"
std::string holder_line() {
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm utc {};
  gmtime_r(&now, &utc);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return std::string(program_invocation_short_name) + " pid " + std::to_string(::getpid()) + " on host " +
         host_token() + " since " + when;
}

// Who holds the lock, as the lock file names it. A holder that could only read the file (a
// shared directory's file of another user) left the previous holder's line: one naming a
// process of this host that is gone is not the holder.
std::string read_holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  if (s.empty()) return "a process that has not written its name yet";
  int pid = 0;
  char host[64] = {};
  const size_t at = s.find(" pid ");
  if (at != std::string::npos && std::sscanf(s.c_str() + at, " pid %d on host %63s", &pid, host) == 2 &&
      host == host_token() && process_is_gone(pid))
    return "a run that could not write its name into the lock file";
  return s;
}

bool cannot_lock_here(int e) { return e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL; }

}  // namespace

std::string hold_save_dir_lock(const fs::path& root) {
  std::lock_guard<std::mutex> guard(held_mu);
  const DirId id = dir_id(root);
  if (held_locks().count(id)) return "";
  const fs::path file = root / kSaveLockFileName;
  // 0666 less the umask: in a directory a team shares, the next member's run can lock the
  // file the first one created; one that can only read it still locks it (flock needs no
  // write access) but cannot leave its name.
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  const bool created = fd >= 0;
  bool writable = created;
  if (!created && errno == EEXIST) {
    fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    writable = fd >= 0;
    if (fd < 0 && (errno == EACCES || errno == EPERM)) fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) {
    const int err = errno;
    throw_write_failure(file.string() + ": cannot create the checkpoint directory's lock file: " + std::strerror(err),
                        err);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    if (cannot_lock_here(e)) {
      ::close(fd);
      if (created) ::unlink(file.c_str());
      held_locks()[id] = HeldLock{};
      return root.string() + ": the file system cannot lock " + file.filename().string() + " (" +
             std::strerror(e) + "): a second run saving into this directory at the same time is not refused";
    }
    if (e != EWOULDBLOCK) {
      ::close(fd);
      if (created) ::unlink(file.c_str());
      throw IoError(file.string() + ": cannot lock: " + std::strerror(e));
    }
    const std::string holder = read_holder(fd);
    ::close(fd);
    throw IoError(root.string() + " is being saved into by another run (" + holder + "; lock file " +
                  file.string() + "): two runs saving into one directory overwrite each other's checkpoints; "
                  "stop that run first, or save elsewhere");
  }
  // Best effort: without the name, the lock still holds and a refused run says less.
  const std::string line = holder_line() + "\n";
  if (writable && ::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, line.data(), line.size(), 0);
  held_locks()[id] = HeldLock{fd, created};
  return "";
}

void release_save_dir_lock(const fs::path& root) {
  std::lock_guard<std::mutex> guard(held_mu);
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return;
  const auto it = held_locks().find({st.st_dev, st.st_ino});
  if (it == held_locks().end()) return;
  if (it->second.fd >= 0) {
    if (it->second.created) ::unlink((root / kSaveLockFileName).c_str());
    ::close(it->second.fd);
  }
  held_locks().erase(it);
}

}  // namespace trident
