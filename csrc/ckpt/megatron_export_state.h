// The training state export_megatron_gpt2 writes beside the weights when given one
// (MegatronExportOptions::training): what Megatron-LM's load_checkpoint reads back from each
// mp_rank_* file of a non-distributed optimizer, the reverse of megatron_optimizer.h.
//  * 'optimizer': Float16OptimizerWithFloat16Params.state_dict() for fp16 and bf16 ({'optimizer':
//    INNER, 'fp32_from_fp16_params': [[master per parameter] per group], 'grad_scaler' for fp16
//    when the run had a dynamic loss scale}); FP32Optimizer's, INNER itself, for fp32.
//  * INNER, torch.optim.Optimizer.state_dict(): {'state': {index: {'exp_avg', 'exp_avg_sq',
//    'step'}}, 'param_groups': [weights, then biases and LayerNorms]}. Megatron's two default
//    groups hold the file's parameters in named_parameters() order, 2-D ones (weight decay) and
//    1-D ones (wd_mult 0), in that order (Megatron-LM sorts the default group first); a
//    --decoupled-lr run's word embedding (and a last stage's tied head) has a group of its own
//    (is_decoupled_lr, max_lr and min_lr its rates), the groups then in Megatron-core 0.12 to
//    0.15's order (group_order in the .cpp; that group empty on a stage without the embedding, as
//    those versions give every rank every group); indices count through them in turn. Adam's step
//    count is where the Adam Megatron runs keeps it: in each group for Transformer Engine's and
//    apex's FusedAdam (Megatron's first choices; Transformer Engine's refuses a state key it
//    does not know), in each state as a tensor for torch's Adam (MegatronAdam::kTorch). Each group carries the keys Megatron matches groups
//    by (wd_mult, lr_mult, is_expert_parallel, is_decoupled_lr) and default_config.
//  * 'opt_param_scheduler': OptimizerParamScheduler.state_dict(), from trident's own fields
//    (in samples, as Megatron counts them).
// Megatron's scheduler sets the groups' lr and weight_decay on load; the file's are its start.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/megatron_gpt2.h"
#include "ckpt/megatron_rank_file.h"

namespace trident::megatron {

// Writes the value of 'optimizer' for tensor-parallel rank t's file whose parameters, in
// named_parameters() order, are `params` (canonical names; "wte" again for the tied head of a
// last stage). `dtype` is the model's stored dtype. A DeepSpeed-style loss scaler's state
// (trainer_state.loss_scaler.style "deepspeed_fused": clean steps counted past the window) is
// written as Megatron's scaler would hold it.
void write_optimizer_state(pickle::Writer& w, RankFile& file, const std::vector<std::string>& params,
                           const MegatronTrainingState& state, const ModelConfig& cfg, int tp, int t, DType dtype,
                           MegatronAdam adam);

// The export's checks of the training state, before anything is written: ConfigError for a
// schedule Megatron-LM's scheduler cannot hold (Megatron-DeepSpeed's token-based decay), and
// for --decoupled-lr's rates unless the export is of Megatron-core's model (`mcore`), the one
// whose word embedding and output layer Megatron trains at them.
void check_exportable_state(const nlohmann::json& trainer_state, bool mcore);

// The distributed optimizer's torch_dist format that loads at any data-parallel size (the state
// by parameter, like the model's): Megatron-core's 'fully_reshardable'.
inline constexpr const char* kFullyReshardable = "fully_reshardable";

// Writes the value of 'optimizer' in a torch_dist checkpoint's common.pt (the optimizer's
// sharded state dict without its tensors, which are saved by name: megatron_export_dist.cpp):
// the groups without 'params'; torch's Adam's step as state['common_step'] (the distributed
// optimizer's always in each group); fp16's 'grad_scaler'. The non-distributed optimizer's layout (Float16OptimizerWithFloat16Params'
// {'optimizer': INNER, 'grad_scaler'}, FP32Optimizer's INNER), or `distributed`:
// {'optimizer': INNER, 'grad_scaler', 'param_state_sharding_type': 'fully_reshardable'}.
void write_sharded_optimizer_common(pickle::Writer& w, RankFile& file, const MegatronTrainingState& st, DType dtype,
                                    MegatronAdam adam, bool distributed);

// Writes the value of 'opt_param_scheduler' (trainer_state.opt_param_scheduler's fields;
// check_exportable_state first).
void write_scheduler_state(pickle::Writer& w, const nlohmann::json& trainer_state, bool mcore);

// Megatron's argparse.Namespace 'args' for the model and options: what its load_checkpoint
// compares (check_checkpoint_args) and --use-checkpoint-args takes, the split, the format.
void write_args(pickle::Writer& w, const ModelConfig& cfg, const MegatronExportOptions& o);
// The fields every export's top-level dict starts with: 'args', 'checkpoint_version',
// 'iteration' and, with the training state, 'num_floating_point_operations_so_far'.
void write_common_fields(pickle::Writer& w, const ModelConfig& cfg, const MegatronExportOptions& o);

}  // namespace trident::megatron
