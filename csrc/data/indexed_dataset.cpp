#include "data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/mapped_files.h"
#include "core/process_id.h"

namespace trident {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
std::string errno_text() { return std::strerror(errno); }

// Throws "<path><what><strerror>" for the write that just failed (throw_write_failure: a full
// disk is a StorageError).
[[noreturn]] void throw_failed_write(const std::string& path, const char* what) {
  const int err = errno;
  throw_write_failure(detail::concat(path, what, std::strerror(err)), err);
}

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes) throw_failed_write(path, ": write failed: ");
}

template <typename T>
void put(std::vector<char>& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void store_as(const int32_t* in, size_t n, char* out, const std::string& prefix) {
  for (size_t i = 0; i < n; ++i) {
    if (in[i] < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        in[i] > static_cast<int64_t>(std::numeric_limits<T>::max()))
      throw IoError(detail::concat(prefix, ": token ", in[i], " does not fit the dataset dtype"));
    T v = static_cast<T>(in[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
}

// Converts n tokens of type T to int32; returns the position of the first that int32 cannot
// hold (only an int64 can be one), n when none.
template <typename T>
size_t load_from(const char* in, size_t n, int32_t* out) {
  for (size_t i = 0; i < n; ++i) {
    const T v = get<T>(in + i * sizeof(T));
    if constexpr (sizeof(T) > sizeof(int32_t))
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return i;
    out[i] = static_cast<int32_t>(v);
  }
  return n;
}

}  // namespace

size_t index_dtype_size(IndexDType dt) {
  switch (dt) {
    case IndexDType::kUInt8: case IndexDType::kInt8: return 1;
    case IndexDType::kInt16: case IndexDType::kUInt16: return 2;
    case IndexDType::kInt32: case IndexDType::kFloat32: return 4;
    case IndexDType::kInt64: case IndexDType::kFloat64: return 8;
  }
  return 0;
}

IndexDType best_fitting_dtype(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexDType::kUInt16 : IndexDType::kInt32;
}

const char* index_dtype_name(IndexDType dt) {
  switch (dt) {
    case IndexDType::kUInt8: return "uint8";
    case IndexDType::kInt8: return "int8";
    case IndexDType::kInt16: return "int16";
    case IndexDType::kInt32: return "int32";
    case IndexDType::kInt64: return "int64";
    case IndexDType::kFloat32: return "float32";
    case IndexDType::kFloat64: return "float64";
    case IndexDType::kUInt16: return "uint16";
  }
  return "unknown";
}

std::string idx_path(const std::string& prefix) { return prefix + ".idx"; }
std::string bin_path(const std::string& prefix) { return prefix + ".bin"; }

// ---------------------------------------------------------------- builder

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string prefix, IndexDType dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  if (dtype != IndexDType::kUInt16 && dtype != IndexDType::kInt32 && dtype != IndexDType::kInt64 &&
      dtype != IndexDType::kUInt8 && dtype != IndexDType::kInt16 && dtype != IndexDType::kInt8)
    throw IoError(detail::concat(prefix_, ": unsupported token dtype code ", int(dtype)));
  // The temporaries {prefix}.bin.tmp.<host>.<pid> and {prefix}.idx.tmp.<host>.<pid>, which
  // remove_stale_builder_temps recognises.
  const std::string tag = detail::concat(host_temp_tag(), ::getpid());
  bin_tmp_ = bin_path(prefix_) + tag;
  idx_tmp_ = idx_path(prefix_) + tag;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  if (!bin_) throw_failed_write(bin_path(prefix_), ": cannot create: ");
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (state_ == State::kWriting || state_ == State::kPrepared) abort();
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw IoError(detail::concat(prefix_, ": item of ", tokens.size(), " tokens is too long"));
  const size_t isz = index_dtype_size(dtype_);
  scratch_.resize(tokens.size() * isz);
  switch (dtype_) {
    case IndexDType::kUInt8: store_as<uint8_t>(tokens.data(), tokens.size(), scratch_.data(), prefix_); break;
    case IndexDType::kInt8: store_as<int8_t>(tokens.data(), tokens.size(), scratch_.data(), prefix_); break;
    case IndexDType::kInt16: store_as<int16_t>(tokens.data(), tokens.size(), scratch_.data(), prefix_); break;
    case IndexDType::kUInt16: store_as<uint16_t>(tokens.data(), tokens.size(), scratch_.data(), prefix_); break;
    case IndexDType::kInt32: store_as<int32_t>(tokens.data(), tokens.size(), scratch_.data(), prefix_); break;
    case IndexDType::kInt64:
      for (size_t i = 0; i < tokens.size(); ++i) {
        int64_t v = tokens[i];
        std::memcpy(scratch_.data() + i * 8, &v, 8);
      }
      break;
    default: break;
  }
  write_all(bin_, scratch_.data(), scratch_.size(), bin_tmp_);
  sizes_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += tokens.size();
}

void IndexedDatasetBuilder::end_document() { doc_idx_.push_back(static_cast<int64_t>(sizes_.size())); }

void IndexedDatasetBuilder::add_index(const IndexedDataset& in) {
  TRIDENT_CHECK(state_ == State::kWriting, "add_index() after prepare(), commit() or abort()");
  TRIDENT_CHECK(in.dtype() == dtype_, idx_path(in.prefix()), " holds ", index_dtype_name(in.dtype()), " tokens, ",
                prefix_, " ", index_dtype_name(dtype_));
  const int64_t offset = static_cast<int64_t>(sizes_.size());
  const uint64_t isz = index_dtype_size(dtype_);
  const std::span<const char> bin = in.bin_bytes();
  // The items' bytes in item order (the pointers were checked against the .bin at open), each
  // run of adjacent items in one write.
  uint64_t run_begin = 0, run_end = 0;
  const auto flush = [&] {
    if (run_end > run_begin) write_all(bin_, bin.data() + run_begin, run_end - run_begin, bin_tmp_);
  };
  const UnalignedArray<int32_t> sizes = in.sizes();
  const UnalignedArray<int64_t> pointers = in.pointers();
  for (uint64_t i = 0; i < in.size(); ++i) {
    const uint64_t at = static_cast<uint64_t>(pointers[i]), bytes = static_cast<uint64_t>(sizes[i]) * isz;
    if (at != run_end) {
      flush();
      run_begin = at;
      run_end = at;
    }
    run_end += bytes;
    sizes_.push_back(sizes[i]);
    tokens_ += static_cast<uint64_t>(sizes[i]);
  }
  flush();
  const UnalignedArray<int64_t> ends = in.doc_idx();
  for (size_t d = 1; d < ends.size(); ++d) doc_idx_.push_back(offset + ends[d]);
}

void IndexedDatasetBuilder::finish() {
  prepare();
  commit();
}

void IndexedDatasetBuilder::prepare() {
  TRIDENT_CHECK(state_ == State::kWriting, "prepare() after prepare(), commit() or abort()");
  if (std::fclose(bin_) != 0) {
    bin_ = nullptr;
    throw_failed_write(bin_tmp_, ": write failed: ");
  }
  bin_ = nullptr;
  std::vector<char> idx;
  idx.reserve(kHeaderBytes + sizes_.size() * 12 + doc_idx_.size() * 8);
  idx.insert(idx.end(), kMagic, kMagic + 9);
  put<uint64_t>(idx, kVersion);
  put<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  put<uint64_t>(idx, sizes_.size());
  put<uint64_t>(idx, doc_idx_.size());
  for (int32_t s : sizes_) put<int32_t>(idx, s);
  const int64_t isz = static_cast<int64_t>(index_dtype_size(dtype_));
  int64_t ptr = 0;
  for (int32_t s : sizes_) {
    put<int64_t>(idx, ptr);
    ptr += s * isz;
  }
  for (int64_t d : doc_idx_) put<int64_t>(idx, d);
  std::FILE* f = std::fopen(idx_tmp_.c_str(), "wb");
  if (!f) throw_failed_write(idx_path(prefix_), ": cannot create: ");
  try {
    write_all(f, idx.data(), idx.size(), idx_tmp_);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) throw_failed_write(idx_tmp_, ": write failed: ");
  state_ = State::kPrepared;
}

void IndexedDatasetBuilder::commit() {
  TRIDENT_CHECK(state_ == State::kPrepared, "commit() without prepare()");
  const std::string bin = bin_path(prefix_), idx = idx_path(prefix_);
  if (std::rename(bin_tmp_.c_str(), bin.c_str()) != 0)
    throw IoError(detail::concat(bin, ": cannot rename ", bin_tmp_, " to it: ", errno_text()));
  if (std::rename(idx_tmp_.c_str(), idx.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(bin.c_str());  // a .bin without its .idx is no dataset
    throw IoError(detail::concat(idx, ": cannot rename ", idx_tmp_, " to it: ", why));
  }
  state_ = State::kCommitted;
}

void IndexedDatasetBuilder::abort() {
  if (state_ == State::kAborted) return;
  if (bin_) std::fclose(bin_);
  bin_ = nullptr;
  if (state_ == State::kCommitted) {
    std::remove(bin_path(prefix_).c_str());
    std::remove(idx_path(prefix_).c_str());
  } else {
    std::remove(bin_tmp_.c_str());
    std::remove(idx_tmp_.c_str());
  }
  state_ = State::kAborted;
}

std::vector<std::string> remove_stale_builder_temps(const std::string& prefix) {
  if (std::filesystem::path(prefix).filename().empty()) return {};
  return remove_dead_writers_files({bin_path(prefix), idx_path(prefix)});
}

// ---------------------------------------------------------------- reader

IndexedDataset::IndexedDataset(const std::string& prefix, int64_t vocab_size)
    : prefix_(prefix), vocab_size_(vocab_size) {
  const std::string ipath = idx_path(prefix), bpath = bin_path(prefix);
  // ---- index: mapped, never copied (a large corpus's index is gigabytes on every rank);
  // every length checked first against the file size
  const bool with_suffix = prefix.ends_with(".bin") || prefix.ends_with(".idx");
  uint64_t idx_len = 0;
  idx_map_ = map_file_read_only(ipath, idx_len, with_suffix ? " (a data path is the prefix, without .bin or .idx)" : "");
  const char* header = idx_map_.data();
  if (idx_len < kHeaderBytes || std::memcmp(header, kMagic, 9) != 0)
    throw IoError(detail::concat(ipath, ": not a Megatron MMapIndexedDataset index (bad magic)"));
  const uint64_t version = get<uint64_t>(header + 9);
  if (version != kVersion)
    throw IoError(detail::concat(ipath, ": unsupported index version ", version, " (expected 1)"));
  const uint8_t code = get<uint8_t>(header + 17);
  dtype_ = static_cast<IndexDType>(code);
  const size_t isz = code >= 1 && code <= 8 ? index_dtype_size(dtype_) : 0;
  if (isz == 0 || dtype_ == IndexDType::kFloat32 || dtype_ == IndexDType::kFloat64)
    throw IoError(detail::concat(ipath, ": unsupported dtype code ", int(code)));
  n_ = get<uint64_t>(header + 18);
  const uint64_t d = get<uint64_t>(header + 26);
  const uint64_t body = idx_len - kHeaderBytes;
  // Overflow-safe: n and d must each be bounded by the body length before multiplying.
  if (n_ > body / 12 || d > body / 8 || n_ * 12 + d * 8 != body)
    throw IoError(detail::concat(ipath, ": truncated or corrupt index (", n_, " items, ", d,
                                 " doc_idx entries do not fit ", idx_len, " bytes)"));
  if (d < 1) throw IoError(detail::concat(ipath, ": corrupt index (empty doc_idx)"));
  const char* arrays = header + kHeaderBytes;
  sizes_ = UnalignedArray<int32_t>(arrays, n_);
  pointers_ = UnalignedArray<int64_t>(arrays + n_ * 4, n_);
  doc_idx_ = UnalignedArray<int64_t>(arrays + n_ * 12, d);
  if (doc_idx_[0] != 0 || static_cast<uint64_t>(doc_idx_.back()) > n_)
    throw IoError(detail::concat(ipath, ": corrupt index (doc_idx out of range)"));
  for (uint64_t i = 1; i < d; ++i)
    if (doc_idx_[i] < doc_idx_[i - 1]) throw IoError(detail::concat(ipath, ": corrupt index (doc_idx not sorted)"));
  // ---- data: map it, check that every item lies inside
  uint64_t bin_len = 0;
  bin_map_ = map_file_read_only(bpath, bin_len);
  const uint64_t capacity = bin_len / isz;
  for (uint64_t i = 0; i < n_; ++i) {
    const int64_t ptr = pointers_[i], sz = sizes_[i];
    if (sz < 0 || ptr < 0 || ptr % static_cast<int64_t>(isz) != 0 ||
        static_cast<uint64_t>(ptr) / isz + static_cast<uint64_t>(sz) > capacity)
      throw IoError(detail::concat(bpath, ": truncated or does not match ", ipath, " (item ", i, " of ", sz,
                                   " tokens at byte ", ptr, " past the end of ", bin_len, " bytes)"));
  }
}

void IndexedDataset::read(uint64_t i, uint64_t offset, uint64_t length, int32_t* out) const {
  TRIDENT_CHECK(i < n_ && offset + length <= static_cast<uint64_t>(sizes_[i]), "item ", i, " offset ",
                offset, " length ", length);
  const size_t isz = index_dtype_size(dtype_);
  // The pointers were checked at open; an index rewritten in place since (it is mapped) must
  // not send a read past the data.
  const uint64_t at = static_cast<uint64_t>(pointers_[i]) + offset * isz;
  if (pointers_[i] < 0 || at > bin_map_.size() || length > (bin_map_.size() - at) / isz)
    throw IoError(detail::concat(idx_path(prefix_), ": item ", i, " now points past the end of ", bin_path(prefix_),
                                 " (the index was rewritten while it was read?)"));
  const char* src = bin_map_.data() + at;
  size_t loaded = 0;
  switch (dtype_) {
    case IndexDType::kUInt8: loaded = load_from<uint8_t>(src, length, out); break;
    case IndexDType::kInt8: loaded = load_from<int8_t>(src, length, out); break;
    case IndexDType::kInt16: loaded = load_from<int16_t>(src, length, out); break;
    case IndexDType::kUInt16: loaded = load_from<uint16_t>(src, length, out); break;
    case IndexDType::kInt32: loaded = load_from<int32_t>(src, length, out); break;
    case IndexDType::kInt64: loaded = load_from<int64_t>(src, length, out); break;
    default: TRIDENT_CHECK(false, "float dtype");
  }
  if (loaded < length)
    throw IoError(detail::concat(bin_path(prefix_), ": token ", get<int64_t>(src + loaded * isz), " (item ", i,
                                 ", position ", offset + loaded, ") does not fit an int32 token id"));
  if (vocab_size_ <= 0) return;
  for (uint64_t k = 0; k < length; ++k)
    if (out[k] < 0 || out[k] >= vocab_size_)
      throw IoError(detail::concat(bin_path(prefix_), ": token id ", out[k], " (item ", i, ", position ", offset + k,
                                   ") is outside the tokenizer's vocabulary of ", vocab_size_,
                                   " ids: was the data made with another tokenizer?"));
}

std::vector<int32_t> IndexedDataset::item(uint64_t i) const {
  TRIDENT_CHECK(i < n_, "item ", i);
  std::vector<int32_t> out(static_cast<size_t>(sizes_[i]));
  read(i, 0, out.size(), out.data());
  return out;
}

}  // namespace trident
