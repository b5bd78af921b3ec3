#include "model/param_spec.h"

#include <cmath>

#include "core/error.h"

namespace trident {

std::vector<ParamSpec> gpt2_param_specs(const ModelConfig& cfg, int tp) {
  const int64_t C = cfg.hidden_size, F = cfg.ffn_hidden_size();
  const float std = cfg.init_method_std;
  // GPT-2 scales the two projections that write into the residual stream.
  const float out_std = std / std::sqrt(2.0f * static_cast<float>(cfg.num_layers));
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, Shape shape, ShardRule shard, InitKind init, float s, bool wd, int layer) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = shape;
    p.shard = shard;
    p.init = init;
    p.std = s;
    p.weight_decay = wd;
    p.layer = layer;
    specs.push_back(p);
  };
  const bool own_embedding_std = cfg.embedding_init_method_std > 0;
  const float embedding_std = own_embedding_std ? cfg.embedding_init_method_std : std;
  add("wte", {cfg.padded_vocab_size(tp), C}, ShardRule::SplitRows, InitKind::Normal, embedding_std, !own_embedding_std,
      -1);
  specs.back().init_rows = cfg.vocab_size;
  add("wpe", {cfg.max_position_embeddings, C}, ShardRule::Replicated, InitKind::Normal, embedding_std,
      !own_embedding_std, -1);
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1.weight", {C}, ShardRule::Replicated, InitKind::Ones, 0, false, i);
    add(h + "ln_1.bias", {C}, ShardRule::Replicated, InitKind::Zeros, 0, false, i);
    add(h + "attn.qkv.weight", {3 * C, C}, ShardRule::SplitQkvHeads, InitKind::Normal, std, true, i);
    add(h + "attn.qkv.bias", {3 * C}, ShardRule::SplitQkvHeads, InitKind::Zeros, 0, false, i);
    add(h + "attn.proj.weight", {C, C}, ShardRule::SplitCols, InitKind::Normal, out_std, true, i);
    add(h + "attn.proj.bias", {C}, ShardRule::Replicated, InitKind::Zeros, 0, false, i);
    add(h + "ln_2.weight", {C}, ShardRule::Replicated, InitKind::Ones, 0, false, i);
    add(h + "ln_2.bias", {C}, ShardRule::Replicated, InitKind::Zeros, 0, false, i);
    add(h + "mlp.fc.weight", {F, C}, ShardRule::SplitRows, InitKind::Normal, std, true, i);
    add(h + "mlp.fc.bias", {F}, ShardRule::SplitRows, InitKind::Zeros, 0, false, i);
    add(h + "mlp.proj.weight", {C, F}, ShardRule::SplitCols, InitKind::Normal, out_std, true, i);
    add(h + "mlp.proj.bias", {C}, ShardRule::Replicated, InitKind::Zeros, 0, false, i);
  }
  add("ln_f.weight", {C}, ShardRule::Replicated,
      InitKind::Ones, 0, false, -1);
  add("ln_f.bias", {C}, ShardRule::Replicated, InitKind::Zeros, 0, false, -1);
  return specs;
}

bool stage_holds(const ParamSpec& spec, int layer_begin, int layer_end, bool first_stage, bool last_stage) {
  if (spec.layer >= 0) return spec.layer >= layer_begin && spec.layer < layer_end;
  if (spec.name == "wte") return first_stage || last_stage;
  if (spec.name == "wpe") return first_stage;
  return last_stage;  // ln_f
}

Shape local_shape(const ParamSpec& spec, int tp) {
  Shape s = spec.shape;
  switch (spec.shard) {
    case ShardRule::Replicated: break;
    case ShardRule::SplitRows:
    case ShardRule::SplitQkvHeads:
      TRIDENT_CHECK(s.dims[0] % tp == 0, spec.name, " rows not divisible by tp");
      s.dims[0] /= tp;
      break;
    case ShardRule::SplitCols:
      TRIDENT_CHECK(s.ndim == 2 && s.dims[1] % tp == 0, spec.name, " cols not divisible by tp");
      s.dims[1] /= tp;
      break;
  }
  return s;
}

int64_t canonical_index(const ParamSpec& spec, int tp, int tp_rank, int64_t local_index) {
  const Shape full = spec.shape;
  const int64_t row_len = full.ndim == 2 ? full.dims[1] : 1;
  switch (spec.shard) {
    case ShardRule::Replicated: return local_index;
    case ShardRule::SplitRows: {
      const int64_t local_rows = full.dims[0] / tp;
      return (tp_rank * local_rows) * row_len + local_index;
    }
    case ShardRule::SplitCols: {
      const int64_t local_cols = full.dims[1] / tp;
      const int64_t r = local_index / local_cols, c = local_index % local_cols;
      return r * full.dims[1] + tp_rank * local_cols + c;
    }
    case ShardRule::SplitQkvHeads: {
      const int64_t C = full.dims[0] / 3, local_C = C / tp;
      const int64_t local_row = local_index / row_len, col = local_index % row_len;
      const int64_t which = local_row / local_C, r = local_row % local_C;  // which of Q, K, V
      return (which * C + tp_rank * local_C + r) * row_len + col;
    }
  }
  return local_index;
}

int64_t canonical_run(const ParamSpec& spec, int tp, int64_t local_index) {
  const Shape full = spec.shape;
  const int64_t row_len = full.ndim == 2 ? full.dims[1] : 1;
  const int64_t local_numel = local_shape(spec, tp).numel();
  switch (spec.shard) {
    case ShardRule::Replicated:
    case ShardRule::SplitRows: return local_numel - local_index;
    case ShardRule::SplitCols: {
      const int64_t local_cols = full.dims[1] / tp;
      return local_cols - local_index % local_cols;
    }
    case ShardRule::SplitQkvHeads: {
      const int64_t block = full.dims[0] / 3 / tp * row_len;  // one of Q, K, V on this rank
      return block - local_index % block;
    }
  }
  return 1;
}

}  // namespace trident
