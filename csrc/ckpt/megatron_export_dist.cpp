// export_megatron_dist_gpt2 (megatron_gpt2.h): canonical tensors -> Megatron-core's distributed
// checkpoint (--ckpt-format torch_dist): whole tensors by name, which Megatron-LM loads at any
// tensor and pipeline split.
#include "ckpt/atomic_file.h"
#include "ckpt/megatron_export_state.h"
#include "ckpt/megatron_gpt2.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/megatron_rank_file.h"
#include "ckpt/pickle_writer.h"
#include "ckpt/torch_dcp_writer.h"
#include "ckpt/torch_file.h"

namespace trident {

namespace {

namespace fs = std::filesystem;

using megatron::RankFile;

// One state saved under the model's keys: the weights, or one of the optimizer's.
struct SavedState {
  std::string prefix;  // "" or "optimizer.state.<name>."
  const TensorMap* tensors;
  DType dtype;
};

// A layer module's prefix in the sharded state dict: the local spec maps its norms to Transformer
// Engine's names (get_gpt_layer_local_spec's sharded_state_dict_keys_map: input_layernorm. ->
// self_attention.linear_qkv.layer_norm_, pre_mlp_layernorm. -> mlp.linear_fc1.layer_norm_), so
// that either spec loads the other's checkpoints.
std::string sharded_key(const megatron::CoreLocalModule& m) {
  const std::string module = m.module;
  if (module == "input_layernorm.") return "self_attention.linear_qkv.layer_norm_";
  if (module == "pre_mlp_layernorm.") return "mlp.linear_fc1.layer_norm_";
  return module;
}

// Writes every piece of each state: rank (stage, t)'s shard of each tensor it would hold, at
// its place in the whole tensor (layers stacked on a first axis of num_layers).
void write_states(DcpWriter& dcp, const ModelConfig& cfg, const MegatronExportOptions& o,
                  const std::vector<SavedState>& states) {
  const int tp = o.tp, L = cfg.num_layers;
  const PipelineSplit split{cfg.num_layers, o.pp, o.chunks, o.uneven};
  std::vector<float> wte_padded;
  const auto piece = [&](const SavedState& s, int stage, int t, const std::string& key, const std::string& name,
                         int layer) {
    const HostTensor& h = s.tensors->at(name);
    const MegatronSplit how = megatron_split(name);
    if (how == MegatronSplit::kReplicated && t > 0) return;  // TP rank 0 saves the replicas
    std::vector<int64_t> whole = h.shape;
    if (name == "wte") whole[0] = cfg.padded_vocab_size(tp);
    std::vector<int64_t> local = megatron::shard_shape(name, whole, tp), offsets(whole.size(), 0);
    if (how == MegatronSplit::kColumns) offsets[1] = t * local[1];
    else if (how != MegatronSplit::kReplicated) offsets[0] = t * local[0];
    if (layer >= 0) {  // the stacked layers' axis
      whole.insert(whole.begin(), L);
      local.insert(local.begin(), 1);
      offsets.insert(offsets.begin(), layer);
    }
    dcp.add_tensor(stage * tp + t, s.prefix + key, whole, offsets, local,
                   name == "wte" ? megatron::shard_of(name, wte_padded, whole[0], whole[1], t, tp, cfg)
                                 : megatron::padded_shard_of(h, name, cfg, tp, t),
                   s.dtype);
  };
  for (const SavedState& s : states) {
    const HostTensor& wte = s.tensors->at("wte");  // padded once a state, Megatron's zero rows
    wte_padded = pad_rows(wte.data.data(), wte.shape[0], wte.shape[1], cfg.padded_vocab_size(tp));
    for (int stage = 0; stage < o.pp; ++stage)
      for (int t = 0; t < tp; ++t) {
        if (stage == 0) {
          piece(s, stage, t, "embedding.word_embeddings.weight", "wte", -1);
          piece(s, stage, t, "embedding.position_embeddings.weight", "wpe", -1);
        }
        for (const LayerRange& chunk : pipeline_chunk_layers(split, stage))
          for (int l = chunk.begin; l < chunk.end; ++l)
            for (const megatron::CoreLocalModule& m : megatron::core_local_modules())
              for (const char* wb : {"weight", "bias"})
                piece(s, stage, t, std::string("decoder.layers.") + sharded_key(m) + wb,
                      "h." + std::to_string(l) + "." + m.canonical + wb, l);
        if (stage == o.pp - 1) {
          piece(s, stage, t, "decoder.final_layernorm.weight", "ln_f.weight", -1);
          piece(s, stage, t, "decoder.final_layernorm.bias", "ln_f.bias", -1);
        }
      }
  }
}

// Each local linear layer's '_extra_state' (None: it has none), a ShardedObject at its layer's
// place on the stacked axis, saved by TP rank 0 of the layer's stage. Megatron-core's load asks
// for them. (GPTModel drops output_layer's.)
void write_extra_states(DcpWriter& dcp, const ModelConfig& cfg, const MegatronExportOptions& o) {
  const PipelineSplit split{cfg.num_layers, o.pp, o.chunks, o.uneven};
  pickle::Writer none;  // a ShardedObject is saved as the list of its data
  none.begin_list();
  none.none();
  none.end();
  const std::string pickled = none.finish();
  for (int stage = 0; stage < o.pp; ++stage)
    for (const LayerRange& chunk : pipeline_chunk_layers(split, stage))
      for (int l = chunk.begin; l < chunk.end; ++l)
        for (const megatron::CoreLocalModule& m : megatron::core_local_modules())
          if (m.linear)
            dcp.add_object(stage * o.tp, std::string("decoder.layers.") + m.module + "_extra_state/shard_" +
                                             std::to_string(l) + "_" + std::to_string(cfg.num_layers),
                           pickled);
}

// common.pt: what the sharded state dict holds besides its tensors and objects.
void write_common(const fs::path& folder, const ModelConfig& cfg, const MegatronExportOptions& o) {
  pickle::Writer w;
  RankFile file;  // the loss scale's tensor
  w.begin_dict();
  megatron::write_common_fields(w, cfg, o);
  if (o.training) {
    w.str("optimizer");
    megatron::write_sharded_optimizer_common(w, file, *o.training, o.dtype, o.adam, o.distributed_optimizer);
    w.str("opt_param_scheduler");
    megatron::write_scheduler_state(w, o.training->trainer_state, o.mcore);
  }
  // Megatron-core's content metadata (its _build_sharded_state_dict_metadata), which chooses
  // how its load builds the sharded state dict to read into.
  w.str("content_metadata");
  w.begin_dict();
  if (o.distributed_optimizer) {
    w.str("distrib_optim_sharding_type");
    w.str(megatron::kFullyReshardable);
  }
  w.str("singleton_local_shards");
  w.boolean(false);
  w.str("chained_optim_avoid_prefix");
  w.boolean(true);
  w.end();
  w.end();
  write_torch_file((folder / "common.pt").string(), w.finish(), file.storages());
}

}  // namespace

void export_megatron_dist_gpt2(const fs::path& folder, const ModelConfig& cfg, const TensorMap& canonical,
                               const MegatronExportOptions& o) {
  std::vector<SavedState> states = {{"", &canonical, o.dtype}};
  if (o.training) {
    const MegatronTrainingState& st = *o.training;
    states.push_back({"optimizer.state.exp_avg.", &st.exp_avg, DType::F32});
    states.push_back({"optimizer.state.exp_avg_sq.", &st.exp_avg_sq, DType::F32});
    // The distributed optimizer keeps its fp32 copy of every parameter ('param'); the
    // non-distributed one of the 16-bit ones ('fp32_param'), an fp32 model being its own.
    if (o.distributed_optimizer) states.push_back({"optimizer.state.param.", &st.master, DType::F32});
    else if (o.dtype != DType::F32) states.push_back({"optimizer.state.fp32_param.", &st.master, DType::F32});
  }
  DcpWriter dcp(folder);
  write_states(dcp, cfg, o, states);
  write_extra_states(dcp, cfg, o);
  dcp.finish();
  write_common(folder, cfg, o);
  write_file_atomic((folder / "metadata.json").string(),
                    R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch", )"
                    R"("common_backend_version": 1})");
}

}  // namespace trident
