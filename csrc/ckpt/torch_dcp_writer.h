// Writes a folder of PyTorch's distributed checkpoint format (torch.distributed.checkpoint,
// "DCP"), as torch 2.x's FileSystemWriter lays it out and torch_dcp.h reads it:
//  * DIR/__R_0.distcp per writing rank R: each item torch.save'd (the zip format, entries under
//    "archive/") one after the other; a tensor piece as a tensor of its own shape;
//  * DIR/.metadata: the pickle of torch.distributed.checkpoint.metadata.Metadata, whose
//    state_dict_metadata maps each key to TensorStorageMetadata(properties, size, chunks) or
//    BytesStorageMetadata(), and storage_data each MetadataIndex(key, chunk offsets) to the
//    filesystem's _StorageInfo(relative_path, offset, length); with Megatron-core's mcore_data
//    ({key: {}} per tensor: nothing reformulated).
// Items go to their file as they are added, so memory holds one piece at a time.
// Errors throw IoError naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace trident {

class DcpWriter {
 public:
  // `dir` must exist; the files it gets must not.
  explicit DcpWriter(std::filesystem::path dir);
  ~DcpWriter();
  DcpWriter(const DcpWriter&) = delete;
  DcpWriter& operator=(const DcpWriter&) = delete;

  // Rank `rank`'s piece of tensor `key`, whose whole shape is `size`: the box at `offsets` of
  // shape `sizes`, its elements `data` (row-major) stored as `dtype` (fp32, fp16 or bf16). A
  // key's pieces must share its size and dtype and lie at different offsets (checked), and must
  // not overlap (not checked: the reader checks that they tile it).
  void add_tensor(int rank, const std::string& key, const std::vector<int64_t>& size, const std::vector<int64_t>& offsets,
                  const std::vector<int64_t>& sizes, const std::vector<float>& data, DType dtype);
  // An object `key`: `pickle` (a pickle::Writer's finish()) torch.save'd by rank `rank`.
  void add_object(int rank, const std::string& key, const std::string& pickle);
  // Flushes and fsyncs the data files, writes .metadata and fsyncs the folder.
  void finish();

 private:
  struct Piece {
    std::vector<int64_t> offsets, sizes;
    std::string file;
    uint64_t offset = 0, length = 0;
  };
  struct Entry {
    bool tensor = false;
    DType dtype = DType::F32;
    std::vector<int64_t> size;
    std::vector<Piece> pieces;  // an object's one piece has no offsets
  };
  struct DataFile {
    std::string name;
    int fd = -1;
    uint64_t length = 0;
  };
  Piece append(int rank, const std::string& bytes);
  std::string metadata_pickle() const;

  std::filesystem::path dir_;
  std::map<std::string, Entry> entries_;
  std::map<int, DataFile> files_;
  bool finished_ = false;
};

}  // namespace trident
