#include "ckpt/torch_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_files.h"
#include "core/tensor.h"

namespace trident {

namespace {

using pickle::Kind;
using pickle::Ref;
using pickle::Value;

// A storage as its persistent id names it.
struct TorchStorage {
  TorchDType dtype = TorchDType::U8;
  std::string key;
  int64_t numel = 0;
};

struct StorageType {
  const char* name;
  TorchDType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", TorchDType::F32},   {"HalfStorage", TorchDType::F16},  {"BFloat16Storage", TorchDType::BF16},
    {"DoubleStorage", TorchDType::F64},  {"LongStorage", TorchDType::I64},  {"IntStorage", TorchDType::I32},
    {"ShortStorage", TorchDType::I16},   {"CharStorage", TorchDType::I8},   {"ByteStorage", TorchDType::U8},
    {"BoolStorage", TorchDType::Bool},   {"UntypedStorage", TorchDType::U8},
};
// _rebuild_tensor_v3's dtype argument: torch.<name>.
constexpr StorageType kDTypeNames[] = {
    {"float32", TorchDType::F32}, {"float16", TorchDType::F16}, {"bfloat16", TorchDType::BF16},
    {"float64", TorchDType::F64}, {"int64", TorchDType::I64},   {"int32", TorchDType::I32},
    {"int16", TorchDType::I16},   {"int8", TorchDType::I8},     {"uint8", TorchDType::U8},
    {"bool", TorchDType::Bool},
};

// The 10-byte little-endian magic number of the legacy format, as LONG1 stores it.
constexpr unsigned char kLegacyMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kLegacyProtocol = 1001;

int64_t as_int(const Value& v, const std::string& source, const char* what) {
  if (v.kind != Kind::Int) throw IoError(source + ": " + what + " is " + v.describe() + ", not an int");
  return v.integer;
}

std::vector<int64_t> int_tuple(const Value& v, const std::string& source, const char* what) {
  if (v.kind != Kind::Tuple && v.kind != Kind::List) throw IoError(source + ": " + what + " is " + v.describe());
  std::vector<int64_t> out;
  for (const Ref& x : v.items) out.push_back(as_int(*x, source, what));
  return out;
}

Ref external_tensor(TorchTensor t) {
  Ref v = pickle::make(Kind::External);
  v->external = std::move(t);
  return v;
}

// The pickle hooks every torch file shares: storages from persistent ids, tensors from the
// rebuild functions. `storages` collects every storage seen (the legacy format sizes its
// records by them).
pickle::Hooks torch_hooks(const std::string& source, std::map<std::string, TorchStorage>* storages) {
  pickle::Hooks h;
  h.persistent_load = [source, storages](const Ref& pid) -> Ref {
    const auto& it = pid->items;
    if (pid->kind != Kind::Tuple || it.size() < 5 || !it[0]->is_str() || it[0]->text != "storage")
      throw IoError(source + ": persistent id " + pid->describe() + " is not a torch storage");
    if (it.size() > 5 && it[5]->kind != Kind::None)
      throw IoError(source + ": storage views (torch < 0.4 files) are not supported");
    TorchStorage s;
    const Value& type = *it[1];
    bool known = false;
    for (const auto& st : kStorageTypes)
      if (type.is_global("torch", st.name)) {
        s.dtype = st.dtype;
        known = true;
      }
    if (!known) throw IoError(source + ": storage type " + type.describe() + " is not supported");
    if (!it[2]->is_str()) throw IoError(source + ": storage key is " + it[2]->describe());
    s.key = it[2]->text;
    s.numel = as_int(*it[4], source, "storage size");
    if (s.numel < 0) throw IoError(source + ": storage '" + s.key + "' has a negative size");
    auto [pos, fresh] = storages->emplace(s.key, s);
    if (!fresh && (pos->second.dtype != s.dtype || pos->second.numel != s.numel))
      throw IoError(source + ": storage '" + s.key + "' is named twice with different types or sizes");
    Ref v = pickle::make(Kind::External);
    v->external = s;
    return v;
  };
  h.reduce = [source](const Value& callable, const Ref& args) -> Ref {
    if (callable.kind != Kind::Global || callable.module != "torch._utils") return nullptr;
    const auto& a = args->items;
    if (callable.name == "_rebuild_parameter" || callable.name == "_rebuild_parameter_with_state") {
      if (a.empty() || !TorchFile::tensor(*a[0])) throw IoError(source + ": " + callable.name + " of a non-tensor");
      return a[0];
    }
    const bool v3 = callable.name == "_rebuild_tensor_v3";
    if (callable.name != "_rebuild_tensor_v2" && callable.name != "_rebuild_tensor" && !v3) return nullptr;
    if (a.size() < 4 || a[0]->kind != Kind::External || !std::any_cast<TorchStorage>(&a[0]->external))
      throw IoError(source + ": torch._utils." + callable.name + " without a storage");
    const TorchStorage& s = std::any_cast<const TorchStorage&>(a[0]->external);
    TorchTensor t;
    t.dtype = s.dtype;
    t.storage_key = s.key;
    t.storage_numel = s.numel;
    t.offset = as_int(*a[1], source, "tensor storage offset");
    t.shape = int_tuple(*a[2], source, "tensor size");
    t.stride = int_tuple(*a[3], source, "tensor stride");
    if (v3) {  // an untyped (byte) storage viewed as the dtype argument
      if (a.size() < 7) throw IoError(source + ": _rebuild_tensor_v3 without a dtype");
      const std::optional<TorchDType> dt = a[6]->kind == Kind::Global && a[6]->module == "torch"
                                               ? torch_dtype_named(a[6]->name)
                                               : std::nullopt;
      if (!dt) throw IoError(source + ": tensor dtype " + a[6]->describe() + " is not supported");
      t.dtype = *dt;
      const int64_t bytes = s.numel * static_cast<int64_t>(torch_dtype_size(s.dtype));
      t.storage_numel = bytes / static_cast<int64_t>(torch_dtype_size(t.dtype));
    }
    if (t.shape.size() != t.stride.size()) throw IoError(source + ": tensor size and stride differ in length");
    return external_tensor(std::move(t));
  };
  return h;
}

// n 16-bit values -> fp32 through `decode` (half_to_float or bf16_to_float).
template <typename Decode>
void convert_16bit(const char* src, int64_t n, float* dst, Decode decode) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = decode(h);
  }
}

void convert_to_f32(TorchDType dt, const char* src, int64_t n, float* dst) {
  switch (dt) {
    case TorchDType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case TorchDType::F16: convert_16bit(src, n, dst, half_to_float); return;
    case TorchDType::BF16: convert_16bit(src, n, dst, bf16_to_float); return;
    case TorchDType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        dst[i] = static_cast<float>(d);
      }
      return;
    default: break;
  }
  throw InternalError("convert_to_f32 of a non-float dtype");
}

}  // namespace

size_t torch_dtype_size(TorchDType t) {
  switch (t) {
    case TorchDType::F64: case TorchDType::I64: return 8;
    case TorchDType::F32: case TorchDType::I32: return 4;
    case TorchDType::F16: case TorchDType::BF16: case TorchDType::I16: return 2;
    case TorchDType::I8: case TorchDType::U8: case TorchDType::Bool: return 1;
  }
  return 1;
}

const char* torch_dtype_str(TorchDType t) {
  switch (t) {
    case TorchDType::F64: return "torch.float64";
    case TorchDType::F32: return "torch.float32";
    case TorchDType::F16: return "torch.float16";
    case TorchDType::BF16: return "torch.bfloat16";
    case TorchDType::I64: return "torch.int64";
    case TorchDType::I32: return "torch.int32";
    case TorchDType::I16: return "torch.int16";
    case TorchDType::I8: return "torch.int8";
    case TorchDType::U8: return "torch.uint8";
    case TorchDType::Bool: return "torch.bool";
  }
  return "?";
}

std::optional<TorchDType> torch_dtype_named(std::string_view name) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

int64_t TorchTensor::numel() const { return numel_of(shape); }

struct TorchFile::Impl {
  std::string path;
  pickle::Ref root;
  std::map<std::string, TorchStorage> storages;
  // Zip format.
  zip_t* zip = nullptr;
  uint64_t archive_bytes = 0;  // the archive's length, which bounds what its entries may claim
  std::string prefix;  // "<prefix>/"
  // Legacy format: the file mapped, each storage's first data byte.
  ReadOnlyMapping mapping;
  std::map<std::string, uint64_t> legacy_offsets;

  ~Impl() {
    if (zip) zip_discard(zip);
  }

  [[noreturn]] void fail(const std::string& what) const { throw IoError(path + ": " + what); }

  // The file's bytes (of the archive, or the legacy file's).
  uint64_t bytes() const { return zip ? archive_bytes : mapping.size(); }

  std::string zip_error_text(int code) const {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    std::string s = zip_error_strerror(&e);
    zip_error_fini(&e);
    return s;
  }

  // The size a zip entry claims, checked against the archive before anything that size is
  // allocated: its compressed bytes lie in the archive, and deflate expands them at most
  // 1032-fold. A corrupt size field fails here instead of asking for gigabytes.
  uint64_t entry_size(zip_uint64_t idx, const std::string& name) const {
    zip_stat_t st;
    if (zip_stat_index(zip, idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_COMP_SIZE))
      fail("cannot stat zip entry " + name + ": " + zip_strerror(zip));
    if (st.comp_size > archive_bytes || st.size / 1032 > st.comp_size + 1)
      fail("zip entry " + name + " claims " + std::to_string(st.size) + " bytes from " + std::to_string(st.comp_size) +
           " compressed in an archive of " + std::to_string(archive_bytes) + ": a corrupt archive");
    return st.size;
  }

  // Reads a whole zip entry; false when absent.
  bool read_entry(const std::string& name, std::string* out) const {
    const zip_int64_t idx = zip_name_locate(zip, name.c_str(), 0);
    if (idx < 0) return false;
    const uint64_t size = entry_size(static_cast<zip_uint64_t>(idx), name);
    out->resize(size);
    read_entry_range(static_cast<zip_uint64_t>(idx), name, 0, size, out->data());
    return true;
  }

  void read_entry_range(zip_uint64_t idx, const std::string& name, uint64_t offset, uint64_t len, char* dst) const {
    zip_file_t* f = zip_fopen_index(zip, idx, 0);
    if (!f) fail("cannot open zip entry " + name + ": " + zip_strerror(zip));
    bool ok = offset == 0 || zip_fseek(f, static_cast<zip_int64_t>(offset), SEEK_SET) == 0;
    uint64_t done = 0;
    while (ok && done < len) {
      const zip_int64_t got = zip_fread(f, dst + done, len - done);
      if (got <= 0) ok = false;
      else done += static_cast<uint64_t>(got);
    }
    const std::string err = ok ? "" : zip_file_strerror(f);
    zip_fclose(f);
    if (!ok) fail("zip entry " + name + ": cannot read " + std::to_string(len) + " bytes at " + std::to_string(offset) +
                  (err.empty() || err == "No error" ? " (truncated)" : ": " + err));
  }

  // The whole file of `file_bytes` (length < 0), or the archive in bytes [offset, offset +
  // length) of it.
  void open_zip(const std::string& file, uint64_t file_bytes, uint64_t offset = 0, int64_t length = -1) {
    archive_bytes = length < 0 ? file_bytes : static_cast<uint64_t>(length);
    if (length < 0) {
      int code = 0;
      zip = zip_open(file.c_str(), ZIP_RDONLY, &code);
      if (!zip) fail("not a readable zip archive: " + zip_error_text(code));
    } else {
      zip_error_t err;
      zip_error_init(&err);
      zip_source_t* src = zip_source_file_create(file.c_str(), offset, length, &err);
      if (src) {
        zip = zip_open_from_source(src, ZIP_RDONLY, &err);
        if (!zip) zip_source_free(src);
      }
      const std::string what = zip ? "" : zip_error_strerror(&err);
      zip_error_fini(&err);
      if (!zip) fail("not a readable zip archive: " + what);
    }
    const zip_int64_t n = zip_get_num_entries(zip, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* nm = zip_get_name(zip, static_cast<zip_uint64_t>(i), 0);
      if (!nm) continue;
      const std::string s = nm;
      const size_t slash = s.find('/');
      if (slash != std::string::npos && s.compare(slash, std::string::npos, "/data.pkl") == 0) {
        prefix = s.substr(0, slash + 1);
        break;
      }
    }
    if (prefix.empty()) fail("zip archive without <name>/data.pkl: not a file torch.save wrote");
    std::string order;
    if (read_entry(prefix + "byteorder", &order) && order != "little")
      fail("byte order '" + order + "': only little-endian files are read");
    std::string pkl;
    read_entry(prefix + "data.pkl", &pkl);
    root = pickle::unpickle(pkl, path + " (data.pkl)", torch_hooks(path, &storages));
  }

  void open_legacy(uint64_t file_size) {
    mapping = map_file_read_only(path, file_size);
    const std::string_view all(mapping.data(), mapping.size());
    size_t pos = 0;
    auto next = [&](const pickle::Hooks& hooks = {}) {
      size_t used = 0;
      Ref v = pickle::unpickle(all.substr(pos), path, hooks, &used);
      pos += used;
      return v;
    };
    const Ref magic = next();
    if (magic->kind != Kind::BigInt || magic->text != std::string(reinterpret_cast<const char*>(kLegacyMagic), 10))
      fail("not a torch.save file (no zip archive, no legacy magic number)");
    const Ref proto = next();
    if (proto->kind != Kind::Int || proto->integer != kLegacyProtocol)
      fail("legacy torch format protocol " + proto->describe() + " (1001 is read)");
    const Ref sys = next();
    const Value* little = sys->get("little_endian");
    if (!little || little->kind != Kind::Bool || !little->boolean) fail("written big-endian: only little-endian files are read");
    root = next(torch_hooks(path, &storages));
    const Ref keys = next();
    if (keys->kind != Kind::List) fail("legacy torch format: no storage key list after the object");
    for (const Ref& k : keys->items) {
      if (!k->is_str()) fail("legacy torch format: storage key " + k->describe());
      auto it = storages.find(k->text);
      if (it == storages.end()) fail("legacy torch format: storage '" + k->text + "' is listed but never used");
      if (all.size() - pos < 8) fail("truncated in the header of storage '" + k->text + "'");
      int64_t count = 0;
      std::memcpy(&count, all.data() + pos, 8);
      pos += 8;
      const uint64_t bytes = static_cast<uint64_t>(count) * torch_dtype_size(it->second.dtype);
      if (count < it->second.numel || bytes / torch_dtype_size(it->second.dtype) != static_cast<uint64_t>(count))
        fail("storage '" + k->text + "' holds " + std::to_string(count) + " elements, fewer than its " +
             std::to_string(it->second.numel));
      if (all.size() - pos < bytes) fail("truncated in the data of storage '" + k->text + "'");
      legacy_offsets[k->text] = pos;
      pos += bytes;
    }
  }

  // A storage's zip entry, checked to hold the bytes the storage claims (zip), or its data
  // record (legacy): before anything is allocated for it.
  zip_int64_t storage_entry(const TorchStorage& s) const {
    if (!zip) {
      if (!legacy_offsets.count(s.key)) fail("storage '" + s.key + "' has no data record");
      return -1;
    }
    const std::string name = prefix + "data/" + s.key;
    const zip_int64_t idx = zip_name_locate(zip, name.c_str(), 0);
    if (idx < 0) fail("zip entry " + name + " missing (storage '" + s.key + "')");
    const uint64_t size = entry_size(static_cast<zip_uint64_t>(idx), name);
    uint64_t need = 0;
    if (s.numel < 0 || __builtin_mul_overflow(static_cast<uint64_t>(s.numel), torch_dtype_size(s.dtype), &need))
      fail("storage '" + s.key + "' of " + std::to_string(s.numel) + " elements: implausibly large");
    if (size < need)
      fail("zip entry " + name + " holds " + std::to_string(size) + " bytes, fewer than its storage's " +
           std::to_string(need));
    return idx;
  }

  // Bytes [begin, begin + len) of a storage's data.
  void read_storage(const TorchStorage& s, uint64_t begin, uint64_t len, char* dst) const {
    const zip_int64_t idx = storage_entry(s);
    if (zip) {
      read_entry_range(static_cast<zip_uint64_t>(idx), prefix + "data/" + s.key, begin, len, dst);
      return;
    }
    const auto it = legacy_offsets.find(s.key);
    std::memcpy(dst, mapping.data() + it->second + begin, len);
  }
};

TorchFile::TorchFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  uint64_t size = 0;
  {
    // Zip archives start with a local file header "PK\3\4".
    ReadOnlyMapping head = map_file_read_only(path, size);
    const bool zip = size >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0;
    if (!zip) {
      impl_->open_legacy(size);
      return;
    }
  }
  impl_->open_zip(path, size);
}

TorchFile::TorchFile(const std::string& path, uint64_t offset, uint64_t length) : impl_(std::make_unique<Impl>()) {
  impl_->path = path + " at byte " + std::to_string(offset);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(path + ": cannot read: " + ec.message());
  if (offset > size || length > size - offset || length > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw IoError(impl_->path + ": " + std::to_string(length) + " bytes lie past the file's end (" +
                  std::to_string(size) + " bytes)");
  impl_->open_zip(path, size, offset, static_cast<int64_t>(length));
}

TorchFile::~TorchFile() = default;
TorchFile::TorchFile(TorchFile&&) noexcept = default;
TorchFile& TorchFile::operator=(TorchFile&&) noexcept = default;

const std::string& TorchFile::path() const { return impl_->path; }
const pickle::Value& TorchFile::root() const { return *impl_->root; }
bool TorchFile::is_zip() const { return impl_->zip != nullptr; }

const TorchTensor* TorchFile::tensor(const pickle::Value& v) {
  return v.kind == Kind::External ? std::any_cast<TorchTensor>(&v.external) : nullptr;
}

std::vector<float> TorchFile::read_f32(const TorchTensor& t, const std::string& what) const {
  const std::string where = impl_->path + ": " + what;
  if (t.dtype != TorchDType::F32 && t.dtype != TorchDType::F16 && t.dtype != TorchDType::BF16 &&
      t.dtype != TorchDType::F64)
    throw IoError(where + ": dtype " + torch_dtype_str(t.dtype) + " is not a floating-point type");
  // The elements span storage [offset, offset + extent); strides are non-negative in torch.
  // Every product and sum is checked: a malformed file must not wrap them around.
  int64_t extent = 1, numel = 1;
  bool contiguous = true, overflow = false;
  int64_t expect_stride = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] < 0 || t.stride[d] < 0) throw IoError(where + ": negative size or stride");
    if (t.shape[d] == 0) extent = numel = 0;
  }
  for (size_t d = t.shape.size(); numel > 0 && d-- > 0;) {
    int64_t span = 0;
    if (t.shape[d] != 1 && t.stride[d] != expect_stride) contiguous = false;
    overflow |= __builtin_mul_overflow(expect_stride, t.shape[d], &expect_stride);
    overflow |= __builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &span);
    overflow |= __builtin_add_overflow(extent, span, &extent);
    overflow |= __builtin_mul_overflow(numel, t.shape[d], &numel);
    if (overflow || numel > (int64_t{1} << 40) || extent > (int64_t{1} << 40)) throw IoError(where + ": implausibly large");
  }
  if (numel == 0) return {};
  // Checked before anything is allocated: a corrupt shape or storage must not ask for gigabytes.
  if (t.offset < 0 || t.storage_numel < extent || t.offset > t.storage_numel - extent)
    throw IoError(where + ": a span of " + std::to_string(extent) + " elements from offset " + std::to_string(t.offset) +
                  " lies outside its storage of " + std::to_string(t.storage_numel));
  const size_t es = torch_dtype_size(t.dtype);
  TorchStorage s{t.dtype, t.storage_key, t.storage_numel};
  impl_->storage_entry(s);
  // A view may repeat its storage (stride 0), but a checkpoint's tensors are not views many
  // times the size of their file: a corrupt shape must not ask for terabytes.
  if (static_cast<uint64_t>(numel) / 16 > impl_->bytes() + (1 << 20))
    throw IoError(where + ": " + std::to_string(numel) + " elements from a file of " + std::to_string(impl_->bytes()) +
                  " bytes: implausibly large");
  std::vector<float> out(static_cast<size_t>(numel));
  std::vector<char> raw(static_cast<size_t>(extent) * es);
  impl_->read_storage(s, static_cast<uint64_t>(t.offset) * es, raw.size(), raw.data());
  if (contiguous) {
    convert_to_f32(t.dtype, raw.data(), numel, out.data());
    return out;
  }
  // Gather along the strides, one innermost row at a time.
  const size_t nd = t.shape.size();
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = t.shape[nd - 1], inner_stride = t.stride[nd - 1];
  for (int64_t o = 0; o < numel; o += inner) {
    int64_t src = 0;
    for (size_t d = 0; d + 1 < nd; ++d) src += idx[d] * t.stride[d];
    for (int64_t j = 0; j < inner; ++j)
      convert_to_f32(t.dtype, raw.data() + static_cast<size_t>((src + j * inner_stride)) * es, 1, &out[o + j]);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

namespace {

// Adds a torch.save archive's entries to `z` (an empty archive): "<stem>/data.pkl", the
// storages, "<stem>/version" and "<stem>/byteorder". False on a libzip error (zip_strerror says it).
bool add_torch_entries(zip_t* z, const std::string& stem, const std::string& pickle,
                       const std::vector<TorchStorageBytes>& storages) {
  static const std::string kVersion = "3\n", kByteOrder = "little";
  // torch.save starts every record's data on a 64-byte boundary (PyTorch's zip writer pads
  // each local header with an extra field "FB"), which torch.load(mmap=True) relies on to map
  // the tensors in place; the same here. libzip writes the entries in the order they are
  // added, each a local header (30 bytes, the name, the extra fields) and the stored bytes.
  uint64_t offset = 0;  // where the next local header goes
  const auto add = [&](const std::string& name, const auto& data) {  // a std::string or std::vector<char>
    const std::string entry = stem + "/" + name;
    zip_source_t* src = zip_source_buffer(z, data.data(), data.size(), 0);
    const zip_int64_t idx = src ? zip_file_add(z, entry.c_str(), src, ZIP_FL_ENC_UTF_8) : -1;
    if (idx < 0) {
      if (src) zip_source_free(src);
      return false;
    }
    const auto at = static_cast<zip_uint64_t>(idx);
    if (zip_set_file_compression(z, at, ZIP_CM_STORE, 0) != 0) return false;
    // An entry of 4 GiB or more also carries a Zip64 field (4 + 16 bytes) in its local header.
    const uint64_t start = offset + 30 + entry.size() + (data.size() >= 0xFFFFFFFFu ? 20 : 0);
    uint64_t pad = (kTorchRecordAlignment - start % kTorchRecordAlignment) % kTorchRecordAlignment;
    if (pad > 0 && pad < 4) pad += kTorchRecordAlignment;  // a field's own header takes 4 bytes
    if (pad > 0) {
      const std::string fill(pad - 4, 'Z');
      if (zip_file_extra_field_set(z, at, 0x4246 /* "FB" */, ZIP_EXTRA_FIELD_NEW,
                                   reinterpret_cast<const zip_uint8_t*>(fill.data()),
                                   static_cast<zip_uint16_t>(fill.size()), ZIP_FL_LOCAL) != 0)
        return false;
    }
    offset = start + pad + data.size();
    return true;
  };
  bool ok = add("data.pkl", pickle);
  for (const TorchStorageBytes& s : storages) ok = ok && add("data/" + s.key, s.bytes);
  return ok && add("version", kVersion) && add("byteorder", kByteOrder);
}

}  // namespace

std::string torch_file_bytes(const std::string& pickle, const std::vector<TorchStorageBytes>& storages) {
  zip_error_t e;
  zip_error_init(&e);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &e);
  zip_t* z = buffer ? zip_open_from_source(buffer, ZIP_TRUNCATE, &e) : nullptr;
  if (!z) {
    const std::string what = zip_error_strerror(&e);
    zip_error_fini(&e);
    if (buffer) zip_source_free(buffer);
    throw IoError("torch.save archive in memory: " + what);
  }
  zip_error_fini(&e);
  zip_source_keep(buffer);  // outlives zip_close, which writes the archive into it
  std::string what;
  if (!add_torch_entries(z, "archive", pickle, storages)) {
    what = zip_strerror(z);
    zip_discard(z);
  } else if (zip_close(z) != 0) {
    what = zip_strerror(z);
    zip_discard(z);
  }
  std::string out;
  if (what.empty() && zip_source_open(buffer) == 0) {
    char chunk[1 << 16];
    zip_int64_t n;
    while ((n = zip_source_read(buffer, chunk, sizeof chunk)) > 0) out.append(chunk, static_cast<size_t>(n));
    if (n < 0) what = zip_error_strerror(zip_source_error(buffer));
    zip_source_close(buffer);
  } else if (what.empty()) {
    what = zip_error_strerror(zip_source_error(buffer));
  }
  zip_source_free(buffer);
  if (!what.empty()) throw IoError("torch.save archive in memory: " + what);
  return out;
}

const char* torch_dtype_global(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    default: return nullptr;
  }
}

const char* torch_storage_class(DType t) {
  switch (t) {
    case DType::F32: return "FloatStorage";
    case DType::F16: return "HalfStorage";
    case DType::BF16: return "BFloat16Storage";
    default: return nullptr;
  }
}

void write_torch_file(const std::string& path, const std::string& pickle, const std::vector<TorchStorageBytes>& storages) {
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_EXCL, &code);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string what = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw IoError(path + ": cannot create: " + what);
  }
  const std::string stem = std::filesystem::path(path).stem().string();
  const bool ok = add_torch_entries(z, stem, pickle, storages);
  std::string what;
  int err = 0;  // the errno behind a failure, where libzip has one
  const auto failed = [&] {
    what = zip_strerror(z);
    zip_error_t* e = zip_get_error(z);
    if (zip_error_system_type(e) == ZIP_ET_SYS) err = zip_error_code_system(e);
    zip_discard(z);
  };
  if (!ok || zip_close(z) != 0) failed();
  if (what.empty()) {  // durable before a caller renames or points at it
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      err = errno;
      what = std::string("fsync: ") + std::strerror(err);
    }
    if (fd >= 0) ::close(fd);
  }
  if (!what.empty()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    throw_write_failure(path + ": cannot write: " + what, err);
  }
}

}  // namespace trident
