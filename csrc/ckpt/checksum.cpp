#include "ckpt/checksum.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/hex.h"
#include "core/mapped_files.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older C library headers lack the name
#endif

namespace trident {

Xxh3Hasher::Xxh3Hasher() : state_(XXH3_createState()) {
  if (!state_) throw InternalError("XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Hasher::~Xxh3Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Hasher::update(const void* data, size_t n) {
  if (n == 0) return;
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}
uint64_t Xxh3Hasher::value() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }
std::string Xxh3Hasher::hex() const { return xxh3_hex(value()); }

std::string xxh3_hex(uint64_t h) { return hex64(h); }

std::string checksum_bytes(const void* data, size_t n) { return xxh3_hex(XXH3_64bits(data, n)); }

namespace {

// Hashes the file with read(2); returns its size in *size. Used where it cannot be mapped.
std::string hash_file_read(const std::string& path, int fd, uint64_t* size) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(size_t{4} << 20);
  Xxh3Hasher h;
  uint64_t total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IoError(path + ": read failed during checksum: " + std::strerror(errno));
    }
    if (r == 0) break;
    h.update(buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  *size = total;
  return h.hex();
}

// Hashes the file, mapped when possible (checksum_mapped); returns its size in *size.
std::string hash_file(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open for checksum: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    const size_t n = static_cast<size_t>(st.st_size);
    void* m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      struct Unmapper {
        void* m;
        size_t n;
        ~Unmapper() {
          forget_mapped_file(m);
          ::munmap(m, n);
        }
      } unmapper{m, n};
      note_mapped_file(m, n, path);
      *size = n;
      return checksum_mapped(path, m, n);
    }
  }
  return hash_file_read(path, fd, size);
}

}  // namespace

std::string checksum_mapped(const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  constexpr size_t kWindow = size_t{32} << 20;
  if (n <= kWindow) {  // small: the kernel's own readahead is enough
    return checksum_bytes(data, n);
  }
  // Helpers fault windows in round robin (helper k owns windows k, k + K, ...). More than one,
  // because filling the page cache costs CPU time per page (allocation, and in a VM often a
  // host fault) that one thread cannot overlap with the next read: measured on a 2-vCPU VM
  // reading 4.3 GB cold, 0.7-0.8 GB/s with one helper, 1.8-1.9 GB/s with 2 to 4 (the disk's
  // own rate with O_DIRECT: 2.0 GB/s).
  const size_t helpers = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 4);
  struct Progress {
    std::atomic<size_t> ready{0};  // the helper's windows below this offset are resident
    int error = 0;                 // errno of a failed read, published by `ready` = n
    size_t error_at = 0;
  };
  std::vector<Progress> progress(helpers);
  std::atomic<bool> stop{false};  // the hash side gave up
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto populate = [&](size_t k) {
    Progress& me = progress[k];
    bool use_madvise = true;
    for (size_t off = k * kWindow; off < n && !stop.load(std::memory_order_relaxed); off += helpers * kWindow) {
      const size_t len = std::min(kWindow, n - off);
      // madvise wants a page-aligned start (a mapping starts on one; `data` may not).
      const uintptr_t a = reinterpret_cast<uintptr_t>(p + off) & ~(page - 1);
      const size_t alen = reinterpret_cast<uintptr_t>(p + off + len) - a;
      if (use_madvise) {
        int rc;
        while ((rc = ::madvise(reinterpret_cast<void*>(a), alen, MADV_POPULATE_READ)) != 0 &&
               (errno == EINTR || errno == EAGAIN)) {
        }
        if (rc != 0 && errno == EINVAL) {
          use_madvise = false;  // before Linux 5.14: fault the pages in by touching them
        } else if (rc != 0) {   // EFAULT, EIO, ENOMEM: the file could not be read
          me.error = errno;
          me.error_at = off;
          break;
        }
      }
      if (!use_madvise)
        for (size_t i = 0; i < len; i += page) (void)*static_cast<const volatile char*>(p + off + i);
      me.ready.store(off + len, std::memory_order_release);
      me.ready.notify_all();
    }
    me.ready.store(n, std::memory_order_release);  // done (or failed, or stopped)
    me.ready.notify_all();
  };
  Xxh3Hasher h;  // before the threads: nothing below may throw until they are joined
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  try {
    for (size_t k = 0; k < helpers; ++k) threads.emplace_back(populate, k);
  } catch (...) {  // no thread to be had (a process limit, or its memory)
    stop.store(true);
    for (auto& t : threads) t.join();
    return checksum_bytes(data, n);  // no threads: fault the pages in while hashing
  }
  int error = 0;
  size_t error_at = 0;
  for (size_t off = 0; off < n; off += kWindow) {
    const size_t end = std::min(n, off + kWindow);
    Progress& owner = progress[(off / kWindow) % helpers];
    size_t r = owner.ready.load(std::memory_order_acquire);
    while (r < end) {
      owner.ready.wait(r, std::memory_order_acquire);
      r = owner.ready.load(std::memory_order_acquire);
    }
    // The error fields are the helper's until its last store (ready = n) publishes them: a
    // helper still at work on later windows may be writing them now.
    if (r == n && owner.error != 0 && owner.error_at <= off) {
      error = owner.error;
      error_at = owner.error_at;
      break;
    }
    h.update(p + off, end - off);
  }
  stop.store(true);
  for (auto& t : threads) t.join();
  if (error != 0)
    throw IoError(path + ": read failed during checksum near byte " + std::to_string(error_at) + ": " +
                  std::strerror(error));
  return h.hex();
}

std::string checksum_file(const std::string& path) {
  uint64_t size = 0;
  return hash_file(path, &size);
}

void check_file_size(const std::string& path, uint64_t actual, int64_t expected_size) {
  if (expected_size >= 0 && actual != static_cast<uint64_t>(expected_size)) {
    throw IoError(path + ": " + (actual < static_cast<uint64_t>(expected_size) ? "truncated" : "size mismatch") +
                  ": " + std::to_string(actual) + " bytes, expected " + std::to_string(expected_size));
  }
}

void check_file_checksum(const std::string& path, const std::string& got, const std::string& expected) {
  if (got != expected)
    throw IoError(path + ": checksum mismatch (xxh3 " + got + ", expected " + expected + "): file is corrupt");
}

void verify_file(const std::string& path, const std::string& expected, int64_t expected_size) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(path + ": missing checkpoint file (" + std::strerror(errno) + ")");
  check_file_size(path, static_cast<uint64_t>(st.st_size), expected_size);
  uint64_t size = 0;
  const std::string got = hash_file(path, &size);
  if (expected_size >= 0 && size != static_cast<uint64_t>(expected_size))
    throw IoError(path + ": truncated while reading: " + std::to_string(size) + " bytes, expected " +
                  std::to_string(expected_size));
  check_file_checksum(path, got, expected);
}

}  // namespace trident
