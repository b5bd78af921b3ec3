#include "train/canonical_export.h"

#include <vector>

#include "ckpt/canonical_slices.h"
#include "ckpt/safetensors.h"
#include "parallel/pipeline_split.h"

namespace trident {
namespace {

// The pipeline stage that holds parameter `s` (the tied word embedding: the first).
int owning_stage(const ParamSpec& s, const PipelineSplit& split) {
  if (s.layer >= 0) return pipeline_stage_of_layer(split, s.layer);
  return s.name == "ln_f.weight" || s.name == "ln_f.bias" ? split.stages - 1 : 0;
}

}  // namespace

void save_canonical_params(Gpt2Model& model, ParallelContext& par, const PipelineSplit& split, const std::string& path) {
  const ModelConfig& cfg = model.config();
  const ProcessGrid& grid = par.grid;
  const int tp = grid.shape.tp;
  Backend& be = model.params().backend();
  const bool writer = grid.rank == 0;
  std::vector<std::vector<float>> full;  // on the writer
  std::vector<ParamSpec> specs = gpt2_param_specs(cfg, tp);
  std::vector<float> slice;
  for (const ParamSpec& s : specs) {
    if (writer) full.emplace_back(static_cast<size_t>(stored_shape(s).numel()), 0.0f);
    const int stage = owning_stage(s, split);
    const int tp_parts = s.shard == ShardRule::Replicated ? 1 : tp;
    const Shape local = local_shape(s, tp);
    slice.resize(static_cast<size_t>(local.numel()));
    const Tensor host(slice.data(), local, DType::F32, Device::Cpu);
    for (int t = 0; t < tp_parts; ++t) {
      const int src = grid.rank_of(t, 0, stage);
      if (grid.rank == src) {
        const Tensor p = model.params().param(s.name);
        Buffer f32 = be.empty(local, DType::F32);
        be.cast(p, f32);
        be.copy_to_host(slice.data(), f32);
        if (!writer) par.world->send(host, 0);
      } else if (writer) {
        par.world->recv(host, src);
      }
      if (writer) scatter_local_stored(s, tp, t, slice.data(), full.back().data());
    }
  }
  if (!writer) return;
  std::vector<StTensorRef> refs;
  for (size_t i = 0; i < specs.size(); ++i) {
    StTensorRef r;
    r.name = specs[i].name;
    r.dtype = StDType::F32;
    r.shape = shape_vec(stored_shape(specs[i]));  // the word embedding without vocabulary padding
    r.data = full[i].data();
    refs.push_back(r);
  }
  write_safetensors(path, refs, {{"format", "trident-canonical"}});
}

}  // namespace trident
