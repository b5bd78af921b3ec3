#include "ckpt/megatron_optimizer.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident::megatron {

namespace {

using pickle::Kind;
using pickle::Value;

// A parameter of a file's model chunks.
struct ModelParam {
  const Shard* shard;
  std::string key;
  const Value* value;
  const TorchTensor* tensor;
};

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

// The parameters of one file in Megatron's named_parameters() order: chunk by chunk, each in its
// state dict's order. Transformer Engine's '_extra_state' (a tensor in newer TE) and anything
// else that is not a tensor are not parameters.
std::vector<ModelParam> file_params(const Checkpoint& c, const TorchFile* file) {
  std::vector<const Shard*> shards;
  for (const Shard& s : c.shards)
    if (s.file == file) shards.push_back(&s);
  std::sort(shards.begin(), shards.end(), [](const Shard* a, const Shard* b) { return a->chunk < b->chunk; });
  std::vector<ModelParam> out;
  for (const Shard* s : shards)
    for (const auto& [key, value] : s->params)
      if (const TorchTensor* t = TorchFile::tensor(*value); t && !ends_with(key, "_extra_state"))
        out.push_back({s, key, value, t});
  return out;
}

// A dict's entries keyed by int (the optimizer's 'state').
std::map<int64_t, const Value*> int_keyed(const Value& d) {
  std::map<int64_t, const Value*> out;
  for (const auto& [k, v] : d.entries)
    if (k->kind == Kind::Int) out[k->integer] = v.get();
  return out;
}

// A step count: an int (apex's FusedAdam, older torch), a float, or a one-element tensor (torch's
// Adam since 1.12). nullopt when `v` is none of those.
std::optional<int64_t> step_value(const TorchFile& f, const Value& v, const std::string& what) {
  if (v.kind == Kind::Int) return v.integer;
  if (v.kind == Kind::Float) return static_cast<int64_t>(v.real);
  if (const TorchTensor* t = TorchFile::tensor(v); t && t->numel() == 1) return static_cast<int64_t>(f.read_f32(*t, what)[0]);
  return std::nullopt;
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

class FileReader {
 public:
  FileReader(const Checkpoint& c, const TorchFile& f, DType dtype, OptimizerState& out)
      : f_(f), dtype_(dtype), out_(out), params_(file_params(c, &f)) {}

  // Returns the file's step count.
  int64_t read() {
    const Value& opt = single_optimizer(f_, f_.root().get("optimizer"));
    const Value* inner = &opt;
    const Value* masters = nullptr;
    // Float16OptimizerWithFloat16Params (Megatron's loader also takes its first names:
    // optimizer_state_dict, fp32_from_fp16).
    const Value* wrapped = opt.get("optimizer") ? opt.get("optimizer") : opt.get("optimizer_state_dict");
    if (wrapped && wrapped->kind == Kind::Dict) {
      inner = wrapped;
      masters = opt.get("fp32_from_fp16_params") ? opt.get("fp32_from_fp16_params") : opt.get("fp32_from_fp16");
      if (const Value* scaler = opt.get("grad_scaler"); scaler && dtype_ == DType::F16) read_scaler(*scaler);
    }
    if (dtype_ != DType::F32 && (!masters || masters->kind != Kind::List))
      throw IoError(f_.path() + ": the " + dtype_name(dtype_) + " model's optimizer holds no 'fp32_from_fp16_params' "
                    "master weights");
    const Value* groups = inner->get("param_groups");
    const Value* state = inner->get("state");
    if (!groups || groups->kind != Kind::List || (state && state->kind != Kind::Dict))
      throw IoError(f_.path() + ": 'optimizer' has no 'param_groups' list (not Megatron's optimizer state)");
    const std::map<int64_t, const Value*> states = state ? int_keyed(*state) : std::map<int64_t, const Value*>{};
    // An fp32 model's optimizer before its first step holds nothing to match: its masters are
    // the parameters and its moments zero (the import's default for a parameter not listed).
    if (states.empty() && !masters) return 0;

    std::vector<std::vector<const ModelParam*>> by_rank(3);  // parameters by dimensions, in order
    for (const ModelParam& p : params_) by_rank[std::min<size_t>(p.tensor->shape.size(), 2)].push_back(&p);
    size_t next[3] = {0, 0, 0};
    std::optional<int64_t> steps;
    for (size_t g = 0; g < groups->items.size(); ++g) {
      const Value& group = *groups->items[g];
      const Value* ids = group.get("params");
      if (!ids || ids->kind != Kind::List) throw IoError(where(g) + ": no 'params' list");
      const Value* group_masters = masters ? list_item(*masters, g, "fp32_from_fp16_params") : nullptr;
      if (group_masters && group_masters->items.size() != ids->items.size())
        throw IoError(where(g) + ": " + std::to_string(group_masters->items.size()) + " master weights for " +
                      std::to_string(ids->items.size()) + " parameters");
      if (const Value* s = group.get("step")) note_steps(steps, step_value(f_, *s, where(g) + " 'step'"), where(g));
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
          if (const Value* s = st_value->get("step"))
            note_steps(steps, step_value(f_, *s, "optimizer state " + std::to_string(id.integer) + " 'step'"), where(g));
        } else if (!states.empty()) {
          throw IoError(f_.path() + ": the optimizer has no state for parameter " + std::to_string(id.integer) +
                        " while it has for others");
        }
        if (group_masters) ps.master = group_masters->items[i].get();
        // The group's kind: its first parameter's tensors say whether it holds weights or not.
        const Value* sample = ps.exp_avg ? ps.exp_avg : ps.master;
        const TorchTensor* st_t = sample ? TorchFile::tensor(*sample) : nullptr;
        if (!st_t) throw IoError(f_.path() + ": optimizer state " + std::to_string(id.integer) + " holds no tensor");
        const size_t kind = std::min<size_t>(st_t->shape.size(), 2);
        if (next[kind] >= by_rank[kind].size())
          throw IoError(where(g) + ": more " + std::to_string(kind) + "-D parameters than the model's " +
                        std::to_string(by_rank[kind].size()));
        const ModelParam& p = *by_rank[kind][next[kind]++];
        if (!ps.master) ps.master = p.value;  // fp32: the parameter is the master
        check_param(p, ps, id.integer);
        out_.params[{p.shard, p.key}] = ps;
      }
    }
    for (size_t k = 0; k < 3; ++k)
      if (next[k] != by_rank[k].size())
        throw IoError(f_.path() + ": the optimizer holds " + std::to_string(next[k]) + " of the model's " +
                      std::to_string(by_rank[k].size()) + " " + std::to_string(k) + "-D parameters");
    if (!states.empty()) out_.moments = true;
    if (!steps && !states.empty())
      throw IoError(f_.path() + ": the optimizer's state records no 'step' (in its param_groups or its states)");
    return steps.value_or(0);
  }

 private:
  std::string where(size_t g) const { return f_.path() + ": optimizer param_groups[" + std::to_string(g) + "]"; }

  const Value* list_item(const Value& list, size_t i, const char* name) const {
    if (list.kind != Kind::List || i >= list.items.size() || list.items[i]->kind != Kind::List)
      throw IoError(f_.path() + ": '" + name + "' has no list for param group " + std::to_string(i));
    return list.items[i].get();
  }

  void note_steps(std::optional<int64_t>& steps, std::optional<int64_t> v, const std::string& what) const {
    if (!v) throw IoError(what + ": 'step' is not a number");
    if (steps && *steps != *v)
      throw IoError(what + ": step " + std::to_string(*v) + " where other parameters took " + std::to_string(*steps));
    steps = v;
  }

  // Every tensor of the parameter's state has its shape; a 16-bit master rounds to it.
  void check_param(const ModelParam& p, const ParamState& ps, int64_t id) const {
    const std::string what = "optimizer state " + std::to_string(id) + " (parameter '" + p.key + "')";
    for (const Value* v : {ps.master, ps.exp_avg, ps.exp_avg_sq}) {
      if (!v) continue;
      const TorchTensor* t = TorchFile::tensor(*v);
      if (!t || t->shape != p.tensor->shape)
        throw IoError(f_.path() + ": " + what + " is " + (t ? "of shape " + shape_str(t->shape) : v->describe()) +
                      ", the parameter " + shape_str(p.tensor->shape) + " (not Megatron's parameter order?)");
    }
    if (dtype_ == DType::F32) return;
    const std::vector<float> master = f_.read_f32(*TorchFile::tensor(*ps.master), what + " master");
    const std::vector<float> param = f_.read_f32(*p.tensor, "'" + p.key + "'");
    for (size_t i = 0; i < master.size(); ++i) {
      const float r = dtype_ == DType::F16 ? half_to_float(float_to_half(master[i])) : bf16_to_float(float_to_bf16(master[i]));
      if (float_bits(r) != float_bits(param[i]))
        throw IoError(f_.path() + ": the master weight of " + what + " does not round to the parameter (element " +
                      std::to_string(i) + "): not Megatron's parameter order, or not this model's optimizer");
    }
  }

  // Megatron's DynamicGradScaler state: {'scale': tensor, 'growth_tracker', 'hysteresis_tracker'}
  // (ConstantGradScaler saves an empty dict).
  void read_scaler(const Value& s) {
    const Value* scale = s.get("scale");
    if (s.kind != Kind::Dict || !scale) return;
    std::optional<double> value;
    if (scale->kind == Kind::Float) value = scale->real;
    else if (const TorchTensor* t = TorchFile::tensor(*scale); t && t->numel() == 1)
      value = f_.read_f32(*t, "grad_scaler 'scale'")[0];
    const Value* growth = s.get("growth_tracker");
    const Value* hysteresis = s.get("hysteresis_tracker");
    if (!value || !growth || growth->kind != Kind::Int || !hysteresis || hysteresis->kind != Kind::Int)
      throw IoError(f_.path() + ": 'grad_scaler' is not a DynamicGradScaler's state (scale, growth_tracker, "
                    "hysteresis_tracker)");
    out_.loss_scaler = {{"scale", *value}, {"growth_tracker", growth->integer},
                        {"hysteresis_tracker", hysteresis->integer}};
  }

  const TorchFile& f_;
  DType dtype_;
  OptimizerState& out_;
  std::vector<ModelParam> params_;
};

// Megatron's OptimizerParamScheduler.state_dict() fields that trident's trainer_state keeps
// under the same names (trainer_checkpoint.cpp's scheduler_fields; num_steps is the position in
// samples). An older checkpoint's 'lr_scheduler' (AnnealingLR, counted in iterations) is not
// read: trident-train then takes the command line's schedule at the consumed samples.
nlohmann::json read_scheduler(const TorchFile& f) {
  const Value* s = f.root().get("opt_param_scheduler");
  if (!s || s->kind != Kind::Dict) return nullptr;
  nlohmann::json out = nlohmann::json::object();
  for (const char* key : {"max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps", "lr_decay_style", "num_steps",
                          "start_wd", "end_wd", "wd_incr_steps", "wd_incr_style", "wsd_decay_steps",
                          "lr_wsd_decay_style"}) {
    const Value* v = s->get(key);
    if (!v || v->kind == Kind::None) continue;
    if (v->kind == Kind::Int) out[key] = v->integer;
    else if (v->kind == Kind::Float) out[key] = v->real;
    else if (v->kind == Kind::Str) out[key] = v->text;
    else throw IoError(f.path() + ": opt_param_scheduler '" + key + "' is " + v->describe());
  }
  return out;
}

}  // namespace

void check_optimizer_state_readable(const Checkpoint& c) {
  if (c.dist)
    throw ConfigError("--with-optimizer: " + c.dir.string() + " is a torch_dist checkpoint, whose optimizer state trident "
                      "does not read; import its weights without --with-optimizer");
  if (c.flavour != "Megatron-LM")
    throw ConfigError("--with-optimizer: " + c.dir.string() + " is a " + c.flavour + " checkpoint, whose optimizer "
                      "state (DeepSpeed's files) trident does not read; import its weights without --with-optimizer");
  if (c.dir.filename() == "release")  // Megatron loads a release folder at iteration 0 without its optimizer
    throw ConfigError("--with-optimizer: " + c.dir.string() + " is a release checkpoint, which Megatron loads without "
                      "optimizer state; import it without --with-optimizer");
  if (!c.args || !c.iteration)
    throw ConfigError("--with-optimizer: " + c.dir.string() + " records no " + (c.args ? "iteration" : "args") +
                      "; import it without --with-optimizer");
  const Value* dist = c.args->get("use_distributed_optimizer");
  if (dist && dist->kind == Kind::Bool && dist->boolean)
    throw ConfigError("--with-optimizer: " + c.args_source + " was saved with --use-distributed-optimizer, whose state "
                      "(distrib_optim.pt) trident does not read; import its weights without --with-optimizer");
}

OptimizerState read_optimizer_state(const Checkpoint& c, DType model_dtype) {
  check_optimizer_state_readable(c);
  OptimizerState out;
  bool first = true;
  for (const auto& file : c.files) {
    const int64_t steps = FileReader(c, *file, model_dtype, out).read();
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
