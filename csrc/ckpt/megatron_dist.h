// The GPT weights of a Megatron-core distributed checkpoint (--ckpt-format torch_dist, the
// default of Megatron-core's training since 2024), which megatron_files.h opens. Internal to
// import_megatron_gpt2 (megatron_gpt2.h), whose contract it follows.
//
// Keys (Megatron-core's GPTModel.sharded_state_dict, local or Transformer Engine layer spec):
// embedding.word_embeddings.weight (padded vocabulary), embedding.position_embeddings.weight,
// decoder.final_layernorm.*, and the layers either stacked, "decoder.layers.<module>.*" with a
// first axis of num_layers whose index is the layer's global number (a homogeneous model), or
// "decoder.layers.N.<module>.*" (heterogeneous ones). Every tensor is whole: the checkpoint
// records where each rank's piece lies, so the training layout does not matter. QKV rows are
// [heads][q,k,v][head_dim], as tensor parallelism at 1 would hold them. A tied head is not
// saved; an output_layer.weight must equal the word embedding. Keys outside embedding.,
// decoder. and output_layer. (optimizer state, RNG state) and the pickled objects
// (Transformer Engine's _extra_state) are skipped, except with
// MegatronImportOptions::with_optimizer: then the optimizer's state by name,
// 'optimizer.state.{exp_avg, exp_avg_sq, fp32_param | param}.<key>', whole or (the distributed
// optimizer's fully_sharded_model_space) flattened and reformulated (torch_dcp.h), with the step
// count, scheduler and loss scaler of common.pt (megatron_optimizer.h); or the distributed
// optimizer's buffers in its bucket formats, dp_reshardable and dp_zero_gather_scatter
// (megatron_dist_buckets.h).
#pragma once

#include "ckpt/megatron_files.h"
#include "ckpt/megatron_gpt2.h"

namespace trident::megatron {

MegatronGpt2Model import_dist_gpt2(const Checkpoint& c, const MegatronImportOptions& options);

}  // namespace trident::megatron
