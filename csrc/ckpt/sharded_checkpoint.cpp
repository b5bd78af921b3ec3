#include "ckpt/sharded_checkpoint.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "ckpt/canonical_slices.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "ckpt/megatron_detect.h"
#include "core/backend.h"
#include "core/error.h"
#include "model/param_store.h"
#include "parallel/pipeline_split.h"

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

namespace {

// "mp_rank_TT" (pp 1) or "mp_rank_TT_PPP" -> (tp rank, pp rank); nullopt for another name.
std::optional<std::pair<int, int>> parse_rank_dir(const std::string& name, int pp) {
  const std::string prefix = "mp_rank_";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = name.substr(prefix.size());
  const size_t bar = rest.find('_');
  const std::string tp = rest.substr(0, bar), stage = bar == std::string::npos ? "" : rest.substr(bar + 1);
  if (!all_digits(tp) || tp.size() > 6 || (bar != std::string::npos && (!all_digits(stage) || stage.size() > 6)))
    return std::nullopt;
  if ((bar == std::string::npos) != (pp <= 1)) return std::nullopt;
  return std::make_pair(std::stoi(tp), stage.empty() ? 0 : std::stoi(stage));
}

// "optim_dpDDDD.safetensors" -> DDDD; nullopt for another name.
std::optional<int> parse_optimizer_file(const std::string& name) {
  const std::string prefix = "optim_dp", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!all_digits(digits) || digits.size() > 6) return std::nullopt;
  return std::stoi(digits);
}

}  // namespace

ShardedCheckpointReader::FilePlace rank_file_place(const std::string& rel_path, int pp) {
  using Kind = ShardedCheckpointReader::FileKind;
  ShardedCheckpointReader::FilePlace place;
  const std::filesystem::path p(rel_path);
  const std::string base = p.filename().string();
  if (base == kModelFileName) {
    place.kind = Kind::Model;
  } else if (const auto dp = parse_optimizer_file(base)) {
    place.kind = Kind::Optimizer;
    place.dp_rank = *dp;
  }
  if (const auto ranks = parse_rank_dir(p.parent_path().string(), pp)) {
    place.tp_rank = ranks->first;
    place.pp_rank = ranks->second;
  }
  return place;
}

ShardedCheckpointReader::ShardedCheckpointReader(const std::filesystem::path& dir) : dir_(dir) {
  const std::filesystem::path meta_path = dir / kMetadataFileName;
  // A Megatron checkpoint (no metadata.json, or Megatron-core's) is named as such.
  const auto not_megatron = [&] {
    if (const std::optional<std::string> megatron = megatron::megatron_format_of(dir))
      throw IoError(dir.string() + ": a " + *megatron + " checkpoint, not trident's: import its weights with " +
                    "trident-convert --from megatron --load " + dir.string() + " --save NEW_DIR");
  };
  std::error_code ec;  // a link loop or an unreadable folder: read_metadata names the cause
  if (!std::filesystem::exists(meta_path, ec) && !ec) {
    not_megatron();
    throw IoError(meta_path.string() + ": missing (not a trident checkpoint)");
  }
  try {
    meta_ = read_metadata(meta_path.string());
  } catch (const IoError&) {
    not_megatron();
    throw;
  }
  specs_ = gpt2_param_specs(meta_.model, meta_.layout.tp);
  for (size_t i = 0; i < specs_.size(); ++i) spec_index_[specs_[i].name] = i;
  readers_.resize(meta_.files.size());
  entries_.resize(meta_.files.size());
  for (const FileRecord& f : meta_.files) {
    places_.push_back(rank_file_place(f.path, meta_.layout.pp));
    has_optimizer_ = has_optimizer_ || places_.back().kind == FileKind::Optimizer;
  }
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

SafetensorsReader& ShardedCheckpointReader::open(size_t file) {
  if (!readers_[file]) {
    const FileRecord& rec = meta_.files[file];
    const std::string path = (dir_ / rec.path).string();
    // Size and checksum are checked on the reader's own mapping before its header is parsed.
    auto reader = std::make_unique<SafetensorsReader>(path, ExpectedFile{rec.xxh3, static_cast<int64_t>(rec.size)});
    entries_[file] = index_tensors(file, *reader);
    readers_[file] = std::move(reader);
    opened_.push_back(rec.path);
  }
  return *readers_[file];
}

// The pieces file `file` holds: parameters under their names, optimizer pieces
// ("<name>|<state>|<first>") under "<name>|<state>".
std::map<std::string, std::vector<ShardedCheckpointReader::Entry>> ShardedCheckpointReader::index_tensors(
    size_t file, const SafetensorsReader& r) const {
  std::map<std::string, std::vector<Entry>> entries;
  const int tp_rank = metadata_int(r, "tp_rank");
  if (tp_rank < 0 || tp_rank >= meta_.layout.tp)
    throw IoError(r.path() + ": __metadata__ tp_rank " + std::to_string(tp_rank) + " is outside tp " +
                  std::to_string(meta_.layout.tp));
  // The model metadata.json describes sizes every piece: a piece that does not fit it is a
  // bad input here, before anything is sized from the metadata's numbers.
  for (const StTensorInfo& t : r.tensors()) {
    const size_t bar = t.name.find('|');
    const auto spec = spec_index_.find(t.name.substr(0, bar));  // the parameter's
    // A piece of no parameter of the model: its metadata.json describes another model (fewer
    // layers, say), which would leave those pieces unread.
    if (spec == spec_index_.end())
      throw IoError(r.path() + ": tensor '" + t.name + "' belongs to no parameter of " + kMetadataFileName +
                    "'s model (" + std::to_string(meta_.model.num_layers) + " layers)");
    const Shape local = local_shape(specs_[spec->second], meta_.layout.tp);
    if (bar == std::string::npos) {
      if (t.shape != shape_vec(local))
        throw IoError(r.path() + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) + ", but " +
                      kMetadataFileName + "'s model at tp " + std::to_string(meta_.layout.tp) + " makes it " +
                      shape_str(shape_vec(local)));
      entries[t.name].push_back(Entry{file, t.name, tp_rank, 0});
      continue;
    }
    const size_t bar2 = t.name.find('|', bar + 1);
    const std::string first = bar2 == std::string::npos ? "" : t.name.substr(bar2 + 1);
    if (!all_digits(first) || first.size() > 18)
      throw IoError(r.path() + ": malformed optimizer tensor name '" + t.name + "'");
    const int64_t begin = std::stoll(first);
    const int64_t n = local.numel();
    if (t.shape.size() != 1 || begin > n || t.numel() > n - begin)
      throw IoError(r.path() + ": optimizer tensor '" + t.name + "' of shape " + shape_str(t.shape) +
                    " does not fit the parameter's " + std::to_string(n) + " elements at tp " +
                    std::to_string(meta_.layout.tp) + " (" + kMetadataFileName + ")");
    entries[t.name.substr(0, bar2)].push_back(Entry{file, t.name, tp_rank, begin});
  }
  return entries;
}

const ParamSpec& ShardedCheckpointReader::spec(const std::string& name) const {
  auto it = spec_index_.find(name);
  if (it == spec_index_.end()) throw IoError(dir_.string() + ": the model has no parameter '" + name + "'");
  return specs_[it->second];
}

// Whether the writer's pipeline stage `pp_rank` holds `s` (its layers split as the trainer
// splits them).
bool ShardedCheckpointReader::stage_may_hold(int pp_rank, const ParamSpec& s) const {
  const int pp = meta_.layout.pp;
  if (pp_rank < 0 || pp_rank >= pp) return false;
  if (s.layer >= 0)
    return pipeline_stage_of_layer(pipeline_split_of(meta_.model, meta_.layout), s.layer) == pp_rank;
  return stage_holds(s, 0, 0, pp_rank == 0, pp_rank == pp - 1);
}

// The files of `kind` that may hold elements `need` of `s`, most preferred first.
std::vector<size_t> ShardedCheckpointReader::candidate_files(const ParamSpec& s, FileKind kind,
                                                             const IndexRanges& need,
                                                             const Preference& prefer) const {
  const int tp = meta_.layout.tp;
  // Whether TP rank t's slice holds any element asked for (every copy of a replicated one).
  std::vector<char> slice_needed(static_cast<size_t>(tp), 1);
  const int64_t local_numel = local_shape(s, tp).numel(), stored_numel = stored_shape(s).numel();
  if (s.shard != ShardRule::Replicated)
    for (int t = 0; t < tp; ++t)
      slice_needed[t] = intersects(canonical_ranges(s, tp, t, 0, local_numel, stored_numel), need);
  std::vector<std::pair<std::array<int, 4>, size_t>> ranked;
  for (size_t f = 0; f < places_.size(); ++f) {
    const FilePlace& p = places_[f];
    if (p.kind != kind && p.kind != FileKind::Other) continue;
    if (p.tp_rank >= 0 && p.tp_rank < tp && !slice_needed[p.tp_rank]) continue;
    const std::array<int, 4> rank = {readers_[f] ? 0 : 1, stage_may_hold(p.pp_rank, s) ? 0 : 1,
                                     p.tp_rank == prefer.tp_rank ? 0 : 1, p.dp_rank == prefer.dp_rank ? 0 : 1};
    ranked.emplace_back(rank, f);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<size_t> files;
  for (const auto& r : ranked) files.push_back(r.second);
  return files;
}

// The canonical elements of `s` a piece holds.
IndexRanges ShardedCheckpointReader::held_by(const ParamSpec& s, const Entry& e) {
  const int64_t n = open(e.file).info(e.key).numel();
  return canonical_ranges(s, meta_.layout.tp, e.tp_rank, e.first, e.first + n, stored_shape(s).numel());
}

// The pieces of tensor `key` (a parameter name, or "<name>|<state>") that hold elements
// `need` of parameter `s`: candidate files are opened in turn until `need` is covered (a
// piece that adds nothing, e.g. a replicated tensor's other copies, is left out).
std::vector<ShardedCheckpointReader::Entry> ShardedCheckpointReader::find_pieces(const ParamSpec& s, FileKind kind,
                                                                                 const std::string& key,
                                                                                 const IndexRanges& need,
                                                                                 const Preference& prefer) {
  IndexRanges missing = need;
  std::vector<Entry> pieces;
  for (size_t f : candidate_files(s, kind, need, prefer)) {
    if (missing.empty()) break;
    open(f);
    const auto it = entries_[f].find(key);
    if (it == entries_[f].end()) continue;
    for (const Entry& e : it->second) {
      const IndexRanges held = held_by(s, e);
      if (!intersects(held, missing)) continue;
      pieces.push_back(e);
      missing = subtract(missing, held);
    }
  }
  return pieces;
}

// Elements `need` of parameter `s` (state empty) or of its optimizer state, in the stored
// canonical form (the others 0).
std::vector<float> ShardedCheckpointReader::read(const ParamSpec& s, const std::string& state, const IndexRanges& need,
                                                 const Preference& prefer) {
  const bool optimizer = !state.empty();
  const std::vector<Entry> pieces = find_pieces(s, optimizer ? FileKind::Optimizer : FileKind::Model,
                                                optimizer ? s.name + "|" + state : s.name, need, prefer);
  if (pieces.empty() && !need.empty()) {
    const std::string what =
        optimizer ? "optimizer state '" + state + "' of '" + s.name + "'" : "parameter '" + s.name + "'";
    throw IoError(dir_.string() + ": no " + what + " in any file");
  }
  return assemble(s, pieces, optimizer, need);
}

namespace {

// A run of consecutive canonical elements in one file mapping.
struct Run {
  int64_t g, n;              // canonical first index, element count
  const unsigned char* src;  // the run's first element in a file mapping
  StDType dtype;
};

// Copies elements [skip, skip + m) of run `u` to `dst` as fp32.
void decode_run(const Run& u, int64_t skip, int64_t m, float* dst) {
  if (u.dtype == StDType::F32) {  // memcpy: a hand-made file may not align them
    std::memcpy(dst, u.src + 4 * skip, static_cast<size_t>(m) * 4);
    return;
  }
  const unsigned char* h = u.src + static_cast<size_t>(skip) * 2;
  for (int64_t k = 0; k < m; ++k) {
    uint16_t v;
    std::memcpy(&v, h + 2 * k, 2);
    dst[k] = u.dtype == StDType::F16 ? half_to_float(v) : bf16_to_float(v);
  }
}

// Puts elements [skip, skip + m) of run `u` at canonical index `at` of `full`: appended when
// `at` is its end (a whole tensor is assembled in order, with no zero fill first).
void put_run(std::vector<float>& full, int64_t at, const Run& u, int64_t skip, int64_t m) {
  if (at == static_cast<int64_t>(full.size())) {
    if (u.dtype == StDType::F32 && reinterpret_cast<uintptr_t>(u.src) % alignof(float) == 0) {
      const float* f = reinterpret_cast<const float*>(u.src) + skip;  // trident's writer aligns them
      full.insert(full.end(), f, f + m);
      return;
    }
    full.resize(full.size() + static_cast<size_t>(m));
  }
  decode_run(u, skip, m, full.data() + at);
}

}  // namespace

// Gathers the saved pieces into the stored canonical form, and checks that every element
// of `need` was written (a missing rank file would otherwise leave silent zeros).
//
// The pieces are first cut into runs of consecutive canonical indices (vocabulary padding
// dropped), which are then sorted and copied in order straight from the files' mappings:
// each element is copied once; a whole tensor is appended into memory written once (no
// zero fill, no staging copy of each piece, no per-element "seen" map); a gap between runs
// inside `need` is a missing element.
std::vector<float> ShardedCheckpointReader::assemble(const ParamSpec& s, const std::vector<Entry>& entries,
                                                     bool pieces, const IndexRanges& need) {
  const int tp = meta_.layout.tp;
  const int64_t stored_numel = stored_shape(s).numel();
  std::vector<Run> runs;
  for (const Entry& e : entries) {
    const SafetensorsReader& r = open(e.file);
    const StTensorInfo& t = r.info(e.key);
    if (t.dtype != StDType::F32 && t.dtype != StDType::F16 && t.dtype != StDType::BF16)
      throw IoError(r.path() + ": tensor '" + e.key + "' has dtype " + st_dtype_name(t.dtype) +
                    ", expected a float type (F32, F16, BF16)");
    const size_t esize = st_dtype_size(t.dtype);
    const unsigned char* base = static_cast<const unsigned char*>(r.data(e.key));
    const int64_t end = e.first + t.numel();
    for_each_canonical_run(s, tp, e.tp_rank, e.first, end, stored_numel, [&](int64_t local, int64_t g, int64_t n) {
      const unsigned char* src = base + static_cast<size_t>(local - e.first) * esize;
      Run* last = runs.empty() ? nullptr : &runs.back();
      if (last && last->dtype == t.dtype && last->g + last->n == g &&
          last->src + static_cast<size_t>(last->n) * esize == src)
        last->n += n;  // continues the previous run in both layouts
      else
        runs.push_back(Run{g, n, src, t.dtype});
    });
  }
  std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.g < b.g; });
  std::vector<float> full;
  // Room for the vocabulary padding too, so that extract_local_stored(&&) can append it
  // in place at tp 1.
  full.reserve(static_cast<size_t>(std::max(stored_numel, s.shape.numel())));
  const bool whole = need.size() == 1 && need[0] == IndexRange{0, stored_numel};
  if (!whole) full.assign(static_cast<size_t>(stored_numel), 0.0f);
  size_t next = 0;  // runs before it end before the current position
  for (const IndexRange& want : need) {
    for (int64_t at = want.begin; at < want.end;) {
      while (next < runs.size() && runs[next].g + runs[next].n <= at) ++next;
      if (next == runs.size() || runs[next].g > at)
        throw IoError(dir_.string() + ": " + (pieces ? "optimizer state" : "parameter") + " '" + s.name +
                      "' is incomplete (element " + std::to_string(at) + " is in no file)");
      const Run& u = runs[next];
      const int64_t m = std::min(u.g + u.n, want.end) - at;
      put_run(full, at, u, at - u.g, m);
      at += m;
    }
  }
  return full;
}

// The writer's TP rank whose slice starts where TP rank `tp_rank`'s slice at `tp` does.
int ShardedCheckpointReader::preferred_tp_rank(int tp, int tp_rank) const {
  return static_cast<int>(static_cast<int64_t>(tp_rank) * meta_.layout.tp / tp);
}

std::vector<float> ShardedCheckpointReader::model_tensor(const std::string& name) {
  const ParamSpec& s = spec(name);
  return read(s, "", {{0, stored_shape(s).numel()}}, Preference{});
}

std::vector<float> ShardedCheckpointReader::optimizer_tensor(const std::string& name, const std::string& state) {
  const ParamSpec& s = spec(name);
  return read(s, state, {{0, stored_shape(s).numel()}}, Preference{});
}

namespace {

// The run's parameter `spec` (at the run's tp) must be the checkpoint's `stored` one.
void check_same_stored_shape(const ParamSpec& spec, const ParamSpec& stored, const std::filesystem::path& dir) {
  const std::vector<int64_t> want = shape_vec(stored_shape(spec)), have = shape_vec(stored_shape(stored));
  if (want != have)
    throw IoError(dir.string() + ": parameter '" + spec.name + "' has shape " + shape_str(have) + ", the run's has " +
                  shape_str(want));
}

}  // namespace

std::vector<float> ShardedCheckpointReader::model_slice(const ParamSpec& run_spec, int tp, int tp_rank) {
  return read_slice(run_spec, "", tp, tp_rank, -1, {{0, local_shape(run_spec, tp).numel()}});
}

std::vector<float> ShardedCheckpointReader::optimizer_slice(const ParamSpec& run_spec, const std::string& state,
                                                            int tp, int tp_rank, int dp_rank,
                                                            const IndexRanges& wanted) {
  return read_slice(run_spec, state, tp, tp_rank, dp_rank, wanted);
}

std::vector<float> ShardedCheckpointReader::read_slice(const ParamSpec& run_spec, const std::string& state, int tp,
                                                       int tp_rank, int dp_rank, const IndexRanges& wanted) {
  const ParamSpec& s = spec(run_spec.name);
  check_same_stored_shape(run_spec, s, dir_);
  IndexRanges need;
  for (const IndexRange& w : wanted)
    for (const IndexRange& r : canonical_ranges(run_spec, tp, tp_rank, w.begin, w.end, stored_shape(s).numel()))
      need.push_back(r);
  const Preference prefer{preferred_tp_rank(tp, tp_rank), dp_rank};
  return extract_local_stored(run_spec, tp, tp_rank, read(s, state, normalized(std::move(need)), prefer));
}

const std::vector<ModelShapeField>& model_shape_fields() {
  static const std::vector<ModelShapeField> fields = {
      {"num-layers", [](const ModelConfig& m) -> int64_t { return m.num_layers; }, true},
      {"hidden-size", [](const ModelConfig& m) -> int64_t { return m.hidden_size; }, true},
      {"num-attention-heads", [](const ModelConfig& m) -> int64_t { return m.num_attention_heads; }, true},
      {"seq-length", [](const ModelConfig& m) -> int64_t { return m.seq_length; }, false},
      {"max-position-embeddings", [](const ModelConfig& m) -> int64_t { return m.max_position_embeddings; }, true},
      {"make-vocab-size-divisible-by", [](const ModelConfig& m) -> int64_t { return m.make_vocab_size_divisible_by; },
       false},
      {"vocab-size", [](const ModelConfig& m) -> int64_t { return m.vocab_size; }, true},
  };
  return fields;
}

void check_same_model_shape(const ModelConfig& c, const ModelConfig& m, const std::filesystem::path& dir) {
  for (const ModelShapeField& f : model_shape_fields()) {
    if (!f.in_weights || f.value(c) == f.value(m)) continue;
    // The vocabulary comes from the tokenizer, not from a flag (--vocab-size is synthetic data's).
    const std::string what = std::string(f.flag) == "vocab-size" ? "vocabulary size" : "--" + std::string(f.flag);
    throw ConfigError("--load: " + dir.string() + " is a model with " + what + " " + std::to_string(f.value(c)) +
                      ", this run has " + std::to_string(f.value(m)));
  }
  // Not in the weights' shapes, but they were trained through it: the other GELU would load
  // them and compute another function.
  if (c.gelu != m.gelu)
    throw ConfigError("--load: " + dir.string() + " is a model with the " + gelu_name(c.gelu) +
                      " GELU, this run has the " + gelu_name(m.gelu) +
                      " GELU (the erf GELU is Megatron's --no-bias-gelu-fusion, without --openai-gelu in the legacy model)");
}

void check_model_shape_flags(const std::vector<std::pair<std::string, int64_t>>& given, const ModelConfig& c,
                             const std::string& where) {
  const std::vector<ModelShapeField>& fields = model_shape_fields();
  for (const auto& [flag, value] : given) {
    const auto f = std::find_if(fields.begin(), fields.end(), [&](const ModelShapeField& x) { return x.flag == flag; });
    TRIDENT_CHECK(f != fields.end(), "--", flag, " is not a model-shape flag");
    if (value != f->value(c))
      throw ConfigError("--" + flag + " " + std::to_string(value) + " differs from the checkpoint's " +
                        std::to_string(f->value(c)) + " (" + where + ")");
  }
}

void load_model_parameters(ShardedCheckpointReader& ckpt, ParamStore& params, Backend& backend, bool from_masters,
                           const std::function<bool(size_t)>& wanted) {
  // The tied word embedding last: the first and the last stage both hold a copy, and by then
  // this rank has opened the file of its own stage, which the reader prefers.
  std::vector<const LocalParam*> order;
  for (size_t i = 0; i < params.list().size(); ++i)
    if (!wanted || wanted(i)) order.push_back(&params.list()[i]);
  std::stable_partition(order.begin(), order.end(), [](const LocalParam* p) { return p->spec.name != "wte"; });
  Buffer staging;
  for (const LocalParam* lp : order) {
    const LocalParam& p = *lp;
    const std::vector<float> local =
        from_masters ? ckpt.optimizer_slice(p.spec, "master", params.tp(), params.tp_rank(), -1, {{0, p.numel()}})
                     : ckpt.model_slice(p.spec, params.tp(), params.tp_rank());
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
