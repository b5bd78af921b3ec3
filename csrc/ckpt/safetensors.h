// safetensors reader and writer (https://github.com/huggingface/safetensors, format only).
//
// File layout: u64 little-endian N; N bytes of UTF-8 JSON
//   {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
// padded with trailing spaces so that N is a multiple of 8 (as the reference writer does);
// then the data buffer. Offsets are relative to the start of the data buffer; the tensors
// tile it exactly (contiguous, no overlap, no holes, nothing after the last one).
//
// The writer stores tensors in order of decreasing element size (stable, caller's order
// otherwise) so every tensor is aligned to its element size in the file and in the mmap;
// the header lists "__metadata__" first and the tensors in data order. It writes to a
// temporary file next to the destination, fsyncs it and renames it (AtomicFileWriter, in
// streaming mode: large aligned O_DIRECT writes behind the caller, checksummed on the way).
//
// The reader mmaps the file read-only and validates the header strictly; every problem
// throws IoError "<file>: <what is wrong>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace trident {

enum class StDType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };

size_t st_dtype_size(StDType t);
const char* st_dtype_name(StDType t);                        // "F32", "BF16", ...
std::optional<StDType> parse_st_dtype(std::string_view s);   // nullopt for unknown names
StDType to_st_dtype(DType t);                                // F32, F16, BF16, I32
// Throws ConfigError for safetensors dtypes trident has no DType for.
DType from_st_dtype(StDType t);

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  // empty: a scalar (one element)
  uint64_t begin = 0, end = 0;  // byte offsets in the data buffer
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// One tensor to write. `data` holds numel(shape) x st_dtype_size(dtype) bytes, little-endian.
struct StTensorRef {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  // Used instead of `data` when set (e.g. a tensor in device memory): copies bytes
  // [offset, offset + len) of the tensor to `dst`, a host staging buffer. Called for
  // consecutive pieces, each a whole number of elements, while the file is written.
  std::function<void(void* dst, uint64_t offset, size_t len)> fill = nullptr;
};

// What write_safetensors wrote: total size and XXH3 checksum (checksum.h) of the file.
struct WrittenFile {
  std::string path;
  uint64_t size = 0;
  std::string xxh3;
};

// Writes `tensors` (unique, non-empty names other than "__metadata__") to `path`
// atomically. Throws ConfigError for bad arguments, IoError naming the file for I/O.
WrittenFile write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Builds the header bytes (8-byte length + padded JSON) for tensors already in data order
// with their offsets set. Exposed for tests.
std::string safetensors_header(const std::vector<StTensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata);

// What a file must be before its header is trusted: metadata.json's record of it.
struct ExpectedFile {
  std::string xxh3;   // checksum.h form
  int64_t size = -1;  // bytes; negative: not checked
};

class SafetensorsReader {
 public:
  // mmaps and validates `path`; throws IoError "<path>: <problem>". With `expect`, first
  // checks the file's size and checksum (verify_file's checks and messages) on the mapping
  // itself, which also faults every page in: one pass over the file, no copy.
  explicit SafetensorsReader(const std::string& path, const std::optional<ExpectedFile>& expect = std::nullopt);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& o) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& o) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  // Tensors in data order (increasing offsets).
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws IoError "<path>: no tensor '<name>'".
  const StTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_size() const { return header_size_; }  // N (JSON + padding)
  uint64_t file_size() const { return file_size_; }

  // Raw bytes in the mapping (aligned to the element size when written by this writer).
  const void* data(const std::string& name) const;
  // Copies the tensor's raw bytes to `dst`, checking dtype and shape; throws IoError
  // naming the file and tensor on mismatch.
  void read_raw(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                void* dst) const;
  // Reads a F32/F16/BF16 tensor converted to fp32. When `shape` is given it must match.
  std::vector<float> read_f32(const std::string& name,
                              const std::optional<std::vector<int64_t>>& shape = std::nullopt) const;

 private:
  void close();
  std::string path_;
  const unsigned char* map_ = nullptr;
  uint64_t file_size_ = 0, header_size_ = 0;
  std::vector<StTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_str(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace trident
