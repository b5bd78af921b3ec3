// Finding and opening the torch.save files of a Megatron-LM or Megatron-DeepSpeed GPT
// checkpoint (the layouts megatron_gpt2.h lists): the iteration folder, which file holds which
// tensor-parallel rank, pipeline stage and virtual-pipeline chunk, the saved args, and each
// chunk's state dict flattened to dotted keys. Internal to the Megatron import.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/megatron_detect.h"
#include "ckpt/pickle_reader.h"
#include "ckpt/torch_dcp.h"
#include "ckpt/torch_file.h"

namespace trident::megatron {

// One model chunk of one tensor-parallel rank: its parameters by flattened key.
struct Shard {
  int tp_rank = 0, stage = 0, chunk = 0;
  const TorchFile* file = nullptr;
  std::string where;  // "<file>" or "<file> 'model1'" for errors
  std::vector<std::pair<std::string, const pickle::Value*>> params;
};

// One checkpoint's open files and what they say.
struct Checkpoint {
  std::filesystem::path dir;  // the iteration folder
  std::string flavour;        // "Megatron-LM", "Megatron-DeepSpeed" or "Megatron-core torch_dist"
  std::vector<std::unique_ptr<TorchFile>> files;
  const pickle::Value* args = nullptr;  // the first file's; nullptr when saved without (NVIDIA's 345M)
  std::string args_source;              // the file the args (would) come from
  double checkpoint_version = 0;        // absent: 0, as Megatron reads it
  std::optional<int64_t> iteration;
  // The run's model FLOPs so far (Megatron's 'num_floating_point_operations_so_far', for its
  // --log-progress), where the file holds them.
  std::optional<double> flops_so_far;
  int tp = 0, pp = 1, chunks = 1;  // chunks: virtual-pipeline model chunks per stage
  std::vector<Shard> shards;
  // A Megatron-core distributed checkpoint (--ckpt-format torch_dist): the args etc. come from
  // its common.pt, the tensors from here, and `shards` is empty.
  std::unique_ptr<DcpCheckpoint> dist;
};

// An integer of Megatron's saved args, `dflt` when absent or not an int.
inline int64_t int_arg(const pickle::Value& args, const char* name, int64_t dflt) {
  const pickle::Value* v = args.get(name);
  return v && v->kind == pickle::Kind::Int ? v->integer : dflt;
}

// Whether a dict's (Megatron's saved args', a param group's) `name` is saved as True.
inline bool true_arg(const pickle::Value& d, const char* name) {
  const pickle::Value* v = d.get(name);
  return v && v->kind == pickle::Kind::Bool && v->boolean;
}

// Whether two tensors are the same bit for bit (a tied head against the word embedding).
inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The checkpoint `load` names (the --save directory, whose latest pointer or `iteration`
// chooses the folder, or one iteration folder), its files open and unpickled. Throws
// ConfigError naming --load or `iteration_flag`, IoError naming a malformed file.
Checkpoint open_checkpoint(const std::filesystem::path& load, std::optional<int64_t> iteration,
                           const std::string& iteration_flag);

}  // namespace trident::megatron
