// Memory-mapped files that can shrink under the process: another process truncating or
// rewriting a dataset's .bin, an index-map cache or a checkpoint file while it is mapped
// makes a read past the new end raise SIGBUS, which would end the process with "Bus error"
// and a core dump, naming nothing. The mappings noted here turn it into one line naming the
// file and exit status 2, the status of a bad file (a SIGBUS anywhere else stays a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace trident {

// Notes that [addr, addr + len) maps `path` (the first use installs the SIGBUS handler);
// forget_mapped_file before unmapping it. Thread-safe; at most 8192 at once (more are not
// noted: their SIGBUS stays a crash).
void note_mapped_file(const void* addr, size_t len, const std::string& path);
void forget_mapped_file(const void* addr);

// A whole file mapped read-only, noted as above, unmapped when destroyed. MAP_SHARED: the
// processes of a node that map one file share its pages in the page cache (eight ranks
// reading one corpus's index hold it once).
class ReadOnlyMapping;
// Maps the whole regular file at `path` (len: its length); throws IoError naming it when it
// cannot be opened (`open_hint` appended to that message), is not a regular file or cannot
// be mapped.
ReadOnlyMapping map_file_read_only(const std::string& path, uint64_t& len, const std::string& open_hint = "");

class ReadOnlyMapping {
 public:
  ReadOnlyMapping() = default;
  // Maps the first len bytes of the open file fd (len 0 maps nothing); throws IoError naming
  // path when the mapping fails.
  ReadOnlyMapping(int fd, size_t len, const std::string& path);
  ~ReadOnlyMapping() { reset(); }
  ReadOnlyMapping(ReadOnlyMapping&& o) noexcept { *this = std::move(o); }
  ReadOnlyMapping& operator=(ReadOnlyMapping&& o) noexcept;
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ReadOnlyMapping& operator=(const ReadOnlyMapping&) = delete;

  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace trident
