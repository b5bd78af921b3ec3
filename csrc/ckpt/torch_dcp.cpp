#include "ckpt/torch_dcp.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "ckpt/atomic_file.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident {

namespace {

namespace fs = std::filesystem;
using pickle::Kind;
using pickle::Ref;
using pickle::Value;

// An instance of the class `name` (any module), as NEWOBJ/REDUCE + BUILD record it.
bool is_instance(const Value& v, std::string_view name) {
  return v.kind == Kind::Object && v.callable && v.callable->kind == Kind::Global && v.callable->name == name;
}

class MetadataReader {
 public:
  explicit MetadataReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  [[noreturn]] void fail(const std::string& what) const { throw IoError(source_ + ": " + what); }

  const Value& field(const Value& obj, const char* name, const std::string& what) const {
    const Value* v = obj.get(name);
    if (!v) fail(what + " has no '" + name + "' (" + obj.describe() + ")");
    return *v;
  }

  int64_t integer(const Value& v, const std::string& what) const {
    if (v.kind != Kind::Int) fail(what + " is " + v.describe() + ", not an int");
    return v.integer;
  }

  std::vector<int64_t> shape(const Value& v, const std::string& what) const {
    if (v.kind != Kind::Tuple && v.kind != Kind::List) fail(what + " is " + v.describe() + ", not a torch.Size");
    std::vector<int64_t> out;
    for (const Ref& x : v.items) {
      out.push_back(integer(*x, what));
      if (out.back() < 0) fail(what + " holds a negative number");
    }
    return out;
  }

  std::string text(const Value& v, const std::string& what) const {
    if (!v.is_str()) fail(what + " is " + v.describe() + ", not a str");
    return v.text;
  }

  // TensorProperties: a dataclass state with 'dtype', or __getstate__'s tuple, dtype first.
  TorchDType dtype(const Value& props, const std::string& what) const {
    const Value* d = nullptr;
    if (props.state && props.state->kind == Kind::Tuple && !props.state->items.empty()) d = props.state->items[0].get();
    else d = props.get("dtype");
    if (!d) fail(what + ": no dtype in " + props.describe());
    const std::optional<TorchDType> t =
        d->kind == Kind::Global && d->module == "torch" ? torch_dtype_named(d->name) : std::nullopt;
    if (!t) fail(what + ": dtype " + d->describe() + " is not read");
    return *t;
  }

 private:
  std::string source_;
};

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 40)) throw IoError(where + ": implausibly large");
  return n;
}

bool boxes_overlap(const DcpChunk& a, const DcpChunk& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (a.offsets[d] + a.sizes[d] <= b.offsets[d] || b.offsets[d] + b.sizes[d] <= a.offsets[d]) return false;
  return true;
}

// Copies the part of `src` (a row-major box at src_begin of src_extent) that lies in `dst`
// (a row-major box at dst_begin of dst_extent). Both are boxes of one tensor.
void copy_intersection(const std::vector<float>& src, const std::vector<int64_t>& src_begin,
                       const std::vector<int64_t>& src_extent, std::vector<float>* dst,
                       const std::vector<int64_t>& dst_begin, const std::vector<int64_t>& dst_extent) {
  const size_t nd = src_begin.size();
  std::vector<int64_t> lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = std::max(src_begin[d], dst_begin[d]);
    hi[d] = std::min(src_begin[d] + src_extent[d], dst_begin[d] + dst_extent[d]);
    if (lo[d] >= hi[d]) return;
  }
  if (nd == 0) {
    (*dst)[0] = src[0];
    return;
  }
  std::vector<int64_t> idx = lo;  // the current element of the intersection, innermost dim at lo
  const int64_t run = hi[nd - 1] - lo[nd - 1];
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < nd; ++d) {
      s = s * src_extent[d] + (idx[d] - src_begin[d]);
      t = t * dst_extent[d] + (idx[d] - dst_begin[d]);
    }
    std::memcpy(dst->data() + t, src.data() + s, static_cast<size_t>(run) * sizeof(float));
    size_t d = nd - 1;
    while (d-- > 0) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

// Where a _StorageInfo puts an item (`what`): its file of the folder and byte range.
void read_storage(const MetadataReader& r, const Value& info, const std::string& what, DcpChunk* out) {
  out->file = r.text(r.field(info, "relative_path", what), what + " relative_path");
  if (out->file.empty() || out->file.find('/') != std::string::npos || out->file == "." || out->file == "..")
    r.fail(what + ": relative_path '" + out->file + "' is not a file of the folder");
  const int64_t off = r.integer(r.field(info, "offset", what), what + " byte offset");
  const int64_t len = r.integer(r.field(info, "length", what), what + " byte length");
  if (off < 0 || len <= 0) r.fail(what + ": byte range " + std::to_string(off) + "+" + std::to_string(len));
  if (const Value* tr = info.get("transform_descriptors"); tr && tr->kind == Kind::List && !tr->items.empty())
    r.fail(what + " is stored through transforms (compression), which are not read");
  out->byte_offset = static_cast<uint64_t>(off);
  out->byte_length = static_cast<uint64_t>(len);
}

// One TensorStorageMetadata entry, its pieces found in `where`; throws IoError.
DcpTensor tensor_entry(const MetadataReader& r, const std::string& fqn, const Value& v,
                       const std::map<std::pair<std::string, std::vector<int64_t>>, const Value*>& where) {
  const std::string what = "'" + fqn + "'";
  DcpTensor t;
  t.dtype = r.dtype(r.field(v, "properties", what), what);
  t.size = r.shape(r.field(v, "size", what), what + ".size");
  t.elements = checked_numel(t.size, r.source() + ": " + what);
  const Value& chunks = r.field(v, "chunks", what);
  if (chunks.kind != Kind::List) r.fail(what + ".chunks is " + chunks.describe());
  std::map<std::vector<int64_t>, std::vector<int64_t>> seen;  // offsets -> sizes
  for (const Ref& c : chunks.items) {
    if (!is_instance(*c, "ChunkStorageMetadata")) r.fail(what + " has chunk " + c->describe());
    DcpChunk chunk;
    chunk.offsets = r.shape(r.field(*c, "offsets", what), what + " chunk offsets");
    chunk.sizes = r.shape(r.field(*c, "sizes", what), what + " chunk sizes");
    const std::string cw = what + " chunk at " + shape_str(chunk.offsets);
    if (chunk.offsets.size() != t.size.size() || chunk.sizes.size() != t.size.size())
      r.fail(cw + " of size " + shape_str(chunk.sizes) + " does not have the tensor's " +
             std::to_string(t.size.size()) + " dimensions");
    for (size_t d = 0; d < t.size.size(); ++d)
      if (chunk.sizes[d] > t.size[d] || chunk.offsets[d] > t.size[d] - chunk.sizes[d])
        r.fail(cw + " of size " + shape_str(chunk.sizes) + " lies outside the tensor's " + shape_str(t.size));
    // A piece listed twice (replicas a planner did not fold) has one record and is read once.
    if (const auto [at, fresh] = seen.emplace(chunk.offsets, chunk.sizes); !fresh) {
      if (at->second != chunk.sizes)
        r.fail(cw + " is listed with sizes " + shape_str(at->second) + " and " + shape_str(chunk.sizes));
      continue;
    }
    const auto found = where.find({fqn, chunk.offsets});
    if (found == where.end()) r.fail(cw + " has no storage_data record");
    read_storage(r, *found->second, cw, &chunk);
    checked_numel(chunk.sizes, r.source() + ": " + cw);
    t.chunks.push_back(std::move(chunk));
  }
  return t;
}

}  // namespace

DcpCheckpoint::DcpCheckpoint(const fs::path& dir) : dir_(dir) {
  const fs::path meta_path = dir / ".metadata";
  const std::string source = meta_path.string();
  std::error_code ec;
  if (!fs::is_regular_file(meta_path, ec)) throw IoError(source + ": missing (a distributed checkpoint's index)");
  const std::string bytes = read_file(source);
  const Ref root = pickle::unpickle(bytes, source);
  const MetadataReader r(source);
  if (!is_instance(*root, "Metadata")) r.fail("holds " + root->describe() + ", not torch's checkpoint Metadata");
  const Value& sdm = r.field(*root, "state_dict_metadata", "Metadata");
  const Value& storage = r.field(*root, "storage_data", "Metadata");
  if (sdm.kind != Kind::Dict || storage.kind != Kind::Dict)
    r.fail("state_dict_metadata or storage_data is not a dict");

  // (fqn, chunk offsets) -> where the bytes are.
  std::map<std::pair<std::string, std::vector<int64_t>>, const Value*> where;
  for (const auto& [k, v] : storage.entries) {
    if (!is_instance(*k, "MetadataIndex") || !is_instance(*v, "_StorageInfo"))
      r.fail("storage_data maps " + k->describe() + " to " + v->describe());
    const std::string fqn = r.text(r.field(*k, "fqn", "MetadataIndex"), "MetadataIndex.fqn");
    // A bytes item's index has no offset (its state leaves out the None).
    const Value* off = k->get("offset");
    const std::vector<int64_t> offsets = !off || off->kind == Kind::None
                                             ? std::vector<int64_t>{}
                                             : r.shape(*off, "MetadataIndex '" + fqn + "'.offset");
    where[{fqn, offsets}] = v.get();
  }

  // Megatron-core's attribute: each flattened optimizer tensor's shape before its reformulation
  // (one that cannot be read is that tensor's problem, as a bad index entry is).
  std::map<std::string, std::string> reformulation_problems;
  if (const Value* mcore = root->get("mcore_data"); mcore && mcore->kind == Kind::Dict)
    for (const auto& [k, v] : mcore->entries) {
      const Value* orig = v->get("nd_reformulated_orig_global_shape");
      if (!k->is_str() || !orig || orig->kind == Kind::None) continue;
      try {
        reformulated_[k->text] = r.shape(*orig, "mcore_data '" + k->text + "'.nd_reformulated_orig_global_shape");
      } catch (const IoError& e) {
        reformulation_problems[k->text] = e.what();
      }
    }

  for (const auto& [k, v] : sdm.entries) {
    const std::string fqn = r.text(*k, "a state_dict_metadata key");
    if (is_instance(*v, "BytesStorageMetadata")) {
      objects_.push_back(fqn);
      if (const auto found = where.find({fqn, {}}); found != where.end())
        read_storage(r, *found->second, "object '" + fqn + "'", &object_storage_[fqn]);
      continue;
    }
    if (!is_instance(*v, "TensorStorageMetadata")) r.fail("'" + fqn + "' is " + v->describe());
    // What is wrong with one tensor's entry (a dtype not read, a piece without its record...)
    // stops only a read of that tensor: the optimizer states beside the weights are not read.
    try {
      tensors_[fqn] = tensor_entry(r, fqn, *v, where);
    } catch (const IoError& e) {
      tensors_[fqn].problem = e.what();
    }
    if (const auto p = reformulation_problems.find(fqn); p != reformulation_problems.end())
      tensors_[fqn].problem = p->second;
  }
}

std::unique_ptr<TorchFile> DcpCheckpoint::open_object(const std::string& fqn) const {
  const auto it = object_storage_.find(fqn);
  if (it == object_storage_.end())
    throw IoError((dir_ / ".metadata").string() + ": object '" + fqn + "' has no storage_data record");
  return std::make_unique<TorchFile>((dir_ / it->second.file).string(), it->second.byte_offset,
                                     it->second.byte_length);
}

void DcpCheckpoint::check_tiling(const std::string& fqn, const DcpTensor& t) const {
  if (tiled_.count(fqn)) return;
  const std::string what = (dir_ / ".metadata").string() + ": '" + fqn + "'";
  int64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (boxes_overlap(t.chunks[i], t.chunks[j]))
        throw IoError(what + " chunk at " + shape_str(t.chunks[i].offsets) + " overlaps the chunk at " +
                      shape_str(t.chunks[j].offsets));
    covered += checked_numel(t.chunks[i].sizes, what);
  }
  if (covered != t.elements)
    throw IoError(what + ": its chunks hold " + std::to_string(covered) + " of its " + std::to_string(t.elements) +
                  " elements " + shape_str(t.size));
  tiled_.insert(fqn);
}

std::vector<float> DcpCheckpoint::read_f32(const std::string& fqn, const std::vector<int64_t>& begin,
                                           const std::vector<int64_t>& extent) const {
  const auto it = tensors_.find(fqn);
  if (it == tensors_.end()) throw InternalError("DcpCheckpoint::read_f32 of a missing key " + fqn);
  const DcpTensor& t = it->second;
  if (!t.problem.empty()) throw IoError(t.problem);
  check_tiling(fqn, t);
  if (begin.size() != t.size.size() || extent.size() != t.size.size())
    throw InternalError("DcpCheckpoint::read_f32: box of another rank than " + fqn);
  for (size_t d = 0; d < t.size.size(); ++d)
    if (begin[d] < 0 || extent[d] < 0 || begin[d] + extent[d] > t.size[d])
      throw InternalError("DcpCheckpoint::read_f32: box outside " + fqn);
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  std::vector<float> out(static_cast<size_t>(n));
  for (const DcpChunk& c : t.chunks) {
    bool meets = true;
    for (size_t d = 0; d < t.size.size(); ++d)
      meets = meets && c.offsets[d] < begin[d] + extent[d] && begin[d] < c.offsets[d] + c.sizes[d];
    if (!meets || n == 0) continue;
    const fs::path file = dir_ / c.file;
    const TorchFile piece(file.string(), c.byte_offset, c.byte_length);
    const TorchTensor* saved = TorchFile::tensor(piece.root());
    const std::string what = "'" + fqn + "' chunk at " + shape_str(c.offsets);
    if (!saved) throw IoError(piece.path() + ": " + what + " holds " + piece.root().describe() + ", not a tensor");
    // The piece as saved: the chunk's shape (Megatron-core views a layer's piece of a stacked
    // tensor with the layer axis of size 1 prepended); any shape of its elements in order is
    // taken, so that a writer leaving out size-1 axes reads too.
    if (checked_numel(saved->shape, piece.path() + ": " + what) != checked_numel(c.sizes, piece.path()))
      throw IoError(piece.path() + ": " + what + " holds a tensor of shape " + shape_str(saved->shape) + ", not " +
                    shape_str(c.sizes));
    if (saved->dtype != t.dtype)
      throw IoError(piece.path() + ": " + what + " is " + torch_dtype_str(saved->dtype) + ", the index says " +
                    torch_dtype_str(t.dtype));
    copy_intersection(piece.read_f32(*saved, what), c.offsets, c.sizes, &out, begin, extent);
  }
  return out;
}

}  // namespace trident
