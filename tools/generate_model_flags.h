// The model and layout flags Megatron's generation scripts pass (they build the model
// before loading it), accepted by trident-generate and trident-text-generation-server, which
// read the model from the checkpoint's metadata.json instead: a shape flag that says what the
// checkpoint holds is accepted, one that does not is an error naming the flag and both
// values (ckpt/sharded_checkpoint.h's check_model_shape_flags, over the table of shape
// fields that check_same_model_shape reads too); --fp16/--bf16 must be the checkpoint's
// precision (generation runs in it). The layout flags say how the tool runs, whatever the
// checkpoint's layout: one process per tensor-parallel rank (--tensor-model-parallel-size),
// no pipeline parallelism.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/sharded_checkpoint.h"
#include "model/config.h"
#include "tools/cxxopts_flags.h"

namespace trident {

// `seq_length_default`: what the longest sample is without --seq-length.
inline void add_model_flags(cxxopts::Options& o, const std::string& seq_length_default) {
  o.add_options("model (Megatron's; checked against the checkpoint)")
      ("num-layers", "transformer layers", cxxopts::value<std::string>())
      ("hidden-size", "hidden size", cxxopts::value<std::string>())
      ("num-attention-heads", "attention heads", cxxopts::value<std::string>())
      ("seq-length", "the longest sample, prompt and generated tokens (" + seq_length_default +
                     "; any value up to its learned positions)", cxxopts::value<std::string>())
      ("max-position-embeddings", "learned positions", cxxopts::value<std::string>())
      ("make-vocab-size-divisible-by", "vocabulary padding", cxxopts::value<std::string>())
      ("fp16", "the checkpoint holds fp16 weights")
      ("bf16", "the checkpoint holds bf16 weights")
      ("tokenizer-type", "GPT2BPETokenizer (the default) or NullTokenizer (texts of token ids, with --vocab-size)",
       cxxopts::value<std::string>())
      ("vocab-size", "NullTokenizer: ids 0 .. V - 1, V the end of document (the checkpoint's vocabulary V + 1)",
       cxxopts::value<std::string>())
      ("tensor-model-parallel-size", "tensor-parallel ranks: the processes mpirun starts (1)",
       cxxopts::value<std::string>())
      ("pipeline-model-parallel-size", "1 (no pipeline parallelism in generation)", cxxopts::value<std::string>());
}

// What the model flags say, read before the checkpoint is (so a bad value is named first).
struct ModelFlags {
  std::vector<std::pair<std::string, int64_t>> shape;  // flag (no dashes), value
  // --seq-length: the longest sample (prompt and generated tokens), as Megatron-DeepSpeed's
  // generation reads it; any value up to the checkpoint's learned positions (default: the
  // tool's, add_model_flags' seq_length_default).
  std::optional<int64_t> seq_length;
  const char* dtype = nullptr;                         // "fp16", "bf16" or none
  int tp = 1;                                          // --tensor-model-parallel-size
  std::string tokenizer_type = "GPT2BPETokenizer";     // or NullTokenizer
  int64_t null_vocab_size = 0;                         // NullTokenizer's --vocab-size
};

// Reads the shape, layout and tokenizer flags and checks the rest: pipeline parallelism only 1,
// the tokenizer GPT-2's or NullTokenizer (`tool` names the command in the errors).
inline ModelFlags read_model_flags(const cxxopts::ParseResult& r, const std::string& tool) {
  if (r.count("pipeline-model-parallel-size") && integer_flag(r, "pipeline-model-parallel-size", 1, INT32_MAX) != 1)
    throw ConfigError("--pipeline-model-parallel-size " + r["pipeline-model-parallel-size"].as<std::string>() +
                      ": " + tool + " splits a model by tensor parallelism only (it reads a checkpoint of "
                      "any layout); give 1 or leave the flag out");
  if (r.count("fp16") && r.count("bf16")) throw ConfigError("--fp16 and --bf16 are mutually exclusive");
  ModelFlags f;
  if (r.count("tokenizer-type")) f.tokenizer_type = r["tokenizer-type"].as<std::string>();
  if (f.tokenizer_type != "GPT2BPETokenizer" && f.tokenizer_type != "NullTokenizer")
    throw ConfigError("--tokenizer-type " + f.tokenizer_type + ": " + tool +
                      " reads GPT2BPETokenizer's --vocab-file and --merge-file, or NullTokenizer's --vocab-size");
  if (f.tokenizer_type == "NullTokenizer") {
    if (!r.count("vocab-size"))
      throw ConfigError("--vocab-size is required for NullTokenizer (its ids are 0 to V - 1, V the end of document)");
    f.null_vocab_size = integer_flag(r, "vocab-size", 1, INT32_MAX - 1);
  } else if (r.count("vocab-size")) {
    throw ConfigError("--vocab-size is NullTokenizer's: GPT2BPETokenizer's vocabulary is its --vocab-file's");
  }
  if (r.count("tensor-model-parallel-size"))
    f.tp = static_cast<int>(integer_flag(r, "tensor-model-parallel-size", 1, INT32_MAX));
  // The shape flags are the checkpoint reader's fields (model_shape_fields); those given here
  // are the ones add_model_flags declares but --vocab-size, NullTokenizer's V (the tokenizer's
  // vocabulary is checked against the checkpoint's by itself).
  for (const ModelShapeField& field : model_shape_fields())
    if (r.count(field.flag) && std::string(field.flag) != "seq-length" && std::string(field.flag) != "vocab-size")
      f.shape.emplace_back(field.flag, integer_flag(r, field.flag, 1, INT32_MAX));
  if (r.count("seq-length")) f.seq_length = integer_flag(r, "seq-length", 1, INT32_MAX);
  for (const char* flag : {"fp16", "bf16"})
    if (r.count(flag)) f.dtype = flag;
  return f;
}

// Each flag given against the checkpoint's model (`where`: its metadata.json); --seq-length
// becomes the model's sequence length.
inline void check_model_flags(const ModelFlags& f, ModelConfig& m, const std::string& where) {
  check_model_shape_flags(f.shape, m, where);
  if (f.seq_length && *f.seq_length > m.max_position_embeddings)
    throw ConfigError("--seq-length " + std::to_string(*f.seq_length) + ": the checkpoint's model has " +
                      std::to_string(m.max_position_embeddings) + " learned positions (" + where +
                      "): a sample of prompt and generated tokens must fit in them");
  if (f.seq_length) m.seq_length = static_cast<int>(*f.seq_length);
  if (f.dtype && std::string(f.dtype) != dtype_name(m.dtype))
    throw ConfigError("--" + std::string(f.dtype) + " differs from the checkpoint's " + dtype_name(m.dtype) +
                      " weights (" + where + "); generation runs in the checkpoint's precision");
}

}  // namespace trident
