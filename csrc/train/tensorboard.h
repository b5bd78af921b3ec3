// A TensorBoard event-file writer for scalars.
//
// File: `<dir>/events.out.tfevents.<unix seconds>.<host>` (a ".N" suffix is added when
// that name already exists). Content: TFRecord frames, each
//   uint64 length | uint32 masked CRC32C(length bytes) | data | uint32 masked CRC32C(data)
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), whose data is one
// serialized tensorflow.Event (tensorboard_event.proto): first {wall_time,
// file_version: "brain.Event:2"}, then one {wall_time, step, summary {value {tag,
// simple_value}}} per add_scalar.
//
// add_scalar() only queues the value: a background thread encodes and writes, so the
// training loop does not wait for the disk. The queue is bounded; when it is full,
// add_scalar() waits for room (as the queue of TensorBoard's own writer, which Megatron
// uses, does): no scalar is lost, and a disk that stops answering stops the run where it
// can be seen. flush() waits until everything queued so far is written to the OS (write(2));
// close() also closes the file and reports any error, the close's included (NFS reports a
// failed write-back there). The destructor writes what is queued and joins; while an
// exception unwinds it waits a few seconds at most, then leaves the thread to finish on its
// own, so that a hung disk does not keep the error from being reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace trident {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord frame around `payload`.
std::string tfrecord_frame(const std::string& payload);

class TensorBoardWriter {
 public:
  // Creates `dir` when needed and the event file with its file_version record.
  // Throws ConfigError naming --tensorboard-dir when it cannot.
  explicit TensorBoardWriter(const std::string& dir, size_t max_queue = 1000);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Queues tag = value at `step`, stamped with the current time (or `wall_time`,
  // seconds since the epoch). Waits only while the queue is full. Throws IoError naming the
  // file when an earlier write failed.
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  // Blocks until every scalar queued before the call is written.
  // Throws IoError naming the file if a write failed.
  void flush();
  // Writes everything queued, stops the thread and closes the file. Throws IoError naming
  // the file if a write or the close failed. A second call does nothing; neither add_scalar
  // nor flush may follow.
  // (All three throw a std::runtime_error naming the file when the writer's thread itself
  // failed: out of memory.)
  void close();

  const std::string& path() const { return path_; }

 private:
  struct Shared;  // the queue and the file: owned by the writer and its thread, until both end
  std::shared_ptr<Shared> shared_;
  std::string path_;
  std::thread thread_;
};

}  // namespace trident
