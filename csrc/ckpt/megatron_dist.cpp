#include "ckpt/megatron_dist.h"

#include <cctype>
#include <cstring>
#include <map>

#include "ckpt/megatron_keys.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/param_spec.h"

namespace trident::megatron {

namespace {

// Where a canonical tensor lies: a key and, for a layer of a stacked key, its index on the
// key's first axis.
struct Source {
  std::string key;
  int64_t layer = -1;
};

class DistModel {
 public:
  DistModel(const Checkpoint& c, const ModelConfig& cfg) : c_(c), d_(*c.dist), cfg_(cfg) {
    for (const auto& [key, t] : d_.tensors()) add_key(key, t);
  }

  bool has(const std::string& canonical) const { return sources_.count(canonical) != 0; }

  // The canonical tensor, `shape` being its shape in Megatron (the padded vocabulary for the
  // embeddings).
  std::vector<float> read(const std::string& canonical, const std::vector<int64_t>& shape) const {
    const auto it = sources_.find(canonical);
    if (it == sources_.end())
      throw IoError(index() + ": no tensor for " +
                    (canonical == "wpe" ? "the position embedding (trident's GPT-2 has learned absolute positions: "
                                          "rotary or ALiBi models cannot be imported)"
                                        : "'" + canonical + "'"));
    const Source& s = it->second;
    const DcpTensor& t = d_.tensors().at(s.key);
    if (!t.problem.empty()) throw IoError(t.problem);  // its index entry cannot be read
    std::vector<int64_t> expect = shape;
    if (s.layer >= 0) expect.insert(expect.begin(), cfg_.num_layers);
    if (t.size != expect)
      throw IoError(index() + ": '" + s.key + "' has shape " + shape_str(t.size) + ", expected " + shape_str(expect) +
                    " from " + c_.args_source + "'s args");
    std::vector<int64_t> begin(t.size.size(), 0), extent = t.size;
    if (s.layer >= 0) begin[0] = s.layer, extent[0] = 1;
    return d_.read_f32(s.key, begin, extent);
  }

 private:
  std::string index() const { return (d_.dir() / ".metadata").string(); }

  void add(const std::string& canonical, Source s) {
    const auto [it, fresh] = sources_.emplace(canonical, s);
    if (!fresh)
      throw IoError(index() + ": '" + s.key + "' and '" + it->second.key + "' are both parameter " + canonical);
  }

  void add_key(const std::string& key, const DcpTensor& t) {
    // Optimizer state ("optimizer.state.exp_avg.<key>", ...), RNG state and other non-model keys.
    if (key.rfind("embedding.", 0) != 0 && key.rfind("decoder.", 0) != 0 && key.rfind("output_layer.", 0) != 0) return;
    std::string rest = key;
    const bool stacked =
        strip(rest, "decoder.layers.") && !rest.empty() && !std::isdigit(static_cast<unsigned char>(rest[0]));
    const std::optional<KeyMeaning> m = classify(stacked ? "decoder.layers.0." + rest : key);
    if (!m) throw IoError(index() + ": '" + key + "' is not a parameter of Megatron-core's GPT model");
    switch (m->what) {
      case KeyMeaning::kSkip: return;
      case KeyMeaning::kWte: add("wte", {key}); return;
      case KeyMeaning::kWpe: add("wpe", {key}); return;
      case KeyMeaning::kHead: add("head", {key}); return;
      case KeyMeaning::kFinalNorm: add("ln_f." + m->suffix, {key}); return;
      case KeyMeaning::kLayer: break;
    }
    const int L = cfg_.num_layers;
    if (!stacked) {
      if (m->local_layer >= L)
        throw IoError(index() + ": '" + key + "' is of layer " + std::to_string(m->local_layer) + ", but " +
                      c_.args_source + "'s args.num_layers is " + std::to_string(L));
      add("h." + std::to_string(m->local_layer) + "." + m->suffix, {key});
      return;
    }
    if (t.problem.empty() && (t.size.empty() || t.size[0] != L))  // (a problem is the error of its read)
      throw IoError(index() + ": '" + key + "' stacks " + (t.size.empty() ? "no" : std::to_string(t.size[0])) +
                    " layers, but " + c_.args_source + "'s args.num_layers is " + std::to_string(L));
    for (int i = 0; i < L; ++i) add("h." + std::to_string(i) + "." + m->suffix, {key, i});
  }

  const Checkpoint& c_;
  const DcpCheckpoint& d_;
  const ModelConfig& cfg_;
  std::map<std::string, Source> sources_;
};

}  // namespace

MegatronGpt2Model import_dist_gpt2(const Checkpoint& c, const MegatronImportOptions& o) {
  if (!c.args) throw IoError(c.args_source + ": no 'args' to read the model's shape from");
  MegatronGpt2Model out;
  out.config = model_config_from_megatron_args(*c.args, c.args_source, o.vocab_size);
  const ModelConfig& cfg = out.config;
  if (o.num_attention_heads && *o.num_attention_heads != cfg.num_attention_heads)
    throw ConfigError("--num-attention-heads " + std::to_string(*o.num_attention_heads) + ": " + c.args_source +
                      "'s args say " + std::to_string(cfg.num_attention_heads));
  const DistModel model(c, cfg);
  const int64_t C = cfg.hidden_size, V = cfg.vocab_size;
  const pickle::Value* padded_arg = c.args->get("padded_vocab_size");  // model_config_from_megatron_args requires it
  TRIDENT_CHECK(padded_arg && padded_arg->kind == pickle::Kind::Int, "args.padded_vocab_size");
  const int64_t padded = padded_arg->integer;
  for (const ParamSpec& spec : gpt2_param_specs(cfg, 1)) {
    const std::vector<int64_t> shape = shape_vec(stored_shape(spec));
    HostTensor t;
    t.shape = shape;
    if (spec.name == "wte") {
      const std::vector<float> full = model.read("wte", {padded, C});
      if (model.has("head") && !bit_equal(model.read("head", {padded, C}), full))
        throw ConfigError(c.dir.string() + ": its output_layer.weight differs from the word embedding; trident ties "
                          "them and cannot load an untied head");
      t.data.assign(full.begin(), full.begin() + V * C);
    } else if (megatron_split(spec.name) == MegatronSplit::kQkv) {
      // Megatron-core's [heads][q,k,v][head_dim] rows (checkpoint_version 3.0's, the whole tensor
      // as one rank would hold it) -> trident's [q,k,v][heads][head_dim].
      const std::vector<float> rows = model.read(spec.name, shape);
      const int64_t cols = shape.size() > 1 ? shape[1] : 1;
      t.data.resize(rows.size());
      for (int64_t r = 0; r < shape[0]; ++r)
        std::memcpy(&t.data[static_cast<size_t>(megatron_qkv_row(r, 0, 1, cfg, 3.0) * cols)],
                    &rows[static_cast<size_t>(r * cols)], static_cast<size_t>(cols) * sizeof(float));
    } else {
      t.data = model.read(spec.name, shape);
    }
    out.tensors[spec.name] = std::move(t);
  }
  out.dir = c.dir;
  out.flavour = c.flavour;
  out.iteration = c.iteration.value_or(0);
  out.tp = static_cast<int>(int_arg(*c.args, "tensor_model_parallel_size", 1));
  out.pp = static_cast<int>(int_arg(*c.args, "pipeline_model_parallel_size", 1));
  out.virtual_chunks = static_cast<int>(int_arg(*c.args, "virtual_pipeline_model_parallel_size", 1));
  return out;
}

}  // namespace trident::megatron
