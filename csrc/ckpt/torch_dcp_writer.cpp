#include "ckpt/torch_dcp_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ckpt/atomic_file.h"
#include "ckpt/canonical_slices.h"
#include "ckpt/pickle_writer.h"
#include "ckpt/torch_file.h"
#include "core/error.h"
#include "core/write_fully.h"

namespace trident {

namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";

void torch_size(pickle::Writer& w, const std::vector<int64_t>& dims) {  // torch.Size((d0, d1, ...))
  w.begin_call("torch", "Size");
  w.begin_tuple();
  for (int64_t d : dims) w.integer(d);
  w.end();
  w.end();
}

}  // namespace

DcpWriter::DcpWriter(std::filesystem::path dir) : dir_(std::move(dir)) {}

DcpWriter::~DcpWriter() {
  for (auto& [rank, f] : files_)
    if (f.fd >= 0) ::close(f.fd);
}

DcpWriter::Piece DcpWriter::append(int rank, const std::string& bytes) {
  DataFile& f = files_[rank];
  if (f.fd < 0) {
    f.name = "__" + std::to_string(rank) + "_0.distcp";
    f.fd = ::open((dir_ / f.name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    const int err = errno;
    if (f.fd < 0) throw_write_failure((dir_ / f.name).string() + ": cannot create: " + std::strerror(err), err);
  }
  if (const int err = write_fully(f.fd, bytes.data(), bytes.size()); err != 0)
    throw_write_failure((dir_ / f.name).string() + ": cannot write: " + std::strerror(err), err);
  Piece p;
  p.file = f.name;
  p.offset = f.length;
  p.length = bytes.size();
  f.length += bytes.size();
  return p;
}

void DcpWriter::add_tensor(int rank, const std::string& key, const std::vector<int64_t>& size,
                           const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes,
                           const std::vector<float>& data, DType dtype) {
  TRIDENT_CHECK(!finished_ && size.size() == offsets.size() && size.size() == sizes.size(),
                "DcpWriter: " + key + ": a piece's offsets and sizes must have the tensor's rank");
  int64_t numel = 1;
  for (size_t d = 0; d < size.size(); ++d) {
    TRIDENT_CHECK(offsets[d] >= 0 && sizes[d] >= 0 && offsets[d] + sizes[d] <= size[d],
                  "DcpWriter: " + key + ": a piece outside the tensor");
    numel *= sizes[d];
  }
  TRIDENT_CHECK(static_cast<int64_t>(data.size()) == numel, "DcpWriter: " + key + ": data of another size than the piece");
  TRIDENT_CHECK(rank >= 0 && torch_storage_class(dtype) != nullptr, "DcpWriter: " + key + ": rank or dtype");
  const auto known = entries_.find(key);
  if (known != entries_.end()) {
    const Entry& e = known->second;
    TRIDENT_CHECK(e.tensor && e.dtype == dtype && e.size == size, "DcpWriter: " + key + ": pieces of another size or dtype");
    for (const Piece& q : e.pieces) TRIDENT_CHECK(q.offsets != offsets, "DcpWriter: " + key + ": two pieces at one offset");
  }
  pickle::Writer w;
  w.tensor(torch_storage_class(dtype), "0", sizes);
  Piece p = append(rank, torch_file_bytes(w.finish(), {{"0", encode_as(data, dtype)}}));
  p.offsets = offsets;
  p.sizes = sizes;
  Entry& e = entries_[key];  // recorded once its bytes are written
  e.tensor = true;
  e.dtype = dtype;
  e.size = size;
  e.pieces.push_back(std::move(p));
}

void DcpWriter::add_object(int rank, const std::string& key, const std::string& pickle) {
  TRIDENT_CHECK(!finished_ && rank >= 0 && !entries_.count(key), "DcpWriter: object " + key + " added twice");
  Piece p = append(rank, torch_file_bytes(pickle, {}));
  entries_[key].pieces.push_back(std::move(p));
}

std::string DcpWriter::metadata_pickle() const {
  pickle::Writer w;
  w.begin_object(kMetadataModule, "Metadata");
  w.begin_dict();
  w.str("state_dict_metadata");
  w.begin_dict();
  for (const auto& [key, e] : entries_) {
    w.str(key);
    if (!e.tensor) {
      w.begin_object(kMetadataModule, "BytesStorageMetadata");
      w.begin_dict();
      w.end();
      w.end();
      continue;
    }
    w.begin_object(kMetadataModule, "TensorStorageMetadata");
    w.begin_dict();
    w.str("properties");
    // TensorProperties pickles the tuple of its __getstate__: (dtype, layout, requires_grad,
    // memory_format as _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, pin_memory).
    w.begin_object(kMetadataModule, "TensorProperties");
    w.begin_tuple();
    w.global("torch", torch_dtype_global(e.dtype));
    w.global("torch", "strided");
    w.boolean(false);
    w.begin_call(kMetadataModule, "_MEM_FORMAT_ENCODING");
    w.integer(0);
    w.end();
    w.boolean(false);
    w.end();
    w.end();
    w.str("size");
    torch_size(w, e.size);
    w.str("chunks");
    w.begin_list();
    for (const Piece& p : e.pieces) {
      w.begin_object(kMetadataModule, "ChunkStorageMetadata");
      w.begin_dict();
      w.str("offsets");
      torch_size(w, p.offsets);
      w.str("sizes");
      torch_size(w, p.sizes);
      w.end();
      w.end();
    }
    w.end();
    w.end();  // the TensorStorageMetadata's dict
    w.end();
  }
  w.end();  // state_dict_metadata
  // The default planner's flattening of an already flat state dict: each key its own path.
  w.str("planner_data");
  w.begin_dict();
  for (const auto& [key, e] : entries_) {
    w.str(key);
    w.begin_tuple();
    w.str(key);
    w.end();
  }
  w.end();
  w.str("storage_data");
  w.begin_dict();
  for (const auto& [key, e] : entries_)
    for (const Piece& p : e.pieces) {
      // MetadataIndex(fqn, offset, index): a frozen dataclass; an object's None offset is not
      // in its state (torch sets the attribute only when given).
      w.begin_object(kMetadataModule, "MetadataIndex");
      w.begin_dict();
      w.str("fqn");
      w.str(key);
      w.str("index");
      w.none();
      if (e.tensor) {
        w.str("offset");
        torch_size(w, p.offsets);
      }
      w.end();
      w.end();
      w.begin_object(kFilesystemModule, "_StorageInfo");
      w.begin_dict();
      w.str("relative_path");
      w.str(p.file);
      w.str("offset");
      w.integer(static_cast<int64_t>(p.offset));
      w.str("length");
      w.integer(static_cast<int64_t>(p.length));
      w.end();
      w.end();
    }
  w.end();  // storage_data
  w.str("storage_meta");
  w.none();
  w.str("version");
  w.str("1.0.0");
  w.str("mcore_data");  // Megatron-core's addition: each tensor's mcore_metadata, {} when not reformulated
  w.begin_dict();
  for (const auto& [key, e] : entries_)
    if (e.tensor) {
      w.str(key);
      w.begin_dict();
      w.end();
    }
  w.end();
  w.end();  // the Metadata's dict
  w.end();
  return w.finish();
}

void DcpWriter::finish() {
  TRIDENT_CHECK(!finished_, "DcpWriter: finish() twice");
  finished_ = true;
  for (auto& [rank, f] : files_) {
    const std::string path = (dir_ / f.name).string();
    if (::fsync(f.fd) != 0) {
      const int err = errno;
      throw_write_failure(path + ": cannot write: fsync: " + std::strerror(err), err);
    }
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) {
      const int err = errno;
      throw_write_failure(path + ": cannot write: " + std::strerror(err), err);
    }
  }
  write_file_atomic((dir_ / ".metadata").string(), metadata_pickle());
  fsync_dir(dir_.string());
}

}  // namespace trident
