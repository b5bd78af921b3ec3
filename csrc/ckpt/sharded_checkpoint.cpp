#include "ckpt/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

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
    // Size and checksum are checked on the reader's own mapping before its header is parsed.
    readers_[file] = std::make_unique<SafetensorsReader>(path, ExpectedFile{rec.xxh3, static_cast<int64_t>(rec.size)});
  }
  return *readers_[file];
}

const ParamSpec& ShardedCheckpointReader::spec(const std::string& name) const {
  auto it = spec_index_.find(name);
  if (it == spec_index_.end()) throw IoError(dir_.string() + ": the model has no parameter '" + name + "'");
  return specs_[it->second];
}

// Gathers the saved pieces into the stored canonical form, and checks that every element
// was written (a missing rank file would otherwise leave silent zeros).
//
// The pieces are first cut into runs of consecutive canonical indices (vocabulary padding
// dropped), which are then sorted and appended in order straight from the files' mappings:
// each element is copied once, into memory that is written once (no zero fill, no staging
// copy of each piece, no per-element "seen" map); a gap between runs is a missing element.
std::vector<float> ShardedCheckpointReader::assemble(const std::string& name, const std::vector<Entry>& entries,
                                                     bool pieces) {
  const ParamSpec& s = spec(name);
  const int tp = meta_.layout.tp;
  const int64_t stored_numel = stored_shape(s).numel();
  struct Run {
    int64_t g, n;               // canonical first index, element count
    const unsigned char* src;   // the run's first element in a file mapping
    StDType dtype;
  };
  std::vector<Run> runs;
  for (const Entry& e : entries) {
    const SafetensorsReader& r = open(e.file);
    const StTensorInfo& t = r.info(e.key);
    if (t.dtype != StDType::F32 && t.dtype != StDType::F16 && t.dtype != StDType::BF16)
      throw IoError(r.path() + ": tensor '" + e.key + "' has dtype " + st_dtype_name(t.dtype) +
                    ", expected a float type (F32, F16, BF16)");
    const size_t esize = st_dtype_size(t.dtype);
    const unsigned char* base = static_cast<const unsigned char*>(r.data(e.key));
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n;) {
      const int64_t g = canonical_index(s, tp, e.tp_rank, e.first + i);
      const int64_t run = std::min(canonical_run(s, tp, e.first + i), n - i);
      const int64_t kept = std::max<int64_t>(0, std::min(run, stored_numel - g));
      const unsigned char* src = base + static_cast<size_t>(i) * esize;
      if (kept > 0) {
        Run* last = runs.empty() ? nullptr : &runs.back();
        if (last && last->dtype == t.dtype && last->g + last->n == g &&
            last->src + static_cast<size_t>(last->n) * esize == src)
          last->n += kept;  // continues the previous run in both layouts
        else
          runs.push_back(Run{g, kept, src, t.dtype});
      }
      i += run;
    }
  }
  std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.g < b.g; });
  std::vector<float> full;
  // Room for the vocabulary padding too, so that extract_local_stored(&&) can append it
  // in place at tp 1.
  full.reserve(static_cast<size_t>(std::max(stored_numel, s.shape.numel())));
  for (const Run& u : runs) {
    const int64_t have = static_cast<int64_t>(full.size());
    if (u.g > have) break;                   // a hole at `have`: reported below
    const int64_t skip = have - u.g;         // already filled by an earlier run
    if (skip >= u.n) continue;
    const int64_t m = u.n - skip;
    if (u.dtype == StDType::F32 && reinterpret_cast<uintptr_t>(u.src) % alignof(float) == 0) {
      const float* f = reinterpret_cast<const float*>(u.src) + skip;  // trident's writer aligns them
      full.insert(full.end(), f, f + m);
    } else if (u.dtype == StDType::F32) {  // a hand-made file may not
      for (int64_t k = 0; k < m; ++k) {
        float v;
        std::memcpy(&v, u.src + 4 * (skip + k), 4);
        full.push_back(v);
      }
    } else {
      const unsigned char* h = u.src + static_cast<size_t>(skip) * 2;
      for (int64_t k = 0; k < m; ++k) {
        uint16_t v;
        std::memcpy(&v, h + 2 * k, 2);
        full.push_back(u.dtype == StDType::F16 ? half_to_float(v) : bf16_to_float(v));
      }
    }
  }
  if (static_cast<int64_t>(full.size()) < stored_numel)
    throw IoError(dir_.string() + ": " + (pieces ? "optimizer state" : "parameter") + " '" + name +
                  "' is incomplete (element " + std::to_string(full.size()) + " is in no file)");
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
