// --use-checkpoint-args, as Megatron-LM's load_args_from_checkpoint: the model-shape flags
// a run did not give (on the command line or in its --config file) take the values of the
// checkpoint it loads: --num-layers, --hidden-size, --num-attention-heads, --seq-length,
// --max-position-embeddings, --make-vocab-size-divisible-by (Megatron takes the padded
// vocabulary size) and --vocab-size (which a tokenizer's vocabulary still replaces, as in
// Megatron). A flag given keeps its value, as Megatron's (those default to None there), so a
// checkpoint of another shape is still the usual error at load. The dropout probabilities
// always come from the checkpoint: Megatron forces hidden_dropout and attention_dropout.
// The GELU too, unless --no-bias-gelu-fusion or --openai-gelu was given (Megatron does not take
// bias_gelu_fusion, and would train a checkpoint of the erf GELU with its fused tanh one).
#pragma once

#include <string>

#include "model/config.h"
#include "train/options.h"

namespace trident {

// Applies the rule above to `o` (nothing to take from a null `checkpoint`: --load holds
// none) and checks the resulting shape (validate_model_options, which parse_train_options
// leaves to this with --use-checkpoint-args). Returns what it took for the log,
// "--num-layers 4, --hidden-size 64, ...".
std::string take_checkpoint_args(TrainOptions& o, const ModelConfig* checkpoint);

// --use-mp-args-from-checkpoint-args (with --use-checkpoint-args), as Megatron's
// load_args_from_checkpoint: the tensor and pipeline-parallel sizes and the model chunks per
// stage of the checkpoint the run loads (--load's, else --pretrained-checkpoint's) replace the
// flags', given or not (Megatron forces them), except a --num-layers-per-virtual-pipeline-stage
// given, which sets the chunks itself, as in Megatron.
// Called before the process grid is made; take_checkpoint_args checks the result with the
// model's shape. Returns the log line's text ("--tensor-model-parallel-size 2, ... from
// --load DIR"), "" without the flags.
// `ckpt_step`: the checkpoint to read, as --ckpt-step picks it (-1: --load's latest).
std::string take_parallel_args(TrainOptions& o, int64_t ckpt_step);
inline std::string take_parallel_args(TrainOptions& o) { return take_parallel_args(o, o.ckpt_step); }

// Resolves the checkpoint --load names (checkpoint_to_load: a --load naming no usable
// checkpoint is a ConfigError) and, with --use-checkpoint-args, takes its arguments as
// above. Returns the log line's text for --use-checkpoint-args ("--num-layers 4, ... from
// --load DIR", or that --load holds no checkpoint), else "".
std::string resolve_load(TrainOptions& o);

}  // namespace trident
