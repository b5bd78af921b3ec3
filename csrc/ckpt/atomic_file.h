// Crash-safe file writing: data goes to a temporary file in the destination's directory,
// which is fsynced, renamed over the final name and the directory fsynced. A reader never
// sees a partial file under the final name; on any error the temporary is removed and the
// previous file (if any) is left untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trident {

class AtomicFileWriter {
 public:
  // Creates `<path>.tmp-<pid>-<n>` next to `path`; throws IoError naming `path`.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();  // removes the temporary unless commit() succeeded
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // throws IoError naming the final path
  void write(std::string_view s) { write(s.data(), s.size()); }
  // fsync, close, rename onto the final name, fsync the directory.
  void commit();
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void abort_quietly();
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
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
