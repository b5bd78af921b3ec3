#include "ckpt/aligned_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace trident {

namespace {
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
XXH3_state_t* state(void* p) { return static_cast<XXH3_state_t*>(p); }
}  // namespace

AlignedWriter::AlignedWriter(int fd, std::string name, AlignedWriterOptions opt)
    : fd_(fd), name_(std::move(name)), chunk_(round_up(std::max<size_t>(opt.chunk_bytes, 1), kDirectAlign)) {
  const int nbuf = std::max(opt.buffers, 2);
  try {
    for (int i = 0; i < nbuf; ++i) {
      void* p = nullptr;
      if (::posix_memalign(&p, kDirectAlign, chunk_) != 0)
        throw IoError(name_ + ": cannot allocate a " + std::to_string(chunk_ >> 20) + " MB write buffer");
      all_buffers_.push_back(static_cast<char*>(p));
      free_.push_back(static_cast<char*>(p));
    }
    hash_state_ = XXH3_createState();
    if (!hash_state_) throw IoError(name_ + ": cannot allocate the checksum state");
    XXH3_64bits_reset(state(hash_state_));
    if (opt.try_direct) direct_ = direct_ok_ = set_direct(true);
    io_ = std::thread([this] { io_loop(); });
  } catch (...) {
    for (char* b : all_buffers_) std::free(b);
    if (hash_state_) XXH3_freeState(state(hash_state_));
    throw;
  }
}

AlignedWriter::~AlignedWriter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;  // queued chunks are dropped: the caller is abandoning the file
  }
  cv_.notify_all();
  if (io_.joinable()) io_.join();
  for (char* b : all_buffers_) std::free(b);
  XXH3_freeState(state(hash_state_));
}

bool AlignedWriter::set_direct(bool on) {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0) return false;
  const int want = on ? (flags | O_DIRECT) : (flags & ~O_DIRECT);
  return ::fcntl(fd_, F_SETFL, want) == 0;
}

uint64_t AlignedWriter::xxh3() const { return XXH3_64bits_digest(state(hash_state_)); }

void AlignedWriter::throw_error() const { throw_write_failure(error_, error_errno_); }

void AlignedWriter::throw_if_failed() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!error_.empty()) throw_error();
}

void AlignedWriter::wait_for_free_buffer(std::unique_lock<std::mutex>& lk) {
  cv_.wait(lk, [&] { return !free_.empty() || !error_.empty(); });
  if (!error_.empty()) throw_error();
}

void AlignedWriter::write(const void* data, size_t n) {
  const char* src = static_cast<const char*>(data);
  write_with(n, [src](void* dst, uint64_t off, size_t len) { std::memcpy(dst, src + off, len); });
}

void AlignedWriter::write_with(size_t n, const FillFn& fill) {
  if (finished_) throw IoError(name_ + ": write after the file was finished");
  throw_if_failed();
  uint64_t done = 0;
  while (done < n) {
    if (current_.buf == nullptr) {
      std::unique_lock<std::mutex> lk(mu_);
      wait_for_free_buffer(lk);
      current_.buf = free_.back();
      free_.pop_back();
      current_.len = 0;
      current_.offset = size_;
    }
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(chunk_ - current_.len, n - done));
    fill(current_.buf + current_.len, done, piece);
    current_.len += piece;
    size_ += piece;
    done += piece;
    if (current_.len == chunk_) submit_current();
  }
}

void AlignedWriter::submit_current() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(current_);
  }
  current_ = Chunk{};
  cv_.notify_all();
}

void AlignedWriter::finish() {
  if (finished_) return;
  if (current_.buf != nullptr) {
    if (current_.len > 0) {
      submit_current();
    } else {
      std::lock_guard<std::mutex> lk(mu_);
      free_.push_back(current_.buf);
      current_ = Chunk{};
    }
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return (queue_.empty() && !busy_) || !error_.empty(); });
    if (!error_.empty()) throw_error();
  }
  // The padding of the last direct write went past the true end: cut it off.
  if (file_end_ > size_) {
    while (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw_write_failure(
          name_ + ": cannot set the file size to " + std::to_string(size_) + " bytes: " + std::strerror(err), err);
    }
  }
  finished_ = true;
}

void AlignedWriter::io_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Chunk c = queue_.front();
    queue_.erase(queue_.begin());
    const bool failed_before = !error_.empty();
    busy_ = true;
    lk.unlock();
    std::string err;
    int err_no = 0;
    bool ok = true;
    if (!failed_before) {  // after a failure the remaining chunks are only recycled
      XXH3_64bits_update(state(hash_state_), c.buf, c.len);
      ok = write_chunk(c, &err, &err_no);
    }
    lk.lock();
    if (!ok && error_.empty()) {
      error_ = std::move(err);
      error_errno_ = err_no;
    }
    free_.push_back(c.buf);
    busy_ = false;
    cv_.notify_all();
  }
}

bool AlignedWriter::write_chunk(const Chunk& c, std::string* error, int* error_errno) {
  size_t done = 0;
  while (done < c.len) {
    if (direct_) {
      // O_DIRECT needs the length in whole blocks: pad the (last, partial) chunk with zeros;
      // finish() truncates the file back to its true size.
      const size_t total = round_up(c.len, kDirectAlign);
      if (done == 0 && total > c.len) std::memset(c.buf + c.len, 0, total - c.len);
      const ssize_t w = ::pwrite(fd_, c.buf + done, total - done, static_cast<off_t>(c.offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        // Refused (EINVAL: no direct I/O here, or a short write left an unaligned rest) or
        // failed: continue with buffered writes, whose error, if any, is the one reported.
        direct_ok_ = false;
        if (!set_direct(false)) {
          *error_errno = errno;
          *error = name_ + ": write failed after " + std::to_string(c.offset + done) +
                   " bytes: cannot leave direct I/O: " + std::strerror(*error_errno);
          return false;
        }
        direct_ = false;
        continue;
      }
      done += static_cast<size_t>(w);
      file_end_ = std::max<uint64_t>(file_end_, c.offset + done);
    } else {
      const ssize_t w = ::pwrite(fd_, c.buf + done, c.len - done, static_cast<off_t>(c.offset + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        *error_errno = w < 0 ? errno : 0;
        *error = name_ + ": write failed after " + std::to_string(c.offset + done) + " bytes: " +
                 (w < 0 ? std::strerror(*error_errno) : "no progress");
        return false;
      }
      done += static_cast<size_t>(w);
      file_end_ = std::max<uint64_t>(file_end_, c.offset + done);
    }
  }
  // Start writing buffered data back now rather than all at the final fsync (which still
  // waits for it and reports any error). A no-op where nothing is cached or supported.
  if (!direct_) ::sync_file_range(fd_, static_cast<off_t>(c.offset), static_cast<off_t>(c.len), SYNC_FILE_RANGE_WRITE);
  return true;
}

}  // namespace trident
