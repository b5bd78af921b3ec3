// Line reader for JSONL input, plain or xz-compressed (detected by the xz magic bytes,
// decoded with liblzma, concatenated streams allowed). Lines are returned without the
// line end ("\n", "\r\n" or a lone "\r", as Python's universal newlines); each view stays
// valid until the next call. A UTF-8 byte-order mark before the first line is dropped (as
// Python's utf-8-sig reads it); gzip, bzip2 and zstd input is refused by name.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

class JsonlReader {
 public:
  explicit JsonlReader(std::string path);
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;

  // Next line; false at the end of input. Throws IoError naming the file on a read error
  // or a corrupt xz stream.
  bool next(std::string_view& line);

  const std::string& path() const { return path_; }
  bool compressed() const { return xz_ != nullptr; }
  uint64_t line_number() const { return line_no_; }       // of the line last returned (1-based)
  uint64_t file_size() const { return file_size_; }       // bytes on disk
  uint64_t raw_bytes_read() const { return raw_read_; }   // bytes on disk consumed so far
  uint64_t text_bytes() const { return text_bytes_; }     // uncompressed bytes returned so far

 private:
  size_t fill();  // appends decoded bytes to buf_; returns how many
  // Reads up to n bytes from the file (fewer only at its end, which sets raw_eof_); throws
  // IoError naming the file on a read error.
  size_t read_raw(char* dst, size_t n);

  std::string path_;
  std::FILE* f_ = nullptr;
  struct XzState;
  XzState* xz_ = nullptr;  // liblzma decoder, only for xz input
  bool raw_eof_ = false, xz_done_ = false;
  bool input_done_ = false;  // fill() found no more text
  std::vector<char> raw_;   // compressed input chunk
  std::vector<char> buf_;   // decoded text
  size_t pos_ = 0;          // start of unread text in buf_
  uint64_t line_no_ = 0, file_size_ = 0, raw_read_ = 0, text_bytes_ = 0;
};

}  // namespace trident
