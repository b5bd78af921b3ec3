// Canonical GPT-2 parameters: one name, full (unsharded) shape, layout and shard rule each
// (ARCHITECTURE.md, invariant 1). Layout follows Megatron's Linear: weight [out, in], so
// Hugging Face's Conv1D weights ([in, out]) map onto ours by a transpose:
//   wte [Vpad, C]                 transformer.wte.weight (rows >= vocab_size are padding, 0)
//   wpe [P, C]                    transformer.wpe.weight
//   h.{i}.ln_1.{weight,bias} [C]
//   h.{i}.attn.qkv.weight [3C, C] c_attn.weight^T, rows: Q (heads in order), K, V
//   h.{i}.attn.qkv.bias [3C]
//   h.{i}.attn.proj.weight [C, C] c_proj.weight^T; .bias [C]
//   h.{i}.ln_2.{weight,bias} [C]
//   h.{i}.mlp.fc.weight [4C, C]   c_fc.weight^T; .bias [4C]
//   h.{i}.mlp.proj.weight [C, 4C] mlp.c_proj.weight^T; .bias [C]
//   ln_f.{weight,bias} [C]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace trident {

enum class ShardRule {
  Replicated,     // every TP rank holds the whole tensor (LayerNorms, row-parallel biases, wpe)
  SplitRows,      // dim 0 split in tp contiguous blocks (column-parallel weight and bias, vocab)
  SplitCols,      // dim 1 split in tp contiguous blocks (row-parallel weight)
  SplitQkvHeads,  // dim 0 is [3][C]: each of Q, K, V split by heads
};

enum class InitKind { Normal, Zeros, Ones };

struct ParamSpec {
  std::string name;
  Shape shape;  // canonical, unsharded
  ShardRule shard = ShardRule::Replicated;
  InitKind init = InitKind::Zeros;
  float std = 0.0f;         // for InitKind::Normal
  int64_t init_rows = -1;   // rows >= init_rows are zero (vocab padding); -1: all rows
  bool weight_decay = false;
  int layer = -1;           // transformer layer, or -1 for embeddings and the final LayerNorm
};

// All canonical parameters of the model padded for `tp`, in a fixed order.
std::vector<ParamSpec> gpt2_param_specs(const ModelConfig& cfg, int tp);

// Whether a pipeline stage running transformer layers [layer_begin, layer_end) holds `spec`:
// its layers' parameters, and the first stage also wte and wpe, the last wte (tied to the LM
// head) and ln_f.
bool stage_holds(const ParamSpec& spec, int layer_begin, int layer_end, bool first_stage, bool last_stage);

// Shape of TP rank `tp_rank`'s slice.
Shape local_shape(const ParamSpec& spec, int tp);
// Canonical flat index of element `local_index` of TP rank `tp_rank`'s slice.
int64_t canonical_index(const ParamSpec& spec, int tp, int tp_rank, int64_t local_index);
// How many local elements from `local_index` on map to consecutive canonical indices (the
// same for every TP rank), so slices can be moved with one copy per run.
int64_t canonical_run(const ParamSpec& spec, int tp, int64_t local_index);

}  // namespace trident
