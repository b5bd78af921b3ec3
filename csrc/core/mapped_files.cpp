#include "core/mapped_files.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace trident {
namespace {

// A fixed table the handler can read without locks or allocation: a slot is claimed by its
// `begin` (0: free), written, then published by `len` (0: not ready).
constexpr int kSlots = 8192;  // a blend of a thousand prefixes maps up to five files each
constexpr size_t kPathBytes = 480;
struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> len{0};
  char path[kPathBytes];
};
Slot g_slots[kSlots];
struct sigaction g_previous {};  // the handler before ours (Open MPI's backtrace printer, say)

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_bus_error(int sig, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const size_t len = s.len.load(std::memory_order_acquire);
    const uintptr_t begin = s.begin.load(std::memory_order_relaxed);
    if (len == 0 || at < begin || at - begin >= len) continue;
    write_all("trident: error: ");
    write_all(s.path);
    write_all(": the file shrank while it was read (truncated or rewritten by another process?): "
              "a read past its new end (SIGBUS)\n");
    ::_exit(2);
  }
  // Not a noted file's: what would have happened without this handler.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    ::signal(sig, SIG_DFL);  // a core dump; returning re-runs the faulting read
  }
}

void install_handler() {
  struct sigaction sa {};
  sa.sa_sigaction = on_bus_error;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

}  // namespace

void note_mapped_file(const void* addr, size_t len, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  if (addr == nullptr || len == 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : g_slots) {
    uintptr_t free = 0;
    if (!s.begin.compare_exchange_strong(free, begin)) continue;
    const size_t n = path.size() < kPathBytes - 1 ? path.size() : kPathBytes - 1;
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.len.store(len, std::memory_order_release);
    return;
  }
}

void forget_mapped_file(const void* addr) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : g_slots) {
    if (s.begin.load() != begin || s.len.load() == 0) continue;
    s.len.store(0, std::memory_order_release);
    s.begin.store(0);
    return;
  }
}

ReadOnlyMapping map_file_read_only(const std::string& path, uint64_t& len, const std::string& open_hint) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(detail::concat(path, ": cannot open: ", std::strerror(errno), open_hint));
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw IoError(detail::concat(path, ": cannot stat: ", std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw IoError(path + ": not a regular file");
    len = static_cast<uint64_t>(st.st_size);
    ReadOnlyMapping m(fd, static_cast<size_t>(len), path);
    ::close(fd);
    return m;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

ReadOnlyMapping::ReadOnlyMapping(int fd, size_t len, const std::string& path) {
  if (len == 0) return;
  void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) throw IoError(detail::concat(path, ": mmap failed: ", std::strerror(errno)));
  data_ = static_cast<const char*>(m);
  size_ = len;
  note_mapped_file(data_, size_, path);
}

ReadOnlyMapping& ReadOnlyMapping::operator=(ReadOnlyMapping&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void ReadOnlyMapping::reset() {
  if (!data_) return;
  forget_mapped_file(data_);
  ::munmap(const_cast<char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace trident
