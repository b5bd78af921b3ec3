// Pieces of export_megatron_gpt2 (megatron_gpt2.h) that write one mp_rank_* file: a canonical
// tensor's shard on a tensor-parallel rank, as Megatron splits it, and the storages of the
// tensors a file's pickle names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/pickle_writer.h"
#include "ckpt/torch_file.h"
#include "core/dtype.h"
#include "model/config.h"

namespace trident::megatron {

// The checkpoint_version the export writes (QKV rows [heads][q,k,v][head_dim] per rank).
inline constexpr double kExportCheckpointVersion = 3.0;

// Rank t's shard of a full canonical tensor [rows, cols] (cols 1 for a vector) of parameter
// `canonical` ("wte" for the padded word embedding), and its shape.
std::vector<float> shard_of(const std::string& canonical, const std::vector<float>& full, int64_t rows, int64_t cols,
                            int t, int tp, const ModelConfig& cfg);
std::vector<int64_t> shard_shape(const std::string& canonical, std::vector<int64_t> full_shape, int tp);
// Rank t's shard of canonical tensor `h` (stored form: wte unpadded), wte padded with Megatron's
// zero rows first.
std::vector<float> padded_shard_of(const HostTensor& h, const std::string& canonical, const ModelConfig& cfg, int tp,
                                   int t);

// A float32 setting as the double of its shortest decimal (0.1f -> 0.1, not
// 0.10000000149011612), as Megatron's argparse would hold it.
double shortest_decimal(float v);

// torch's storage class of `dtype` ("FloatStorage", ...); ConfigError naming --dtype for
// another than fp32, fp16 and bf16.
const char* torch_storage_type(DType dtype);

// The storages of one torch.save file, in the order its pickle names them.
class RankFile {
 public:
  // Writes a tensor value over a new storage of `data` stored as `dtype`.
  void tensor(pickle::Writer& w, const std::vector<float>& data, const std::vector<int64_t>& shape, DType dtype);
  const std::vector<TorchStorageBytes>& storages() const { return storages_; }

 private:
  std::vector<TorchStorageBytes> storages_;
};

}  // namespace trident::megatron
