// export_megatron_gpt2 (megatron_gpt2.h): canonical tensors -> a Megatron-LM checkpoint of the
// legacy GPT model or Megatron-core's, one torch.save file per tensor-parallel rank and stage: a
// release, or with the training state an iteration Megatron-LM resumes from.
#include <cctype>

#include "ckpt/atomic_file.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/megatron_export_state.h"
#include "ckpt/megatron_gpt2.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/megatron_rank_file.h"
#include "ckpt/metadata.h"
#include "ckpt/pickle_writer.h"
#include "ckpt/torch_file.h"
#include "core/error.h"
#include "model/param_spec.h"

namespace trident {

namespace {

namespace fs = std::filesystem;

using megatron::RankFile;


}  // namespace

MegatronExportOptions check_megatron_export(const ModelConfig& cfg, const MegatronExportOptions& options) {
  MegatronExportOptions o = options;
  (void)megatron::torch_storage_type(o.dtype);  // validates it
  try {
    cfg.validate(o.tp);
  } catch (const ConfigError& e) {
    throw ConfigError("--target-tp " + std::to_string(o.tp) + ": " + e.what());
  }
  if (o.torch_dist && !o.mcore)
    throw ConfigError("--ckpt-format torch_dist: Megatron-core's distributed checkpoint holds Megatron-core's model; "
                      "give --megatron-model mcore");
  if (o.distributed_optimizer && !o.torch_dist)
    throw ConfigError("--use-distributed-optimizer: applies to --ckpt-format torch_dist (the torch format's "
                      "distributed optimizer state, distrib_optim.pt, is not written)");
  // Megatron groups parameters whose name holds "embedding" with the biases when the flag is
  // set (default_skip_embedding_weight_decay): another group order and membership than the
  // two groups the export writes.
  if (o.training && cfg.embedding_init_method_std > 0)
    throw ConfigError("--with-optimizer: the run's embeddings take no weight decay (--embedding-init-method-std), "
                      "which Megatron's parameter groups hold in another order than trident writes them; export "
                      "without --with-optimizer");
  if (o.uneven.any() && !o.mcore)
    throw ConfigError("Megatron's uneven pipeline stages (--decoder-first/last-pipeline-num-layers, "
                      "--account-for-embedding/loss-in-pipeline-split, --pipeline-model-parallel-layout) are "
                      "Megatron-core's: Megatron-LM's legacy model splits its layers evenly; give --megatron-model mcore");
  const PipelineSplit split{cfg.num_layers, o.pp, o.chunks, o.uneven};
  std::string why = o.pp < 1 || o.chunks < 1 ? "the stages and chunks must be positive" : pipeline_split_error(split);
  // Without the uneven flags Megatron splits evenly (trident's own rule for layers the stages
  // do not divide is not Megatron's).
  if (why.empty() && !o.uneven.any() && cfg.num_layers % (o.pp * o.chunks) != 0)
    why = "Megatron's pipeline splits the " + std::to_string(cfg.num_layers) + " layers evenly" +
          (o.chunks > 1 ? " over stages x " + std::to_string(o.chunks) + " model chunks" : std::string()) +
          "; it must divide them, or give Megatron's uneven-stage flags";
  if (!why.empty()) throw ConfigError("--target-pp " + std::to_string(o.pp) + ": " + why);
  if (o.tokenizer_type.empty()) {
    if (cfg.vocab_size != kGpt2VocabSize)
      throw ConfigError("--tokenizer-type: required: Megatron checks args.tokenizer_type on load, and a vocabulary of " +
                        std::to_string(cfg.vocab_size) + " tokens is not GPT-2's (GPT2BPETokenizer)");
    o.tokenizer_type = "GPT2BPETokenizer";
  }
  // Megatron-LM's --tokenizer-type choices (some releases' too), and Megatron-DeepSpeed's and
  // BigScience's other names. Megatron compares args.tokenizer_type with its run's on load,
  // and builds GPT-2's vocabulary for GPT2BPETokenizer.
  static const char* const kTokenizers[] = {
      "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer",
      "GPTSentencePieceTokenizer", "HuggingFaceTokenizer", "HFTokenizer", "PretrainedFromHF", "Llama2Tokenizer",
      "Llama3Tokenizer", "DeepSeekV2Tokenizer", "TikTokenizer", "MultimodalTokenizer", "NullTokenizer",
      "NullMultimodalTokenizer", "SFTTokenizer"};
  if (std::find(std::begin(kTokenizers), std::end(kTokenizers), o.tokenizer_type) == std::end(kTokenizers)) {
    std::string names;
    for (const char* t : kTokenizers) names += (names.empty() ? "" : ", ") + std::string(t);
    throw ConfigError("--tokenizer-type: '" + o.tokenizer_type + "' is not one of Megatron's tokenizer types (" +
                      names + ")");
  }
  if (o.tokenizer_type == "GPT2BPETokenizer" && cfg.vocab_size != kGpt2VocabSize)
    throw ConfigError("--tokenizer-type GPT2BPETokenizer: Megatron builds GPT-2's " + std::to_string(kGpt2VocabSize) +
                      " tokens for it, and this model's vocabulary is " + std::to_string(cfg.vocab_size) +
                      " tokens: name the tokenizer the model was trained with (NullTokenizer for token ids)");
  return o;
}

void export_megatron_gpt2(const fs::path& dir, const ModelConfig& cfg, const TensorMap& canonical,
                          const MegatronExportOptions& options) {
  const MegatronExportOptions o = check_megatron_export(cfg, options);
  const int tp = o.tp, pp = o.pp;
  const DType dtype = o.dtype;
  const int64_t C = cfg.hidden_size, padded = cfg.padded_vocab_size(tp);
  const auto full = [&](const std::string& name) -> const HostTensor& {
    auto it = canonical.find(name);
    if (it == canonical.end()) throw InternalError("Megatron export: no tensor " + name);
    return it->second;
  };
  const PipelineSplit split{cfg.num_layers, pp, o.chunks, o.uneven};
  const std::vector<ParamSpec> specs = gpt2_param_specs(cfg, 1);
  // A release, or with the training state the iteration Megatron resumes from.
  const fs::path folder = o.training ? iteration_dir(dir, o.iteration) : dir / "release";
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw_write_failure(folder.string() + ": cannot create: " + ec.message(), ec.value());
  if (o.torch_dist) {
    export_megatron_dist_gpt2(folder, cfg, canonical, o);
    fsync_dir(folder.string());
    write_file_atomic(latest_file(dir).string(), o.training ? std::to_string(o.iteration) : "release");
    return;
  }
  const HostTensor& wte = full("wte");
  const std::vector<float> wte_padded = pad_rows(wte.data.data(), wte.shape[0], C, padded);
  for (int p = 0; p < pp; ++p) {
    const std::vector<LayerRange> chunk_layers = pipeline_chunk_layers(split, p);
    for (int t = 0; t < tp; ++t) {
      pickle::Writer w;
      RankFile file;
      // The parameters in the order of Megatron's named_parameters() over the model chunks,
      // which its optimizer's parameter groups follow.
      std::vector<std::string> written;
      const auto param = [&](const std::string& key, const std::string& name) {
        const HostTensor& h = full(name);
        const int64_t rows = h.shape[0], cols = h.shape.size() > 1 ? h.shape[1] : 1;
        w.str(key);
        file.tensor(w, megatron::shard_of(name, h.data, rows, cols, t, tp, cfg), megatron::shard_shape(name, h.shape, tp),
                    dtype);
        written.push_back(name);
      };
      const auto word_embeddings = [&](const std::string& key) {
        w.str(key);
        file.tensor(w, megatron::shard_of("wte", wte_padded, padded, C, t, tp, cfg), {padded / tp, C}, dtype);
        written.push_back("wte");
      };
      w.begin_dict();
      megatron::write_common_fields(w, cfg, o);
      for (int v = 0; v < o.chunks; ++v) {
        // The embedding is the first chunk's of the first stage, the final norm and the LM head
        // (a copy of the tied embedding where that is another chunk) the last one's of the last.
        const bool first = p == 0 && v == 0, last = p == pp - 1 && v == o.chunks - 1;
        const LayerRange layers = chunk_layers[v];
        // The chunk's layer l (both models number a chunk's layers from 0): canonical prefix.
        const auto layer = [&](int l) { return "h." + std::to_string(layers.begin + l) + "."; };
        w.str(o.chunks == 1 ? std::string("model") : "model" + std::to_string(v));
        if (o.mcore) {
          // GPTModel.state_dict()'s flat keys, in the order its modules are built.
          w.begin_ordered_dict();
          if (first) {
            word_embeddings("embedding.word_embeddings.weight");
            param("embedding.position_embeddings.weight", "wpe");
          }
          for (int l = 0; l < layers.size(); ++l)
            for (const megatron::CoreLocalModule& m : megatron::core_local_modules()) {
              const std::string module = "decoder.layers." + std::to_string(l) + "." + m.module;
              for (const char* wb : {"weight", "bias"}) param(module + wb, layer(l) + m.canonical + wb);
              if (m.linear) {  // after a linear layer's parameters, its extra state
                w.str(module + "_extra_state");
                w.none();
              }
            }
          if (last) {
            param("decoder.final_layernorm.weight", "ln_f.weight");
            param("decoder.final_layernorm.bias", "ln_f.bias");
            if (!first) word_embeddings("output_layer.weight");  // the tied head's copy
            w.str("output_layer._extra_state");
            w.none();
          }
          w.end();  // model
        } else {
          w.begin_dict();
          w.str("language_model");
          w.begin_dict();
          if (first) {
            w.str("embedding");
            w.begin_dict();
            w.str("word_embeddings");
            w.begin_dict();
            word_embeddings("weight");
            w.end();
            w.str("position_embeddings");
            w.begin_dict();
            param("weight", "wpe");
            w.end();
            w.end();
          }
          w.str("encoder");
          w.begin_ordered_dict();
          for (int l = 0; l < layers.size(); ++l)  // the legacy layer's parameters are in trident's order
            for (const ParamSpec& spec : specs)
              if (spec.name.rfind(layer(l), 0) == 0)
                param("layers." + std::to_string(l) + "." +
                          megatron_layer_key(spec.name.substr(layer(l).size()), o.norm_names),
                      spec.name);
          if (last) {
            const std::string final_norm = o.norm_names ? "final_norm." : "final_layernorm.";
            param(final_norm + "weight", "ln_f.weight");
            param(final_norm + "bias", "ln_f.bias");
          }
          w.end();  // encoder
          w.end();  // language_model
          if (last && !first) {
            w.str("word_embeddings_for_head");
            w.begin_dict();
            word_embeddings("weight");
            w.end();
          }
          w.end();  // model
        }
      }
      if (o.training) {
        w.str("optimizer");
        megatron::write_optimizer_state(w, file, written, *o.training, cfg, tp, t, dtype, o.adam);
        w.str("opt_param_scheduler");
        megatron::write_scheduler_state(w, o.training->trainer_state, o.mcore);
      }
      w.end();
      const fs::path rank_dir = folder / rank_dir_name(t, p, pp);
      fs::create_directories(rank_dir, ec);
      if (ec) throw_write_failure(rank_dir.string() + ": cannot create: " + ec.message(), ec.value());
      write_torch_file((rank_dir / "model_optim_rng.pt").string(), w.finish(), file.storages());
      fsync_dir(rank_dir.string());
    }
  }
  fsync_dir(folder.string());
  write_file_atomic(latest_file(dir).string(), o.training ? std::to_string(o.iteration) : "release");
}

}  // namespace trident
