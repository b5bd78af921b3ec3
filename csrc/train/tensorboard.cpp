#include "train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/process_id.h"
#include "core/write_fully.h"
#include "tensorboard_event.pb.h"

namespace trident {
namespace {

// CRC-32C lookup table for the reflected Castagnoli polynomial, built once.
const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Test hook: TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S=<seconds> holds the writer's thread that
// long before each batch it writes (a slow or hung disk). Read when a writer is made.
double test_write_delay_s() {
  const char* v = std::getenv("TRIDENT_TEST_SLOW_TENSORBOARD_WRITE_S");
  return v ? std::strtod(v, nullptr) : 0;
}

// How long the destructor, while an exception unwinds, lets the thread write what is queued.
constexpr std::chrono::seconds kUnwindingWait(5);

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) { return mask_crc(crc32c(data, n)); }

std::string tfrecord_frame(const std::string& payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += payload;
  put_le(out, masked_crc32c(payload.data(), payload.size()), 4);
  return out;
}

// Shared by the writer and its thread, so that a thread left to finish on its own (the
// writer destroyed while an exception unwinds) still has its queue and file. The file is a
// plain descriptor written with write(2), not a stdio stream: exit() flushes every stream,
// and would block on the stuck write of a thread left behind on a hung disk.
struct TensorBoardWriter::Shared {
  struct Item {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };

  Shared(std::string p, int f, size_t max) : path(std::move(p)), fd(f), max_queue(max) {}
  ~Shared() {
    if (fd >= 0) ::close(fd);  // not close()d: nobody is told of an error here
  }
  void run();
  void write_queued();
  void request_stop();  // the writer's: the thread writes what is queued, then ends
  void write_frames(const std::string& frames);  // the constructor's before the thread starts, then the thread's
  void note_error(const std::string& what, int err);  // the first one only; mu held
  // IoError (StorageError for a full disk) for a failed write; a failure of the thread
  // itself (out of memory) is a runtime error, as the tools report one elsewhere.
  [[noreturn]] void throw_error() const {
    if (thread_failed) throw std::runtime_error(path + ": " + error);
    throw_write_failure(path + ": " + error, error_errno);
  }

  const std::string path;
  int fd;
  const size_t max_queue;
  const double write_delay_s = test_write_delay_s();
  std::mutex mu;
  std::condition_variable work, done, room;
  std::deque<Item> queue;       // guarded by mu, as is everything below
  uint64_t queued = 0, written = 0;
  bool stop = false;            // the writer's: write what is queued, then end
  bool ended = false;           // the thread's: it has ended (stopped, or failed)
  bool thread_failed = false;   // it ended on an exception of its own
  std::string error;            // the first error
  int error_errno = 0;          // and its errno (0: not a system call's)
};

void TensorBoardWriter::Shared::note_error(const std::string& what, int err) {
  if (!error.empty()) return;
  error = what;
  error_errno = err;
}

void TensorBoardWriter::Shared::request_stop() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  work.notify_all();
}

void TensorBoardWriter::Shared::write_frames(const std::string& frames) {
  if (const int err = write_fully(fd, frames.data(), frames.size()); err != 0) {
    std::lock_guard<std::mutex> lock(mu);
    note_error(std::string("write failed: ") + std::strerror(err), err);
  }
}

// Any failure other than a write's (protobuf out of memory) ends the thread with an error
// that add_scalar, flush and close report, rather than std::terminate.
void TensorBoardWriter::Shared::run() {
  try {
    write_queued();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu);
    thread_failed = error.empty();
    note_error(std::string("the event writer's thread failed: ") + e.what(), 0);
  }
  std::lock_guard<std::mutex> lock(mu);
  ended = true;
  done.notify_all();
  room.notify_all();
}

// Takes everything queued, encodes it outside the lock and writes it in one write(2), so that
// flush() and close() see complete files.
void TensorBoardWriter::Shared::write_queued() {
  std::vector<Item> batch;
  std::string frames;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    work.wait(lock, [&] { return stop || !queue.empty(); });
    if (queue.empty() && stop) return;
    batch.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.end()));
    queue.clear();
    room.notify_all();  // room for add_scalar's waiters
    lock.unlock();
    if (write_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(write_delay_s));
    frames.clear();
    for (const Item& it : batch) {
      tensorflow::Event ev;
      ev.set_wall_time(it.wall_time);
      ev.set_step(it.step);
      tensorflow::Summary::Value* v = ev.mutable_summary()->add_value();
      v->set_tag(it.tag);
      v->set_simple_value(it.value);
      frames += tfrecord_frame(ev.SerializeAsString());
    }
    write_frames(frames);
    lock.lock();
    written += batch.size();
    done.notify_all();
  }
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, size_t max_queue) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw_write_failure<ConfigError>(
        "--tensorboard-dir: cannot create directory " + dir + (ec ? ": " + ec.message() : ""), ec.value());
  const long long seconds = static_cast<long long>(now_seconds());
  const std::string base = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." +
                                                          host_name())).string();
  // O_EXCL: fail rather than overwrite another writer's file of the same second.
  int fd = -1;
  for (int n = 0; fd < 0 && n < 1000; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    std::error_code ec;  // a path that cannot be looked at: open says why
    if (!std::filesystem::exists(path_, ec)) fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  }
  if (fd < 0) {
    const int err = errno;
    throw_write_failure<ConfigError>(
        "--tensorboard-dir: cannot create an event file in " + dir + ": " + std::strerror(err), err);
  }
  // From here on, a failure closes and removes the file: no event file left behind.
  try {
    shared_ = std::make_shared<Shared>(path_, fd, max_queue);
  } catch (...) {
    ::close(fd);
    std::remove(path_.c_str());
    throw;
  }
  try {
    tensorflow::Event first;
    first.set_wall_time(now_seconds());
    first.set_file_version("brain.Event:2");
    shared_->write_frames(tfrecord_frame(first.SerializeAsString()));
    if (!shared_->error.empty())  // a full disk
      throw_write_failure<ConfigError>("--tensorboard-dir: " + path_ + ": " + shared_->error, shared_->error_errno);
    thread_ = std::thread([s = shared_] { s->run(); });
  } catch (...) {
    shared_.reset();  // closes the file
    std::remove(path_.c_str());
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (!thread_.joinable()) return;  // closed
  shared_->request_stop();
  // Unwinding for an error: the last scalars (a NaN loss's iterations) are still written when
  // the disk answers, but a hung one must not keep the error from being reported. A thread
  // that has not ended in time is left to end on its own (its Shared outlives this), or with
  // the process.
  bool ended = true;
  if (std::uncaught_exceptions() > 0) {
    std::unique_lock<std::mutex> lock(shared_->mu);
    ended = shared_->done.wait_for(lock, kUnwindingWait, [this] { return shared_->ended; });
  }
  if (ended)
    thread_.join();
  else
    thread_.detach();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  TRIDENT_CHECK(thread_.joinable(), "TensorBoardWriter::add_scalar after close()");
  Shared& s = *shared_;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.room.wait(lock, [&] { return s.queue.size() < s.max_queue || !s.error.empty(); });
    // A write that failed (a full disk) stops the run at the next scalar, as Megatron's
    // writer raises its thread's error, rather than after the last iteration.
    if (!s.error.empty()) s.throw_error();
    s.queue.push_back(Shared::Item{tag, static_cast<float>(value), step, wall_time});
    ++s.queued;
  }
  s.work.notify_one();
}

void TensorBoardWriter::flush() {
  TRIDENT_CHECK(thread_.joinable(), "TensorBoardWriter::flush after close()");
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mu);
  const uint64_t target = s.queued;
  s.work.notify_one();
  s.done.wait(lock, [&] { return s.written >= target || s.ended; });
  if (!s.error.empty()) s.throw_error();
}

void TensorBoardWriter::close() {
  if (!thread_.joinable()) return;
  Shared& s = *shared_;
  s.request_stop();
  thread_.join();
  // The thread has ended: the rest is this thread's alone. NFS reports a failed write-back at
  // the close.
  if (::close(std::exchange(s.fd, -1)) != 0) {
    const int err = errno;
    s.note_error(std::string("close failed: ") + std::strerror(err), err);
  }
  if (!s.error.empty()) s.throw_error();
}

}  // namespace trident
