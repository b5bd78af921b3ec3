#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/atomic_file.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "core/mapped_files.h"
#include "core/tensor.h"

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace trident {

namespace {

struct DTypeRow {
  StDType t;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::BOOL, "BOOL", 1}, {StDType::U8, "U8", 1},     {StDType::I8, "I8", 1},
    {StDType::U16, "U16", 2},   {StDType::I16, "I16", 2},   {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2}, {StDType::U32, "U32", 4},   {StDType::I32, "I32", 4},
    {StDType::F32, "F32", 4},   {StDType::U64, "U64", 8},   {StDType::I64, "I64", 8},
    {StDType::F64, "F64", 8},
};

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeader = 100'000'000;

// numel with overflow detection; returns false on overflow or a negative dim.
bool checked_numel(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  *out = n;
  return true;
}

}  // namespace

size_t st_dtype_size(StDType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.size;
  return 0;
}
const char* st_dtype_name(StDType t) {
  for (const auto& r : kDTypes)
    if (r.t == t) return r.name;
  return "?";
}
std::optional<StDType> parse_st_dtype(std::string_view s) {
  for (const auto& r : kDTypes)
    if (s == r.name) return r.t;
  return std::nullopt;
}
StDType to_st_dtype(DType t) {
  switch (t) {
    case DType::F32: return StDType::F32;
    case DType::F16: return StDType::F16;
    case DType::BF16: return StDType::BF16;
    case DType::I32: return StDType::I32;
  }
  return StDType::F32;
}
DType from_st_dtype(StDType t) {
  switch (t) {
    case StDType::F32: return DType::F32;
    case StDType::F16: return DType::F16;
    case StDType::BF16: return DType::BF16;
    case StDType::I32: return DType::I32;
    default: break;
  }
  throw ConfigError(std::string("safetensors dtype ") + st_dtype_name(t) + " has no trident dtype");
}

int64_t StTensorInfo::numel() const { return numel_of(shape); }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------- writer

std::string safetensors_header(const std::vector<StTensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (const auto& t : tensors) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = st_dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {t.begin, t.end};
    j[t.name] = std::move(e);
  }
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(std::string("safetensors header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

WrittenFile write_safetensors(const std::string& path, const std::vector<StTensorRef>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw ConfigError(path + ": invalid tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second) throw ConfigError(path + ": duplicate tensor name '" + t.name + "'");
    int64_t n = 0;
    if (!checked_numel(t.shape, &n))
      throw ConfigError(path + ": tensor '" + t.name + "' has an invalid shape " + shape_str(t.shape));
    if (n > 0 && t.data == nullptr && !t.fill) throw ConfigError(path + ": tensor '" + t.name + "' has no data");
  }
  // Larger elements first: each tensor then starts at a multiple of its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return st_dtype_size(tensors[a].dtype) > st_dtype_size(tensors[b].dtype);
  });
  std::vector<StTensorInfo> infos;
  infos.reserve(tensors.size());
  uint64_t off = 0;
  for (size_t i : order) {
    const auto& t = tensors[i];
    StTensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    info.begin = off;
    off += static_cast<uint64_t>(info.numel()) * st_dtype_size(t.dtype);
    info.end = off;
    infos.push_back(std::move(info));
  }
  const std::string header = safetensors_header(infos, metadata);

  // One pass over the bytes: each is copied once into a staging buffer, from which the
  // writer's I/O thread hashes and writes it (see aligned_writer.h).
  AtomicFileWriter w(path, AlignedWriterOptions{});
  w.write(header);
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& t = tensors[order[k]];
    const size_t n = static_cast<size_t>(infos[k].nbytes());
    if (n == 0) continue;
    if (!t.fill) {
      w.write(t.data, n);
      continue;
    }
    // Pieces end at staging-buffer boundaries (multiples of 4096 in the file) and every
    // tensor starts at a multiple of its element size, so each piece is whole elements.
    const size_t esize = st_dtype_size(t.dtype);
    w.write_with(n, [&](void* dst, uint64_t offset, size_t len) {
      TRIDENT_CHECK(offset % esize == 0 && len % esize == 0, path, ": tensor '", t.name, "' piece [", offset, ", +",
                    len, ") is not whole elements");
      t.fill(dst, offset, len);
    });
  }
  w.commit();
  WrittenFile out;
  out.path = path;
  out.size = w.bytes_written();
  out.xxh3 = w.xxh3();
  return out;
}

// ---------------------------------------------------------------- reader

SafetensorsReader::SafetensorsReader(const std::string& path, const std::optional<ExpectedFile>& expect)
    : path_(path) {
  auto fail = [&](const std::string& what) -> IoError { return IoError(path_ + ": " + what); };
  if (expect) {  // verify_file's first checks, with its messages
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw IoError(path + ": missing checkpoint file (" + std::strerror(errno) + ")");
    check_file_size(path, static_cast<uint64_t>(st.st_size), expect->size);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot open safetensors file: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = std::strerror(errno);
    ::close(fd);
    throw fail("fstat failed: " + e);
  }
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (expect) {
    try {
      check_file_size(path, file_size_, expect->size);  // it may have changed since the stat
      // Too short to map usefully: hash it the plain way; the checks below then reject it.
      if (file_size_ < 8) check_file_checksum(path, checksum_file(path), expect->xxh3);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  if (file_size_ < 8) {
    ::close(fd);
    throw fail("truncated: " + std::to_string(file_size_) +
               " bytes, shorter than the 8-byte header length");
  }
  void* m = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  if (m == MAP_FAILED) throw fail(std::string("mmap failed: ") + std::strerror(mmap_errno));
  map_ = static_cast<const unsigned char*>(m);
  note_mapped_file(map_, file_size_, path_);

  try {
    if (expect) check_file_checksum(path_, checksum_mapped(path_, map_, file_size_), expect->xxh3);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(map_[i]) << (8 * i);
    header_size_ = n;
    if (n == 0) throw fail("header length is 0");
    if (n > kMaxHeader) throw fail("header length " + std::to_string(n) + " exceeds the 100 MB limit");
    if (n > file_size_ - 8)
      throw fail("truncated: header length " + std::to_string(n) + " exceeds the " +
                 std::to_string(file_size_ - 8) + " bytes after the length field");
    const char* hb = reinterpret_cast<const char*>(map_ + 8);
    if (hb[0] != '{') throw fail("header does not start with '{'");
    const uint64_t data_size = file_size_ - 8 - n;

    // Parse, rejecting duplicate keys in any object (nlohmann would keep the last one).
    std::vector<std::set<std::string>> keys;
    std::string dup;
    nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
      using E = nlohmann::json::parse_event_t;
      if (ev == E::object_start) keys.emplace_back();
      else if (ev == E::object_end) keys.pop_back();
      else if (ev == E::key && !keys.empty() && !keys.back().insert(v.get<std::string>()).second &&
               dup.empty())
        dup = v.get<std::string>();
      return true;
    };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(hb, hb + n, cb);
    } catch (const nlohmann::json::exception& e) {
      throw fail(std::string("bad header JSON: ") + e.what());
    }
    if (!dup.empty()) throw fail("bad header JSON: duplicate key '" + dup + "'");
    if (!j.is_object()) throw fail("header is not a JSON object");

    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& e = it.value();
      if (name == "__metadata__") {
        if (!e.is_object()) throw fail("__metadata__ is not an object");
        for (auto m2 = e.begin(); m2 != e.end(); ++m2) {
          if (!m2.value().is_string()) throw fail("__metadata__ value for '" + m2.key() + "' is not a string");
          metadata_[m2.key()] = m2.value().get<std::string>();
        }
        continue;
      }
      const std::string where = "tensor '" + name + "': ";
      if (!e.is_object()) throw fail(where + "entry is not an object");
      for (auto k = e.begin(); k != e.end(); ++k)
        if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
          throw fail(where + "unknown field '" + k.key() + "'");
      if (!e.contains("dtype") || !e["dtype"].is_string()) throw fail(where + "missing or non-string 'dtype'");
      const auto dt = parse_st_dtype(e["dtype"].get<std::string>());
      if (!dt) throw fail(where + "unknown dtype '" + e["dtype"].get<std::string>() + "'");
      if (!e.contains("shape") || !e["shape"].is_array()) throw fail(where + "missing or non-array 'shape'");
      StTensorInfo info;
      info.name = name;
      info.dtype = *dt;
      for (const auto& d : e["shape"]) {
        if (!d.is_number_unsigned()) throw fail(where + "shape has a non-integer or negative dimension");
        const uint64_t v = d.get<uint64_t>();
        if (v > static_cast<uint64_t>(INT64_MAX)) throw fail(where + "shape dimension too large");
        info.shape.push_back(static_cast<int64_t>(v));
      }
      const auto& o = e.contains("data_offsets") ? e["data_offsets"] : nlohmann::json();
      if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
        throw fail(where + "'data_offsets' must be two non-negative integers");
      info.begin = o[0].get<uint64_t>();
      info.end = o[1].get<uint64_t>();
      const std::string offs = "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "]";
      if (info.end < info.begin) throw fail(where + offs + " end before begin");
      int64_t numel = 0;
      uint64_t want = 0;
      if (!checked_numel(info.shape, &numel) ||
          __builtin_mul_overflow(static_cast<uint64_t>(numel), st_dtype_size(info.dtype), &want))
        throw fail(where + "shape " + shape_str(info.shape) + " overflows");
      if (info.end - info.begin != want)
        throw fail(where + offs + " hold " + std::to_string(info.end - info.begin) + " bytes but " +
                   st_dtype_name(info.dtype) + " " + shape_str(info.shape) + " needs " + std::to_string(want));
      if (info.end > data_size)
        throw fail(where + offs + " out of range: the data section has " + std::to_string(data_size) +
                   " bytes (file truncated?)");
      tensors_.push_back(std::move(info));
    }
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expect = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      if (t.begin < expect)
        throw fail("tensor '" + t.name + "' data_offsets [" + std::to_string(t.begin) + ", " +
                   std::to_string(t.end) + "] overlap tensor '" + tensors_[i - 1].name + "' [" +
                   std::to_string(tensors_[i - 1].begin) + ", " + std::to_string(tensors_[i - 1].end) + "]");
      if (t.begin > expect)
        throw fail("hole in the data: bytes [" + std::to_string(expect) + ", " + std::to_string(t.begin) +
                   ") before tensor '" + t.name + "' belong to no tensor");
      expect = t.end;
    }
    if (expect != data_size)
      throw fail(std::to_string(data_size - expect) + " trailing bytes after the last tensor (data section " +
                 std::to_string(data_size) + " bytes, tensors end at " + std::to_string(expect) + ")");
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    close();
    throw;
  }
}

void SafetensorsReader::close() {
  if (map_) {
    forget_mapped_file(map_);
    ::munmap(const_cast<unsigned char*>(map_), file_size_);
  }
  map_ = nullptr;
}

SafetensorsReader::~SafetensorsReader() { close(); }

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)), map_(o.map_), file_size_(o.file_size_), header_size_(o.header_size_),
      tensors_(std::move(o.tensors_)), index_(std::move(o.index_)), metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    map_ = o.map_;
    file_size_ = o.file_size_;
    header_size_ = o.header_size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.map_ = nullptr;
  }
  return *this;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors_) out.push_back(t.name);
  return out;
}

const StTensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw IoError(path_ + ": no tensor '" + name + "'");
  return tensors_[it->second];
}

const void* SafetensorsReader::data(const std::string& name) const {
  const auto& t = info(name);
  return map_ + 8 + header_size_ + t.begin;
}

void SafetensorsReader::read_raw(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                                 void* dst) const {
  const auto& t = info(name);
  if (t.dtype != dtype)
    throw IoError(path_ + ": tensor '" + name + "' has dtype " + st_dtype_name(t.dtype) + ", expected " +
                  st_dtype_name(dtype));
  if (t.shape != shape)
    throw IoError(path_ + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " +
                  shape_str(shape));
  if (t.nbytes()) std::memcpy(dst, data(name), t.nbytes());
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name,
                                               const std::optional<std::vector<int64_t>>& shape) const {
  const auto& t = info(name);
  if (shape && t.shape != *shape)
    throw IoError(path_ + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " +
                  shape_str(*shape));
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const unsigned char* src = static_cast<const unsigned char*>(data(name));
  switch (t.dtype) {
    case StDType::F32:
      if (n) std::memcpy(out.data(), src, n * 4);
      break;
    case StDType::F16:
    case StDType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = t.dtype == StDType::F16 ? half_to_float(h) : bf16_to_float(h);
      }
      break;
    default:
      throw IoError(path_ + ": tensor '" + name + "' has dtype " + st_dtype_name(t.dtype) +
                    ", expected a float type (F32, F16, BF16)");
  }
  return out;
}

}  // namespace trident
