#include "ckpt/megatron_deepspeed_optimizer.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>

#include "ckpt/megatron_keys.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

namespace trident::megatron {

namespace {

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

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// One model-parallel rank's files: its model states and its ZeRO files by data-parallel rank.
struct RankFiles {
  std::unique_ptr<TorchFile> model_states;
  std::vector<std::unique_ptr<TorchFile>> zero;
};

class DeepSpeedReader {
 public:
  DeepSpeedReader(const Checkpoint& c, DType dtype, OptimizerState& out) : c_(c), dtype_(dtype), out_(out) {}

  void read() {
    find_files();
    index_shards();
    for (size_t mp = 0; mp < ranks_.size(); ++mp) read_rank(static_cast<int>(mp));
    out_.moments = true;
  }

 private:
  // global_stepN's files: mp_rank_XX_model_states.pt and [bf16_]zero_pp_rank_<dp>_mp_rank_XX_optim_states.pt.
  void find_files() {
    const std::regex model_re(R"(mp_rank_(\d\d)_model_states\.pt)"),
        zero_re(R"((bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d\d)_optim_states\.pt)");
    std::map<int, fs::path> models;
    std::map<int, std::map<int, fs::path>> zero;  // mp rank -> dp rank -> file
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(c_.dir, ec)) {
      const std::string n = e.path().filename().string();
      std::smatch m;
      if (std::regex_match(n, m, model_re)) models[std::stoi(m[1].str())] = e.path();
      else if (std::regex_match(n, m, zero_re)) zero[std::stoi(m[3].str())][std::stoi(m[2].str())] = e.path();
    }
    if (zero.empty())
      throw ConfigError("--with-optimizer: " + c_.dir.string() + ": no DeepSpeed ZeRO optimizer files "
                        "(zero_pp_rank_*_optim_states.pt): a run at ZeRO stage 0 keeps its optimizer state in the "
                        "model-states files, which trident does not read; import the weights without --with-optimizer");
    if (models.empty() || models.rbegin()->first + 1 != static_cast<int>(models.size()))
      throw IoError(c_.dir.string() + ": mp_rank_*_model_states.pt files are not numbered 00 to " +
                    std::to_string(models.size() - 1));
    const int mp = static_cast<int>(models.size());
    if (mp % c_.tp != 0)
      throw IoError(c_.dir.string() + ": " + std::to_string(mp) + " model-states files for tensor parallelism " +
                    std::to_string(c_.tp));
    size_t dp = 0;
    for (int r = 0; r < mp; ++r) {
      const auto z = zero.find(r);
      if (z == zero.end() || (dp && z->second.size() != dp) || z->second.rbegin()->first + 1 != static_cast<int>(z->second.size()))
        throw IoError(c_.dir.string() + ": the ZeRO files of model-parallel rank " + std::to_string(r) +
                      " are not zero_pp_rank_0 to " + std::to_string(std::max<size_t>(dp, 1) - 1));
      dp = z->second.size();
      RankFiles files;
      files.model_states = std::make_unique<TorchFile>(models.at(r).string());
      for (const auto& [d, path] : z->second) files.zero.push_back(std::make_unique<TorchFile>(path.string()));
      ranks_.push_back(std::move(files));
    }
  }

  // Where each parameter's weight is: GPTModelPipe's layer files by (tp rank, layer index), the
  // embedding's file by tp rank; GPTModel's shard by tp rank.
  void index_shards() {
    const std::regex layer_re(R"(layer_(\d+)-model_(\d\d)-model_states\.pt)");
    for (const Shard& s : c_.shards) {
      const std::string n = fs::path(s.where).filename().string();
      std::smatch m;
      if (std::regex_match(n, m, layer_re)) {
        pipeline_ = true;
        layer_shard_[{s.tp_rank, std::stoi(m[1].str())}] = &s;
        for (const auto& [key, v] : s.params)
          if (key == "embedding.word_embeddings.weight") embedding_shard_[s.tp_rank] = &s;
      } else {
        module_shard_[s.tp_rank] = &s;
      }
    }
  }

  // The parameter `name` of param_shapes on (tp rank t, stage s): its shard and key; nullopt for
  // a later stage's copy of the tied embedding.
  std::optional<std::pair<const Shard*, std::string>> resolve(const std::string& name, int t, int s,
                                                              const std::string& where) const {
    const Shard* shard = nullptr;
    std::string rest = name;
    if (pipeline_) {
      if (strip(rest, "tied_modules.embed.")) {
        if (s > 0) return std::nullopt;
        const auto it = embedding_shard_.find(t);
        shard = it == embedding_shard_.end() ? nullptr : it->second;
      } else {
        const size_t dot = rest.find('.');
        const std::string idx = rest.substr(0, dot);
        if (dot != std::string::npos && !idx.empty() && idx.size() <= 6 &&
            std::all_of(idx.begin(), idx.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; })) {
          const auto it = layer_shard_.find({t, std::stoi(idx)});
          shard = it == layer_shard_.end() ? nullptr : it->second;
          rest = rest.substr(dot + 1);
        }
      }
    } else {
      strip(rest, "module.");
      const auto it = module_shard_.find(t);
      shard = it == module_shard_.end() ? nullptr : it->second;
    }
    if (shard)
      for (const auto& [key, v] : shard->params)
        if (key == rest || (key.size() > rest.size() && key.compare(key.size() - rest.size(), rest.size(), rest) == 0 &&
                            key[key.size() - rest.size() - 1] == '.' && pipeline_))
          return std::make_pair(shard, key);
    throw IoError(where + ": parameter '" + name + "' has no weight in the checkpoint's " +
                  (pipeline_ ? "layer files" : "model states") + " for tensor-parallel rank " + std::to_string(t));
  }

  // A group's flat state over the data-parallel ranks: the partitions joined, `numel` long.
  std::vector<float> joined(const std::vector<std::pair<const TorchFile*, const TorchTensor*>>& parts, int64_t numel,
                            const std::string& what) const {
    std::vector<float> out;
    for (const auto& [f, t] : parts) {
      const std::vector<float> v = f->read_f32(*t, what);
      out.insert(out.end(), v.begin(), v.end());
    }
    if (static_cast<int64_t>(out.size()) < numel)
      throw IoError(c_.dir.string() + ": " + what + " holds " + std::to_string(out.size()) + " elements over the "
                    "data-parallel ranks, its parameters " + std::to_string(numel));
    out.resize(static_cast<size_t>(numel));
    return out;
  }

  void read_rank(int mp) {
    const int t = mp % c_.tp, s = mp / c_.tp;
    const RankFiles& files = ranks_[static_cast<size_t>(mp)];
    const TorchFile& ms = *files.model_states;
    const Value& shapes = field(ms, ms.root(), "param_shapes", "the model states");
    if (shapes.kind != Kind::List) throw IoError(ms.path() + ": 'param_shapes' is " + shapes.describe());
    // Per group: the masters' and the moments' partitions over the data-parallel ranks.
    const size_t groups = shapes.items.size();
    std::vector<std::vector<std::pair<const TorchFile*, const TorchTensor*>>> parts[3];
    for (auto& p : parts) p.resize(groups);
    for (const auto& zf : files.zero) {
      const TorchFile& z = *zf;
      const Value& osd = field(z, z.root(), "optimizer_state_dict", "the ZeRO file");
      const Value& masters = field(z, osd, "single_partition_of_fp32_groups", "'optimizer_state_dict'");
      if (masters.kind != Kind::List || masters.items.size() != groups)
        throw IoError(z.path() + ": 'single_partition_of_fp32_groups' is not a list of " + std::to_string(groups) +
                      " groups' masters (" + ms.path() + "'s param_shapes)");
      const Value& base = field(z, osd, "base_optimizer_state", "'optimizer_state_dict'");
      for (size_t g = 0; g < groups; ++g) {
        const std::string what = "group " + std::to_string(g);
        parts[0][g].push_back({&z, &flat_tensor(z, *masters.items[g], "the masters of " + what)});
        const Value& st = group_state(z, base, g);
        parts[1][g].push_back({&z, &flat_tensor(z, field(z, st, "exp_avg", what + "'s state"), what + " 'exp_avg'")});
        parts[2][g].push_back(
            {&z, &flat_tensor(z, field(z, st, "exp_avg_sq", what + "'s state"), what + " 'exp_avg_sq'")});
        note_step(z, base, st, g);
      }
      if (&zf == &files.zero.front() && mp == 0) read_common(z, osd, base);
    }
    for (size_t g = 0; g < groups; ++g) {
      const Value& group = *shapes.items[g];
      if (group.kind != Kind::Dict) throw IoError(ms.path() + ": param_shapes[" + std::to_string(g) + "] is " + group.describe());
      std::vector<std::tuple<std::string, std::vector<int64_t>, int64_t>> params;  // name, shape, offset
      int64_t numel = 0;
      for (const auto& [k, v] : group.entries) {
        if (!k->is_str() || (v->kind != Kind::Tuple && v->kind != Kind::List))
          throw IoError(ms.path() + ": param_shapes[" + std::to_string(g) + "] maps " + k->describe() + " to " + v->describe());
        std::vector<int64_t> shape;
        for (const auto& d : v->items) shape.push_back(d->integer);
        params.emplace_back(k->text, shape, numel);
        numel += numel_of(shape);
      }
      const std::string what = "model-parallel rank " + std::to_string(mp) + " group " + std::to_string(g);
      std::vector<float> flat[3];
      for (int k = 0; k < 3; ++k) flat[k] = joined(parts[k][g], numel, what);
      for (const auto& [name, shape, at] : params) {
        const std::optional<std::pair<const Shard*, std::string>> where = resolve(name, t, s, ms.path());
        if (!where) continue;
        auto state = std::make_shared<std::array<HostTensor, 3>>();
        for (int k = 0; k < 3; ++k) {
          (*state)[static_cast<size_t>(k)].shape = shape;
          (*state)[static_cast<size_t>(k)].data.assign(flat[k].begin() + at, flat[k].begin() + at + numel_of(shape));
        }
        check_master(*where->first, where->second, (*state)[0], name, what);
        ParamState ps;
        ps.joined = std::move(state);
        out_.params[*where] = std::move(ps);
      }
    }
  }

  // A group's Adam state in base_optimizer_state: torch's {'state': {group: ...}}, or the
  // elastic checkpoint's list of per-group states.
  const Value& group_state(const TorchFile& z, const Value& base, size_t g) const {
    if (base.kind == Kind::List) {
      if (g >= base.items.size()) throw IoError(z.path() + ": 'base_optimizer_state' has no group " + std::to_string(g));
      return *base.items[g];
    }
    const Value& state = field(z, base, "state", "'base_optimizer_state'");
    for (const auto& [k, v] : state.entries)
      if (k->kind == Kind::Int && k->integer == static_cast<int64_t>(g)) return *v;
    throw IoError(z.path() + ": 'base_optimizer_state' has no state for group " + std::to_string(g) +
                  " (saved before the optimizer's first step?)");
  }

  // Adam's step count: each group's (apex's FusedAdam) or each state's (DeepSpeed's FusedAdam,
  // torch's Adam); all must agree.
  void note_step(const TorchFile& z, const Value& base, const Value& st, size_t g) {
    const Value* step = st.get("step");
    if (const Value* groups = base.kind == Kind::Dict ? base.get("param_groups") : nullptr;
        groups && groups->kind == Kind::List && g < groups->items.size())
      if (const Value* gs = groups->items[g]->get("step"); gs && (!step || step_value(z, *gs, "step").value_or(0) > 0))
        step = gs;
    if (!step) throw IoError(z.path() + ": group " + std::to_string(g) + " records no Adam 'step'");
    const std::optional<int64_t> n = step_value(z, *step, "group " + std::to_string(g) + " 'step'");
    if (!n) throw IoError(z.path() + ": group " + std::to_string(g) + "'s 'step' is " + step->describe());
    if (steps_ && *steps_ != *n)
      throw IoError(z.path() + ": group " + std::to_string(g) + " took " + std::to_string(*n) + " Adam steps, others " +
                    std::to_string(*steps_));
    steps_ = n;
    out_.steps = *n;
    out_.steps_recorded = true;
  }

  // The groups (Megatron's default two) with Adam's hyperparameters, and the fp16 loss scaler:
  // DeepSpeed's DynamicLossScaler object, in the terms of trident's dynamic scaler (Megatron's
  // rules, which DeepSpeed's equal: the scale grows on the window-th clean step since the last
  // overflow or growth, hysteresis counts overflows down).
  void read_common(const TorchFile& z, const Value& osd, const Value& base) {
    // The client's scheduler, which the engine saves as 'lr_scheduler': Megatron-DeepSpeed's
    // AnnealingLR counts samples unless it decays by tokens (args.lr_decay_tokens), which
    // trident's schedule does not.
    const TorchFile& ms = *ranks_.front().model_states;
    const Value* tokens = c_.args ? c_.args->get("lr_decay_tokens") : nullptr;
    if (const Value* sched = ms.root().get("lr_scheduler");
        sched && sched->kind == Kind::Dict && (!tokens || tokens->kind == Kind::None))
      out_.scheduler = scheduler_state(ms, *sched, "lr_scheduler");
    if (const Value* groups = base.kind == Kind::Dict ? base.get("param_groups") : nullptr;
        groups && groups->kind == Kind::List) {
      for (size_t g = 0; g < groups->items.size(); ++g)
        check_default_group(*groups->items[g], z.path() + ": base_optimizer_state param_groups[" + std::to_string(g) + "]");
      if (!groups->items.empty()) out_.adam = adam_hyperparameters(*groups->items[0]);
    }
    const Value* scaler = osd.get("loss_scaler");
    if (dtype_ != DType::F16 || !scaler || scaler->kind == Kind::None) return;
    const Value* scale = scaler->get("cur_scale");
    const std::optional<double> value = scale ? scalar_value(z, *scale, "loss_scaler cur_scale") : std::nullopt;
    if (!value || !(*value > 0)) throw IoError(z.path() + ": 'loss_scaler' is " + scaler->describe() + ", not DeepSpeed's loss scaler");
    const Value* iter = scaler->get("cur_iter");
    const Value* last = scaler->get("last_overflow_iter");
    const Value* window = scaler->get("scale_window");
    if (!iter || !last || !window || iter->kind != Kind::Int || last->kind != Kind::Int || window->kind != Kind::Int ||
        window->integer < 1) {
      out_.loss_scaler = {{"scale", *value}, {"growth_tracker", 0}, {"hysteresis_tracker", 0}};  // a static scaler
      return;
    }
    const Value* hysteresis = scaler->get("cur_hysteresis");
    out_.loss_scaler = {{"scale", *value},
                        {"growth_tracker", (iter->integer - last->integer - 1) % window->integer},
                        {"hysteresis_tracker", hysteresis && hysteresis->kind == Kind::Int ? hysteresis->integer : 1}};
  }

  // The master must equal (fp32) or round to (16-bit) the stored weight: else the groups were
  // cut at the wrong places.
  void check_master(const Shard& shard, const std::string& key, const HostTensor& master, const std::string& name,
                    const std::string& what) const {
    const Value* v = nullptr;
    for (const auto& [k, x] : shard.params)
      if (k == key) v = x;
    const TorchTensor* t = v ? TorchFile::tensor(*v) : nullptr;
    if (!t || t->shape != master.shape)
      throw IoError(shard.where + ": '" + key + "' is not of the shape " + shape_str(master.shape) + " that " + what +
                    "'s param_shapes gives '" + name + "'");
    if (const int64_t bad = master_mismatch(master.data, shard.file->read_f32(*t, "'" + key + "'"), dtype_); bad >= 0)
      throw IoError(c_.dir.string() + ": the master weight of '" + name + "' (" + what + ") does not match '" + key +
                    "' of " + shard.where + " (element " + std::to_string(bad) + "): not this model's optimizer, or "
                    "its groups are not laid out as DeepSpeed's ZeRO optimizer lays them");
  }

  const Checkpoint& c_;
  DType dtype_;
  OptimizerState& out_;
  bool pipeline_ = false;
  std::vector<RankFiles> ranks_;
  std::map<std::pair<int, int>, const Shard*> layer_shard_;  // (tp rank, layer index) -> its layer file
  std::map<int, const Shard*> embedding_shard_, module_shard_;
  std::optional<int64_t> steps_;
};

}  // namespace

OptimizerState read_deepspeed_optimizer_state(const Checkpoint& c, DType model_dtype) {
  OptimizerState out;
  DeepSpeedReader(c, model_dtype, out).read();
  return out;
}

}  // namespace trident::megatron
