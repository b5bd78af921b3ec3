// A trident checkpoint as written by many ranks, read back as canonical tensors.
//
// Inside DIR/iter_NNNNNNN/ every (tp, pp) rank folder (rank_dir_name) holds
//   model.safetensors      written by DP rank 0: the rank's TP slice of each parameter it
//                          holds, under the canonical name, in the model's dtype;
//   optim_dp<D>.safetensors one per DP rank that owns optimizer state (every DP rank with
//                          ZeRO, DP rank 0 without): pieces of the TP slices' flat ranges,
//                          fp32, keyed "<name>|<state>|<first local index>" with state
//                          master, exp_avg or exp_avg_sq;
// each file's __metadata__ says tp, tp_rank, pp_rank and dp_rank. metadata.json lists every
// file with its size and checksum. Because pieces name canonical parameters and local
// index ranges under the layout that wrote them, any other layout can rebuild what it
// needs: the reader assembles full canonical tensors (the word embedding without
// vocabulary padding), which a rank then slices for its own (tp, shard).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/metadata.h"
#include "ckpt/safetensors.h"
#include "model/param_spec.h"

namespace trident {

inline constexpr const char* kOptimizerStates[] = {"master", "exp_avg", "exp_avg_sq"};

inline constexpr const char* kModelFileName = "model.safetensors";
std::string optimizer_piece_key(const std::string& param, const std::string& state, int64_t first);
std::string optimizer_file_name(int dp_rank);  // "optim_dp0003.safetensors"
// The __metadata__ every rank file carries (the reader needs tp_rank).
std::map<std::string, std::string> rank_file_metadata(int tp, int tp_rank, int pp_rank, int dp_rank);

class ShardedCheckpointReader {
 public:
  // Reads DIR/metadata.json (DIR is one iter_NNNNNNN folder). Files are opened lazily and
  // verified against their checksums the first time (IoError naming the file).
  explicit ShardedCheckpointReader(const std::filesystem::path& dir);
  ~ShardedCheckpointReader();

  const CheckpointMetadata& metadata() const { return meta_; }
  const std::filesystem::path& dir() const { return dir_; }
  bool has_optimizer_state() const { return has_optimizer_; }
  // Full canonical fp32 tensor (stored form: word embedding rows = vocab size) of a
  // parameter. Throws IoError when the checkpoint lacks it or part of it.
  std::vector<float> model_tensor(const std::string& name);
  std::vector<float> optimizer_tensor(const std::string& name, const std::string& state);
  // The canonical parameters of the checkpoint's model (gpt2_param_specs at its tp).
  const std::vector<ParamSpec>& specs() const { return specs_; }

 private:
  struct Entry {
    size_t file;
    std::string key;
    int tp_rank;
    int64_t first;  // local index of the piece's first element (optimizer pieces)
  };
  SafetensorsReader& open(size_t file);
  const ParamSpec& spec(const std::string& name) const;
  std::vector<float> assemble(const std::string& name, const std::vector<Entry>& entries, bool pieces);

  std::filesystem::path dir_;
  CheckpointMetadata meta_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> spec_index_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, std::vector<Entry>> model_entries_;
  std::map<std::string, std::vector<Entry>> optimizer_entries_;  // key: name|state
  bool has_optimizer_ = false;
};

// Checks that the checkpoint holds a model of the run's shape; ConfigError naming the flag.
void check_same_model_shape(const ModelConfig& checkpoint, const ModelConfig& run, const std::filesystem::path& dir);

// Fills `params` (one TP rank's slices, any dtype, any device) from the checkpoint.
class Backend;
class ParamStore;
void load_model_parameters(ShardedCheckpointReader& ckpt, ParamStore& params, Backend& backend);

}  // namespace trident
