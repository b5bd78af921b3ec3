// The training state of a Megatron-LM checkpoint saved with --ckpt-format torch: each parameter's
// Adam moments and fp32 master weight, Adam's step count, the learning-rate scheduler and the
// loss scaler. Internal to the Megatron import (megatron_gpt2.h,
// MegatronImportOptions::with_optimizer).
//
// Each mp_rank_* file's 'optimizer' is what Megatron's optimizer.state_dict() returns:
//   * Float16OptimizerWithFloat16Params (fp16, bf16): {'optimizer': INNER, 'grad_scaler': {...}
//     (fp16), 'fp32_from_fp16_params': [[master tensor per parameter] per group]};
//   * FP32Optimizer: INNER itself (the masters are the parameters);
//   * DistributedOptimizer (--use-distributed-optimizer): {'optimizer': INNER without 'state' and
//     its groups without 'params', 'grad_scaler'}, the parameters' state in the rank folder's
//     distrib_optim.pt (megatron_distrib_optim.h);
//   * ChainedOptimizer (newer Megatron-core): a list of those, of which one is read;
// INNER is torch.optim.Optimizer.state_dict() of apex's or Transformer Engine's FusedAdam (or
// torch's Adam): {'state': {index: {'exp_avg', 'exp_avg_sq'[, 'step']}}, 'param_groups':
// [{'params': [index, ...][, 'step'], ...}, ...]}, indices counting through the groups in order.
//
// Which parameter an index is: Megatron builds its groups from the model chunks'
// named_parameters() in order (every version: _get_params_for_weight_decay_optimization,
// get_param_groups, Megatron-core's _get_param_groups), the decayed ones (GPT-2: the 2-D
// weights) apart from the others (biases and LayerNorms, 1-D, weight decay 0). The file's model
// state dict lists the parameters in that same order (its '_extra_state' entries are not
// parameters), so a group's i-th index is the i-th parameter of its kind. A group's kind is read
// from its tensors' shapes, and every moment and master must have its parameter's shape; a
// 16-bit master must also round to the stored parameter bit for bit (Megatron copies the masters
// into the model after each step), which catches parameters taken in another order.
//
// A run with --decoupled-lr (Megatron-core's model only) has a third group, of the word embedding
// and the output layer (the tied head's copy on a last stage): Megatron-core 0.12 to 0.15 mark it
// is_decoupled_lr, newer versions give it a learning-rate override instead (default_config
// False, its max_lr the run's args.decoupled_lr: another override, muP's say, is refused);
// either keeps its peak and floor in the group's max_lr and min_lr, which the import takes as
// trident's --decoupled-lr and --decoupled-min-lr. Megatron orders its groups by where
// their first parameter lies (0.12 to 0.15) or sorts them (newer), and a stage without the
// embedding may hold that group empty, so the import goes by each group's kind, not its place.
// Groups of another learning-rate multiplier (scale_lr_cond) or of experts are refused.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/megatron_files.h"
#include "ckpt/megatron_gpt2.h"
#include "core/dtype.h"

namespace trident::megatron {

// A parameter of one rank's model chunk: its key in the chunk's state dict and its tensor.
struct ModelParam {
  const Shard* shard;
  std::string key;
  const pickle::Value* value;
  const TorchTensor* tensor;
};

// One parameter's state in one rank's files; the moments are nullptr before the first step.
struct ParamState {
  const pickle::Value* master = nullptr;  // the parameter itself for an fp32 model
  const pickle::Value* exp_avg = nullptr;
  const pickle::Value* exp_avg_sq = nullptr;
  const TorchFile* file = nullptr;  // the file the state lies in (distrib_optim.pt); nullptr: the model's
  // Or the states themselves (master, exp_avg, exp_avg_sq) in the parameter's shape, where the
  // Values are nullptr: DeepSpeed's flat partitions, joined across files.
  std::shared_ptr<const std::array<HostTensor, 3>> joined;
};

struct OptimizerState {
  int64_t steps = 0;     // Adam's step count (its bias correction): the updates taken
  bool moments = false;  // false before the first step: every moment is zero
  bool steps_recorded = false;  // read_common_optimizer_state: whether `steps` was saved (else 0)
  // (shard, key in Shard::params) -> state, for every parameter of every shard.
  std::map<std::pair<const Shard*, std::string>, ParamState> params;
  // trident's trainer_state fields: Megatron's opt_param_scheduler fields that trident reads
  // (null when the checkpoint predates them), the dynamic loss scaler's state (null without),
  // the first group's Adam betas and epsilon ({"beta1", "beta2", "eps"}; null when not saved).
  nlohmann::json scheduler;
  nlohmann::json loss_scaler;
  nlohmann::json adam;
  // A --decoupled-lr run's rates from its word embedding's group: {"max_lr", "min_lr"}; null without.
  nlohmann::json decoupled_lr;
  // The distributed optimizer's files and the tensor views into their flat buffers that
  // `params` points to.
  std::vector<std::unique_ptr<TorchFile>> files;
  std::vector<pickle::Ref> views;
};

// Throws ConfigError, naming --with-optimizer, for a checkpoint whose optimizer state trident
// does not read: a release folder's (Megatron loads none from it), one saved without args or
// iteration. The import calls it before reading.
void check_optimizer_state_readable(const Checkpoint& c);

// Reads the state of every rank's file of a torch-format Megatron-LM checkpoint (that
// check_optimizer_state_readable accepted) whose model is stored as `model_dtype`, or of a
// Megatron-DeepSpeed one's DeepSpeed files (megatron_deepspeed_optimizer.h). Throws
// ConfigError for a state trident does not read (several optimizers, other parameter groups),
// IoError naming the file for a missing or malformed one.
OptimizerState read_optimizer_state(const Checkpoint& c, DType model_dtype);

// The optimizer's state that is not the parameters' in a torch_dist checkpoint's common.pt: the
// step count, scheduler, loss scaler and Adam hyperparameters (OptimizerState::params stays
// empty), and the distributed optimizer's param_state_sharding_type ("" for the non-distributed
// optimizer) in `sharding_type`: fully_reshardable or fully_sharded_model_space (the formats by
// parameter), or the bucket formats dp_reshardable and dp_zero_gather_scatter, whose common.pt
// holds the scheduler only (the rest: read_object_optimizer_state). Others throw ConfigError
// naming the file.
// `decoupled_lr`: the run's args.decoupled_lr (decoupled_lr_arg), which a newer Megatron-core's
// --decoupled-lr group is recognised by.
OptimizerState read_common_optimizer_state(const TorchFile& common, DType model_dtype, std::string* sharding_type,
                                           std::optional<double> decoupled_lr);

// The distributed optimizer's state that is not the parameters' in torch_dist's bucket formats,
// saved as objects of the DCP files: `optimizer` (the torch optimizer's state dict
// without 'state', its groups without 'params') and, in fp16 runs, `grad_scaler`. Not the
// scheduler (common.pt's).
OptimizerState read_object_optimizer_state(const TorchFile& optimizer, const TorchFile* grad_scaler,
                                           DType model_dtype, std::optional<double> decoupled_lr);

// The run's --decoupled-lr as its saved args hold it (args.decoupled_lr); nullopt for None or
// args that predate it.
std::optional<double> decoupled_lr_arg(const Checkpoint& c);

// Completes an imported run's state whose masters (and moments, after the first step) are read:
// zero moments when there are none, the consumed samples (and Megatron-DeepSpeed's consumed
// tokens) and trident's trainer_state from the checkpoint's args, FLOPs so far and optimizer state.
void finish_training_state(MegatronTrainingState& out, const Checkpoint& c, const OptimizerState& st);

// A number saved as an int, a float or a one-element floating-point tensor of `f` (a step count,
// the loss scale); nullopt for anything else.
std::optional<double> scalar_value(const TorchFile& f, const pickle::Value& v, const std::string& what);

// A step count: an int (apex's FusedAdam, older torch), a float, or a one-element tensor (torch's
// Adam since 1.12); nullopt when `v` is none of those or not a count.
std::optional<int64_t> step_value(const TorchFile& f, const pickle::Value& v, const std::string& what);

// A learning-rate scheduler's state dict `s` (`what` of `f`) in trident's trainer_state fields,
// which are Megatron's OptimizerParamScheduler.state_dict() names (train/scheduler_state.cpp's
// scheduler_fields; num_steps is the position in samples); Megatron-DeepSpeed's AnnealingLR
// (warmup_steps, decay_steps, decay_style; also counted in samples) renamed to them. Megatron-LM's
// older AnnealingLR, counted in iterations, is not read: trident-train then takes the command
// line's schedule at the consumed samples.
nlohmann::json scheduler_state(const TorchFile& f, const pickle::Value& s, const std::string& what);

// Throws ConfigError starting with `where` for a param group that is not one of Megatron's
// default two (a learning-rate multiplier, --decoupled-lr, expert parallelism): Megatron-DeepSpeed's.
void check_default_group(const pickle::Value& group, const std::string& where);

// Whether a param group is one of Megatron's default two or a --decoupled-lr run's group of the
// word embedding and output layer: is_decoupled_lr, or (newer Megatron-core) default_config
// False with max_lr the run's `decoupled_lr` (args.decoupled_lr). ConfigError starting with
// `where` for any other: a learning-rate multiplier, expert parallelism, another override.
enum class GroupRole { kDefault, kDecoupled };
GroupRole group_role(const pickle::Value& group, const std::string& where, std::optional<double> decoupled_lr);

// A param group's Adam betas and epsilon ({"beta1", "beta2", "eps"}; null when not saved).
nlohmann::json adam_hyperparameters(const pickle::Value& group);

// The run's data-parallel size from its args (data_parallel_size, else world_size over the model
// parallel sizes); 0 when they do not say.
int64_t data_parallel_size(const Checkpoint& c);

// Whether the stored parameter `param` is what Megatron copies from fp32 master `master` into a
// model of `dtype` (equal in fp32, rounded to nearest-even in 16 bits). The first element that
// is not, or -1.
int64_t master_mismatch(const std::vector<float>& master, const std::vector<float>& param, DType dtype);

}  // namespace trident::megatron
