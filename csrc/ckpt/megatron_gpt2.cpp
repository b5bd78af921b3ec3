#include "ckpt/megatron_gpt2.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/megatron_dist.h"
#include "ckpt/megatron_files.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/megatron_optimizer.h"
#include "ckpt/safetensors.h"
#include "ckpt/torch_file.h"
#include "core/error.h"
#include "model/param_spec.h"

namespace trident {

namespace {

namespace fs = std::filesystem;
using megatron::bit_equal;
using megatron::Checkpoint;
using megatron::classify;
using megatron::int_arg;
using megatron::KeyMeaning;
using megatron::layer_modules;
using megatron::LayerModule;
using megatron::strip;
using megatron::Shard;
using pickle::Kind;
using pickle::Value;

// ---------------------------------------------------------------------------------------
// Joining the shards.

struct Piece {
  const Shard* shard = nullptr;
  std::string key;
  const Value* value = nullptr;
  const TorchFile* file = nullptr;  // the file `value` lies in, when not the shard's (distrib_optim.pt)
  const HostTensor* data = nullptr;  // or the tensor itself (DeepSpeed's joined partitions)
  bool held() const { return value || data; }
};

// A piece's tensor as a pick gives it: a Value (in `file`, nullptr: the shard's), or data.
struct Picked {
  const Value* value = nullptr;
  const TorchFile* file = nullptr;
  const HostTensor* data = nullptr;
};

class Joiner {
 public:
  Joiner(const Checkpoint& c, const ModelConfig& cfg) : c_(c), cfg_(cfg) {}

  void add(const std::string& canonical, int tp_rank, Piece p) {
    auto& v = pieces_[canonical];
    v.resize(c_.tp);
    if (v[tp_rank].held())
      throw IoError(p.shard->where + ": '" + p.key + "' is parameter " + canonical + ", which " + v[tp_rank].shard->where +
                    " '" + v[tp_rank].key + "' holds already");
    v[tp_rank] = std::move(p);
  }
  bool has(const std::string& canonical) const { return pieces_.count(canonical) != 0; }

  // The full tensor of `shape` (the whole model's [rows, cols] or [n]).
  std::vector<float> join(const std::string& canonical, const std::vector<int64_t>& shape) const {
    const auto it = pieces_.find(canonical);
    if (it == pieces_.end() || !it->second[0].held())
      throw IoError(c_.dir.string() + ": no tensor for " + describe(canonical) + " on tensor-parallel rank 0");
    const MegatronSplit split = megatron_split(canonical);
    if (split == MegatronSplit::kReplicated) return read(it->second[0], shape);
    const int tp = c_.tp;
    const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    std::vector<int64_t> local_shape = shape;
    local_shape[split == MegatronSplit::kColumns ? 1 : 0] /= tp;
    const int64_t lrows = local_shape[0], lcols = local_shape.size() > 1 ? local_shape[1] : 1;
    std::vector<float> full(static_cast<size_t>(rows * cols));
    for (int t = 0; t < tp; ++t) {
      if (!it->second[t].held())
        throw IoError(c_.dir.string() + ": no tensor for " + describe(canonical) + " on tensor-parallel rank " +
                      std::to_string(t));
      const std::vector<float> local = read(it->second[t], local_shape);
      for (int64_t r = 0; r < lrows; ++r) {
        const MegatronShardRow at = megatron_shard_row(split, r, t, tp, lrows, lcols, cfg_, c_.checkpoint_version);
        std::memcpy(&full[static_cast<size_t>(at.row * cols + at.col0)], &local[static_cast<size_t>(r * lcols)],
                    static_cast<size_t>(lcols) * sizeof(float));
      }
    }
    return full;
  }

 private:
  std::string describe(const std::string& canonical) const {
    if (canonical == "wpe") return "the position embedding (trident's GPT-2 has learned absolute positions: rotary or ALiBi "
                                   "models cannot be imported)";
    return canonical == "head" ? "the LM head" : "'" + canonical + "'";
  }
  std::vector<float> read(const Piece& p, const std::vector<int64_t>& shape) const {
    if (p.data) {
      if (p.data->shape != shape)
        throw IoError(p.shard->where + ": the state of '" + p.key + "' has shape " + shape_str(p.data->shape) +
                      ", expected " + shape_str(shape) + " (tp " + std::to_string(c_.tp) + ")");
      return p.data->data;
    }
    const TorchTensor* t = TorchFile::tensor(*p.value);
    if (!t) throw IoError(p.shard->where + ": '" + p.key + "' is " + p.value->describe() + ", not a tensor");
    if (t->shape != shape)
      throw IoError(p.shard->where + ": '" + p.key + "' has shape " + shape_str(t->shape) + ", expected " +
                    shape_str(shape) + " (tp " + std::to_string(c_.tp) + ")");
    return (p.file ? p.file : p.shard->file)->read_f32(*t, "'" + p.key + "'");
  }

  const Checkpoint& c_;
  const ModelConfig& cfg_;
  std::map<std::string, std::vector<Piece>> pieces_;
};

// The saved args against the files: the rank grid, the layer count, --num-attention-heads.
void check_args_layout(const Checkpoint& c, const ModelConfig& cfg, int layers_found, std::optional<int> heads_flag) {
  const int64_t tp_arg = int_arg(*c.args, "tensor_model_parallel_size", int_arg(*c.args, "model_parallel_size", 1));
  const int64_t pp_arg = c.flavour == "Megatron-LM" ? int_arg(*c.args, "pipeline_model_parallel_size", 1) : c.pp;
  if (tp_arg != c.tp || pp_arg != c.pp)
    throw IoError(c.dir.string() + ": files for tp " + std::to_string(c.tp) + " x pp " + std::to_string(c.pp) + ", but " +
                  c.args_source + "'s args say tp " + std::to_string(tp_arg) + " x pp " + std::to_string(pp_arg));
  if (layers_found != cfg.num_layers)
    throw IoError(c.dir.string() + ": " + std::to_string(layers_found) + " transformer layers found, args.num_layers is " +
                  std::to_string(cfg.num_layers));
  if (heads_flag && *heads_flag != cfg.num_attention_heads)
    throw ConfigError("--num-attention-heads " + std::to_string(*heads_flag) + ": " + c.args_source + "'s args say " +
                      std::to_string(cfg.num_attention_heads));
}

// The model shape of a checkpoint saved without args (NVIDIA's released GPT-2 345M): layers
// counted, hidden size and positions from the position embedding, the padded vocabulary from
// the word embedding's shards, the dtype of the weights; the heads from --num-attention-heads
// (16 for the released 24 x 1024 model, as Hugging Face's converter assumes); GPT-2's
// vocabulary unless --vocab-size; Megatron's padding to 128 x tp; the tanh GELU of Megatron's
// gelu_impl of that time.
ModelConfig config_from_tensors(const Checkpoint& c,
                                const std::vector<std::tuple<const Shard*, std::string, KeyMeaning, const Value*>>& keys,
                                int layers, const MegatronImportOptions& o) {
  const TorchTensor *wte = nullptr, *wpe = nullptr;
  for (const auto& [shard, key, m, value] : keys) {
    if (shard->tp_rank != 0) continue;
    const TorchTensor* t = TorchFile::tensor(*value);
    if (m.what == KeyMeaning::kWte && t) wte = t;
    if (m.what == KeyMeaning::kWpe && t) wpe = t;
  }
  if (!wte || !wpe || wte->shape.size() != 2 || wpe->shape.size() != 2 || wte->shape[1] != wpe->shape[1])
    throw IoError(c.args_source + ": no 'args', and no word and position embeddings to read the model's shape from");
  ModelConfig cfg;
  cfg.num_layers = layers;
  cfg.hidden_size = static_cast<int>(wpe->shape[1]);
  cfg.max_position_embeddings = cfg.seq_length = static_cast<int>(wpe->shape[0]);
  const bool released_345m = layers == 24 && cfg.hidden_size == 1024;
  if (!o.num_attention_heads && !released_345m)
    throw ConfigError("--num-attention-heads: required: " + c.args_source +
                      " has no 'args' to read the number of attention heads from");
  cfg.num_attention_heads = o.num_attention_heads.value_or(16);
  cfg.vocab_size = o.vocab_size.value_or(kGpt2VocabSize);
  cfg.make_vocab_size_divisible_by = 128;
  const int64_t padded = wte->shape[0] * c.tp;
  if (cfg.padded_vocab_size(c.tp) != padded)
    throw ConfigError("--vocab-size " + std::to_string(cfg.vocab_size) + " pads to " +
                      std::to_string(cfg.padded_vocab_size(c.tp)) + " (128 x tp " + std::to_string(c.tp) + "), not " +
                      c.args_source + "'s " + std::to_string(padded) + " word-embedding rows");
  cfg.dtype = wte->dtype == TorchDType::F16 ? DType::F16 : wte->dtype == TorchDType::BF16 ? DType::BF16 : DType::F32;
  cfg.hidden_dropout = cfg.attention_dropout = 0.1f;
  try {
    cfg.validate(c.tp);
  } catch (const ConfigError& e) {
    throw ConfigError(c.args_source + ": the model read from its tensors: " + e.what());
  }
  return cfg;
}

// Every parameter of the model (stored shapes, wte unpadded) from `joiner`; a tied head it holds
// must equal the word embedding (the parameters' joiner: the states' hold no head).
TensorMap join_model(const Joiner& joiner, const Checkpoint& c, const ModelConfig& cfg) {
  TensorMap out;
  const int64_t C = cfg.hidden_size, padded = cfg.padded_vocab_size(c.tp);
  for (const ParamSpec& spec : gpt2_param_specs(cfg, 1)) {
    const std::vector<int64_t> shape = shape_vec(stored_shape(spec));
    HostTensor t;
    t.shape = shape;
    if (spec.name == "wte") {
      const std::vector<float> full = joiner.join("wte", {padded, C});
      t.data.assign(full.begin(), full.begin() + cfg.vocab_size * C);
      if (joiner.has("head") && !bit_equal(joiner.join("head", {padded, C}), full))
        throw ConfigError(c.dir.string() + ": the LM head stored on the last stage differs from the word embedding; "
                          "trident ties them and cannot load an untied head");
    } else {
      t.data = joiner.join(spec.name, shape);
    }
    out[spec.name] = std::move(t);
  }
  return out;
}

// The optimizer state joined as the parameters are (a last stage's copy of the tied head, which
// Megatron steps as the word embedding, is left out), and the run's counters.
template <typename JoinerOf>
MegatronTrainingState read_training_state(const Checkpoint& c, const ModelConfig& cfg, const JoinerOf& joiner_of) {
  const megatron::OptimizerState st = megatron::read_optimizer_state(c, cfg.dtype);
  using megatron::ParamState;
  const auto joined = [&](int k) {  // 0 master, 1 exp_avg, 2 exp_avg_sq
    return join_model(joiner_of(
                          [&](const Shard* shard, const std::string& key, const Value* param) -> Picked {
                            const auto it = st.params.find({shard, key});
                            if (it == st.params.end())  // fp32 before the first step: the master is the parameter
                              return {k == 0 ? param : nullptr, nullptr, nullptr};
                            const ParamState& ps = it->second;
                            if (ps.joined) return {nullptr, nullptr, &(*ps.joined)[static_cast<size_t>(k)]};
                            const Value* members[3] = {ps.master, ps.exp_avg, ps.exp_avg_sq};
                            return {members[k], ps.file, nullptr};
                          },
                          false),
                      c, cfg);
  };
  MegatronTrainingState out;
  out.master = joined(0);
  if (st.moments) {
    out.exp_avg = joined(1);
    out.exp_avg_sq = joined(2);
  }
  megatron::finish_training_state(out, c, st);
  return out;
}

}  // namespace

MegatronSplit megatron_split(const std::string& canonical) {
  if (canonical == "wte" || canonical == "head") return MegatronSplit::kRows;
  const size_t dot = canonical.find('.', 2);
  const std::string s = canonical.rfind("h.", 0) == 0 && dot != std::string::npos ? canonical.substr(dot + 1) : canonical;
  if (s == "attn.qkv.weight" || s == "attn.qkv.bias") return MegatronSplit::kQkv;
  if (s == "mlp.fc.weight" || s == "mlp.fc.bias") return MegatronSplit::kRows;
  if (s == "attn.proj.weight" || s == "mlp.proj.weight") return MegatronSplit::kColumns;
  return MegatronSplit::kReplicated;
}

int64_t megatron_qkv_row(int64_t r, int t, int tp, const ModelConfig& cfg, double checkpoint_version) {
  const int64_t hd = cfg.head_dim(), heads = cfg.num_attention_heads / tp;
  int64_t which, head, d;
  if (checkpoint_version >= 2.0) {  // [heads][3][head_dim]
    d = r % hd, which = (r / hd) % 3, head = r / (3 * hd);
  } else if (checkpoint_version >= 1.0) {  // [heads][head_dim][3]
    which = r % 3, d = (r / 3) % hd, head = r / (3 * hd);
  } else {  // [3][heads][head_dim]
    d = r % hd, head = (r / hd) % heads, which = r / (hd * heads);
  }
  return which * cfg.hidden_size + (t * heads + head) * hd + d;
}

MegatronShardRow megatron_shard_row(MegatronSplit split, int64_t r, int t, int tp, int64_t lrows, int64_t lcols,
                                    const ModelConfig& cfg, double checkpoint_version) {
  switch (split) {
    case MegatronSplit::kColumns: return {r, t * lcols};
    case MegatronSplit::kQkv: return {megatron_qkv_row(r, t, tp, cfg, checkpoint_version), 0};
    case MegatronSplit::kRows: return {t * lrows + r, 0};
    case MegatronSplit::kReplicated: break;
  }
  return {r, 0};
}

std::string megatron_layer_key(const std::string& canonical_suffix, bool norm_names) {
  for (const LayerModule& lm : layer_modules()) {
    std::string rest = canonical_suffix;
    // The LayerNorms' second spelling is the "*_norm" one.
    if (strip(rest, lm.canonical))
      return lm.megatron[norm_names && std::strncmp(lm.canonical, "ln_", 3) == 0 ? 1 : 0] + rest;
  }
  throw InternalError("'" + canonical_suffix + "' is not a layer parameter");
}

MegatronGpt2Model import_megatron_gpt2(const fs::path& load, const MegatronImportOptions& o) {
  Checkpoint c = megatron::open_checkpoint(load, o.iteration, o.iteration_flag);
  if (o.with_optimizer) megatron::check_optimizer_state_readable(c);
  if (c.dist) return megatron::import_dist_gpt2(c, o);

  // Local layer numbers -> global: chunk-major, then stage (Megatron's virtual pipeline order).
  std::map<std::tuple<int, int, int>, std::set<int>> local_layers;  // (tp, chunk, stage) -> local indices
  std::vector<std::tuple<const Shard*, std::string, KeyMeaning, const Value*>> keys;
  for (const Shard& s : c.shards)
    for (const auto& [key, value] : s.params) {
      const std::optional<KeyMeaning> m = classify(key);
      if (!m) throw IoError(s.where + ": '" + key + "' is not a parameter of Megatron's GPT model");
      if (m->what == KeyMeaning::kSkip) continue;
      if (m->what == KeyMeaning::kLayer) local_layers[{s.tp_rank, s.chunk, s.stage}].insert(m->local_layer);
      keys.emplace_back(&s, key, *m, value);
    }
  std::map<std::pair<int, int>, int> offset;  // (chunk, stage) -> first global layer
  int total = 0;
  for (int v = 0; v < c.chunks; ++v)
    for (int p = 0; p < c.pp; ++p) {
      const std::set<int>& l0 = local_layers[{0, v, p}];
      for (int t = 1; t < c.tp; ++t)
        if (local_layers[{t, v, p}] != l0)
          throw IoError(c.dir.string() + ": tensor-parallel rank " + std::to_string(t) + " holds other layers than rank 0 "
                        "(stage " + std::to_string(p) + ", chunk " + std::to_string(v) + ")");
      if (!l0.empty() && (*l0.begin() != 0 || *l0.rbegin() != static_cast<int>(l0.size()) - 1))
        throw IoError(c.dir.string() + ": stage " + std::to_string(p) + " (chunk " + std::to_string(v) +
                      ") numbers its layers other than 0 to n-1");
      offset[{v, p}] = total;
      total += static_cast<int>(l0.size());
    }

  MegatronGpt2Model out;
  if (c.args) {
    out.config = model_config_from_megatron_args(*c.args, c.args_source, o.vocab_size);
    check_args_layout(c, out.config, total, o.num_attention_heads);
  } else {
    out.config = config_from_tensors(c, keys, total, o);
  }
  const ModelConfig& cfg = out.config;
  if (cfg.num_attention_heads % c.tp || cfg.hidden_size % c.tp)
    throw IoError(c.args_source + ": " + std::to_string(cfg.num_attention_heads) + " heads do not split over tp " +
                  std::to_string(c.tp));

  // Each key's tensor under its canonical name: `pick` gives the tensor of a key's parameter (or
  // of a state of it) and the file it lies in (nullptr: the shard's), or the tensor's data, or
  // neither (no tensor).
  const auto joiner_of = [&](const std::function<Picked(const Shard*, const std::string&, const Value*)>& pick,
                             bool with_head = true) {
    Joiner joiner(c, cfg);
    for (const auto& [shard, key, m, value] : keys) {
      std::string canonical;
      switch (m.what) {
        case KeyMeaning::kWte: canonical = "wte"; break;
        case KeyMeaning::kWpe: canonical = "wpe"; break;
        case KeyMeaning::kHead:
          if (!with_head) continue;
          canonical = "head";
          break;
        case KeyMeaning::kFinalNorm: canonical = "ln_f." + m.suffix; break;
        case KeyMeaning::kLayer:
          canonical = "h." + std::to_string(offset.at({shard->chunk, shard->stage}) + m.local_layer) + "." + m.suffix;
          break;
        case KeyMeaning::kSkip: continue;
      }
      if (const Picked p = pick(shard, key, value); p.value || p.data)
        joiner.add(canonical, shard->tp_rank, Piece{shard, key, p.value, p.file, p.data});
    }
    return joiner;
  };
  const auto weights = [](const Shard*, const std::string&, const Value* v) { return Picked{v, nullptr, nullptr}; };
  out.tensors = join_model(joiner_of(weights), c, cfg);
  if (o.with_optimizer) out.training = read_training_state(c, cfg, joiner_of);
  out.dir = c.dir;
  out.flavour = c.flavour;
  out.iteration = c.iteration.value_or(0);
  out.tp = c.tp;
  out.pp = c.pp;
  out.virtual_chunks = c.chunks;
  return out;
}

}  // namespace trident
