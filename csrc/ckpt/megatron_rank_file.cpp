#include "ckpt/megatron_rank_file.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "ckpt/canonical_slices.h"
#include "ckpt/megatron_gpt2.h"
#include "core/error.h"

namespace trident::megatron {

double shortest_decimal(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

const char* torch_storage_type(DType t) {
  if (const char* storage = torch_storage_class(t)) return storage;
  throw ConfigError(std::string("--dtype: the Megatron export stores fp32, fp16 or bf16, not ") + dtype_name(t));
}

std::vector<float> shard_of(const std::string& canonical, const std::vector<float>& full, int64_t rows, int64_t cols,
                            int t, int tp, const ModelConfig& cfg) {
  const MegatronSplit split = megatron_split(canonical);
  if (split == MegatronSplit::kReplicated) return full;
  const int64_t lrows = split == MegatronSplit::kColumns ? rows : rows / tp;
  const int64_t lcols = split == MegatronSplit::kColumns ? cols / tp : cols;
  std::vector<float> out(static_cast<size_t>(lrows * lcols));
  for (int64_t r = 0; r < lrows; ++r) {
    const MegatronShardRow at = megatron_shard_row(split, r, t, tp, lrows, lcols, cfg, kExportCheckpointVersion);
    std::memcpy(&out[static_cast<size_t>(r * lcols)], &full[static_cast<size_t>(at.row * cols + at.col0)],
                static_cast<size_t>(lcols) * sizeof(float));
  }
  return out;
}

std::vector<float> padded_shard_of(const HostTensor& h, const std::string& canonical, const ModelConfig& cfg, int tp,
                                   int t) {
  const int64_t cols = h.shape.size() > 1 ? h.shape[1] : 1;
  if (canonical != "wte") return shard_of(canonical, h.data, h.shape[0], cols, t, tp, cfg);
  const int64_t padded = cfg.padded_vocab_size(tp);  // Megatron's padding rows: zero
  return shard_of(canonical, pad_rows(h.data.data(), h.shape[0], cols, padded), padded, cols, t, tp, cfg);
}

std::vector<int64_t> shard_shape(const std::string& canonical, std::vector<int64_t> shape, int tp) {
  const MegatronSplit split = megatron_split(canonical);
  if (split == MegatronSplit::kColumns) shape[1] /= tp;
  else if (split != MegatronSplit::kReplicated) shape[0] /= tp;
  return shape;
}

void RankFile::tensor(pickle::Writer& w, const std::vector<float>& data, const std::vector<int64_t>& shape,
                      DType dtype) {
  const std::string key = std::to_string(storages_.size());
  w.tensor(torch_storage_type(dtype), key, shape);
  storages_.push_back({key, encode_as(data, dtype)});
}

}  // namespace trident::megatron
