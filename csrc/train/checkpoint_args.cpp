#include "train/checkpoint_args.h"

#include <filesystem>
#include <optional>
#include <sstream>

#include "ckpt/metadata.h"
#include "core/error.h"
#include "train/checkpoint_to_load.h"

namespace trident {

std::string resolve_load(TrainOptions& o) {
  std::optional<CheckpointMetadata> meta;
  try {
    const std::optional<std::filesystem::path> dir = checkpoint_to_load(o);
    if (dir && o.use_checkpoint_args) meta = read_metadata((*dir / kMetadataFileName).string());
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  if (!o.use_checkpoint_args) return "";
  const std::string taken = take_checkpoint_args(o, meta ? &meta->model : nullptr);
  return meta ? taken + " from --load " + o.load : "no checkpoint to take the model shape from in --load " + o.load;
}

std::string take_parallel_args(TrainOptions& o, int64_t ckpt_step) {
  if (!o.use_checkpoint_args || !o.use_mp_args_from_checkpoint_args) return "";
  // Where the run will load from, as far as the grid's absence allows: --load's latest
  // persistent checkpoint (a local one is of the same job's layout), else
  // --pretrained-checkpoint's (resolve_pretrained_checkpoint's rule). A missing checkpoint is
  // reported later, by the checks that know the local and pretrained ones.
  TrainOptions which = load_probe(o);
  std::optional<CheckpointMetadata> meta;
  std::string from = "--load " + o.load;
  try {
    const bool in_load = !o.load.empty() && checkpoint_to_load(which).has_value();
    if (!in_load && !o.pretrained_checkpoint.empty()) {
      which.load = o.pretrained_checkpoint;
      from = "--pretrained-checkpoint " + o.pretrained_checkpoint;
    }
    which.ckpt_step = ckpt_step;
    if (in_load || !o.pretrained_checkpoint.empty())
      if (const std::optional<std::filesystem::path> dir = checkpoint_to_load(which))
        meta = read_metadata((*dir / kMetadataFileName).string());
  } catch (const IoError& e) {
    throw ConfigError(e.what());
  }
  if (!meta) return "nothing (no checkpoint in " + from + ")";
  const ParallelLayout& l = meta->layout;
  o.tensor_model_parallel_size = l.tp;
  o.pipeline_model_parallel_size = l.pp;
  std::string taken = "--tensor-model-parallel-size " + std::to_string(l.tp) + ", --pipeline-model-parallel-size " +
                      std::to_string(l.pp);
  // Megatron forces the chunk count, but keeps a --num-layers-per-virtual-pipeline-stage given
  // (which then sets the count): the flag given wins here too.
  if (!o.given_flags.count("num-layers-per-virtual-pipeline-stage")) {
    o.num_layers_per_virtual_pipeline_stage = 0;
    o.num_virtual_stages_per_pipeline_rank = l.virtual_pipeline_chunks > 1 ? l.virtual_pipeline_chunks : 0;
    o.given_flags.erase("num-virtual-stages-per-pipeline-rank");
    if (l.virtual_pipeline_chunks > 1)
      taken += ", --num-virtual-stages-per-pipeline-rank " + std::to_string(l.virtual_pipeline_chunks);
  }
  return taken + " from " + from;
}

std::string take_checkpoint_args(TrainOptions& o, const ModelConfig* checkpoint) {
  ModelConfig& m = o.model;
  std::ostringstream taken;
  auto take = [&](const char* flag, auto& value, auto saved, bool forced) {
    if (!forced && o.given_flags.count(flag)) return;
    value = saved;
    taken << (taken.tellp() > 0 ? ", " : "") << "--" << flag << " " << saved;
  };
  if (checkpoint) {
    const ModelConfig& c = *checkpoint;
    take("num-layers", m.num_layers, c.num_layers, false);
    take("hidden-size", m.hidden_size, c.hidden_size, false);
    take("num-attention-heads", m.num_attention_heads, c.num_attention_heads, false);
    take("seq-length", m.seq_length, c.seq_length, false);
    take("max-position-embeddings", m.max_position_embeddings, c.max_position_embeddings, false);
    take("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by, c.make_vocab_size_divisible_by, false);
    take("vocab-size", m.vocab_size, c.vocab_size, false);
    take("hidden-dropout", m.hidden_dropout, c.hidden_dropout, true);
    take("attention-dropout", m.attention_dropout, c.attention_dropout, true);
    // The GELU, unless a flag that chooses it was given (Megatron's args hold bias_gelu_fusion).
    if (c.gelu != m.gelu && !o.given_flags.count("no-bias-gelu-fusion") && !o.given_flags.count("openai-gelu")) {
      m.gelu = c.gelu;
      taken << (taken.tellp() > 0 ? ", " : "") << "the " << gelu_name(c.gelu) << " GELU";
    }
  }
  try {
    validate_model_options(o);
  } catch (const ConfigError& e) {
    if (taken.tellp() == 0) throw;
    throw ConfigError(std::string(e.what()) + " (--use-checkpoint-args took " + taken.str() + ")");
  }
  return taken.tellp() > 0 ? taken.str() : "nothing (every model flag was given)";
}

}  // namespace trident
