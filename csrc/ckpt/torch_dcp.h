// Folders of PyTorch's distributed checkpoint (torch.distributed.checkpoint, "DCP"; what
// Megatron-core's --ckpt-format torch_dist writes), read without Python:
//  * DIR/.metadata, a pickle of torch's Metadata: state_dict_metadata maps each key (fqn) to a
//    TensorStorageMetadata (properties.dtype, size = the whole tensor's shape, chunks = the
//    pieces the ranks saved, each with offsets and sizes) or a BytesStorageMetadata (a pickled
//    object); storage_data maps MetadataIndex(fqn, offset = a chunk's offsets) to
//    _StorageInfo(relative_path, offset, length): where in which file the piece lies;
//  * DIR/__R_I.distcp, the data files: each tensor piece is a torch.save zip archive at its
//    byte range (torch_file.h reads it), holding a tensor of the chunk's shape.
// Classes are matched by name, not by module (torch moved them from
// torch.distributed._shard.checkpoint to torch.distributed.checkpoint); class states are read
// as the dicts their dataclass pickles hold, and TensorProperties also as the tuple
// (dtype, layout, requires_grad, memory_format, pin_memory) of its __getstate__.
//
// Errors throw IoError naming the file ("<dir>/.metadata: ...").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ckpt/torch_file.h"

namespace trident {

struct DcpChunk {
  std::vector<int64_t> offsets, sizes;  // in the whole tensor
  std::string file;                     // relative to the folder
  uint64_t byte_offset = 0, byte_length = 0;
};

struct DcpTensor {
  TorchDType dtype = TorchDType::F32;
  std::vector<int64_t> size;
  int64_t elements = 0;  // the product of size
  std::vector<DcpChunk> chunks;
  // Not empty: why the tensor cannot be read (a dtype torch_file.h does not read, a piece
  // without its storage record, ...), the error of a read.
  std::string problem;
};

class DcpCheckpoint {
 public:
  // Reads DIR/.metadata. What is wrong with one tensor's entry (its chunks outside it or
  // without their storage record, a dtype not read) is kept as its `problem`, and that its
  // chunks do not overlap and cover it is checked at its first read: the keys beside the ones
  // read (a distributed optimizer's states, with thousands of pieces a key) cost no more.
  explicit DcpCheckpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::map<std::string, DcpTensor>& tensors() const { return tensors_; }
  // The keys saved as pickled objects (Transformer Engine's _extra_state, RNG states, ...).
  const std::vector<std::string>& objects() const { return objects_; }
  // Object `fqn`: its bytes, a torch.save archive (Megatron-core saves a ShardedObject as the
  // list of its one datum), opened. Throws IoError when it has no storage record.
  std::unique_ptr<TorchFile> open_object(const std::string& fqn) const;
  // Megatron-core's reformulated keys (Metadata.mcore_data's nd_reformulated_orig_global_shape):
  // a flattened optimizer tensor of shape ORIG stored as (fragments per axis..., block numel),
  // row c holding, row-major, the block of shape ORIG / fragments at offsets c * that block.
  const std::map<std::string, std::vector<int64_t>>& reformulated() const { return reformulated_; }

  // The box [begin, begin + extent) of tensor `fqn` as fp32, row-major: read from the data
  // files of the chunks that meet it. `extent` has the tensor's rank.
  std::vector<float> read_f32(const std::string& fqn, const std::vector<int64_t>& begin,
                              const std::vector<int64_t>& extent) const;

 private:
  void check_tiling(const std::string& fqn, const DcpTensor& t) const;

  std::filesystem::path dir_;
  std::map<std::string, DcpTensor> tensors_;
  std::vector<std::string> objects_;
  std::map<std::string, DcpChunk> object_storage_;  // an object's file and byte range (offsets, sizes empty)
  std::map<std::string, std::vector<int64_t>> reformulated_;
  mutable std::set<std::string> tiled_;  // the keys check_tiling has passed
};

}  // namespace trident
