// The optimizer state of a Megatron-DeepSpeed checkpoint that DeepSpeed's engine saved with a
// ZeRO optimizer (stage 1 or 2, DeepSpeedZeroOptimizer; or BF16_Optimizer), as the BigScience
// recipe trains, or at ZeRO stage 0 (megatron_deepspeed_stage0.cpp). Internal to the Megatron
// import (megatron_optimizer.h dispatches here; megatron_deepspeed_files.h the shared parts).
//
// DeepSpeed's files in global_stepN/ (deepspeed/runtime/engine.py):
//  * mp_rank_XX_model_states.pt per model-parallel rank XX = stage * tp + tensor-parallel rank
//    (PipelineModule's grid; XX = the tp rank without a pipeline): Megatron's client state
//    (args, iteration) and 'param_shapes', a list per optimizer param group of
//    {parameter name: shape} in the order the group is flattened, the names of the engine's
//    module: "tied_modules.embed.word_embeddings.weight", "<layer index>.input_layernorm.weight"
//    (GPTModelPipe, whose layer files layer_<index>-model_TT-model_states.pt hold the weights), or
//    "language_model.encoder.layers.N..." (GPTModel, its weights in the same file's 'module');
//  * [bf16_]zero_pp_rank_<dp>_mp_rank_XX_optim_states.pt per data-parallel rank dp:
//    {'optimizer_state_dict': {'single_partition_of_fp32_groups': [the rank's fp32 master
//    partition per group], 'base_optimizer_state': the inner Adam's state dict over those flat
//    partitions ({'state': {group: {'exp_avg', 'exp_avg_sq'[, 'step']}}, 'param_groups'}, or
//    the elastic list of per-group states), 'loss_scaler' (fp16: DeepSpeed's DynamicLossScaler
//    object), ...}}.
// Each group is flattened in param_shapes' order, padded at its end to a multiple of 2 x dp and
// split into dp equal partitions; the masters of the last rank may leave the padding out. The
// reader joins each group's partitions over the data-parallel ranks and cuts the parameters out
// in order. A later stage's copy of the tied embedding (tied_modules.* on stage > 0) is left out:
// DeepSpeed all-reduces its word embedding's gradient with the first stage's, so their states are
// equal, and its position embedding is unused there.
// Adam's step count is read as saved; DeepSpeed before 2024 takes one zero-gradient step when it
// builds its optimizer, so its count is one more than the updates, and the import keeps it so
// that the bias correction goes on as DeepSpeed's would.
#pragma once

#include "ckpt/megatron_files.h"
#include "ckpt/megatron_optimizer.h"

namespace trident::megatron {

// The state of every parameter of `c`'s shards (ParamState::joined), the step count, Adam's
// hyperparameters, the learning-rate schedule and the fp16 loss scaler. Throws ConfigError for a
// state trident does not read (consecutive_hysteresis loss scaling, parameters aligned within
// their groups), IoError naming the file for a missing or malformed one.
OptimizerState read_deepspeed_optimizer_state(const Checkpoint& c, DType model_dtype);

}  // namespace trident::megatron
