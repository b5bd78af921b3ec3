#include "ckpt/megatron_optimizer.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/megatron_deepspeed_optimizer.h"
#include "ckpt/megatron_distrib_optim.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/metadata.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident::megatron {

namespace {

using pickle::Kind;
using pickle::Value;

// The parameters of one file's model chunks, each chunk's in Megatron's named_parameters()
// order (its state dict's). Transformer Engine's '_extra_state' (a tensor in newer TE) and
// anything else that is not a tensor are not parameters.
std::vector<std::vector<ModelParam>> file_params(const Checkpoint& c, const TorchFile* file) {
  std::vector<const Shard*> shards;
  for (const Shard& s : c.shards)
    if (s.file == file) shards.push_back(&s);
  std::sort(shards.begin(), shards.end(), [](const Shard* a, const Shard* b) { return a->chunk < b->chunk; });
  std::vector<std::vector<ModelParam>> out;
  for (const Shard* s : shards) {
    out.emplace_back();
    for (const auto& [key, value] : s->params) {
      const std::optional<KeyMeaning> m = classify(key);
      if (const TorchTensor* t = TorchFile::tensor(*value); t && m && m->what != KeyMeaning::kSkip)
        out.back().push_back({s, key, value, t});
    }
  }
  return out;
}

// A dict's entries keyed by int (the optimizer's 'state').
std::map<int64_t, const Value*> int_keyed(const TorchFile& f, const Value& d) {
  std::map<int64_t, const Value*> out;
  for (const auto& [k, v] : d.entries) {
    if (k->kind != Kind::Int)
      throw IoError(f.path() + ": the optimizer's state is keyed by " + k->describe() + ", not by parameter index");
    out[k->integer] = v.get();
  }
  return out;
}

// The one optimizer state dict of a file's 'optimizer' (a ChainedOptimizer saves a list).
const Value& single_optimizer(const TorchFile& f, const Value* opt) {
  if (!opt || opt->kind == Kind::None)
    throw IoError(f.path() + ": no 'optimizer' state (saved with --no-save-optim?); import the weights without "
                  "--with-optimizer");
  if (opt->kind == Kind::List) {
    if (opt->items.size() != 1)
      throw ConfigError(f.path() + ": 'optimizer' holds " + std::to_string(opt->items.size()) +
                        " optimizers' states (Megatron-core's ChainedOptimizer); trident reads one");
    return single_optimizer(f, opt->items[0].get());
  }
  if (opt->kind != Kind::Dict) throw IoError(f.path() + ": 'optimizer' is " + opt->describe() + ", not a state dict");
  return *opt;
}

// A number of a param group, or nullopt when absent or not a number.
std::optional<double> group_number(const Value& group, const char* key) {
  const Value* v = group.get(key);
  if (!v) return std::nullopt;
  if (v->kind == Kind::Float) return v->real;
  if (v->kind == Kind::Int) return static_cast<double>(v->integer);
  return std::nullopt;
}

// The kinds of parameter a param group holds: Megatron's default groups split the 1-D ones
// (biases, LayerNorms) from the 2-D ones; a --decoupled-lr run's third group holds the word
// embedding and the output layer.
constexpr size_t kEmbeddingKind = 3;
constexpr size_t kKinds = 4;

std::string kind_name(size_t kind) {
  return kind == kEmbeddingKind ? "word-embedding and output-layer" : std::to_string(kind) + "-D";
}

// A model parameter's kind; with `decoupled` the word embedding and output layer are their own.
size_t param_kind(const ModelParam& p, bool decoupled) {
  if (decoupled)
    if (const std::optional<KeyMeaning> m = classify(p.key);
        m && (m->what == KeyMeaning::kWte || m->what == KeyMeaning::kHead))
      return kEmbeddingKind;
  return std::min<size_t>(p.tensor->shape.size(), 2);
}

class FileReader {
 public:
  FileReader(const Checkpoint& c, const TorchFile& f, DType dtype, bool distributed, OptimizerState& out)
      : f_(f),
        dtype_(dtype),
        distributed_(distributed),
        out_(out),
        chunks_(file_params(c, &f)),
        dp_(data_parallel_size(c)),
        decoupled_lr_(decoupled_lr_arg(c)) {}
  // A file without model chunks (a torch_dist checkpoint's common.pt, or an object of its DCP
  // files whose datum `optimizer` is the optimizer's state): read_common and read_scaler only.
  FileReader(const TorchFile& f, DType dtype, OptimizerState& out, std::optional<double> decoupled_lr,
             const Value* optimizer = nullptr)
      : f_(f), dtype_(dtype), distributed_(false), out_(out), optimizer_(optimizer), decoupled_lr_(decoupled_lr) {}

  // The state that is not the parameters': the groups, the step count (none recorded: nullopt),
  // the loss scaler, Adam's hyperparameters; for a torch_dist checkpoint's common.pt, all of it.
  std::optional<int64_t> read_common() {
    const Value& opt = single_optimizer(f_, optimizer_ ? optimizer_ : f_.root().get("optimizer"));
    inner_ = &opt;
    // Float16OptimizerWithFloat16Params and DistributedOptimizer (Megatron's loader also takes
    // the first names: optimizer_state_dict, fp32_from_fp16).
    const Value* wrapped = opt.get("optimizer") ? opt.get("optimizer") : opt.get("optimizer_state_dict");
    if (wrapped && wrapped->kind == Kind::Dict) {
      inner_ = wrapped;
      masters_ = opt.get("fp32_from_fp16_params") ? opt.get("fp32_from_fp16_params") : opt.get("fp32_from_fp16");
      if (const Value* scaler = opt.get("grad_scaler"); scaler && dtype_ == DType::F16) read_scaler(*scaler);
    }
    // torch_dist's distributed optimizer: the formats by parameter keep the groups here; the
    // bucket formats (dp_reshardable, dp_zero_gather_scatter) keep them in objects of the DCP
    // files (read_object_optimizer_state).
    if (const Value* t = opt.get("param_state_sharding_type"); t && t->is_str()) {
      sharding_type_ = t->text;
      if (sharding_type_ == "dp_reshardable" || sharding_type_ == "dp_zero_gather_scatter") return std::nullopt;
      if (sharding_type_ != "fully_reshardable" && sharding_type_ != "fully_sharded_model_space")
        throw ConfigError("--with-optimizer: " + f_.path() + ": the distributed optimizer's state is saved in its '" +
                          sharding_type_ + "' format, which trident does not read (it reads dp_reshardable, "
                          "dp_zero_gather_scatter, fully_reshardable and fully_sharded_model_space); import the weights without "
                          "--with-optimizer");
    }
    groups_ = inner_->get("param_groups");
    if (!groups_ || groups_->kind != Kind::List)
      throw IoError(f_.path() + ": 'optimizer' has no 'param_groups' list (not Megatron's optimizer state)");
    std::optional<int64_t> steps;
    for (size_t g = 0; g < groups_->items.size(); ++g) {
      const Value& group = *groups_->items[g];
      check_group(group, g);
      if (const Value* s = group.get("step")) note_steps(steps, step_value(f_, *s, where(g) + " 'step'"), where(g));
    }
    // torch's Adam under Megatron-core's sharded state dict: one 'common_step' for all.
    if (const Value* state = inner_->get("state"))
      if (const Value* s = state->get("common_step"))
        note_steps(steps, step_value(f_, *s, "'common_step'"), f_.path() + ": the optimizer's 'common_step'");
    return steps;
  }

  // The distributed optimizer's param_state_sharding_type (a torch_dist checkpoint's).
  const std::string& sharding_type() const { return sharding_type_; }

  // Returns the file's step count.
  int64_t read() {
    std::optional<int64_t> steps = read_common();
    if (distributed_) {
      read_distributed();
      if (!steps) throw IoError(f_.path() + ": the optimizer's param_groups record no 'step'");
      return *steps;
    }
    if (dtype_ != DType::F32 && (!masters_ || masters_->kind != Kind::List))
      throw IoError(f_.path() + ": the " + dtype_name(dtype_) + " model's optimizer holds no 'fp32_from_fp16_params' "
                    "master weights");
    const Value* state = inner_->get("state");
    if (state && state->kind != Kind::Dict)
      throw IoError(f_.path() + ": the optimizer's 'state' is " + state->describe());
    const std::map<int64_t, const Value*> states = state ? int_keyed(f_, *state) : std::map<int64_t, const Value*>{};
    // An fp32 model's optimizer before its first step holds nothing to match: its masters are
    // the parameters and its moments zero (the import's default for a parameter not listed).
    if (states.empty() && !masters_) {
      if (steps.value_or(0) != 0)
        throw IoError(f_.path() + ": the optimizer took " + std::to_string(*steps) + " steps but holds no state");
      return 0;
    }
    read_indexed(*groups_, states, masters_, steps);
    if (!states.empty()) out_.moments = true;
    if (!steps && !states.empty())
      throw IoError(f_.path() + ": the optimizer's state records no 'step' (in its param_groups or its states)");
    return steps.value_or(0);
  }

 private:
  std::string where(size_t g) const { return f_.path() + ": optimizer param_groups[" + std::to_string(g) + "]"; }

  // A group trident can map: Megatron's default groups or a --decoupled-lr group, whose rates
  // are kept; the first group's Adam betas and epsilon are kept.
  void check_group(const Value& group, size_t g) {
    roles_.push_back(group_role(group, where(g), decoupled_lr_));
    if (roles_.back() == GroupRole::kDecoupled) note_decoupled(group, g);
    if (g == 0) out_.adam = adam_hyperparameters(group);
  }

  // Every --decoupled-lr group of the checkpoint holds the same peak and floor.
  void note_decoupled(const Value& group, size_t g) {
    const std::optional<double> max_lr = group_number(group, "max_lr"), min_lr = group_number(group, "min_lr");
    if (!max_lr || !min_lr) throw IoError(where(g) + ": a --decoupled-lr group without its max_lr and min_lr");
    const nlohmann::json rates = {{"max_lr", *max_lr}, {"min_lr", *min_lr}};
    if (!out_.decoupled_lr.is_null() && out_.decoupled_lr != rates)
      throw IoError(where(g) + ": the --decoupled-lr group's rates " + rates.dump() + " differ from another group's " +
                    out_.decoupled_lr.dump());
    out_.decoupled_lr = rates;
  }

  // The non-distributed optimizer: the state by index, the indices counting through the groups,
  // each group's of one kind (2-D, 1-D, or a --decoupled-lr group's) in named_parameters() order.
  void read_indexed(const Value& groups, const std::map<int64_t, const Value*>& states, const Value* masters,
                    std::optional<int64_t>& steps) {
    const bool decoupled = std::find(roles_.begin(), roles_.end(), GroupRole::kDecoupled) != roles_.end();
    std::vector<std::vector<const ModelParam*>> by_kind(kKinds);  // the parameters of each kind, in order
    for (const auto& chunk : chunks_)
      for (const ModelParam& p : chunk) by_kind[param_kind(p, decoupled)].push_back(&p);
    size_t next[kKinds] = {};
    for (size_t g = 0; g < groups.items.size(); ++g) {
      const Value& group = *groups.items[g];
      const Value* ids = group.get("params");
      if (!ids || ids->kind != Kind::List) throw IoError(where(g) + ": no 'params' list");
      const Value* group_masters = masters ? list_item(*masters, g, "fp32_from_fp16_params") : nullptr;
      if (group_masters && group_masters->items.size() != ids->items.size())
        throw IoError(where(g) + ": " + std::to_string(group_masters->items.size()) + " master weights for " +
                      std::to_string(ids->items.size()) + " parameters");
      for (size_t i = 0; i < ids->items.size(); ++i) {
        const Value& id = *ids->items[i];
        if (id.kind != Kind::Int) throw IoError(where(g) + ": parameter " + id.describe() + " is not an index");
        const auto st = states.find(id.integer);
        const Value* st_value = st == states.end() ? nullptr : st->second;
        ParamState ps;
        if (st_value) {
          ps.exp_avg = st_value->get("exp_avg");
          ps.exp_avg_sq = st_value->get("exp_avg_sq");
          if (!ps.exp_avg || !ps.exp_avg_sq)
            throw IoError(f_.path() + ": optimizer state " + std::to_string(id.integer) + " has no exp_avg and "
                          "exp_avg_sq (not Adam's)");
          if (const Value* s = st_value->get("step")) {
            const std::string what = "optimizer state " + std::to_string(id.integer) + " 'step'";
            note_steps(steps, step_value(f_, *s, what), where(g));
          }
        } else if (!states.empty()) {
          throw IoError(f_.path() + ": the optimizer has no state for parameter " + std::to_string(id.integer) +
                        " while it has for others");
        }
        if (group_masters) ps.master = group_masters->items[i].get();
        // The group's kind: its tensors say whether it holds weights or not.
        const Value* sample = ps.exp_avg ? ps.exp_avg : ps.master;
        const TorchTensor* st_t = sample ? TorchFile::tensor(*sample) : nullptr;
        if (!st_t) throw IoError(f_.path() + ": optimizer state " + std::to_string(id.integer) + " holds no tensor");
        const size_t kind =
            roles_[g] == GroupRole::kDecoupled ? kEmbeddingKind : std::min<size_t>(st_t->shape.size(), 2);
        if (i == 0) check_group_kind(group, g, kind);
        if (next[kind] >= by_kind[kind].size())
          throw IoError(where(g) + ": more " + kind_name(kind) + " parameters than the model's " +
                        std::to_string(by_kind[kind].size()));
        const ModelParam& p = *by_kind[kind][next[kind]++];
        if (!ps.master) ps.master = p.value;  // fp32: the parameter is the master
        check_param(p, ps, id.integer);
        out_.params[{p.shard, p.key}] = ps;
      }
    }
    for (size_t k = 0; k < kKinds; ++k)
      if (next[k] != by_kind[k].size())
        throw IoError(f_.path() + ": the optimizer holds " + std::to_string(next[k]) + " of the model's " +
                      std::to_string(by_kind[k].size()) + " " + kind_name(k) + " parameters");
  }

  // Megatron exempts biases and norms (1-D) from weight decay, and decays the weights: a group
  // that says otherwise was not built by Megatron's default rule.
  void check_group_kind(const Value& group, size_t g, size_t kind) const {
    const std::optional<double> wd = group_number(group, "weight_decay"), mult = group_number(group, "wd_mult");
    const bool exempt = (wd && *wd == 0.0) || (mult && *mult == 0.0);
    if ((kind < 2 && !exempt) || (kind >= 2 && mult && *mult == 0.0))
      throw IoError(where(g) + " holds " + kind_name(kind) + " parameters " + (kind < 2 ? "with" : "without") +
                    " weight decay: not Megatron's default parameter groups");
  }

  const Value* list_item(const Value& list, size_t i, const char* name) const {
    if (list.kind != Kind::List || i >= list.items.size() || list.items[i]->kind != Kind::List)
      throw IoError(f_.path() + ": '" + name + "' has no list for param group " + std::to_string(i));
    return list.items[i].get();
  }

  void note_steps(std::optional<int64_t>& steps, std::optional<int64_t> v, const std::string& what) const {
    if (!v) throw IoError(what + ": 'step' is not a step count");
    if (steps && *steps != *v)
      throw IoError(what + ": step " + std::to_string(*v) + " where other parameters took " + std::to_string(*steps));
    steps = v;
  }

  // Every tensor of the parameter's state has its shape; a 16-bit master rounds to it.
  void check_param(const ModelParam& p, const ParamState& ps, int64_t id) const {
    // The chunk when not the only one: Shard::where is the file, then 'model1' etc.
    const std::string chunk = p.shard->where.substr(std::min(p.shard->where.size(), f_.path().size()));
    const std::string what = "optimizer state " + std::to_string(id) + " (parameter '" + p.key + "'" +
                             (chunk.empty() ? "" : " of" + chunk) + ")";
    for (const Value* v : {ps.master, ps.exp_avg, ps.exp_avg_sq}) {
      if (!v) continue;
      const TorchTensor* t = TorchFile::tensor(*v);
      if (!t || t->shape != p.tensor->shape)
        throw IoError(f_.path() + ": " + what + " is " + (t ? "of shape " + shape_str(t->shape) : v->describe()) +
                      ", the parameter " + shape_str(p.tensor->shape) + " (not Megatron's parameter order?)");
    }
    if (dtype_ == DType::F32) return;
    const int64_t bad = master_mismatch(f_.read_f32(*TorchFile::tensor(*ps.master), what + " master"),
                                        f_.read_f32(*p.tensor, "'" + p.key + "'"), dtype_);
    if (bad >= 0)
      throw IoError(f_.path() + ": the master weight of " + what + " does not round to the parameter (element " +
                    std::to_string(bad) + "): not Megatron's parameter order, or not this model's optimizer");
  }

  // --use-distributed-optimizer: the parameters' state is in distrib_optim.pt beside the file.
  void read_distributed() {
    const std::filesystem::path path = std::filesystem::path(f_.path()).parent_path() / "distrib_optim.pt";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      throw IoError(path.string() + ": missing (--use-distributed-optimizer keeps the optimizer's parameter state "
                    "there)");
    out_.files.push_back(std::make_unique<TorchFile>(path.string()));
    read_distributed_state(*out_.files.back(), chunks_, dtype_, dp_, out_);
  }

  // Megatron's DynamicGradScaler state: {'scale': tensor, 'growth_tracker', 'hysteresis_tracker'}
  // (ConstantGradScaler saves an empty dict).
 public:
  void read_scaler(const Value& s) {
    const Value* scale = s.get("scale");
    if (s.kind != Kind::Dict || !scale) return;
    const std::optional<double> value = scalar_value(f_, *scale, "grad_scaler 'scale'");
    const Value* growth = s.get("growth_tracker");
    const Value* hysteresis = s.get("hysteresis_tracker");
    if (!value || !(*value > 0) || !growth || growth->kind != Kind::Int || !hysteresis || hysteresis->kind != Kind::Int)
      throw IoError(f_.path() + ": 'grad_scaler' is not a DynamicGradScaler's state (scale, growth_tracker, "
                    "hysteresis_tracker)");
    out_.loss_scaler = {{"scale", *value}, {"growth_tracker", growth->integer},
                        {"hysteresis_tracker", hysteresis->integer}};
  }


 private:
  const TorchFile& f_;
  DType dtype_;
  bool distributed_;
  OptimizerState& out_;
  const Value* optimizer_ = nullptr;  // the optimizer's state when not the file's 'optimizer'
  std::vector<std::vector<ModelParam>> chunks_;
  int64_t dp_ = 0;                 // the run's data-parallel size (0: unknown)
  const Value* inner_ = nullptr;   // the torch optimizer's state dict
  const Value* groups_ = nullptr;  // its param_groups
  const Value* masters_ = nullptr; // fp32_from_fp16_params
  std::vector<GroupRole> roles_;   // each param group's
  std::string sharding_type_;
  std::optional<double> decoupled_lr_;  // args.decoupled_lr
};

// The checkpoint's OptimizerParamScheduler state (scheduler_state), null without one.
nlohmann::json read_scheduler(const TorchFile& f) {
  const Value* s = f.root().get("opt_param_scheduler");
  if (!s || s->kind != Kind::Dict) return nullptr;
  return scheduler_state(f, *s, "opt_param_scheduler");
}

}  // namespace

// A number saved as an int, a float or a one-element floating-point tensor (a step count, the
// loss scale); nullopt for anything else.
std::optional<double> scalar_value(const TorchFile& f, const Value& v, const std::string& what) {
  if (v.kind == Kind::Int) return static_cast<double>(v.integer);
  if (v.kind == Kind::Float) return v.real;
  if (const TorchTensor* t = TorchFile::tensor(v); t && t->numel() == 1) return f.read_f32(*t, what)[0];
  return std::nullopt;
}

// A step count: an int (apex's FusedAdam, older torch), a float, or a one-element tensor (torch's
// Adam since 1.12); nullopt when `v` is none of those or not a count.
std::optional<int64_t> step_value(const TorchFile& f, const Value& v, const std::string& what) {
  const std::optional<double> x = scalar_value(f, v, what);
  if (!x || !(*x >= 0 && *x < 9.0e15) || *x != static_cast<double>(static_cast<int64_t>(*x))) return std::nullopt;
  return static_cast<int64_t>(*x);
}

nlohmann::json scheduler_state(const TorchFile& f, const Value& s, const std::string& what) {
  // Megatron's field name -> the saved one: OptimizerParamScheduler's own; AnnealingLR's
  // (Megatron-DeepSpeed) where it has no lr_warmup_steps.
  static const std::vector<std::pair<const char*, const char*>> megatron = {
      {"max_lr", "max_lr"}, {"min_lr", "min_lr"}, {"lr_warmup_steps", "lr_warmup_steps"},
      {"lr_decay_steps", "lr_decay_steps"}, {"lr_decay_style", "lr_decay_style"}, {"num_steps", "num_steps"},
      {"start_wd", "start_wd"}, {"end_wd", "end_wd"}, {"wd_incr_steps", "wd_incr_steps"},
      {"wd_incr_style", "wd_incr_style"}, {"wsd_decay_steps", "wsd_decay_steps"},
      {"lr_wsd_decay_style", "lr_wsd_decay_style"}};
  static const std::vector<std::pair<const char*, const char*>> annealing = {
      {"max_lr", "max_lr"}, {"min_lr", "min_lr"}, {"lr_warmup_steps", "warmup_steps"},
      {"lr_decay_steps", "decay_steps"}, {"lr_decay_style", "decay_style"}, {"num_steps", "num_steps"}};
  const bool annealing_lr = !s.get("lr_warmup_steps") && s.get("warmup_steps");
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [ours, saved] : annealing_lr ? annealing : megatron) {
    const Value* v = s.get(saved);
    if (!v || v->kind == Kind::None) continue;
    if (v->kind == Kind::Int) out[ours] = v->integer;
    else if (v->kind == Kind::Float) out[ours] = v->real;
    else if (v->kind == Kind::Str) out[ours] = v->text;
    else throw IoError(f.path() + ": " + what + " '" + saved + "' is " + v->describe());
  }
  return out;
}

namespace {

// The groups no reader maps: a learning-rate multiplier's, experts'. `reads` says which it maps.
void refuse_other_groups(const Value& group, const std::string& where, const std::string& reads) {
  if (const std::optional<double> m = group_number(group, "lr_mult"); m && *m != 1.0)
    throw ConfigError(where + " has lr_mult " + std::to_string(*m) + " (a scale_lr_cond group): trident reads " + reads);
  if (true_arg(group, "is_expert_parallel"))
    throw ConfigError(where + " is an 'is_expert_parallel' group: trident reads " + reads);
}

}  // namespace

GroupRole group_role(const Value& group, const std::string& where, std::optional<double> decoupled_lr) {
  const std::string reads = "Megatron's default parameter groups and a --decoupled-lr run's word-embedding group";
  refuse_other_groups(group, where, reads);
  if (true_arg(group, "is_decoupled_lr")) return GroupRole::kDecoupled;
  const Value* default_config = group.get("default_config");
  if (!default_config || default_config->kind != Kind::Bool || default_config->boolean) return GroupRole::kDefault;
  // Newer Megatron-core's override of the learning rate: --decoupled-lr's, or another (muP's).
  const std::optional<double> max_lr = group_number(group, "max_lr");
  if (!decoupled_lr || !max_lr || *max_lr != *decoupled_lr)
    throw ConfigError(where + " trains at a learning rate of its own (default_config False, max_lr " +
                      (max_lr ? detail::concat(*max_lr) : std::string("not saved")) + ") that is not the run's " +
                      "--decoupled-lr (args.decoupled_lr " +
                      (decoupled_lr ? detail::concat(*decoupled_lr) : std::string("None")) + "): trident reads " + reads);
  return GroupRole::kDecoupled;
}

void check_default_group(const Value& group, const std::string& where) {
  const std::string reads = "Megatron's default parameter groups";
  refuse_other_groups(group, where, reads);
  if (true_arg(group, "is_decoupled_lr")) throw ConfigError(where + " is an 'is_decoupled_lr' group: trident reads " + reads);
}

std::optional<double> decoupled_lr_arg(const Checkpoint& c) {
  const Value* v = c.args ? c.args->get("decoupled_lr") : nullptr;
  if (v && v->kind == Kind::Float) return v->real;
  if (v && v->kind == Kind::Int) return static_cast<double>(v->integer);
  return std::nullopt;
}

nlohmann::json adam_hyperparameters(const Value& group) {
  const Value* betas = group.get("betas");
  const std::optional<double> eps = group_number(group, "eps");
  if (!betas || (betas->kind != Kind::Tuple && betas->kind != Kind::List) || betas->items.size() != 2 || !eps)
    return nullptr;
  std::optional<double> b[2];
  for (int i = 0; i < 2; ++i) {
    const Value& x = *betas->items[static_cast<size_t>(i)];
    if (x.kind == Kind::Float) b[i] = x.real;
    else if (x.kind == Kind::Int) b[i] = static_cast<double>(x.integer);
  }
  if (!b[0] || !b[1]) return nullptr;
  return {{"beta1", *b[0]}, {"beta2", *b[1]}, {"eps", *eps}};
}

int64_t data_parallel_size(const Checkpoint& c) {
  if (!c.args) return 0;
  if (const int64_t dp = int_arg(*c.args, "data_parallel_size", 0); dp > 0) return dp;
  const int64_t world = int_arg(*c.args, "world_size", 0);
  const int64_t model = std::max<int64_t>(1, int_arg(*c.args, "tensor_model_parallel_size", 1)) *
                        std::max<int64_t>(1, int_arg(*c.args, "pipeline_model_parallel_size", 1)) *
                        std::max<int64_t>(1, int_arg(*c.args, "context_parallel_size", 1));
  return world > 0 && world % model == 0 ? world / model : 0;
}

int64_t master_mismatch(const std::vector<float>& master, const std::vector<float>& param, DType dtype) {
  if (master.size() != param.size()) return 0;
  for (size_t i = 0; i < master.size(); ++i) {
    const float m = master[i];
    const float r = dtype == DType::F16 ? half_to_float(float_to_half(m))
                    : dtype == DType::BF16 ? bf16_to_float(float_to_bf16(m))
                                           : m;
    if (float_bits(r) != float_bits(param[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

OptimizerState read_common_optimizer_state(const TorchFile& common, DType model_dtype, std::string* sharding_type,
                                           std::optional<double> decoupled_lr) {
  OptimizerState out;
  FileReader r(common, model_dtype, out, decoupled_lr);
  const std::optional<int64_t> steps = r.read_common();
  out.steps = steps.value_or(0);
  out.steps_recorded = steps.has_value();
  *sharding_type = r.sharding_type();
  out.scheduler = read_scheduler(common);
  return out;
}

OptimizerState read_object_optimizer_state(const TorchFile& optimizer, const TorchFile* grad_scaler,
                                           DType model_dtype, std::optional<double> decoupled_lr) {
  // Megatron-core saves a ShardedObject as the list of its one datum.
  const auto datum = [](const TorchFile& f) -> const Value& {
    const Value& root = f.root();
    if (root.kind != Kind::List || root.items.size() != 1)
      throw IoError(f.path() + ": holds " + root.describe() + ", not a sharded object's datum");
    return *root.items[0];
  };
  OptimizerState out;
  const std::optional<int64_t> steps =
      FileReader(optimizer, model_dtype, out, decoupled_lr, &datum(optimizer)).read_common();
  out.steps = steps.value_or(0);
  out.steps_recorded = steps.has_value();
  if (grad_scaler && model_dtype == DType::F16)
    FileReader(*grad_scaler, model_dtype, out, decoupled_lr).read_scaler(datum(*grad_scaler));
  return out;
}

void finish_training_state(MegatronTrainingState& out, const Checkpoint& c, const OptimizerState& st) {
  const pickle::Value& args = *c.args;
  if (out.exp_avg.empty())  // before the first step
    for (const auto& [name, t] : out.master) {
      out.exp_avg[name] = HostTensor{t.shape, std::vector<float>(t.data.size(), 0.0f)};
      out.exp_avg_sq[name] = out.exp_avg[name];
    }
  out.consumed_samples = int_arg(args, "consumed_train_samples", 0);
  if (out.consumed_samples < 0)
    throw IoError(c.args_source + ": args.consumed_train_samples " + std::to_string(out.consumed_samples) +
                  " is not a count of samples");
  nlohmann::json& ts = out.trainer_state;
  ts["optimizer_steps"] = st.steps;
  ts["consumed_valid_samples"] = int_arg(args, "consumed_valid_samples", 0);
  ts["skipped_train_samples"] = int_arg(args, "skipped_train_samples", 0);  // --iterations-to-skip's
  // Megatron-DeepSpeed counts the tokens too (fewer than samples x seq_length while a curriculum
  // shortens the sequences); without it trident takes samples x seq_length.
  if (const int64_t tokens = int_arg(args, "consumed_train_tokens", -1); tokens >= 0)
    ts["consumed_train_tokens"] = tokens;
  ts[kRngStateKey] = int_arg(args, "seed", 1234);
  ts[kDataSeedKey] = int_arg(args, "seed", 1234);
  ts[kSampleOrderKey] = kSampleOrder;  // its consumed samples count in Megatron's order, which trident's is
  if (const int64_t gbs = int_arg(args, "global_batch_size", 0); gbs > 0) ts["global_batch_size"] = gbs;
  if (!st.scheduler.is_null()) {
    ts["opt_param_scheduler"] = st.scheduler;
    if (!st.decoupled_lr.is_null()) {  // Megatron keeps them in the group, trident with the schedule
      ts["opt_param_scheduler"]["decoupled_lr"] = st.decoupled_lr["max_lr"];
      ts["opt_param_scheduler"]["decoupled_min_lr"] = st.decoupled_lr["min_lr"];
    }
  }
  if (!st.loss_scaler.is_null()) ts["loss_scaler"] = st.loss_scaler;
  if (!st.adam.is_null()) ts[kAdamKey] = st.adam;
  if (c.flops_so_far) ts["num_floating_point_operations_so_far"] = *c.flops_so_far;
  // What a trident checkpoint may hold (the args' counts, the scheduler's fields as saved).
  check_trainer_state(ts, c.args_source + " (its training state as trident reads it)");
}

void check_optimizer_state_readable(const Checkpoint& c) {
  if (c.dir.filename() == "release")  // Megatron loads a release folder at iteration 0 without its optimizer
    throw ConfigError("--with-optimizer: " + c.dir.string() + " is a release checkpoint, which Megatron loads without "
                      "optimizer state; import it without --with-optimizer");
  if (!c.args || !c.iteration)
    throw ConfigError("--with-optimizer: " + c.dir.string() + " records no " + (c.args ? "iteration" : "args") +
                      "; import it without --with-optimizer");
}

OptimizerState read_optimizer_state(const Checkpoint& c, DType model_dtype) {
  if (c.flavour == "Megatron-DeepSpeed") return read_deepspeed_optimizer_state(c, model_dtype);
  const bool distributed = true_arg(*c.args, "use_distributed_optimizer");
  OptimizerState out;
  bool first = true;
  for (const auto& file : c.files) {
    const int64_t steps = FileReader(c, *file, model_dtype, distributed, out).read();
    if (!first && steps != out.steps)
      throw IoError(file->path() + ": the optimizer took " + std::to_string(steps) + " steps, " + c.files[0]->path() +
                    "'s " + std::to_string(out.steps));
    out.steps = steps;
    if (first) out.scheduler = read_scheduler(*file);
    first = false;
  }
  return out;
}

}  // namespace trident::megatron
