#include "ckpt/megatron_deepspeed_files.h"

#include <algorithm>
#include <regex>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/megatron_keys.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident::megatron::deepspeed {

namespace fs = std::filesystem;
using pickle::Kind;
using pickle::Value;

const Value& field(const TorchFile& f, const Value& v, const char* key, const std::string& what) {
  const Value* x = v.get(key);
  if (!x) throw IoError(f.path() + ": " + what + " has no '" + key + "'");
  return *x;
}

const TorchTensor& flat_tensor(const TorchFile& f, const Value& v, const std::string& what) {
  const TorchTensor* t = TorchFile::tensor(v);
  if (!t || t->shape.size() != 1) throw IoError(f.path() + ": " + what + " is " + v.describe() + ", not a flat tensor");
  return *t;
}

Import::Import(const Checkpoint& checkpoint, DType model_dtype, OptimizerState& state)
    : c(checkpoint), dtype(model_dtype), out(state) {
  find_files();
  index_shards();
}

// global_stepN's files: mp_rank_XX_model_states.pt and [bf16_]zero_pp_rank_<dp>_mp_rank_XX_optim_states.pt.
void Import::find_files() {
  const std::regex model_re(R"(mp_rank_(\d\d)_model_states\.pt)"),
      zero_re(R"((bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d\d)_optim_states\.pt)");
  std::map<int, fs::path> models;
  std::map<int, std::map<int, fs::path>> zero;  // mp rank -> dp rank -> file
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(c.dir, ec)) {
    const std::string n = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(n, m, model_re)) models[std::stoi(m[1].str())] = e.path();
    else if (std::regex_match(n, m, zero_re)) zero[std::stoi(m[3].str())][std::stoi(m[2].str())] = e.path();
  }
  stage0 = zero.empty();  // ZeRO stage 0: the optimizer is in the model-states files
  if (models.empty() || models.rbegin()->first + 1 != static_cast<int>(models.size()))
    throw IoError(c.dir.string() + ": mp_rank_*_model_states.pt files are not numbered 00 to " +
                  std::to_string(models.size() - 1));
  const int mp = static_cast<int>(models.size());
  if (mp % c.tp != 0)
    throw IoError(c.dir.string() + ": " + std::to_string(mp) + " model-states files for tensor parallelism " +
                  std::to_string(c.tp));
  size_t dp = 0;
  for (int r = 0; r < mp; ++r) {
    if (stage0) {
      ranks.push_back({std::make_unique<TorchFile>(models.at(r).string()), {}});
      continue;
    }
    const auto z = zero.find(r);
    if (z == zero.end() || (dp && z->second.size() != dp) ||
        z->second.rbegin()->first + 1 != static_cast<int>(z->second.size()))
      throw IoError(c.dir.string() + ": the ZeRO files of model-parallel rank " + std::to_string(r) +
                    " are not zero_pp_rank_0 to " + std::to_string(std::max<size_t>(dp, 1) - 1));
    dp = z->second.size();
    RankFiles files;
    files.model_states = std::make_unique<TorchFile>(models.at(r).string());
    for (const auto& [d, path] : z->second) files.zero.push_back(std::make_unique<TorchFile>(path.string()));
    ranks.push_back(std::move(files));
  }
}

// Where each weight is: GPTModelPipe's layer files by (tp rank, layer index), the embedding's and
// the final norm's by tp rank; GPTModel's shard by tp rank.
void Import::index_shards() {
  // layer_<index>-model_TT-model_states.pt, or layer_<index>-model_states.pt without tensor parallelism.
  const std::regex layer_re(R"(layer_(\d+)(-model_\d\d)?-model_states\.pt)");
  for (const Shard& s : c.shards) {
    const std::string n = fs::path(s.where).filename().string();
    std::smatch m;
    if (std::regex_match(n, m, layer_re)) {
      pipeline = true;
      layer_shard[{s.tp_rank, std::stoi(m[1].str())}] = &s;
      for (const auto& [key, v] : s.params) {
        if (key == "embedding.word_embeddings.weight") embedding_shard[s.tp_rank] = &s;
        if (key.rfind("encoder.final_layernorm.", 0) == 0) final_norm_shard[s.tp_rank] = &s;
      }
    } else {
      module_shard[s.tp_rank] = &s;
    }
  }
}

std::optional<std::pair<const Shard*, std::string>> Import::resolve(const std::string& name, int t, int s,
                                                            const std::string& where) const {
  const Shard* shard = nullptr;
  std::string rest = name;
  if (pipeline) {
    if (strip(rest, "tied_modules.embed.")) {
      if (s > 0) return std::nullopt;
      const auto it = embedding_shard.find(t);
      shard = it == embedding_shard.end() ? nullptr : it->second;
    } else {
      const size_t dot = rest.find('.');
      const std::string idx = rest.substr(0, dot);
      if (dot != std::string::npos && !idx.empty() && idx.size() <= 6 && all_digits(idx)) {
        const auto it = layer_shard.find({t, std::stoi(idx)});
        shard = it == layer_shard.end() ? nullptr : it->second;
        rest = rest.substr(dot + 1);
      }
    }
  } else {
    strip(rest, "module.");
    const auto it = module_shard.find(t);
    shard = it == module_shard.end() ? nullptr : it->second;
  }
  if (shard)
    for (const auto& [key, v] : shard->params)
      if (key == rest || (key.size() > rest.size() && key.compare(key.size() - rest.size(), rest.size(), rest) == 0 &&
                          key[key.size() - rest.size() - 1] == '.' && pipeline))
        return std::make_pair(shard, key);
  throw IoError(where + ": parameter '" + name + "' has no weight in the checkpoint's " +
                (pipeline ? "layer files" : "model states") + " for tensor-parallel rank " + std::to_string(t));
}

std::vector<const Shard*> Import::layer_shards(int t) const {
  std::vector<const Shard*> out;
  for (const auto& [at, shard] : layer_shard)
    if (at.first == t && !(embedding_shard.count(t) && shard == embedding_shard.at(t)) &&
        !(final_norm_shard.count(t) && shard == final_norm_shard.at(t)))
      out.push_back(shard);
  return out;
}

const Value& Import::group_state(const TorchFile& z, const Value& base, size_t g) const {
  if (base.kind == Kind::List) {
    if (g >= base.items.size()) throw IoError(z.path() + ": the optimizer state has no group " + std::to_string(g));
    return *base.items[g];
  }
  const Value& state = field(z, base, "state", "the optimizer state");
  for (const auto& [k, v] : state.entries)
    if (k->kind == Kind::Int && k->integer == static_cast<int64_t>(g)) return *v;
  throw IoError(z.path() + ": the optimizer state has no state for group " + std::to_string(g) +
                " (saved before the optimizer's first step?)");
}

void Import::note_step(const TorchFile& z, const Value& base, const Value& st, size_t g, const Value* elastic_step) {
  const std::string what = "group " + std::to_string(g);
  std::optional<int64_t> n;
  const auto count = [&](const Value& v, const std::string& where) {
    const std::optional<int64_t> x = step_value(z, v, what + " " + where);
    if (!x) throw IoError(z.path() + ": " + what + "'s " + where + " is " + v.describe() + ", not a step count");
    if (n && *x > 0 && *n > 0 && *x != *n)
      throw IoError(z.path() + ": " + what + "'s " + where + " says " + std::to_string(*x) + " Adam steps, where " +
                    std::to_string(*n) + " is recorded beside");
    if (!n || *n == 0) n = x;  // DeepSpeed's FusedAdam leaves the group's at 0
  };
  if (const Value* s = st.get("step")) count(*s, "state 'step'");
  if (const Value* groups = base.kind == Kind::Dict ? base.get("param_groups") : nullptr;
      groups && groups->kind == Kind::List && g < groups->items.size())
    if (const Value* s = groups->items[g]->get("step")) count(*s, "param group 'step'");
  if (elastic_step) count(*elastic_step, "'base_optimizer_state_step'");
  if (!n)
    throw IoError(z.path() + ": " + what + " records no Adam 'step'" +
                  (base.kind == Kind::List ? std::string(" (an elastic ZeRO checkpoint of a DeepSpeed that did not save "
                                                         "base_optimizer_state_step: Adam's step count is lost)")
                                           : ""));
  if (steps_ && *steps_ != *n)
    throw IoError(z.path() + ": " + what + " took " + std::to_string(*n) + " Adam steps, others " +
                  std::to_string(*steps_));
  steps_ = n;
  out.steps = *n;
  out.steps_recorded = true;
}

// Megatron-DeepSpeed's AnnealingLR counts samples unless it decays by tokens
// (args.lr_decay_tokens), which trident's schedule does not.
void Import::read_schedule_and_groups(const TorchFile& f, const Value* groups) {
  const TorchFile& ms = *ranks.front().model_states;
  const Value* tokens = c.args ? c.args->get("lr_decay_tokens") : nullptr;
  if (const Value* sched = ms.root().get("lr_scheduler");
      sched && sched->kind == Kind::Dict && (!tokens || tokens->kind == Kind::None))
    out.scheduler = scheduler_state(ms, *sched, "lr_scheduler");
  if (!groups || groups->kind != Kind::List) return;
  for (size_t g = 0; g < groups->items.size(); ++g)
    check_default_group(*groups->items[g], f.path() + ": the optimizer's param_groups[" + std::to_string(g) + "]");
  if (!groups->items.empty()) out.adam = adam_hyperparameters(*groups->items[0]);
}

void Import::take(const Shard& shard, const std::string& key, std::array<HostTensor, 3> state, const std::string& name,
                  const std::string& what, bool master_is_weight) {
  const Value* v = nullptr;
  for (const auto& [k, x] : shard.params)
    if (k == key) v = x;
  const TorchTensor* t = v ? TorchFile::tensor(*v) : nullptr;
  if (!t || t->shape != state[0].shape)
    throw IoError(shard.where + ": '" + key + "' is not of the shape " + shape_str(state[0].shape) + " that " + what +
                  " gives '" + name + "'");
  const int64_t bad =
      master_is_weight ? -1 : master_mismatch(state[0].data, shard.file->read_f32(*t, "'" + key + "'"), dtype);
  if (bad >= 0)
    throw IoError(c.dir.string() + ": the master weight of '" + name + "' (" + what + ") does not match '" + key +
                  "' of " + shard.where + " (element " + std::to_string(bad) + "): not this model's optimizer, or "
                  "its groups are not laid out as DeepSpeed lays them");
  ParamState ps;
  ps.joined = std::make_shared<const std::array<HostTensor, 3>>(std::move(state));
  out.params[{&shard, key}] = std::move(ps);
}

}  // namespace trident::megatron::deepspeed
