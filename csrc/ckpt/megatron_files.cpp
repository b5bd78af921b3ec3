#include "ckpt/megatron_files.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "ckpt/atomic_file.h"
#include "ckpt/checkpoint_dir.h"
#include "core/error.h"

namespace trident::megatron {

namespace {

namespace fs = std::filesystem;
using pickle::Kind;
using pickle::Value;

// Nested state dicts -> dotted keys. A state dict is a few levels deep; a deeper (or cyclic:
// the pickle memo can make a dict hold itself) one is malformed.
void flatten(const Value& v, const std::string& prefix, std::vector<std::pair<std::string, const Value*>>* out,
             const std::string& where, int depth = 0) {
  constexpr int kMaxDepth = 16;
  if (depth > kMaxDepth) throw IoError(where + ": state dict nested deeper than " + std::to_string(kMaxDepth) + " at '" +
                                       prefix.substr(0, 200) + "'");
  for (const auto& [k, child] : v.entries) {
    const std::string name = prefix + (k->is_str() ? k->text : k->describe());
    if (child->kind == Kind::Dict) flatten(*child, name + ".", out, where, depth + 1);
    else if (child->kind != Kind::None) out->emplace_back(name, child.get());
  }
}

const TorchFile& open_file(Checkpoint& c, const fs::path& p) {
  c.files.push_back(std::make_unique<TorchFile>(p.string()));
  return *c.files.back();
}

// The saved 'args', 'checkpoint_version', 'iteration' and FLOPs so far of a file's root dict.
void read_common(Checkpoint& c, const TorchFile& f) {
  const Value& root = f.root();
  if (root.kind != Kind::Dict) throw IoError(f.path() + ": holds " + root.describe() + ", not a checkpoint dict");
  const Value* args = root.get("args");
  c.args = args && args->kind != Kind::None ? args : nullptr;  // absent in NVIDIA's released GPT-2 345M
  c.args_source = f.path();
  if (const Value* v = root.get("checkpoint_version")) {
    if (v->kind == Kind::Float) c.checkpoint_version = v->real;
    else if (v->kind == Kind::Int) c.checkpoint_version = static_cast<double>(v->integer);
  }
  if (const Value* it = root.get("iteration"); it && it->kind == Kind::Int) c.iteration = it->integer;
  if (const Value* v = root.get("num_floating_point_operations_so_far")) {
    if (v->kind == Kind::Float) c.flops_so_far = v->real;
    else if (v->kind == Kind::Int) c.flops_so_far = static_cast<double>(v->integer);
  }
}

// Megatron-LM: mp_rank_TT[_PPP]/model_optim_rng.pt.
void read_megatron_lm(Checkpoint& c, const std::vector<std::pair<int, int>>& ranks, bool with_stage) {
  c.flavour = "Megatron-LM";
  for (const auto& [t, p] : ranks) {
    c.tp = std::max(c.tp, t + 1);
    c.pp = std::max(c.pp, p + 1);
  }
  if (static_cast<int>(ranks.size()) != c.tp * c.pp)
    throw IoError(c.dir.string() + ": the mp_rank_* folders do not form a tp x pp grid (" + std::to_string(ranks.size()) +
                  " folders for tp " + std::to_string(c.tp) + " x pp " + std::to_string(c.pp) + ")");
  for (const auto& [t, p] : ranks) {
    const fs::path rank_dir = c.dir / rank_dir_name(t, p, with_stage ? 2 : 1);
    fs::path file = rank_dir / "model_optim_rng.pt";
    std::error_code ec;
    if (!fs::exists(file, ec) && fs::exists(rank_dir / "model_rng.pt", ec)) file = rank_dir / "model_rng.pt";
    if (!fs::exists(file, ec)) throw IoError(file.string() + ": missing (a Megatron-LM rank folder holds model_optim_rng.pt)");
    const TorchFile& f = open_file(c, file);
    if (t == 0 && p == 0) read_common(c, f);
    // 'model', or one 'model<v>' per virtual-pipeline chunk.
    std::vector<std::pair<std::string, const Value*>> models;
    if (const Value* m = f.root().get("model")) models.emplace_back("model", m);
    else
      for (int v = 0; const Value* m = f.root().get("model" + std::to_string(v)); ++v)
        models.emplace_back("model" + std::to_string(v), m);
    const int chunks = static_cast<int>(models.size());
    for (int v = 0; v < chunks; ++v) {
      const auto& [key, m] = models[v];
      if (m->kind != Kind::Dict) throw IoError(f.path() + ": '" + key + "' is " + m->describe() + ", not a state dict");
      Shard s{t, p, v, &f, f.path() + (key == "model" ? "" : " '" + key + "'"), {}};
      flatten(*m, "", &s.params, s.where);
      c.shards.push_back(std::move(s));
    }
    if (chunks == 0) throw IoError(f.path() + ": no 'model' state dict (saved with --no-save-model?)");
    if (t == 0 && p == 0) c.chunks = chunks;
    else if (chunks != c.chunks)
      throw IoError(f.path() + ": " + std::to_string(chunks) + " model chunks, but the first rank has " + std::to_string(c.chunks));
  }
}

// Megatron-DeepSpeed: mp_rank_TT_model_states.pt, and with DeepSpeed's pipeline
// layer_XX-model_TT-model_states.pt.
void read_megatron_deepspeed(Checkpoint& c, const std::vector<int>& mp_ranks,
                             const std::map<int, std::map<int, fs::path>>& layer_files) {
  c.flavour = "Megatron-DeepSpeed";
  const fs::path first = c.dir / "mp_rank_00_model_states.pt";
  std::error_code ec;
  if (!fs::exists(first, ec)) throw IoError(first.string() + ": missing (DeepSpeed writes it with the args)");
  if (layer_files.empty()) {
    for (int t : mp_ranks) {
      char name[64];
      std::snprintf(name, sizeof name, "mp_rank_%02d_model_states.pt", t);
      const TorchFile& f = open_file(c, c.dir / name);
      if (t == 0) read_common(c, f);
      const Value* m = f.root().get("module");
      if (!m || m->kind != Kind::Dict)
        throw IoError(f.path() + ": 'module' is " + (m ? m->describe() : std::string("missing")) + ", not a state dict");
      Shard s{t, 0, 0, &f, f.path(), {}};
      flatten(*m, "", &s.params, s.where);
      c.shards.push_back(std::move(s));
      c.tp = std::max(c.tp, t + 1);
    }
    if (static_cast<int>(mp_ranks.size()) != c.tp)
      throw IoError(c.dir.string() + ": mp_rank_*_model_states.pt files are not numbered 00 to " + std::to_string(c.tp - 1));
    return;
  }
  read_common(c, open_file(c, first));
  c.tp = static_cast<int>(layer_files.size());
  if (layer_files.rbegin()->first != c.tp - 1)
    throw IoError(c.dir.string() + ": layer_*-model_TT files are not numbered 00 to " + std::to_string(c.tp - 1));
  // A model-states file per stage and tensor-parallel rank (the layer files leave the stages out:
  // their layers are numbered through the whole model, and every shard is read as stage 0's).
  if (mp_ranks.size() % static_cast<size_t>(c.tp) == 0 && !mp_ranks.empty())
    c.pp = static_cast<int>(mp_ranks.size()) / c.tp;
  // The layer files in index order: the embedding, the transformer layers, the final norm.
  for (const auto& [t, files] : layer_files) {
    int layer = 0;
    for (const auto& [index, path] : files) {
      const TorchFile& f = open_file(c, path);
      if (f.root().kind != Kind::Dict) throw IoError(f.path() + ": holds " + f.root().describe() + ", not a state dict");
      std::vector<std::pair<std::string, const Value*>> keys;
      flatten(f.root(), "", &keys, f.path());
      const auto has = [&](const char* k) { return f.root().get(k) != nullptr; };
      std::string prefix;
      if (has("word_embeddings.weight")) prefix = "embedding.";
      else if (keys.size() == 2 && has("weight") && has("bias")) prefix = "encoder.final_layernorm.";
      else prefix = "encoder.layers." + std::to_string(layer++) + ".";
      Shard s{t, 0, 0, &f, f.path(), {}};
      for (auto& [k, v] : keys) s.params.emplace_back(prefix + k, v);
      c.shards.push_back(std::move(s));
    }
  }
}

// metadata.json's sharded_backend ("torch_dist", "zarr") in a Megatron-core distributed
// checkpoint; nullopt when there is none (trident's own metadata.json has no such key).
std::optional<std::string> sharded_backend(const fs::path& dir) {
  std::error_code ec;
  const fs::path config = dir / "metadata.json";
  if (!fs::is_regular_file(config, ec)) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(config.string()));
    if (j.is_object() && j.contains("sharded_backend") && j["sharded_backend"].is_string())
      return j["sharded_backend"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

// Megatron-core's distributed checkpoint (--ckpt-format torch_dist): metadata.json names the
// backend, common.pt holds the args and the iteration, .metadata and the *.distcp files the
// tensors (torch_dcp.h).
void read_megatron_dist(Checkpoint& c) {
  c.flavour = "Megatron-core torch_dist";
  const std::optional<std::string> backend = sharded_backend(c.dir);
  if (backend && *backend != "torch_dist")
    throw ConfigError((c.dir / "metadata.json").string() + ": sharded_backend '" + *backend +
                      "': of Megatron-core's distributed formats only torch_dist is read (Megatron converts with "
                      "--ckpt-convert-format torch_dist)");
  std::error_code ec;
  const fs::path common = c.dir / "common.pt";
  if (!fs::exists(common, ec)) throw IoError(common.string() + ": missing (Megatron-core saves the args there)");
  read_common(c, open_file(c, common));
  c.dist = std::make_unique<DcpCheckpoint>(c.dir);
}

// Whether `n`, an entry of an iteration folder, belongs to a distributed checkpoint.
bool is_dist_entry(const fs::path& n) {
  return n.filename() == ".metadata" || n.filename() == "common.pt" || n.extension() == ".distcp";
}

// What an iteration folder holds, by the names Megatron's formats give their files.
struct FolderListing {
  std::vector<std::pair<int, int>> lm_ranks;  // Megatron-LM's mp_rank_TT[_PPP] folders: (tp, pp)
  int with_stage = -1;                        // whether they carry _PPP (-1: none seen)
  std::string expert_folder;                  // an mp_rank_TT_PPP_EEE folder (mixture of experts)
  std::vector<int> ds_ranks;                  // Megatron-DeepSpeed's mp_rank_TT_model_states.pt
  std::map<int, std::map<int, fs::path>> layer_files;  // DeepSpeed's pipeline: tp -> layer -> file
  bool torch_dist = false;                    // .metadata, common.pt or *.distcp
};

FolderListing list_iteration_folder(const fs::path& dir) {
  static const std::regex lm_rank(R"(mp_rank_(\d\d)(_(\d\d\d))?)"), lm_expert(R"(mp_rank_\d\d_\d\d\d_\d\d\d)"),
      ds_rank(R"(mp_rank_(\d\d)_model_states\.pt)"), ds_layer(R"(layer_(\d+)-model_(\d\d)-model_states\.pt)"),
      ds_layer_no_tp(R"(layer_(\d+)-model_states\.pt)");
  FolderListing l;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    const std::string n = path.filename().string();
    std::error_code entry_ec;  // an entry that cannot be examined (a dangling link) is not a folder
    std::smatch m;
    if (std::regex_match(n, lm_expert)) {
      l.expert_folder = path.string();
    } else if (it->is_directory(entry_ec) && std::regex_match(n, m, lm_rank)) {
      const int stage = m[3].matched ? std::stoi(m[3].str()) : 0;
      if (l.with_stage >= 0 && l.with_stage != static_cast<int>(m[3].matched))
        throw IoError(dir.string() + ": mp_rank_TT and mp_rank_TT_PPP folders mixed");
      l.with_stage = m[3].matched;
      l.lm_ranks.emplace_back(std::stoi(m[1].str()), stage);
    } else if (std::regex_match(n, m, ds_rank)) {
      l.ds_ranks.push_back(std::stoi(m[1].str()));
    } else if (std::regex_match(n, m, ds_layer)) {
      l.layer_files[std::stoi(m[2].str())][std::stoi(m[1].str())] = path;
    } else if (std::regex_match(n, m, ds_layer_no_tp)) {
      l.layer_files[0][std::stoi(m[1].str())] = path;
    } else if (is_dist_entry(path)) {
      l.torch_dist = true;
    }
  }
  if (ec) throw IoError(dir.string() + ": cannot list: " + ec.message());
  std::sort(l.lm_ranks.begin(), l.lm_ranks.end());
  std::sort(l.ds_ranks.begin(), l.ds_ranks.end());
  return l;
}

// The iteration folder `load` names: itself, iter_NNNNNNN / global_stepN for `iteration`, or
// the one the pointer file (Megatron's latest_checkpointed_iteration.txt, DeepSpeed's latest)
// names.
fs::path resolve_dir(const fs::path& load, std::optional<int64_t> iteration, const std::string& iteration_flag) {
  check_load_is_directory(load);
  std::error_code ec;
  const auto is_iteration_folder = [](const fs::path& d) {
    const FolderListing l = list_iteration_folder(d);
    return !l.lm_ranks.empty() || !l.expert_folder.empty() || !l.ds_ranks.empty() || !l.layer_files.empty() ||
           l.torch_dist;
  };
  if (is_iteration_folder(load)) {
    if (iteration) throw ConfigError(iteration_flag + ": --load names one iteration folder already (" + load.string() + ")");
    return load;
  }
  const auto global_step = [&](int64_t n) { return load / ("global_step" + std::to_string(n)); };
  if (iteration) {
    for (const fs::path& d : {iteration_dir(load, *iteration), global_step(*iteration)})
      if (fs::is_directory(d, ec)) return d;
    throw ConfigError(iteration_flag + " " + std::to_string(*iteration) + ": neither " +
                      iteration_dir(load, *iteration).string() + " nor " + global_step(*iteration).string() + " exists");
  }
  const fs::path megatron_pointer = latest_file(load), deepspeed_pointer = load / "latest";
  fs::path dir;
  const auto read_pointer = [](const fs::path& p) {
    std::string s = read_file(p.string());
    s.erase(s.find_last_not_of(" \t\r\n") + 1);
    return s;
  };
  if (fs::exists(megatron_pointer, ec)) {
    const std::string s = read_pointer(megatron_pointer);
    if (s == "release") dir = load / "release";
    else if (all_digits(s) && s.size() <= 10) {
      dir = iteration_dir(load, std::stoll(s));
      if (!fs::is_directory(dir, ec) && fs::is_directory(global_step(std::stoll(s)), ec)) dir = global_step(std::stoll(s));
    } else {
      throw IoError(megatron_pointer.string() + ": '" + s + "' is neither an iteration number nor 'release'");
    }
  } else if (fs::exists(deepspeed_pointer, ec)) {
    const std::string s = read_pointer(deepspeed_pointer);
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
      throw IoError(deepspeed_pointer.string() + ": '" + s + "' is not a checkpoint tag");
    dir = load / s;
  } else {
    throw ConfigError("--load: " + load.string() + " holds no Megatron checkpoint (no " + kLatestFileName +
                      ", no DeepSpeed 'latest', no mp_rank_* files)");
  }
  if (!fs::is_directory(dir, ec)) throw IoError(dir.string() + ": missing (named by the latest-checkpoint file)");
  return dir;
}

Checkpoint read_checkpoint_files(const fs::path& dir) {
  Checkpoint c;
  c.dir = dir;
  const FolderListing l = list_iteration_folder(dir);
  if (!l.expert_folder.empty())
    throw ConfigError(l.expert_folder + ": expert-parallel checkpoints (mixture of experts) are not supported");
  const auto& [lm_ranks, with_stage, expert, ds_ranks, layer_files, torch_dist] = l;
  if (!lm_ranks.empty()) {
    read_megatron_lm(c, lm_ranks, with_stage == 1);
  } else if (!ds_ranks.empty()) {
    read_megatron_deepspeed(c, ds_ranks, layer_files);
  } else if (torch_dist || sharded_backend(dir)) {
    read_megatron_dist(c);
  } else {
    throw IoError(dir.string() + ": no mp_rank_TT[_PPP]/model_optim_rng.pt (Megatron-LM), no "
                                 "mp_rank_TT_model_states.pt (Megatron-DeepSpeed) and no .metadata "
                                 "(Megatron-core torch_dist)");
  }
  return c;
}

}  // namespace

std::optional<std::string> megatron_format_of(const fs::path& iteration_dir) {
  std::error_code ec;
  if (sharded_backend(iteration_dir)) return "Megatron-core torch_dist";
  // trident's own: its metadata.json, and rank folders named as Megatron's.
  if (fs::exists(iteration_dir / "metadata.json", ec)) return std::nullopt;
  FolderListing l;
  try {
    l = list_iteration_folder(iteration_dir);
  } catch (const IoError&) {
    return std::nullopt;
  }
  if (l.torch_dist) return "Megatron-core torch_dist";
  if (!l.ds_ranks.empty() || !l.layer_files.empty()) return "Megatron-DeepSpeed";
  for (const auto& [t, p] : l.lm_ranks) {  // a Megatron-LM rank file, not a trident checkpoint that lost its metadata
    const fs::path rank = iteration_dir / rank_dir_name(t, p, l.with_stage == 1 ? 2 : 1);
    if (fs::exists(rank / "model_optim_rng.pt", ec) || fs::exists(rank / "model_rng.pt", ec)) return "Megatron-LM";
  }
  return l.expert_folder.empty() ? std::nullopt : std::optional<std::string>("Megatron-LM");
}

Checkpoint open_checkpoint(const fs::path& load, std::optional<int64_t> iteration, const std::string& iteration_flag) {
  return read_checkpoint_files(resolve_dir(load, iteration, iteration_flag));
}

}  // namespace trident::megatron
