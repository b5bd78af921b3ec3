#include "ckpt/megatron_dist_buckets.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/megatron_distrib_optim.h"
#include "ckpt/megatron_keys.h"
#include "core/error.h"
#include "core/tensor.h"
#include "model/param_spec.h"
#include "parallel/pipeline_split.h"

namespace trident::megatron {

namespace {

using pickle::Kind;
using pickle::Value;

constexpr const char* kStates[3] = {"param", "exp_avg", "exp_avg_sq"};

// A parameter of one rank's model chunk: its canonical name ("head" for a later stage's copy of
// the tied word embedding), how Megatron splits it, its shape at tp 1 and the rank's.
struct LocalParam {
  std::string canonical;
  MegatronSplit split = MegatronSplit::kReplicated;
  std::vector<int64_t> global_shape, shape;
  int64_t numel() const { return numel_of(shape); }
};

// Calls run(offset in the whole tensor, offset in the piece, count) for each contiguous run of
// tensor-parallel rank t's piece of a tensor in Megatron's layout at tp 1: rows split (one
// block; QKV's [heads][q,k,v][head_dim] rows too, a rank's heads being consecutive), columns
// split (a run per row) or whole.
template <typename Run>
void for_each_run(const LocalParam& p, int t, Run run) {
  switch (p.split) {
    case MegatronSplit::kRows:
    case MegatronSplit::kQkv: run(t * p.numel(), 0, p.numel()); return;
    case MegatronSplit::kColumns: {
      const int64_t cols = p.global_shape[1], lc = p.shape[1];
      for (int64_t r = 0; r < p.shape[0]; ++r) run(r * cols + t * lc, r * lc, lc);
      return;
    }
    case MegatronSplit::kReplicated: run(0, 0, p.numel()); return;
  }
}

// args.pipeline_model_parallel_layout: the string Megatron's flag took ("" when None or
// absent), or the input_data of a PipelineParallelLayerLayout saved in its place.
std::string layout_arg(const Checkpoint& c) {
  const Value* v = c.args->get("pipeline_model_parallel_layout");
  if (v && v->kind == Kind::Object) v = v->get("input_data");
  if (!v || v->kind == Kind::None) return "";
  if (!v->is_str())
    throw ConfigError("--with-optimizer: " + c.args_source + ": args.pipeline_model_parallel_layout is " +
                      v->describe() + "; trident reads the layout's string");
  return v->text;
}

std::vector<float> extract_piece(const LocalParam& p, int t, const std::vector<float>& whole) {
  std::vector<float> piece(static_cast<size_t>(p.numel()));
  for_each_run(p, t, [&](int64_t w, int64_t l, int64_t n) {
    std::copy_n(whole.begin() + w, n, piece.begin() + l);
  });
  return piece;
}

void place_piece(const LocalParam& p, int t, const float* piece, std::vector<float>& whole) {
  for_each_run(p, t, [&](int64_t w, int64_t l, int64_t n) { std::copy_n(piece + l, n, whole.begin() + w); });
}

// One model chunk's buffer as saved: its segments' element counts and a reader of a segment's
// state k (0 param, 1 exp_avg, 2 exp_avg_sq) whole, nullopt when not saved (the moments before
// Adam's first step).
struct ChunkBuffer {
  std::vector<int64_t> numel;
  std::function<std::optional<std::vector<float>>(int k, size_t segment)> read;
};

class BucketReader {
 public:
  BucketReader(const Checkpoint& c, const ModelConfig& cfg, const MegatronTensors& weights, std::string sharding)
      : d_(*c.dist),
        cfg_(cfg),
        weights_(weights),
        index_((d_.dir() / ".metadata").string()),
        sharding_(std::move(sharding)),
        dp_(data_parallel_size(c)),
        decoupled_lr_(decoupled_lr_arg(c)) {
    tp_ = static_cast<int>(int_arg(*c.args, "tensor_model_parallel_size", 1));
    pp_ = static_cast<int>(int_arg(*c.args, "pipeline_model_parallel_size", 1));
    vp_ = static_cast<int>(std::max<int64_t>(1, int_arg(*c.args, "virtual_pipeline_model_parallel_size", 1)));
    // Megatron's uneven stages (an int or None; a bool; the layout's string or None).
    split_ = PipelineSplit{cfg.num_layers, pp_, vp_,
                           UnevenPipeline{static_cast<int>(int_arg(*c.args, "decoder_first_pipeline_num_layers", 0)),
                                          static_cast<int>(int_arg(*c.args, "decoder_last_pipeline_num_layers", 0)),
                                          true_arg(*c.args, "account_for_embedding_in_pipeline_split"),
                                          true_arg(*c.args, "account_for_loss_in_pipeline_split"),
                                          layout_arg(c)}};
    if (tp_ < 1 || pp_ < 1) throw ConfigError("--with-optimizer: " + c.args_source + ": tp and pp must be positive");
    // Without the flags Megatron splits evenly (trident's own rule for layers the stages do not
    // divide is not Megatron's).
    std::string why = pipeline_split_error(split_);
    if (why.empty() && !split_.uneven.any() && cfg.num_layers % (pp_ * vp_) != 0) why = "Megatron's split is even";
    if (!why.empty())
      throw ConfigError("--with-optimizer: " + c.args_source + ": its pipeline split of " +
                        std::to_string(cfg.num_layers) + " layers over " + std::to_string(pp_) + " stages x " +
                        std::to_string(vp_) + " chunks does not hold: " + why);
    bool named_like_te = false;
    for (const auto& [key, t] : d_.tensors()) {
      if (key.rfind("chained_", 0) == 0)
        throw ConfigError("--with-optimizer: " + index_ + ": '" + key + "' is of one of several optimizers "
                          "(Megatron-core's ChainedOptimizer); trident reads one");
      // A buffer per model chunk: more (--fp8-param-gather's, expert parameters') are not read.
      if (const size_t at = key.find(".gbuf_idx_"); at != std::string::npos && key.rfind("optimizer.distributed.", 0) == 0)
        if (std::atoll(key.c_str() + at + 10) >= vp_)
          throw ConfigError("--with-optimizer: " + index_ + ": '" + key + "': more buffers than the " +
                            std::to_string(vp_) + " model chunk(s) (several dtypes, --fp8-param-gather?); trident "
                            "reads one buffer a chunk");
      named_like_te = named_like_te || key.find("linear_qkv.layer_norm_weight") != std::string::npos;
    }
    // The layer spec orders a layer's parameters (the buffers follow that order). The saved
    // args name it; without them the keys tell, where they can: the local spec keys its norms
    // as Transformer Engine's (sharded_state_dict_keys_map) since Megatron-core 0.5 or so.
    const pickle::Value* impl = c.args->get("transformer_impl");
    te_ = impl && impl->is_str() ? impl->text == "transformer_engine" : named_like_te;
    for (const ParamSpec& spec : gpt2_param_specs(cfg, 1)) {
      std::vector<int64_t> shape = shape_vec(stored_shape(spec));
      if (spec.name == "wte") shape[0] = weights.at("wte").size() / static_cast<size_t>(cfg.hidden_size);
      global_shape_[spec.name] = shape;
    }
    global_shape_["head"] = global_shape_.at("wte");
  }

  BucketOptimizerState read() {
    BucketOptimizerState out;
    out.common = read_common();
    for (int s = 0; s < pp_; ++s)
      for (int t = 0; t < tp_; ++t) {
        if (sharding_ == "dp_zero_gather_scatter") read_gathered(t, s, out);
        else read_buckets(t, s, out);
      }
    for (const auto& [state, tensors] : {std::pair{"param", &out.master}, {"exp_avg", &out.exp_avg},
                                          {"exp_avg_sq", &out.exp_avg_sq}})
      for (const auto& [name, shape] : global_shape_)
        if (name != "head" && !tensors->count(name) && (tensors == &out.master || !tensors->empty()))
          throw IoError(index_ + ": no rank's buckets hold the '" + state + "' of parameter " + name);
    return out;
  }

 private:
  std::string group(int g) const { return "optimizer.distributed.dp_group_idx_" + std::to_string(g); }

  // The objects of every model-parallel rank that holds parameters: their step counts must agree.
  OptimizerState read_common() const {
    std::optional<OptimizerState> first;
    for (int g = 0; g < tp_ * pp_; ++g) {
      if (buffer_chunks(g / tp_).empty()) continue;  // a stage of no parameters: no state to read
      const std::string optimizer = object(group(g) + ".optimizer", true), scaler = object(group(g) + ".grad_scaler", false);
      const std::unique_ptr<TorchFile> o = d_.open_object(optimizer);
      const std::unique_ptr<TorchFile> sc = scaler.empty() ? nullptr : d_.open_object(scaler);
      // No 'step' (apex's and TE's FusedAdam before their first step): no moments either (read_chunk).
      OptimizerState st = read_object_optimizer_state(*o, sc.get(), cfg_.dtype, decoupled_lr_);
      if (first && st.steps != first->steps)
        throw IoError(o->path() + ": the optimizer took " + std::to_string(st.steps) + " steps, model-parallel rank "
                      "0's " + std::to_string(first->steps));
      if (!first) first = std::move(st);
    }
    return std::move(*first);
  }

  // The object saved for ShardedObject `key` (its key in the files: "<key>/shard_<offset>_<shape>").
  std::string object(const std::string& key, bool required) const {
    for (const std::string& o : d_.objects())
      if (o.rfind(key + "/shard_", 0) == 0) return o;
    if (required) throw IoError(index_ + ": no object '" + key + "' (the distributed optimizer's state dict)");
    return "";
  }

  // Model chunk v's parameters on (tensor-parallel rank t, stage s), in named_parameters() order.
  std::vector<LocalParam> chunk_params(int s, int v) const {
    std::vector<std::string> names;
    const bool first = s == 0 && v == 0, last = s == pp_ - 1 && v == vp_ - 1;
    if (first) names = {"wte", "wpe"};
    const LayerRange layers = pipeline_chunk_layers(split_, s)[v];  // Megatron-core's offsets
    static const char* const kLocal[] = {"ln_1.weight", "ln_1.bias", "attn.proj.weight", "attn.proj.bias",
                                         "attn.qkv.weight", "attn.qkv.bias", "ln_2.weight", "ln_2.bias",
                                         "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};
    static const char* const kTe[] = {"attn.proj.weight", "attn.proj.bias", "ln_1.weight", "ln_1.bias",
                                      "attn.qkv.weight", "attn.qkv.bias", "ln_2.weight", "ln_2.bias",
                                      "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};
    for (int layer = layers.begin; layer < layers.end; ++layer)
      for (const char* suffix : te_ ? kTe : kLocal) names.push_back("h." + std::to_string(layer) + "." + suffix);
    if (last) {
      names.push_back("ln_f.weight");
      names.push_back("ln_f.bias");
      if (!first) names.push_back("head");  // the tied embedding's copy on the last stage
    }
    std::vector<LocalParam> out;
    for (const std::string& n : names) {
      LocalParam p;
      p.canonical = n;
      p.split = megatron_split(n);
      p.global_shape = p.shape = global_shape_.at(n);
      if (p.split == MegatronSplit::kColumns) p.shape[1] /= tp_;
      else if (p.split != MegatronSplit::kReplicated) p.shape[0] /= tp_;
      out.push_back(std::move(p));
    }
    return out;
  }

  // The model chunks of stage s that hold parameters, in order: Megatron builds a gradient
  // buffer for each of them alone, and gbuf_idx counts those buffers.
  std::vector<int> buffer_chunks(int s) const {
    std::vector<int> out;
    for (int v = 0; v < vp_; ++v)
      if (!chunk_params(s, v).empty()) out.push_back(v);
    return out;
  }

  // The bucket tensors' keys of buffer v of model-parallel rank g, without the state suffix, by
  // bucket index.
  std::vector<std::string> bucket_keys(int g, int v) const {
    const std::string prefix = group(g) + ".gbuf_idx_" + std::to_string(v) + ".dtype_";
    std::map<int64_t, std::string> buckets;
    std::string dtype;
    for (const auto& [key, t] : d_.tensors()) {
      if (key.rfind(prefix, 0) != 0 || key.compare(key.size() - 6, 6, ".param") != 0) continue;
      const size_t b = key.find(".bucket_idx_", prefix.size());
      const size_t dot = b == std::string::npos ? b : key.find('.', b + 12);
      const std::string number = dot == std::string::npos ? "" : key.substr(b + 12, dot - b - 12);
      if (number.empty() || number.size() > 6 || !all_digits(number))
        throw IoError(index_ + ": '" + key + "' is no bucket of the distributed optimizer");
      const std::string d = key.substr(prefix.size(), b - prefix.size());
      if (!dtype.empty() && d != dtype)
        throw ConfigError("--with-optimizer: " + index_ + ": buffer " + std::to_string(v) + " of " + group(g) +
                          " holds parameters of dtypes " + dtype + " and " + d + "; trident's GPT-2 has one");
      dtype = d;
      buckets[std::stoll(number)] = key.substr(0, dot);
    }
    std::vector<std::string> out;
    for (const auto& [b, key] : buckets) {
      if (b != static_cast<int64_t>(out.size()))
        throw IoError(index_ + ": " + group(g) + " buffer " + std::to_string(v) + " has no bucket " +
                      std::to_string(out.size()));
      for (const char* k : kStates) {
        const auto it = d_.tensors().find(key + "." + k);
        if (it == d_.tensors().end()) continue;  // the moments before the first step: read_chunk
        if (it->second.size.size() != 1 || it->second.size != d_.tensors().at(key + ".param").size)
          throw IoError(index_ + ": '" + key + "." + k + "' is not a flat tensor of its bucket's 'param' size");
      }
      out.push_back(key);
    }
    if (out.empty())
      throw IoError(index_ + ": no '" + prefix + "*' tensors: no state of buffer " + std::to_string(v) +
                    " of model-parallel rank " + std::to_string(g) + " (saved with --no-save-optim?)");
    return out;
  }

  // dp_reshardable: rank (t, s)'s buckets, a tensor per bucket and state.
  void read_buckets(int t, int s, BucketOptimizerState& out) {
    const int g = s * tp_ + t;
    const std::vector<int> chunks = buffer_chunks(s);
    for (size_t b = 0; b < chunks.size(); ++b) {
      const int v = chunks[b];
      const std::vector<std::string> keys = bucket_keys(g, static_cast<int>(b));
      ChunkBuffer buffer;
      for (const std::string& key : keys) buffer.numel.push_back(d_.tensors().at(key + ".param").size[0]);
      buffer.read = [&](int k, size_t b) -> std::optional<std::vector<float>> {
        const std::string key = keys[b] + "." + kStates[k];
        if (!d_.tensors().count(key)) return std::nullopt;
        return d_.read_f32(key, {0}, {d_.tensors().at(key).size[0]});
      };
      read_chunk(t, s, v, buffer, index_ + ": " + group(g) + ".gbuf_idx_" + std::to_string(b), out);
    }
  }

  // dp_zero_gather_scatter: rank (t, s)'s buffers gathered in one object, as distrib_optim.pt.
  void read_gathered(int t, int s, BucketOptimizerState& out) {
    const std::vector<int> chunks = buffer_chunks(s);
    if (chunks.empty()) return;  // a stage of no parameters
    const std::string key = object(group(s * tp_ + t) + ".param_state", true);
    const std::unique_ptr<TorchFile> f = d_.open_object(key);
    const std::vector<std::vector<SavedSegment>> buffers = saved_buffers(*f, chunks.size());
    for (size_t b = 0; b < chunks.size(); ++b) {
      const int v = chunks[b];
      const std::vector<SavedSegment>& segments = buffers[b];
      ChunkBuffer buffer;
      for (const SavedSegment& seg : segments) buffer.numel.push_back(seg.numel);
      buffer.read = [&](int k, size_t i) -> std::optional<std::vector<float>> {
        return read_segment_range(*f, segments[i], k, 0, segments[i].numel);
      };
      read_chunk(t, s, v, buffer, index_ + ": object '" + key + "' buffer " + std::to_string(b), out);
    }
  }

  // Places chunk v's parameters of (tensor-parallel rank t, stage s) in `buffer` and takes
  // their states into `out`; `where` names the buffer in errors.
  void read_chunk(int t, int s, int v, const ChunkBuffer& buffer, const std::string& where,
                  BucketOptimizerState& out) {
    const std::vector<LocalParam> params = chunk_params(s, v);
    std::vector<std::vector<float>> masters(buffer.numel.size());  // read when the search first looks
    std::vector<BufferSegment> segments;
    for (size_t b = 0; b < buffer.numel.size(); ++b)
      segments.push_back({buffer.numel[b], [&, b](int64_t at, int64_t n) {
                            if (masters[b].empty()) masters[b] = read_state(buffer, 0, b, where);
                            return std::vector<float>(masters[b].begin() + at, masters[b].begin() + at + n);
                          }});
    std::vector<BufferParam> search;
    for (const LocalParam& p : params)
      search.push_back({p.canonical, p.shape, p.numel(), [this, &p, t] {
                          return extract_piece(p, t, weights_.at(p.canonical == "head" ? "wte" : p.canonical));
                        }});
    const std::string rank = " (tensor-parallel rank " + std::to_string(t) + ", stage " + std::to_string(s) +
                             ", chunk " + std::to_string(v) + ")";
    const std::vector<BufferPlace> places = place_parameters(search, segments, cfg_.dtype, dp_, where + rank);
    MegatronTensors* outs[3] = {&out.master, &out.exp_avg, &out.exp_avg_sq};
    for (int k = 0; k < 3; ++k)
      for (size_t b = 0; b < segments.size(); ++b) {
        std::optional<std::vector<float>> state;
        if (k == 0 && !masters[b].empty()) state = std::move(masters[b]);
        else if (k == 0) state = read_state(buffer, 0, b, where);
        else state = buffer.read(k, b);
        if (!state) {  // Adam keeps no moments before its first step
          if (out.common.steps > 0)
            throw IoError(where + rank + ": no '" + kStates[k] + "' state after " + std::to_string(out.common.steps) +
                          " steps");
          continue;
        }
        if (k > 0 && !out.common.steps_recorded)
          throw IoError(where + rank + ": '" + kStates[k] + "' state, but the optimizer's param_groups record no "
                        "'step'");
        for (size_t i = 0; i < params.size(); ++i) {
          const LocalParam& p = params[i];
          // The tied head's state is the word embedding's (Megatron keeps the copies equal);
          // replicated parameters are taken from tensor-parallel rank 0.
          if (places[i].segment != b || p.canonical == "head" || (p.split == MegatronSplit::kReplicated && t > 0))
            continue;
          std::vector<float>& whole = (*outs[k])[p.canonical];
          if (whole.empty()) whole.resize(weights_.at(p.canonical).size());
          place_piece(p, t, state->data() + places[i].at, whole);
        }
      }
  }

  static std::vector<float> read_state(const ChunkBuffer& buffer, int k, size_t b, const std::string& where) {
    std::optional<std::vector<float>> v = buffer.read(k, b);
    if (!v) throw IoError(where + ": segment " + std::to_string(b) + " has no '" + kStates[k] + "'");
    return std::move(*v);
  }

  const DcpCheckpoint& d_;
  const ModelConfig& cfg_;
  const MegatronTensors& weights_;
  std::string index_;
  std::string sharding_;  // dp_reshardable or dp_zero_gather_scatter
  int64_t dp_ = 0;        // the run's data-parallel size (0: unknown)
  std::optional<double> decoupled_lr_;  // args.decoupled_lr: newer Megatron-core's group is recognised by it
  int tp_ = 1, pp_ = 1, vp_ = 1;
  PipelineSplit split_;  // which layers each stage's chunks hold
  bool te_ = false;  // Transformer Engine's layer spec (norms fused into the next linear layer)
  std::map<std::string, std::vector<int64_t>> global_shape_;
};

}  // namespace

BucketOptimizerState read_bucket_optimizer_state(const Checkpoint& c, const ModelConfig& cfg,
                                                 const MegatronTensors& weights, const std::string& sharding) {
  return BucketReader(c, cfg, weights, sharding).read();
}

}  // namespace trident::megatron
