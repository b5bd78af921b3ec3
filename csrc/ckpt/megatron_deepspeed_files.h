// What the Megatron-DeepSpeed optimizer import (megatron_deepspeed_optimizer.h) shares between
// ZeRO's partitioned files (megatron_deepspeed_optimizer.cpp) and ZeRO stage 0's model states
// (megatron_deepspeed_stage0.cpp): global_stepN's files, where each parameter's weight is, the
// step count, schedule and groups, and each parameter's state once read. Internal.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/megatron_files.h"
#include "ckpt/megatron_optimizer.h"

namespace trident::megatron::deepspeed {

// v[key], or IoError naming the file and `what`.
const pickle::Value& field(const TorchFile& f, const pickle::Value& v, const char* key, const std::string& what);
// A 1-D tensor, or IoError.
const TorchTensor& flat_tensor(const TorchFile& f, const pickle::Value& v, const std::string& what);

// One model-parallel rank's files: its model states and its ZeRO files by data-parallel rank.
struct RankFiles {
  std::unique_ptr<TorchFile> model_states;
  std::vector<std::unique_ptr<TorchFile>> zero;
};

class Import {
 public:
  // Finds global_stepN's files (IoError when they do not make a tp x pp grid) and where each
  // weight of `c`'s shards is.
  Import(const Checkpoint& c, DType dtype, OptimizerState& out);

  const Checkpoint& c;
  const DType dtype;
  OptimizerState& out;
  std::vector<RankFiles> ranks;  // by model-parallel rank, stage * tp + tensor-parallel rank
  bool stage0 = false;           // no ZeRO files: the optimizer is in the model states
  bool pipeline = false;         // GPTModelPipe's layer files hold the weights
  std::map<std::pair<int, int>, const Shard*> layer_shard;  // (tp rank, layer index) -> its layer file
  std::map<int, const Shard*> embedding_shard, final_norm_shard, module_shard;  // by tp rank

  // The parameter `name` (param_shapes' names: GPTModelPipe's "tied_modules.embed.*" and
  // "<layer index>.*", GPTModel's own) on (tp rank t, stage s): its shard and key; nullopt for a
  // later stage's copy of the tied embedding. IoError starting with `where` when it has none.
  std::optional<std::pair<const Shard*, std::string>> resolve(const std::string& name, int t, int s,
                                                              const std::string& where) const;
  // Tp rank t's transformer-layer files in index order.
  std::vector<const Shard*> layer_shards(int t) const;
  // Group g's Adam state in an optimizer state dict `base`: torch's {'state': {g: ...}}, or the
  // elastic checkpoint's list of per-group states.
  const pickle::Value& group_state(const TorchFile& f, const pickle::Value& base, size_t g) const;
  // Adam's step count of group g: the group's (apex's FusedAdam), its state's (DeepSpeed's
  // FusedAdam, torch's Adam), or the elastic ZeRO checkpoint's `elastic_step`
  // (base_optimizer_state_step); all must agree.
  void note_step(const TorchFile& f, const pickle::Value& base, const pickle::Value& state, size_t g,
                 const pickle::Value* elastic_step = nullptr);
  // The client's learning-rate scheduler and the param groups (Megatron's default two, Adam's
  // hyperparameters).
  void read_schedule_and_groups(const TorchFile& f, const pickle::Value* groups);
  // Keeps a parameter's state (master, exp_avg, exp_avg_sq in its shape); the master must equal
  // (fp32) or round to (16-bit) the stored weight `key` of `shard`, else the groups were cut at
  // the wrong places. `name` and `what` say where the state came from. `master_is_weight`: the
  // master was read from that weight (fp32 without masters of its own): nothing to compare.
  void take(const Shard& shard, const std::string& key, std::array<HostTensor, 3> state, const std::string& name,
            const std::string& what, bool master_is_weight = false);

 private:
  void find_files();
  void index_shards();

  std::optional<int64_t> steps_;
};

// ZeRO stage 1 or 2: model-parallel rank mp's partitions (megatron_deepspeed_optimizer.cpp).
void read_zero_rank(Import& im, int mp);

// ZeRO stage 0: model-parallel rank mp's model states (megatron_deepspeed_stage0.cpp); with a
// pipeline, next_layer[t] is the position of tp rank t's next stage's first layer file.
void read_stage0_rank(Import& im, int mp, std::map<int, size_t>& next_layer);

}  // namespace trident::megatron::deepspeed
