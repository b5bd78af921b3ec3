// The distributed optimizer's parameter state in a torch_dist checkpoint's bucket formats, which
// keep Megatron's in-memory buffers rather than the state by parameter. Internal to
// megatron_dist.cpp.
//
// dp_reshardable (Megatron-core's default for --use-distributed-optimizer unless
// --dist-ckpt-optim-fully-reshardable): each model-parallel rank (its index g = stage * tp +
// tensor-parallel rank, the rank in Megatron's model-parallel group) saves, for model chunk v
// (buffer v: GPT-2 has one dtype), bucket b and state K (param, the fp32 master; exp_avg;
// exp_avg_sq), a flat tensor
//   optimizer.distributed.dp_group_idx_<g>.gbuf_idx_<v>.dtype_<(param dtype, grad dtype)>.bucket_idx_<b>.<K>
// of the bucket's elements without its end padding, pieced by the data-parallel ranks (the gaps
// between parameters saved as torch.empty).
// dp_zero_gather_scatter (before it, without --ckpt-fully-parallel-save): the rank's buffers
// gathered on data-parallel rank 0 into one object, optimizer.distributed.dp_group_idx_<g>.param_state,
// holding what distrib_optim.pt holds (megatron_distrib_optim.h).
// Both save the optimizer state dict's other entries as objects
// (optimizer.distributed.dp_group_idx_<g>.{optimizer, grad_scaler, ...}).
//
// Nothing records which parameter lies where: a bucket holds its chunk's parameters in reverse
// named_parameters() order, each at a multiple of 64 elements from the bucket's start, a shared
// embedding in a bucket of its own. The reader places them as megatron_distrib_optim.h does,
// by content, in Megatron-core's GPTModel parameter order (the local or the Transformer Engine
// layer spec: an attention's linear_proj before its linear_qkv, TE's fused norms before their
// linear layer's weight; the spec is args.transformer_impl's, or without it guessed from the
// norms' keys, which the local spec also gives Transformer Engine's names).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckpt/megatron_files.h"
#include "ckpt/megatron_optimizer.h"
#include "model/config.h"

namespace trident::megatron {

// Tensors by canonical name in Megatron's layout at tensor parallelism 1: the padded vocabulary,
// QKV rows [heads][q,k,v][head_dim].
using MegatronTensors = std::map<std::string, std::vector<float>>;

struct BucketOptimizerState {
  MegatronTensors master, exp_avg, exp_avg_sq;  // every canonical parameter (not the tied head)
  OptimizerState common;                        // steps, loss scaler, Adam's hyperparameters
};

// Reads the state of `c` (a torch_dist checkpoint whose common.pt names `sharding`,
// dp_reshardable or dp_zero_gather_scatter), whose weights are `weights` (every canonical
// parameter). Throws ConfigError for a layout trident does not read (an uneven pipeline split,
// several optimizers), IoError naming the index or object for a missing or malformed state.
BucketOptimizerState read_bucket_optimizer_state(const Checkpoint& c, const ModelConfig& cfg,
                                                 const MegatronTensors& weights, const std::string& sharding);

}  // namespace trident::megatron
