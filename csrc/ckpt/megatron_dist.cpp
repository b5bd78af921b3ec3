#include "ckpt/megatron_dist.h"

#include <cctype>
#include <cstring>
#include <map>

#include "ckpt/megatron_dist_buckets.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/megatron_optimizer.h"
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

// The model's tensors, or a state of them: with a prefix ("optimizer.state.exp_avg."), the keys
// that are it followed by a model key.
class DistModel {
 public:
  DistModel(const Checkpoint& c, const ModelConfig& cfg, std::string prefix = "")
      : c_(c), d_(*c.dist), cfg_(cfg), prefix_(std::move(prefix)) {
    for (const auto& [key, t] : d_.tensors())
      if (key.compare(0, prefix_.size(), prefix_) == 0) add_key(key, key.substr(prefix_.size()), t);
  }

  bool has(const std::string& canonical) const { return sources_.count(canonical) != 0; }

  // The canonical tensor, `shape` being its shape in Megatron (the padded vocabulary for the
  // embeddings).
  std::vector<float> read(const std::string& canonical, const std::vector<int64_t>& shape) const {
    const auto it = sources_.find(canonical);
    if (it == sources_.end())
      throw IoError(index() + ": no tensor for " +
                    (!prefix_.empty() ? "'" + canonical + "' under '" + prefix_ + "'"
                     : canonical == "wpe"
                         ? "the position embedding (trident's GPT-2 has learned absolute positions: rotary or ALiBi "
                           "models cannot be imported)"
                         : "'" + canonical + "'"));
    const Source& s = it->second;
    const DcpTensor& t = d_.tensors().at(s.key);
    if (!t.problem.empty()) throw IoError(t.problem);  // its index entry cannot be read
    std::vector<int64_t> expect = shape;
    if (s.layer >= 0) expect.insert(expect.begin(), cfg_.num_layers);
    if (const auto r = d_.reformulated().find(s.key); r != d_.reformulated().end()) {
      if (r->second != expect)
        throw IoError(index() + ": '" + s.key + "' was of shape " + shape_str(r->second) + ", expected " +
                      shape_str(expect) + " from " + c_.args_source + "'s args");
      return read_reformulated(s, t, expect);
    }
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

  // A flattened optimizer tensor of shape `orig` (the whole stack for a stacked key), stored
  // reformulated (DcpCheckpoint::reformulated): its layer's rows read and put back in place.
  std::vector<float> read_reformulated(const Source& s, const DcpTensor& t, const std::vector<int64_t>& orig) const {
    const size_t n = orig.size();
    std::vector<int64_t> frag(t.size.begin(), t.size.begin() + static_cast<long>(std::min(n, t.size.size())));
    std::vector<int64_t> block(n);
    int64_t block_numel = 1;
    bool fits = t.size.size() == n + 1;
    for (size_t i = 0; fits && i < n; ++i) {
      fits = frag[i] > 0 && orig[i] % frag[i] == 0;
      if (fits) block_numel *= block[i] = orig[i] / frag[i];
    }
    if (!fits || t.size[n] != block_numel || (s.layer >= 0 && block[0] != 1))
      throw IoError(index() + ": '" + s.key + "' of shape " + shape_str(t.size) + " is no reformulation of " +
                    shape_str(orig));
    // The layer's rows (or all), then each row's block into its place in the layer's tensor.
    std::vector<int64_t> begin(n + 1, 0), extent = t.size;
    if (s.layer >= 0) begin[0] = s.layer, extent[0] = 1;
    const std::vector<float> rows = d_.read_f32(s.key, begin, extent);
    const long skip = s.layer >= 0 ? 1 : 0;  // a layer's rows: its tensor without the layer axis
    const std::vector<int64_t> shape(orig.begin() + skip, orig.end()), grid(frag.begin() + skip, frag.end()),
        box(block.begin() + skip, block.end());
    const size_t d = shape.size();
    std::vector<int64_t> stride(d, 1);
    for (size_t i = d; i-- > 1;) stride[i - 1] = stride[i] * shape[i];
    int64_t total = 1;
    for (int64_t x : shape) total *= x;
    std::vector<float> out(static_cast<size_t>(total));
    std::vector<int64_t> c(d, 0), e(d, 0);
    for (size_t row = 0; row * static_cast<size_t>(block_numel) < rows.size(); ++row) {
      std::fill(e.begin(), e.end(), 0);
      for (int64_t k = 0; k < block_numel; ++k) {
        int64_t at = 0;
        for (size_t i = 0; i < d; ++i) at += (c[i] * box[i] + e[i]) * stride[i];
        out[static_cast<size_t>(at)] = rows[row * static_cast<size_t>(block_numel) + static_cast<size_t>(k)];
        for (size_t i = d; i-- > 0;) {  // the next element of the block, row-major
          if (++e[i] < box[i]) break;
          e[i] = 0;
        }
      }
      for (size_t i = d; i-- > 0;) {  // the next block, row-major over the grid
        if (++c[i] < grid[i]) break;
        c[i] = 0;
      }
    }
    return out;
  }

  void add_key(const std::string& full_key, const std::string& key, const DcpTensor& t) {
    // Optimizer state ("optimizer.state.exp_avg.<key>", ...), RNG state and other non-model keys.
    if (key.rfind("embedding.", 0) != 0 && key.rfind("decoder.", 0) != 0 && key.rfind("output_layer.", 0) != 0) return;
    std::string rest = key;
    const bool stacked =
        strip(rest, "decoder.layers.") && !rest.empty() && !std::isdigit(static_cast<unsigned char>(rest[0]));
    const std::optional<KeyMeaning> m = classify(stacked ? "decoder.layers.0." + rest : key);
    if (!m) throw IoError(index() + ": '" + full_key + "' is not a parameter of Megatron-core's GPT model");
    switch (m->what) {
      case KeyMeaning::kSkip: return;
      case KeyMeaning::kWte: add("wte", {full_key}); return;
      case KeyMeaning::kWpe: add("wpe", {full_key}); return;
      case KeyMeaning::kHead: add("head", {full_key}); return;
      case KeyMeaning::kFinalNorm: add("ln_f." + m->suffix, {full_key}); return;
      case KeyMeaning::kLayer: break;
    }
    const int L = cfg_.num_layers;
    if (!stacked) {
      if (m->local_layer >= L)
        throw IoError(index() + ": '" + full_key + "' is of layer " + std::to_string(m->local_layer) + ", but " +
                      c_.args_source + "'s args.num_layers is " + std::to_string(L));
      add("h." + std::to_string(m->local_layer) + "." + m->suffix, {full_key});
      return;
    }
    if (t.problem.empty() && (t.size.empty() || t.size[0] != L))  // (a problem is the error of its read)
      throw IoError(index() + ": '" + full_key + "' stacks " + (t.size.empty() ? "no" : std::to_string(t.size[0])) +
                    " layers, but " + c_.args_source + "'s args.num_layers is " + std::to_string(L));
    for (int i = 0; i < L; ++i) add("h." + std::to_string(i) + "." + m->suffix, {full_key, i});
  }

  const Checkpoint& c_;
  const DcpCheckpoint& d_;
  const ModelConfig& cfg_;
  std::string prefix_;
  std::map<std::string, Source> sources_;
};

// A canonical parameter's shape in Megatron: the padded vocabulary for the word embedding.
std::vector<int64_t> megatron_shape(const ParamSpec& spec, const Checkpoint& c) {
  std::vector<int64_t> shape = shape_vec(stored_shape(spec));
  if (spec.name == "wte") {
    const pickle::Value* padded = c.args->get("padded_vocab_size");  // model_config_from_megatron_args requires it
    TRIDENT_CHECK(padded && padded->kind == pickle::Kind::Int, "args.padded_vocab_size");
    shape[0] = padded->integer;
  }
  return shape;
}

// Every canonical parameter of `model` (the weights, or a state of them) in Megatron's layout,
// and the tied head when it is saved.
MegatronTensors megatron_tensors(const DistModel& model, const Checkpoint& c, const ModelConfig& cfg) {
  MegatronTensors out;
  for (const ParamSpec& spec : gpt2_param_specs(cfg, 1)) {
    out[spec.name] = model.read(spec.name, megatron_shape(spec, c));
    if (spec.name == "wte" && model.has("head")) out["head"] = model.read("head", megatron_shape(spec, c));
  }
  return out;
}

// `tensors` (Megatron's layout at tp 1) in trident's form: stored shapes, the vocabulary rows
// taken from the padded word embedding, QKV rows in trident's order; a tied head among them must
// equal the word embedding.
TensorMap read_canonical(const MegatronTensors& tensors, const Checkpoint& c, const ModelConfig& cfg) {
  TensorMap out;
  for (const ParamSpec& spec : gpt2_param_specs(cfg, 1)) {
    const std::vector<int64_t> shape = shape_vec(stored_shape(spec));
    const std::vector<float>& saved = tensors.at(spec.name);
    HostTensor t;
    t.shape = shape;
    if (spec.name == "wte") {
      if (const auto head = tensors.find("head"); head != tensors.end() && !bit_equal(head->second, saved))
        throw ConfigError(c.dir.string() + ": its output_layer.weight differs from the word embedding; trident ties "
                          "them and cannot load an untied head");
      t.data.assign(saved.begin(), saved.begin() + cfg.vocab_size * cfg.hidden_size);
    } else if (megatron_split(spec.name) == MegatronSplit::kQkv) {
      // Megatron-core's [heads][q,k,v][head_dim] rows (checkpoint_version 3.0's, the whole tensor
      // as one rank would hold it) -> trident's [q,k,v][heads][head_dim].
      const int64_t cols = shape.size() > 1 ? shape[1] : 1;
      t.data.resize(saved.size());
      for (int64_t r = 0; r < shape[0]; ++r)
        std::memcpy(&t.data[static_cast<size_t>(megatron_qkv_row(r, 0, 1, cfg, 3.0) * cols)],
                    &saved[static_cast<size_t>(r * cols)], static_cast<size_t>(cols) * sizeof(float));
    } else {
      t.data = saved;
    }
    out[spec.name] = std::move(t);
  }
  return out;
}

TensorMap read_canonical(const DistModel& model, const Checkpoint& c, const ModelConfig& cfg) {
  return read_canonical(megatron_tensors(model, c, cfg), c, cfg);
}

// The distributed optimizer's state in a bucket format, `sharding` (megatron_dist_buckets.h),
// placed by the weights `weights` (Megatron's layout).
MegatronTrainingState read_bucket_training_state(const Checkpoint& c, const ModelConfig& cfg,
                                                 const MegatronTensors& weights, const std::string& sharding,
                                                 OptimizerState& st) {
  BucketOptimizerState b = read_bucket_optimizer_state(c, cfg, weights, sharding);
  b.common.scheduler = std::move(st.scheduler);
  st = std::move(b.common);
  MegatronTrainingState out;
  out.master = read_canonical(b.master, c, cfg);
  if (!b.exp_avg.empty()) {  // else before the first step: finish_training_state's zeros
    out.exp_avg = read_canonical(b.exp_avg, c, cfg);
    out.exp_avg_sq = read_canonical(b.exp_avg_sq, c, cfg);
  }
  return out;
}

// Every master weight equals or rounds to its weight in `params`; `source` says where the
// masters were read.
void check_masters(const MegatronTrainingState& out, const TensorMap& params, const Checkpoint& c,
                   const ModelConfig& cfg, const std::string& source) {
  for (const auto& [name, t] : out.master)
    if (const int64_t bad = master_mismatch(t.data, params.at(name).data, cfg.dtype); bad >= 0)
      throw IoError((c.dir / ".metadata").string() + ": the master weight of " + name + " under " + source +
                    " does not match the weight (element " + std::to_string(bad) + "): not this model's optimizer");
}

// The optimizer's state (Megatron-core's sharded optimizer state dict, saved by name): the
// non-distributed optimizer's 'optimizer.state.{exp_avg, exp_avg_sq, fp32_param}.<key>', or the
// distributed optimizer's in model space ('fully_reshardable': 'param' for the master;
// 'fully_sharded_model_space': 'fp32_param', each rank's flattened range, reformulated). The
// masters must equal or round to the weights `params` (`weights` in Megatron's layout).
MegatronTrainingState read_training_state(const Checkpoint& c, const ModelConfig& cfg, const TensorMap& params,
                                          const MegatronTensors& weights) {
  const TorchFile& common = *c.files.at(0);
  std::string sharding;
  OptimizerState st = read_common_optimizer_state(common, cfg.dtype, &sharding, decoupled_lr_arg(c));
  if (sharding == "dp_reshardable" || sharding == "dp_zero_gather_scatter") {
    MegatronTrainingState out = read_bucket_training_state(c, cfg, weights, sharding, st);
    check_masters(out, params, c, cfg, "the distributed optimizer's buckets");
    finish_training_state(out, c, st);
    return out;
  }
  const pickle::Value* dist = c.args->get("use_distributed_optimizer");
  std::string master;  // the masters' prefix; none: the weights are the masters
  if (dist && dist->kind == pickle::Kind::Bool && dist->boolean) {
    master = sharding == "fully_reshardable" ? "optimizer.state.param." : "optimizer.state.fp32_param.";
  } else if (cfg.dtype != DType::F32) {
    master = "optimizer.state.fp32_param.";
  }
  MegatronTrainingState out;
  if (!master.empty()) {
    const DistModel masters(c, cfg, master);
    if (!masters.has("wte"))
      throw IoError((c.dir / ".metadata").string() + ": no '" + master + "*' tensors: no optimizer state by parameter "
                    "(saved with --no-save-optim?); import the weights without --with-optimizer");
    out.master = read_canonical(masters, c, cfg);
  } else {
    out.master = params;
  }
  check_masters(out, params, c, cfg, "'" + master + "'");
  const DistModel exp_avg(c, cfg, "optimizer.state.exp_avg."), exp_avg_sq(c, cfg, "optimizer.state.exp_avg_sq.");
  if (exp_avg.has("wte") && !st.steps_recorded)
    throw IoError(common.path() + ": the optimizer's state records no 'step' (its param_groups, 'common_step')");
  if (exp_avg.has("wte") || st.steps > 0) {
    out.exp_avg = read_canonical(exp_avg, c, cfg);
    out.exp_avg_sq = read_canonical(exp_avg_sq, c, cfg);
  }
  finish_training_state(out, c, st);
  return out;
}

}  // namespace

MegatronGpt2Model import_dist_gpt2(const Checkpoint& c, const MegatronImportOptions& o) {
  if (!c.args) throw IoError(c.args_source + ": no 'args' to read the model's shape from");
  MegatronGpt2Model out;
  out.config = model_config_from_megatron_args(*c.args, c.args_source, o.vocab_size);
  const ModelConfig& cfg = out.config;
  if (o.num_attention_heads && *o.num_attention_heads != cfg.num_attention_heads)
    throw ConfigError("--num-attention-heads " + std::to_string(*o.num_attention_heads) + ": " + c.args_source +
                      "'s args say " + std::to_string(cfg.num_attention_heads));
  const MegatronTensors weights = megatron_tensors(DistModel(c, cfg), c, cfg);
  out.tensors = read_canonical(weights, c, cfg);
  if (o.with_optimizer) out.training = read_training_state(c, cfg, out.tensors, weights);
  out.dir = c.dir;
  out.flavour = c.flavour;
  out.iteration = c.iteration.value_or(0);
  out.tp = static_cast<int>(int_arg(*c.args, "tensor_model_parallel_size", 1));
  out.pp = static_cast<int>(int_arg(*c.args, "pipeline_model_parallel_size", 1));
  out.virtual_chunks = static_cast<int>(int_arg(*c.args, "virtual_pipeline_model_parallel_size", 1));
  return out;
}

}  // namespace trident::megatron
