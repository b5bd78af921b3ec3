#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/process_id.h"
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
// writer destroyed while an exception unwinds) still has its queue and file.
struct TensorBoardWriter::Shared {
  struct Item {
    std::string tag;
    float value;
    int64_t step;
    double wall_time;
  };

  Shared(std::string p, std::FILE* f, size_t max) : path(std::move(p)), file(f), max_queue(max) {}
  ~Shared() {
    if (file) std::fclose(file);  // not close()d: nobody is told of an error here
  }
  void run();
  void write_queued();
  void write_record(const std::string& payload);
  void note_error(const std::string& what, int err);  // the first one only; mu held
  [[noreturn]] void throw_error() const { throw_write_failure(path + ": " + error, error_errno); }

  const std::string path;
  std::FILE* file;
  const size_t max_queue;
  const double write_delay_s = test_write_delay_s();
  std::mutex mu;
  std::condition_variable work, done, room;
  std::deque<Item> queue;       // guarded by mu, as is everything below
  uint64_t queued = 0, flushed = 0;
  bool stop = false;            // the writer's: write what is queued, then end
  bool ended = false;           // the thread's: it has ended (stopped, or failed)
  std::string error;            // the first write error
  int error_errno = 0;          // and its errno (0: not a system call's)
};

void TensorBoardWriter::Shared::note_error(const std::string& what, int err) {
  if (!error.empty()) return;
  error = what;
  error_errno = err;
}

// Called by the constructor (before the thread starts) and by the thread only.
void TensorBoardWriter::Shared::write_record(const std::string& payload) {
  const std::string frame = tfrecord_frame(payload);
  if (std::fwrite(frame.data(), 1, frame.size(), file) != frame.size()) {
    const int err = errno;
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
    note_error(std::string("the event writer's thread failed: ") + e.what(), 0);
  }
  std::lock_guard<std::mutex> lock(mu);
  ended = true;
  done.notify_all();
  room.notify_all();
}

// Takes everything queued, encodes and writes it outside the lock, and fflush()es each
// time the queue runs empty, so flush() and close() see complete files.
void TensorBoardWriter::Shared::write_queued() {
  std::vector<Item> batch;
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    work.wait(lock, [&] { return stop || !queue.empty(); });
    if (queue.empty() && stop) return;
    batch.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.end()));
    queue.clear();
    room.notify_all();  // room for add_scalar's waiters
    lock.unlock();
    if (write_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(write_delay_s));
    for (const Item& it : batch) {
      tensorflow::Event ev;
      ev.set_wall_time(it.wall_time);
      ev.set_step(it.step);
      tensorflow::Summary::Value* v = ev.mutable_summary()->add_value();
      v->set_tag(it.tag);
      v->set_simple_value(it.value);
      write_record(ev.SerializeAsString());
    }
    const bool flush_ok = std::fflush(file) == 0;
    const int flush_errno = errno;
    lock.lock();
    if (!flush_ok) note_error(std::string("flush failed: ") + std::strerror(flush_errno), flush_errno);
    flushed += batch.size();
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
  // "x": fail rather than overwrite another writer's file of the same second.
  std::FILE* file = nullptr;
  for (int n = 0; !file && n < 1000; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    std::error_code ec;  // a path that cannot be looked at: fopen says why
    if (!std::filesystem::exists(path_, ec)) file = std::fopen(path_.c_str(), "wbx");
  }
  if (!file) {
    const int err = errno;
    throw_write_failure<ConfigError>(
        "--tensorboard-dir: cannot create an event file in " + dir + ": " + std::strerror(err), err);
  }
  // From here on, a failure closes and removes the file: no event file left behind.
  auto remove_file = [&] {
    shared_.reset();  // closes it
    std::remove(path_.c_str());
  };
  try {
    shared_ = std::make_shared<Shared>(path_, file, max_queue);
  } catch (...) {
    std::fclose(file);
    std::remove(path_.c_str());
    throw;
  }
  tensorflow::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  shared_->write_record(first.SerializeAsString());
  if (std::fflush(file) != 0) {
    const int err = errno;
    shared_->note_error(std::string("flush failed: ") + std::strerror(err), err);
  }
  if (!shared_->error.empty()) {  // a full disk
    const std::string error = shared_->error;
    const int err = shared_->error_errno;
    remove_file();
    throw_write_failure<ConfigError>("--tensorboard-dir: " + path_ + ": " + error, err);
  }
  try {
    thread_ = std::thread([s = shared_] { s->run(); });
  } catch (...) {
    remove_file();
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  if (!thread_.joinable()) return;  // closed
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->stop = true;
  }
  shared_->work.notify_all();
  // Unwinding for an error: the thread writes what is queued on its own and closes the file
  // when it ends (its Shared outlives this), or the process ends first.
  if (std::uncaught_exceptions() > 0)
    thread_.detach();
  else
    thread_.join();
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
  s.done.wait(lock, [&] { return s.flushed >= target || s.ended; });
  if (!s.error.empty()) s.throw_error();
}

void TensorBoardWriter::close() {
  if (!thread_.joinable()) return;
  Shared& s = *shared_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
  }
  s.work.notify_all();
  thread_.join();
  // The thread has ended: the rest is this thread's alone.
  std::FILE* file = std::exchange(s.file, nullptr);
  if (std::fclose(file) != 0) {
    const int err = errno;
    s.note_error(std::string("close failed: ") + std::strerror(err), err);
  }
  if (!s.error.empty()) s.throw_error();
}

}  // namespace trident
