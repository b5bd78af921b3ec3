#include "ckpt/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "ckpt/checksum.h"
#include "core/error.h"

namespace trident {

namespace {
std::string errno_str() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path d = p.parent_path();
  return d.empty() ? std::string(".") : d.string();
}
}  // namespace

std::string unique_token() {
  static std::atomic<uint64_t> counter{0};
  const auto ns = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "-" +
         std::to_string(static_cast<uint64_t>(ns) % 1000000007ull);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(dir + ": cannot open directory to sync: " + errno_str());
  if (::fsync(fd) != 0 && errno != EINVAL) {  // some file systems cannot sync directories
    const int err = errno;
    ::close(fd);
    throw_write_failure(dir + ": fsync of directory failed: " + std::strerror(err), err);
  }
  ::close(fd);
}

namespace {

// The standard output or error stream (1 or 2) when `st` is the file it writes to (the path
// was /dev/stdout, /dev/fd/2, /proc/self/fd/1, ...); -1 otherwise.
int standard_stream_of(const struct stat& st) {
  for (int fd : {1, 2}) {
    struct stat s;
    if (::fstat(fd, &s) == 0 && s.st_dev == st.st_dev && s.st_ino == st.st_ino) return fd;
  }
  return -1;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::optional<AlignedWriterOptions> streaming)
    : path_(std::move(path)) {
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) {  // what the path ends at, links followed
    if (S_ISDIR(st.st_mode)) throw IoError(path_ + ": is a directory");
    standard_stream_ = standard_stream_of(st);
    // The process's own output, a FIFO, a terminal, a device: written in place, as a shell's
    // redirection would (a rename would replace /dev/stdout or the node with a file), and
    // opened only at the first write (a reader of a FIFO would take a probe's open and close
    // for the end of the data). Not a streaming file (large files meant for a file system).
    if (standard_stream_ >= 0 || !S_ISREG(st.st_mode)) {
      if (streaming) throw IoError(path_ + ": not a regular file");
      if (standard_stream_ < 0 && ::access(path_.c_str(), W_OK) != 0)
        throw IoError(path_ + ": cannot open: " + errno_str());
      in_place_ = true;
      return;
    }
  }
  tmp_ = path_ + ".tmp-" + unique_token();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw_write_failure(path_ + ": cannot create temporary file " + tmp_ + ": " + std::strerror(err), err);
  }
  if (streaming) {
    try {
      stream_ = std::make_unique<AlignedWriter>(fd_, path_, *streaming);
    } catch (...) {
      abort_quietly();
      throw;
    }
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abort_quietly();
}

void AtomicFileWriter::abort_quietly() {
  stream_.reset();  // joins the I/O thread before its file descriptor is closed
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write_with(size_t n, const AlignedWriter::FillFn& fill) {
  if (fd_ < 0) throw IoError(path_ + ": write after commit or failure");
  if (!stream_) throw InternalError(path_ + ": write_with needs a streaming AtomicFileWriter");
  try {
    stream_->write_with(n, fill);
  } catch (...) {
    abort_quietly();
    throw;
  }
  written_ = stream_->size();
}

void AtomicFileWriter::open_in_place() {
  if (!in_place_) return;
  in_place_ = false;  // once: after a failure later calls see "after failure"
  // The standard stream is written where it stands (a log redirected with >> keeps its lines).
  fd_ = standard_stream_ >= 0 ? ::fcntl(standard_stream_, F_DUPFD_CLOEXEC, 3)
                              : ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd_ < 0) throw IoError(path_ + ": cannot open: " + errno_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  open_in_place();
  if (fd_ < 0) throw IoError(path_ + ": write after commit or failure");
  if (stream_) {
    try {
      stream_->write(data, n);
    } catch (...) {
      abort_quietly();
      throw;
    }
    written_ = stream_->size();
    return;
  }
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      abort_quietly();
      throw_write_failure(path_ + ": write failed after " + std::to_string(written_) + " bytes: " + std::strerror(err),
                          err);
    }
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFileWriter::commit() {
  open_in_place();
  if (fd_ < 0) throw IoError(path_ + ": commit after failure");
  if (stream_) {
    try {
      stream_->finish();
    } catch (...) {
      abort_quietly();
      throw;
    }
    written_ = stream_->size();
    xxh3_ = xxh3_hex(stream_->xxh3());
    direct_ = stream_->direct();
    stream_.reset();
  }
  if (tmp_.empty()) {  // written in place (not a regular file): nothing to sync or rename
    const int rc = ::close(fd_);
    fd_ = -1;
    const int err = errno;
    if (rc != 0) throw_write_failure(path_ + ": close failed: " + std::strerror(err), err);
    committed_ = true;
    return;
  }
  if (::fsync(fd_) != 0) {
    const int err = errno;
    abort_quietly();
    throw_write_failure(path_ + ": fsync failed: " + std::strerror(err), err);
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    const int err = errno;
    abort_quietly();
    throw_write_failure(path_ + ": close failed: " + std::strerror(err), err);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abort_quietly();
    throw_write_failure(path_ + ": rename from " + tmp_ + " failed: " + std::strerror(err), err);
  }
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents);
  w.commit();
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": cannot open: " + errno_str());
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const std::string e = errno_str();
      ::close(fd);
      throw IoError(path + ": read failed: " + e);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

}  // namespace trident
