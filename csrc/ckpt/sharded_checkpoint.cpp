#include "ckpt/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>

#include "ckpt/canonical_slices.h"
#include "ckpt/checksum.h"
#include "core/backend.h"
#include "core/error.h"
#include "model/param_store.h"

namespace trident {
namespace {

int metadata_int(const SafetensorsReader& r, const char* key) {
  auto it = r.metadata().find(key);
  if (it == r.metadata().end()) throw IoError(r.path() + ": __metadata__ lacks '" + key + "'");
  try {
    return std::stoi(it->second);
  } catch (const std::exception&) {
    throw IoError(r.path() + ": __metadata__ '" + key + "' is not a number");
  }
}

}  // namespace

std::string optimizer_piece_key(const std::string& param, const std::string& state, int64_t first) {
  return param + "|" + state + "|" + std::to_string(first);
}

std::map<std::string, std::string> rank_file_metadata(int tp, int tp_rank, int pp_rank, int dp_rank) {
  return {{"tp", std::to_string(tp)},
          {"tp_rank", std::to_string(tp_rank)},
          {"pp_rank", std::to_string(pp_rank)},
          {"dp_rank", std::to_string(dp_rank)}};
}

std::string optimizer_file_name(int dp_rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optim_dp%04d.safetensors", dp_rank);
  return buf;
}

ShardedCheckpointReader::ShardedCheckpointReader(const std::filesystem::path& dir) : dir_(dir) {
  const std::filesystem::path meta_path = dir / kMetadataFileName;
  if (!std::filesystem::exists(meta_path)) throw IoError(meta_path.string() + ": missing (not a trident checkpoint)");
  meta_ = read_metadata(meta_path.string());
  specs_ = gpt2_param_specs(meta_.model, meta_.layout.tp);
  for (size_t i = 0; i < specs_.size(); ++i) spec_index_[specs_[i].name] = i;
  readers_.resize(meta_.files.size());
  // Index every tensor of every file (this opens each file once: headers only, plus the
  // checksum pass on first open).
  for (size_t f = 0; f < meta_.files.size(); ++f) {
    SafetensorsReader& r = open(f);
    const int tp_rank = metadata_int(r, "tp_rank");
    for (const StTensorInfo& t : r.tensors()) {
      const size_t bar = t.name.find('|');
      if (bar == std::string::npos) {
        model_entries_[t.name].push_back(Entry{f, t.name, tp_rank, 0});
        continue;
      }
      const size_t bar2 = t.name.find('|', bar + 1);
      if (bar2 == std::string::npos) throw IoError(r.path() + ": malformed optimizer tensor name '" + t.name + "'");
      const std::string name = t.name.substr(0, bar), state = t.name.substr(bar + 1, bar2 - bar - 1);
      optimizer_entries_[name + "|" + state].push_back(Entry{f, t.name, tp_rank, std::stoll(t.name.substr(bar2 + 1))});
      has_optimizer_ = true;
    }
  }
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

SafetensorsReader& ShardedCheckpointReader::open(size_t file) {
  if (!readers_[file]) {
    const FileRecord& rec = meta_.files[file];
    const std::string path = (dir_ / rec.path).string();
    verify_file(path, rec.xxh3, static_cast<int64_t>(rec.size));
    readers_[file] = std::make_unique<SafetensorsReader>(path);
  }
  return *readers_[file];
}

const ParamSpec& ShardedCheckpointReader::spec(const std::string& name) const {
  auto it = spec_index_.find(name);
  if (it == spec_index_.end()) throw IoError(dir_.string() + ": the model has no parameter '" + name + "'");
  return specs_[it->second];
}

// Scatters the saved pieces into the stored canonical form, and checks that every element
// was written (a missing rank file would otherwise leave silent zeros).
std::vector<float> ShardedCheckpointReader::assemble(const std::string& name, const std::vector<Entry>& entries,
                                                     bool pieces) {
  const ParamSpec& s = spec(name);
  const int tp = meta_.layout.tp;
  const Shape stored = stored_shape(s);
  const int64_t stored_numel = stored.numel();
  std::vector<float> full(static_cast<size_t>(stored_numel), 0.0f);
  std::vector<char> seen(static_cast<size_t>(stored_numel), 0);
  for (const Entry& e : entries) {
    const std::vector<float> v = open(e.file).read_f32(e.key);
    const int64_t n = static_cast<int64_t>(v.size());
    for (int64_t i = 0; i < n;) {
      // One copy per run of consecutive canonical indices; vocabulary padding is dropped.
      const int64_t g = canonical_index(s, tp, e.tp_rank, e.first + i);
      const int64_t run = std::min(canonical_run(s, tp, e.first + i), n - i);
      const int64_t kept = std::max<int64_t>(0, std::min(run, stored_numel - g));
      std::copy(v.begin() + i, v.begin() + i + kept, full.begin() + g);
      std::fill(seen.begin() + g, seen.begin() + g + kept, 1);
      i += run;
    }
  }
  for (int64_t i = 0; i < stored_numel; ++i)
    if (!seen[i])
      throw IoError(dir_.string() + ": " + (pieces ? "optimizer state" : "parameter") + " '" + name +
                    "' is incomplete (element " + std::to_string(i) + " is in no file)");
  return full;
}

std::vector<float> ShardedCheckpointReader::model_tensor(const std::string& name) {
  auto it = model_entries_.find(name);
  if (it == model_entries_.end()) throw IoError(dir_.string() + ": no parameter '" + name + "' in any file");
  // Replicated tensors are saved by every TP rank; one copy is enough.
  std::vector<Entry> entries;
  std::vector<char> have(meta_.layout.tp, 0);
  for (const Entry& e : it->second)
    if (!have[e.tp_rank]) have[e.tp_rank] = 1, entries.push_back(e);
  if (spec(name).shard == ShardRule::Replicated) entries.resize(1);
  return assemble(name, entries, false);
}

std::vector<float> ShardedCheckpointReader::optimizer_tensor(const std::string& name, const std::string& state) {
  auto it = optimizer_entries_.find(name + "|" + state);
  if (it == optimizer_entries_.end())
    throw IoError(dir_.string() + ": no optimizer state '" + state + "' of '" + name + "' in any file");
  return assemble(name, it->second, true);
}

void check_same_model_shape(const ModelConfig& c, const ModelConfig& m, const std::filesystem::path& dir) {
  auto same = [&](const char* flag, int64_t ckpt, int64_t run) {
    if (ckpt != run)
      throw ConfigError("--load: " + dir.string() + " is a model with " + flag + " " + std::to_string(ckpt) +
                        ", this run has " + std::to_string(run));
  };
  same("--num-layers", c.num_layers, m.num_layers);
  same("--hidden-size", c.hidden_size, m.hidden_size);
  same("--num-attention-heads", c.num_attention_heads, m.num_attention_heads);
  same("vocabulary size", c.vocab_size, m.vocab_size);
  same("--max-position-embeddings", c.max_position_embeddings, m.max_position_embeddings);
}

void load_model_parameters(ShardedCheckpointReader& ckpt, ParamStore& params, Backend& backend) {
  Buffer staging;
  for (const LocalParam& p : params.list()) {
    const std::vector<float> local =
        extract_local_stored(p.spec, params.tp(), params.tp_rank(), ckpt.model_tensor(p.spec.name));
    const Tensor dst = params.param(p);
    if (dst.dtype == DType::F32) {
      backend.copy_from_host(dst, local.data());
      continue;
    }
    staging = backend.empty(dst.shape, DType::F32);
    backend.copy_from_host(staging, local.data());
    backend.cast(staging, dst);
  }
}

}  // namespace trident
