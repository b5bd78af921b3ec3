// Crash-safe file writing: data goes to a temporary file in the destination's directory,
// which is fsynced, renamed over the final name and the directory fsynced. A reader never
// sees a partial file under the final name; on any error the temporary is removed and the
// previous file (if any) is left untouched.
//
// Two ways to write: plain (each write() is a write(2) call; small files such as
// metadata.json and the latest pointer) and streaming (large files: an AlignedWriter
// stages the bytes in big aligned buffers, writes them with O_DIRECT where the file system
// allows it from a second thread, and computes the file's XXH3 checksum on the way).
// Either way the file holds exactly the bytes given, fsynced once before the rename.
//
// A symbolic link to a file is replaced by the new file, never written through (a checkpoint
// folder's tracker linked to another run's leaves that run alone). A path that ends at
// something other than a regular file (a FIFO, a terminal, a device), or at the process's own
// standard output or error (/dev/stdout redirected to a log), is written in place, as a
// shell's redirection would, in plain mode only, and opened at the first write or commit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/aligned_writer.h"

namespace trident {

class AtomicFileWriter {
 public:
  // Creates `<path>.tmp-<pid>-<n>` next to `path`; throws IoError naming `path`. With
  // `streaming`, writes go through an AlignedWriter with those options.
  explicit AtomicFileWriter(std::string path, std::optional<AlignedWriterOptions> streaming = std::nullopt);
  ~AtomicFileWriter();  // removes the temporary unless commit() succeeded
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Throws IoError naming the final path. In streaming mode a failure may surface at a
  // later write() or at commit() (the data is written behind the caller); the file is then
  // removed all the same.
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Streaming mode only: appends n bytes produced by fill (AlignedWriter::write_with).
  void write_with(size_t n, const AlignedWriter::FillFn& fill);
  // fsync, close, rename onto the final name, fsync the directory.
  void commit();
  uint64_t bytes_written() const { return written_; }
  // Streaming mode: XXH3 of the file's bytes (checksum.h form), valid after commit().
  std::string xxh3() const { return xxh3_; }
  // Streaming mode: whether every chunk went out with O_DIRECT (after commit()).
  bool wrote_direct() const { return direct_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void abort_quietly();
  void open_in_place();  // the in-place file's descriptor, at the first write or commit
  std::string path_, tmp_;  // tmp_ "": written in place
  bool in_place_ = false;   // in place and not opened yet
  int standard_stream_ = -1;  // 1 or 2 when the path is this process's standard output or error
  int fd_ = -1;
  std::unique_ptr<AlignedWriter> stream_;
  uint64_t written_ = 0;
  std::string xxh3_;
  bool direct_ = false;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically (AtomicFileWriter).
void write_file_atomic(const std::string& path, std::string_view contents);
// Reads a whole file; throws IoError naming it.
std::string read_file(const std::string& path);
// fsync a directory so that renames and unlinks in it are durable; throws IoError.
void fsync_dir(const std::string& dir);
// A short token unique to this process and call ("<pid>-<counter>-<nanoseconds>").
std::string unique_token();

}  // namespace trident
