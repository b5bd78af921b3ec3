#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
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

TensorBoardWriter::TensorBoardWriter(const std::string& dir, size_t max_queue) : max_queue_(max_queue) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw_write_failure<ConfigError>(
        "--tensorboard-dir: cannot create directory " + dir + (ec ? ": " + ec.message() : ""), ec.value());
  const long long seconds = static_cast<long long>(now_seconds());
  const std::string base = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." +
                                                          host_name())).string();
  // "x": fail rather than overwrite another writer's file of the same second.
  for (int n = 0; !file_ && n < 1000; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    std::error_code ec;  // a path that cannot be looked at: fopen says why
    if (!std::filesystem::exists(path_, ec)) file_ = std::fopen(path_.c_str(), "wbx");
  }
  if (!file_) {
    const int err = errno;
    throw_write_failure<ConfigError>(
        "--tensorboard-dir: cannot create an event file in " + dir + ": " + std::strerror(err), err);
  }
  tensorflow::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString());
  if (std::fflush(file_) != 0 && error_.empty()) note_error("flush failed: ", errno);
  if (!error_.empty()) {  // a full disk: no event file left behind
    std::fclose(file_);
    std::remove(path_.c_str());
    throw_write_failure<ConfigError>("--tensorboard-dir: " + path_ + ": " + error_, error_errno_);
  }
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {  // no thread to be had: no event file left behind either
    std::fclose(file_);
    std::remove(path_.c_str());
    throw;
  }
}

TensorBoardWriter::~TensorBoardWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  if (thread_.joinable()) thread_.join();  // the thread drains the queue before it stops
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalar(tag, value, step, now_seconds());
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_room_.wait(lock, [&] { return queue_.size() < max_queue_ || !error_.empty(); });
    // A write that failed (a full disk) stops the run at the next scalar, as Megatron's
    // writer raises its thread's error, rather than after the last iteration.
    if (!error_.empty()) throw_write_failure(path_ + ": " + error_, error_errno_);
    queue_.push_back(Item{tag, static_cast<float>(value), step, wall_time});
    ++queued_;
  }
  cv_work_.notify_one();
}

void TensorBoardWriter::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_;
  cv_work_.notify_one();
  cv_done_.wait(lock, [&] { return flushed_ >= target; });
  if (!error_.empty()) throw_write_failure(path_ + ": " + error_, error_errno_);
}

// The first failure only (mu_ held, or before the thread starts).
void TensorBoardWriter::note_error(const char* what, int err) {
  if (!error_.empty()) return;
  error_ = what + std::string(std::strerror(err));
  error_errno_ = err;
}

// Called by the constructor (before the thread starts) and by the thread only.
void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string frame = tfrecord_frame(payload);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size()) {
    const int err = errno;
    std::lock_guard<std::mutex> lock(mu_);
    note_error("write failed: ", err);
  }
}

// Takes everything queued, encodes and writes it outside the lock, and fflush()es each
// time the queue runs empty, so flush() and the destructor see complete files.
void TensorBoardWriter::run() {
  std::vector<Item> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty() && stop_) break;
    batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.clear();
    cv_room_.notify_all();  // room for add_scalar's waiters
    lock.unlock();
    for (const Item& it : batch) {
      tensorflow::Event ev;
      ev.set_wall_time(it.wall_time);
      ev.set_step(it.step);
      tensorflow::Summary::Value* v = ev.mutable_summary()->add_value();
      v->set_tag(it.tag);
      v->set_simple_value(it.value);
      write_record(ev.SerializeAsString());
    }
    const bool flush_ok = std::fflush(file_) == 0;
    const int flush_errno = errno;
    lock.lock();
    if (!flush_ok) note_error("flush failed: ", flush_errno);
    written_ += batch.size();
    flushed_ = written_;
    cv_done_.notify_all();
  }
  cv_done_.notify_all();
}

}  // namespace trident
