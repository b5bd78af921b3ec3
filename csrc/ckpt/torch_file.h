// Files written by torch.save (PyTorch's serialization; the format only, read without Python):
//  * the zip format (torch >= 1.6, the default): a zip archive, entries stored uncompressed,
//    "<prefix>/data.pkl" the pickled object and "<prefix>/data/<key>" each storage's raw
//    bytes (<prefix> is the file's stem, or "archive"); "<prefix>/byteorder", when present,
//    must say "little";
//  * the legacy format (_use_new_zipfile_serialization=False, torch < 1.6): pickles of the
//    magic number 0x1950a86a20f9469cfc6c, the protocol version 1001 and a sys_info dict
//    (little_endian must be true), then the object's pickle, then a pickled list of storage
//    keys, then for each key in that order an int64 element count and the raw bytes.
// In both, a storage is the persistent id ('storage', torch.<Type>Storage, key, location,
// numel[, view_metadata]) and a tensor is torch._utils._rebuild_tensor_v2(storage, offset,
// size, stride, requires_grad, backward_hooks[, metadata]) (also _rebuild_tensor,
// _rebuild_tensor_v3 with its dtype, and _rebuild_parameter around one). Tensors become
// pickle::Kind::External values; their data is read only when asked for, so a file's
// metadata costs no more than its pickle.
//
// write_torch_file writes the zip format (what torch.load and TorchFile read).
//
// Zip archives are read and written with libzip. Errors throw IoError "<file>: <what is wrong>".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "ckpt/pickle_reader.h"
#include "core/dtype.h"

namespace trident {

enum class TorchDType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };
size_t torch_dtype_size(TorchDType t);
const char* torch_dtype_str(TorchDType t);  // "torch.float32", ...
// The dtype a pickle names as the global torch.<name> ("float32", "bfloat16", ...).
std::optional<TorchDType> torch_dtype_named(std::string_view name);
// torch's names of trident's stored dtypes (fp32, fp16, bf16): the dtype's global ("float32",
// "float16", "bfloat16") and its storage class ("FloatStorage", ...); nullptr for another dtype.
const char* torch_dtype_global(DType t);
const char* torch_storage_class(DType t);

struct TorchTensor {
  TorchDType dtype = TorchDType::F32;
  std::string storage_key;
  int64_t storage_numel = 0;  // elements of the storage (in this dtype)
  int64_t offset = 0;         // in elements
  std::vector<int64_t> shape, stride;
  int64_t numel() const;
};

class TorchFile {
 public:
  // Opens and unpickles `path` (either format); throws IoError naming it.
  explicit TorchFile(const std::string& path);
  // The zip-format torch.save output that fills bytes [offset, offset + length) of `path` (as
  // PyTorch's distributed checkpoint stores each tensor); errors name "<path> at byte <offset>".
  TorchFile(const std::string& path, uint64_t offset, uint64_t length);
  ~TorchFile();
  TorchFile(TorchFile&&) noexcept;
  TorchFile& operator=(TorchFile&&) noexcept;

  const std::string& path() const;
  const pickle::Value& root() const;
  bool is_zip() const;

  // The tensor `v` stands for; nullptr when it is not a tensor.
  static const TorchTensor* tensor(const pickle::Value& v);
  // The tensor's elements in row-major order as fp32 (from float32, float16, bfloat16 or
  // float64 storages). `what` names it in errors ("<file>: <what>: ...").
  std::vector<float> read_f32(const TorchTensor& t, const std::string& what) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One storage for write_torch_file: its key and raw little-endian bytes.
struct TorchStorageBytes {
  std::string key;
  std::vector<char> bytes;
};
// Where write_torch_file starts each record's data: at a multiple of this many bytes from the
// file's start, as torch.save does (torch.load(mmap=True) maps the tensors in place).
constexpr uint64_t kTorchRecordAlignment = 64;
// Writes a torch.save zip file at `path` (which must not exist): "<stem>/data.pkl" holding
// `pickle` (pickle::Writer's), "<stem>/data/<key>" per storage, "<stem>/version" ("3") and
// "<stem>/byteorder" ("little"), entries stored uncompressed, their data aligned to
// kTorchRecordAlignment. On error nothing is left at `path`; throws IoError naming it.
void write_torch_file(const std::string& path, const std::string& pickle, const std::vector<TorchStorageBytes>& storages);
// The same archive in memory, its entries under "archive/" as torch.save names them when it
// writes to a stream (PyTorch's distributed checkpoint stores each item so). Throws IoError.
std::string torch_file_bytes(const std::string& pickle, const std::vector<TorchStorageBytes>& storages);

}  // namespace trident
