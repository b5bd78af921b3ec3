// ZeRO stage 0: each model-parallel rank's model states hold its optimizer: DeepSpeed's
// FP16_Optimizer (fp16 with apex's or DeepSpeed's FusedAdam: 'fp32_groups_flat', each group's
// masters flattened without padding, and the inner Adam over those flat tensors, its loss scale
// beside), FP16_UnfusedOptimizer (fp16 with another Adam: 'fp32_groups', a master per parameter,
// the inner state by parameter index), or the bare Adam (fp32: the state by parameter index,
// counted through the groups; a later stage's copy of the tied embedding is skipped, its state
// or none). No param_shapes: the groups are
// Megatron-DeepSpeed's, built over the modules in order (the weights of modules other than
// LayerNorms; then the LayerNorms' parameters and the biases), and with a pipeline the layers of
// a stage are counted from the size of its first group.
#include <algorithm>
#include <functional>

#include "ckpt/megatron_deepspeed_files.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"

namespace trident::megatron::deepspeed {

namespace {

using pickle::Kind;
using pickle::Value;

struct StageParam {
  const Shard* shard = nullptr;
  std::string key;
  const TorchTensor* weight = nullptr;
  bool copy = false;  // the last stage's copy of the tied embedding
};

bool second_group(const std::string& key) {
  const std::optional<KeyMeaning> m = classify(key);
  return m && (m->what == KeyMeaning::kFinalNorm || m->suffix.rfind("ln_", 0) == 0 ||
               (m->suffix.size() > 4 && m->suffix.compare(m->suffix.size() - 4, 4, "bias") == 0));
}

// Stage s's parameters of tp rank t in module order, split into the two groups, with the
// stage's transformer layers the layer files from position `first` on, `layers` of them.
std::array<std::vector<StageParam>, 2> stage_groups(const Import& im, int t, int s, size_t first, size_t layers) {
  std::vector<std::pair<const Shard*, bool>> shards;  // in module order; whether a tied copy
  const int pp = static_cast<int>(im.ranks.size()) / im.c.tp;
  const auto shard_of = [&](const std::map<int, const Shard*>& by_rank, const char* what) {
    const auto it = by_rank.find(t);
    if (it == by_rank.end())
      throw IoError(im.c.dir.string() + ": no " + what + " for tensor-parallel rank " + std::to_string(t));
    return it->second;
  };
  if (!im.pipeline) {
    shards.push_back({shard_of(im.module_shard, "model states with a 'module'"), false});
  } else {
    if (s == 0 || s == pp - 1) shards.push_back({shard_of(im.embedding_shard, "embedding layer file"), s > 0});
    const std::vector<const Shard*> all = im.layer_shards(t);
    for (size_t i = first; i < first + layers && i < all.size(); ++i) shards.push_back({all[i], false});
    if (s == pp - 1) shards.push_back({shard_of(im.final_norm_shard, "final-norm layer file"), false});
  }
  std::array<std::vector<StageParam>, 2> out;
  for (const auto& [shard, copy] : shards)
    for (const auto& [key, v] : shard->params)
      if (const TorchTensor* w = TorchFile::tensor(*v); w && classify(key) && classify(key)->what != KeyMeaning::kSkip)
        out[second_group(key) ? 1 : 0].push_back({shard, key, w, copy});
  return out;
}

// How many transformer layers stage s holds, from its first group's size (`size` of a list of
// parameters: their elements, or their count).
size_t stage_layers(const Import& im, int t, int s, size_t first, int64_t group0,
                    const std::function<int64_t(const std::vector<StageParam>&)>& size, const std::string& where) {
  if (!im.pipeline) return 0;
  const int64_t without = size(stage_groups(im, t, s, first, 0)[0]);
  const int64_t one = size(stage_groups(im, t, s, first, 1)[0]) - without;  // a layer's
  const size_t left = im.layer_shards(t).size() - first;
  if (one <= 0 && left == 0 && group0 == without) return 0;
  if (one <= 0 || group0 < without || (group0 - without) % one != 0 || static_cast<size_t>((group0 - without) / one) > left)
    throw IoError(where + ": its first param group (" + std::to_string(group0) + ") is no whole number of the " +
                  std::to_string(left) + " transformer layers left for stage " + std::to_string(s));
  return static_cast<size_t>((group0 - without) / one);
}

// A parameter's state from `state(k)` (k 0 master, 1 exp_avg, 2 exp_avg_sq, flat);
// `master_is_weight` as Import::take's.
void take(Import& im, const StageParam& p, const std::function<std::vector<float>(int)>& state, const std::string& what,
          bool master_is_weight = false) {
  std::array<HostTensor, 3> joined;
  for (int k = 0; k < 3; ++k) joined[static_cast<size_t>(k)] = HostTensor{p.weight->shape, state(k)};
  im.take(*p.shard, p.key, std::move(joined), p.key, what, master_is_weight);
}

// FP16_Optimizer's (and FP16_UnfusedOptimizer's) loss scale, in the terms of trident's
// DeepSpeedFused scaler (its rules): the clean steps since the last overflow. Newer DeepSpeed
// gave FP16_Optimizer hysteresis, which that scaler has not: refused when configured.
void read_fused_scaler(Import& im, const TorchFile& ms, const Value& opt) {
  const Value* config = ms.root().get("ds_config");
  const Value* fp16 = config ? config->get("fp16") : nullptr;
  const Value* hysteresis = fp16 ? fp16->get("hysteresis") : nullptr;
  const Value* consecutive = fp16 ? fp16->get("consecutive_hysteresis") : nullptr;
  if (opt.get("cur_hysteresis") && ((hysteresis && hysteresis->kind == Kind::Int && hysteresis->integer > 1) ||
                                    (consecutive && consecutive->kind == Kind::Bool && consecutive->boolean)))
    throw ConfigError("--with-optimizer: " + ms.path() + ": DeepSpeed's FP16_Optimizer ran with hysteresis, which "
                      "trident's scaler for DeepSpeed at ZeRO stage 0 has not");
  const Value* scale = opt.get("cur_scale");
  const std::optional<double> value = scale ? scalar_value(ms, *scale, "cur_scale") : std::nullopt;
  if (!value || !(*value > 0)) throw IoError(ms.path() + ": the optimizer's 'cur_scale' is not a loss scale");
  const Value* iter = opt.get("cur_iter");
  const Value* last = opt.get("last_overflow_iter");
  const int64_t clean = iter && last && iter->kind == Kind::Int && last->kind == Kind::Int
                            ? std::max<int64_t>(0, iter->integer - last->integer - 1)
                            : 0;
  im.out.loss_scaler = {{"scale", *value}, {"growth_tracker", clean}, {"hysteresis_tracker", 0}};
}

}  // namespace

void read_stage0_rank(Import& im, int mp, std::map<int, size_t>& next_layer) {
  const int t = mp % im.c.tp, s = mp / im.c.tp;
  const TorchFile& ms = *im.ranks[static_cast<size_t>(mp)].model_states;
  const Value* opt = ms.root().get("optimizer");
  if (!opt || opt->kind != Kind::Dict)
    throw IoError(ms.path() + ": no 'optimizer' state (DeepSpeed keeps it here at ZeRO stage 0; saved with "
                  "--no-save-optim?); import the weights without --with-optimizer");
  if (opt->get("single_partition_of_fp32_groups"))
    throw ConfigError("--with-optimizer: " + ms.path() + ": DeepSpeed's BF16_Optimizer state in the model states "
                      "(newer DeepSpeed at ZeRO stage 0), which trident does not read");
  const Value* flat = opt->get("fp32_groups_flat");  // FP16_Optimizer's masters, a flat tensor a group
  const Value* masters = opt->get("fp32_groups");    // FP16_UnfusedOptimizer's, a tensor a parameter
  const bool wrapped = flat || masters;
  if (!wrapped && im.dtype != DType::F32)
    throw IoError(ms.path() + ": the " + std::string(dtype_name(im.dtype)) + " model's optimizer holds no fp32 master "
                  "weights (neither FP16_Optimizer's fp32_groups_flat nor FP16_UnfusedOptimizer's fp32_groups)");
  const Value& inner = wrapped ? field(ms, *opt, "optimizer_state_dict", "'optimizer'") : *opt;
  const Value& groups = field(ms, inner, "param_groups", "the optimizer");
  const Value& state = field(ms, inner, "state", "the optimizer");
  if (groups.kind != Kind::List || groups.items.size() != 2)
    throw IoError(ms.path() + ": the optimizer has " + groups.describe() + " as param groups, not Megatron-DeepSpeed's "
                  "two");
  for (const Value* m : {flat, masters})
    if (m && (m->kind != Kind::List || m->items.size() != 2))
      throw IoError(ms.path() + ": the optimizer's fp32 masters are " + m->describe() + ", not two groups'");
  const auto ids = [&](size_t g) -> const Value& {
    const Value& p = field(ms, *groups.items[g], "params", "param_groups[" + std::to_string(g) + "]");
    if (p.kind != Kind::List)
      throw IoError(ms.path() + ": param_groups[" + std::to_string(g) + "] 'params' is " + p.describe());
    return p;
  };
  size_t& first = next_layer[t];
  const size_t layers =
      flat ? stage_layers(im, t, s, first, flat_tensor(ms, *flat->items[0], "fp32_groups_flat[0]").shape[0],
                          [](const std::vector<StageParam>& ps) {
                            int64_t n = 0;
                            for (const StageParam& p : ps) n += p.weight->numel();
                            return n;
                          }, ms.path())
           : stage_layers(im, t, s, first, static_cast<int64_t>(ids(0).items.size()),
                          [](const std::vector<StageParam>& ps) { return static_cast<int64_t>(ps.size()); }, ms.path());
  const std::array<std::vector<StageParam>, 2> params = stage_groups(im, t, s, first, layers);
  first += layers;
  if (mp == 0) {
    im.read_schedule_and_groups(ms, &groups);
    if (wrapped && im.dtype == DType::F16) read_fused_scaler(im, ms, *opt);
  }
  for (size_t g = 0; g < 2; ++g) {
    const std::string what = "param group " + std::to_string(g);
    if (flat) {  // FP16_Optimizer: one flat tensor a group, the inner state keyed by group
      const Value& st = im.group_state(ms, inner, g);
      im.note_step(ms, inner, st, g);
      const TorchTensor* tensors[3] = {&flat_tensor(ms, *flat->items[g], "fp32_groups_flat[" + std::to_string(g) + "]"),
                                       &flat_tensor(ms, field(ms, st, "exp_avg", what), what + " 'exp_avg'"),
                                       &flat_tensor(ms, field(ms, st, "exp_avg_sq", what), what + " 'exp_avg_sq'")};
      int64_t numel = 0;
      for (const StageParam& p : params[g]) numel += p.weight->numel();
      std::vector<float> data[3];
      for (int k = 0; k < 3; ++k) {
        if (tensors[k]->shape[0] != numel)
          throw IoError(ms.path() + ": " + what + " holds " + std::to_string(tensors[k]->shape[0]) + " elements, its "
                        "parameters " + std::to_string(numel) + " (not Megatron-DeepSpeed's groups)");
        data[k] = ms.read_f32(*tensors[k], what);
      }
      int64_t at = 0;
      for (const StageParam& p : params[g]) {
        const int64_t n = p.weight->numel();
        if (!p.copy)
          take(im, p, [&](int k) { return std::vector<float>(data[k].begin() + at, data[k].begin() + at + n); }, what);
        at += p.weight->numel();
      }
      continue;
    }
    // The state by parameter index (fp32's bare Adam, FP16_UnfusedOptimizer's inner one); the
    // masters the weights (fp32) or fp32_groups' tensors. Every tensor must have its parameter's
    // shape, which catches another order of differently shaped parameters.
    const Value& list = ids(g);
    const Value* group_masters = masters ? masters->items[g].get() : nullptr;
    if (list.items.size() != params[g].size() ||
        (group_masters && (group_masters->kind != Kind::List || group_masters->items.size() != params[g].size())))
      throw IoError(ms.path() + ": " + what + " holds " + std::to_string(list.items.size()) + " parameters, the "
                    "stage's modules " + std::to_string(params[g].size()) + " (not Megatron-DeepSpeed's groups)");
    for (size_t i = 0; i < params[g].size(); ++i) {
      const StageParam& p = params[g][i];
      if (p.copy) continue;  // (its state, when it has one, is the first stage's)
      const Value* st = nullptr;
      if (list.items[i]->kind != Kind::Int)
        throw IoError(ms.path() + ": " + what + " lists parameter " + list.items[i]->describe() + ", not an index");
      for (const auto& [k, v] : state.entries)
        if (k->kind == Kind::Int && k->integer == list.items[i]->integer) st = v.get();
      if (!st) throw IoError(ms.path() + ": the optimizer has no state for '" + p.key + "' (" + what + ")");
      im.note_step(ms, inner, *st, g);
      const auto shaped = [&](const Value& v, const std::string& name) {
        const TorchTensor* m = TorchFile::tensor(v);
        if (!m || m->shape != p.weight->shape)
          throw IoError(ms.path() + ": the " + name + " of '" + p.key + "' (" + what + ") is " +
                        (m ? "of shape " + shape_str(m->shape) : v.describe()) + ", the parameter " +
                        shape_str(p.weight->shape) + " (not Megatron-DeepSpeed's parameter order?)");
        return ms.read_f32(*m, "the " + name + " of '" + p.key + "'");
      };
      take(im, p, [&](int k) {
        if (k == 0 && !group_masters) return p.shard->file->read_f32(*p.weight, "'" + p.key + "'");
        if (k == 0) return shaped(*group_masters->items[i], "fp32 master");
        const char* name = k == 1 ? "exp_avg" : "exp_avg_sq";
        return shaped(field(ms, *st, name, "the state of '" + p.key + "'"), name);
      }, what, /*master_is_weight=*/!group_masters);
    }
  }
}

}  // namespace trident::megatron::deepspeed
