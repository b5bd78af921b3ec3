#include "ckpt/metadata.h"

#include <cmath>
#include <limits>
#include <set>

#include "ckpt/atomic_file.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/checksum.h"
#include "core/error.h"
#include "parallel/pipeline_layout.h"

namespace trident {

std::string layout_text(const ParallelLayout& l) {
  std::string s = "tp " + std::to_string(l.tp) + " x pp " + std::to_string(l.pp) + " x dp " + std::to_string(l.dp) +
                  ", zero " + std::to_string(l.zero_stage);
  if (l.virtual_pipeline_chunks > 1) s += ", " + std::to_string(l.virtual_pipeline_chunks) + " model chunks a stage";
  const UnevenPipeline& u = l.uneven;
  const auto layers = [](int n) { return std::to_string(n) + (n == 1 ? " layer" : " layers"); };
  if (u.first_stage_layers > 0) s += ", " + layers(u.first_stage_layers) + " in the first stage";
  if (u.last_stage_layers > 0) s += ", " + layers(u.last_stage_layers) + " in the last stage";
  if (u.embedding_as_layer) s += ", the embedding counted as a layer";
  if (u.loss_as_layer) s += ", the loss counted as a layer";
  if (!u.layout.empty()) s += ", layout \"" + u.layout + "\"";
  return s;
}

PipelineSplit pipeline_split_of(const ModelConfig& model, const ParallelLayout& l) {
  return PipelineSplit{model.num_layers, l.pp, l.virtual_pipeline_chunks, l.uneven};
}

bool same_layout(const ParallelLayout& a, const ParallelLayout& b, const ModelConfig& model) {
  return a.tp == b.tp && a.dp == b.dp && a.zero_stage == b.zero_stage && a.pp == b.pp &&
         pipeline_layer_counts(pipeline_split_of(model, a)) == pipeline_layer_counts(pipeline_split_of(model, b));
}

namespace {

using json = nlohmann::json;

// Field access with one-line errors naming the file and the dotted field path.
struct Fields {
  const json& j;
  std::string prefix;  // "model." etc.
  const std::string& source;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw IoError(source + ": field '" + prefix + key + "': " + what);
  }
  const json& get(const std::string& key) const {
    if (!j.contains(key)) fail(key, "missing");
    return j.at(key);
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json& v = get(key);
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(key, "out of range");
      x = static_cast<int64_t>(v.get<uint64_t>());
    } else {
      x = v.get<int64_t>();
    }
    if (x < lo || x > hi)
      fail(key, "value " + std::to_string(x) + " out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  double number(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(key, "not finite");
    return x;
  }
  std::string string(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  bool boolean(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_boolean()) fail(key, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  const json& object(const std::string& key) const {
    const json& v = get(key);
    if (!v.is_object()) fail(key, "expected an object");
    return v;
  }
  void no_unknown(const std::set<std::string>& known) const {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known.count(it.key())) fail(it.key(), "unknown field");
  }
};

constexpr int kIntMax = std::numeric_limits<int>::max();

// A field of `f` that holds a count of samples, tokens, steps or iterations: an integer in
// [lo, 9e15] (exact as a double, far from overflowing a sum).
void count_field(const Fields& f, const char* key, int64_t lo = 0) {
  if (f.j.contains(key)) f.integer(key, lo, 9'000'000'000'000'000);
}

// A seed: an integer in [0, 2^64).
void seed_field(const Fields& f, const char* key) {
  if (!f.j.contains(key)) return;
  const json& v = f.j.at(key);
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
    f.fail(key, "expected an integer >= 0, got " + v.dump());
}

// A number of `f` (finite), null too where `nullable`, at least `lo`.
void number_field(const Fields& f, const char* key, double lo, bool nullable = false) {
  if (!f.j.contains(key) || (nullable && f.j.at(key).is_null())) return;
  if (const double x = f.number(key); x < lo) f.fail(key, "value " + f.j.at(key).dump() + " is below " + detail::concat(lo));
}

}  // namespace

void check_trainer_state(const json& st, const std::string& source) {
  const Fields f{st, "trainer_state.", source};
  for (const char* key : {"consumed_valid_samples", "skipped_train_samples", "consumed_train_tokens",
                          "skipped_iterations", "nan_iterations", "optimizer_steps"})
    count_field(f, key);
  count_field(f, "global_batch_size", 1);
  count_field(f, kSkippedRangeSamplesKey);
  if (st.contains(kAppliedSkipRangesKey)) {
    const json& ranges = st.at(kAppliedSkipRangesKey);
    bool ok = ranges.is_array();
    for (const json& r : ok ? ranges : json::array())
      ok = ok && r.is_array() && r.size() == 2 && r[0].is_number_integer() && r[1].is_number_integer() &&
           r[0].get<int64_t>() >= 1 && r[1].get<int64_t>() >= r[0].get<int64_t>();
    if (!ok) f.fail(kAppliedSkipRangesKey, "expected [[first, last], ...] with 1 <= first <= last, got " + ranges.dump());
  }
  seed_field(f, kRngStateKey);
  seed_field(f, kDataSeedKey);
  number_field(f, "num_floating_point_operations_so_far", 0.0);
  if (st.contains("opt_param_scheduler")) {
    const Fields s{f.object("opt_param_scheduler"), "trainer_state.opt_param_scheduler.", source};
    for (const char* key : {"max_lr", "min_lr", "init_lr", "start_wd", "end_wd"}) number_field(s, key, 0.0);
    for (const char* key : {"decoupled_lr", "decoupled_min_lr"}) number_field(s, key, 0.0, true);
    for (const char* key : {"lr_warmup_steps", "lr_decay_steps", "num_steps", "num_tokens", "wd_incr_steps",
                            "wsd_decay_steps"})
      number_field(s, key, 0.0);
    for (const char* key : {"lr_warmup_tokens", "lr_decay_tokens", "warmup_end_tokens"}) number_field(s, key, 0.0, true);
    for (const char* key : {"lr_decay_style", "wd_incr_style", "lr_wsd_decay_style"})
      if (s.j.contains(key)) s.string(key);
  }
  if (st.contains("loss_scaler")) {
    const Fields l{f.object("loss_scaler"), "trainer_state.loss_scaler.", source};
    if (l.number("scale") <= 0) l.fail("scale", "value " + l.j.at("scale").dump() + " is not positive");
    for (const char* key : {"growth_tracker", "hysteresis_tracker"})
      if (l.j.contains(key)) l.integer(key, std::numeric_limits<int64_t>::min());
    count_field(l, "window", 1);
    if (l.j.contains("style")) l.string("style");
  }
  if (st.contains(kAdamKey)) {
    const Fields a{f.object(kAdamKey), "trainer_state.adam.", source};
    for (const char* key : {"beta1", "beta2", "eps"}) number_field(a, key, 0.0);
  }
}

json model_config_to_json(const ModelConfig& c) {
  json j = json::object();
  j["num_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["num_attention_heads"] = c.num_attention_heads;
  j["seq_length"] = c.seq_length;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["vocab_size"] = c.vocab_size;
  j["make_vocab_size_divisible_by"] = c.make_vocab_size_divisible_by;
  j["init_method_std"] = c.init_method_std;
  if (c.embedding_init_method_std > 0) j["embedding_init_method_std"] = c.embedding_init_method_std;
  j["hidden_dropout"] = c.hidden_dropout;
  j["attention_dropout"] = c.attention_dropout;
  j["dtype"] = dtype_name(c.dtype);
  // Only the erf GELU is written: a tanh model's metadata.json stays what older builds read,
  // and they refuse an erf model's (an unknown field) instead of running it with tanh.
  if (c.gelu != Gelu::Tanh) j["gelu"] = gelu_name(c.gelu);
  return j;
}

ModelConfig model_config_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw IoError(source + ": field 'model': expected an object");
  Fields f{j, "model.", source};
  f.no_unknown({"num_layers", "hidden_size", "num_attention_heads", "seq_length", "max_position_embeddings",
                "vocab_size", "make_vocab_size_divisible_by", "init_method_std", "embedding_init_method_std",
                "hidden_dropout", "attention_dropout", "dtype", "gelu"});
  ModelConfig c;
  c.num_layers = static_cast<int>(f.integer("num_layers", 1, kIntMax));
  c.hidden_size = static_cast<int>(f.integer("hidden_size", 1, kIntMax));
  c.num_attention_heads = static_cast<int>(f.integer("num_attention_heads", 1, kIntMax));
  c.seq_length = static_cast<int>(f.integer("seq_length", 1, kIntMax));
  c.max_position_embeddings = static_cast<int>(f.integer("max_position_embeddings", 1, kIntMax));
  c.vocab_size = f.integer("vocab_size", 2);
  c.make_vocab_size_divisible_by = static_cast<int>(f.integer("make_vocab_size_divisible_by", 1, kIntMax));
  c.init_method_std = static_cast<float>(f.number("init_method_std"));
  if (j.contains("embedding_init_method_std"))  // written only when set
    c.embedding_init_method_std = static_cast<float>(f.number("embedding_init_method_std"));
  c.hidden_dropout = static_cast<float>(f.number("hidden_dropout"));
  c.attention_dropout = static_cast<float>(f.number("attention_dropout"));
  const std::string dt = f.string("dtype");
  try {
    c.dtype = parse_dtype(dt);
  } catch (const ConfigError&) {
    f.fail("dtype", "unknown dtype '" + dt + "'");
  }
  if (c.dtype == DType::I32) f.fail("dtype", "int32 is not a parameter dtype");
  if (j.contains("gelu")) {  // absent: the tanh GELU (checkpoints of older builds, tanh models)
    const std::string g = f.string("gelu");
    if (g == gelu_name(Gelu::Erf))
      c.gelu = Gelu::Erf;
    else if (g != gelu_name(Gelu::Tanh))
      f.fail("gelu", "unknown GELU '" + g + "' (expected \"tanh\" or \"erf\")");
  }
  try {
    c.validate(1);
  } catch (const ConfigError& e) {
    throw IoError(source + ": field 'model': inconsistent model config: " + e.what());
  }
  return c;
}

json metadata_to_json(const CheckpointMetadata& m) {
  json j = json::object();
  j["format"] = "trident-checkpoint";
  j["format_version"] = m.format_version;
  j["iteration"] = m.iteration;
  j["consumed_samples"] = m.consumed_samples;
  j["model"] = model_config_to_json(m.model);
  j["layout"] = {{"tp", m.layout.tp}, {"pp", m.layout.pp}, {"dp", m.layout.dp}, {"zero_stage", m.layout.zero_stage}};
  if (m.layout.virtual_pipeline_chunks > 1) j["layout"]["virtual_pipeline_chunks"] = m.layout.virtual_pipeline_chunks;
  const UnevenPipeline& u = m.layout.uneven;
  if (u.first_stage_layers > 0) j["layout"]["decoder_first_pipeline_num_layers"] = u.first_stage_layers;
  if (u.last_stage_layers > 0) j["layout"]["decoder_last_pipeline_num_layers"] = u.last_stage_layers;
  if (u.embedding_as_layer) j["layout"]["account_for_embedding_in_pipeline_split"] = true;
  if (u.loss_as_layer) j["layout"]["account_for_loss_in_pipeline_split"] = true;
  if (!u.layout.empty()) j["layout"]["pipeline_model_parallel_layout"] = u.layout;
  j["trainer_state"] = m.trainer_state.is_null() ? json::object() : m.trainer_state;
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"path", f.path}, {"size", f.size}, {"xxh3", f.xxh3}});
  j["files"] = std::move(files);
  return j;
}

CheckpointMetadata metadata_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw IoError(source + ": not a JSON object");
  Fields f{j, "", source};
  f.no_unknown({"format", "format_version", "iteration", "consumed_samples", "model", "layout", "trainer_state",
                "files"});
  if (f.string("format") != "trident-checkpoint") f.fail("format", "expected \"trident-checkpoint\"");
  CheckpointMetadata m;
  m.format_version = static_cast<int>(f.integer("format_version", 1, kIntMax));
  if (m.format_version > kCheckpointFormatVersion)
    f.fail("format_version", "version " + std::to_string(m.format_version) + " is newer than this build reads (" +
                                 std::to_string(kCheckpointFormatVersion) + ")");
  m.iteration = f.integer("iteration", 0);
  m.consumed_samples = f.integer("consumed_samples", 0);
  m.model = model_config_from_json(f.object("model"), source);
  {
    Fields l{f.object("layout"), "layout.", source};
    l.no_unknown({"tp", "pp", "dp", "zero_stage", "virtual_pipeline_chunks", "decoder_first_pipeline_num_layers",
                  "decoder_last_pipeline_num_layers", "account_for_embedding_in_pipeline_split",
                  "account_for_loss_in_pipeline_split", "pipeline_model_parallel_layout"});
    UnevenPipeline& u = m.layout.uneven;
    const int L = m.model.num_layers;
    if (l.j.contains("decoder_first_pipeline_num_layers"))
      u.first_stage_layers = static_cast<int>(l.integer("decoder_first_pipeline_num_layers", 1, L));
    if (l.j.contains("decoder_last_pipeline_num_layers"))
      u.last_stage_layers = static_cast<int>(l.integer("decoder_last_pipeline_num_layers", 1, L));
    if (l.j.contains("account_for_embedding_in_pipeline_split"))
      u.embedding_as_layer = l.boolean("account_for_embedding_in_pipeline_split");
    if (l.j.contains("account_for_loss_in_pipeline_split"))
      u.loss_as_layer = l.boolean("account_for_loss_in_pipeline_split");
    if (l.j.contains("pipeline_model_parallel_layout")) u.layout = l.string("pipeline_model_parallel_layout");
    // A stage holds a layer at least (the embedding or the loss may take one's place; a
    // layout's stages may hold nothing, but there are no more of them than it lists), a
    // tensor-parallel rank a head: bounds that also keep the products of the layout's numbers
    // inside int.
    std::string unparsed;
    const int64_t max_stages =
        std::max<int64_t>(L + 2, pipeline_layout_virtual_stages(u.layout, unparsed).size());
    m.layout.tp = static_cast<int>(l.integer("tp", 1, m.model.num_attention_heads));
    m.layout.pp = static_cast<int>(l.integer("pp", 1, max_stages));
    m.layout.dp = static_cast<int>(l.integer("dp", 1, kIntMax / (int64_t{m.layout.tp} * m.layout.pp)));
    m.layout.zero_stage = static_cast<int>(l.integer("zero_stage", 0, 3));
    if (l.j.contains("virtual_pipeline_chunks"))
      m.layout.virtual_pipeline_chunks = static_cast<int>(l.integer("virtual_pipeline_chunks", 1, max_stages));
    if (const std::string why = pipeline_split_error(pipeline_split_of(m.model, m.layout)); !why.empty())
      l.fail(m.layout.virtual_pipeline_chunks > 1 ? "virtual_pipeline_chunks" : "pp",
             "the split of model.num_layers (" + std::to_string(L) + ") does not hold: " + why);
    if (m.model.num_attention_heads % m.layout.tp != 0)
      l.fail("tp", "value " + std::to_string(m.layout.tp) + " does not divide model.num_attention_heads (" +
                       std::to_string(m.model.num_attention_heads) + ")");
  }
  m.trainer_state = f.object("trainer_state");
  check_trainer_state(m.trainer_state, source);
  const json& files = f.get("files");
  if (!files.is_array()) f.fail("files", "expected an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = "files[" + std::to_string(i) + "].";
    if (!files[i].is_object()) throw IoError(source + ": field 'files[" + std::to_string(i) + "]': expected an object");
    Fields e{files[i], at, source};
    e.no_unknown({"path", "size", "xxh3"});
    FileRecord r;
    r.path = e.string("path");
    if (r.path.empty() || r.path[0] == '/' || r.path.find("..") != std::string::npos)
      e.fail("path", "'" + r.path + "' must be a relative path inside the checkpoint");
    if (!seen.insert(r.path).second) e.fail("path", "duplicate entry '" + r.path + "'");
    r.size = static_cast<uint64_t>(e.integer("size", 0));
    r.xxh3 = e.string("xxh3");
    if (r.xxh3.size() != 16 || r.xxh3.find_first_not_of("0123456789abcdef") != std::string::npos)
      e.fail("xxh3", "'" + r.xxh3 + "' is not 16 lowercase hex digits");
    m.files.push_back(std::move(r));
  }
  return m;
}

void write_metadata(const std::string& path, const CheckpointMetadata& m) {
  write_file_atomic(path, metadata_to_json(m).dump(2) + "\n");
}

CheckpointMetadata read_metadata(const std::string& path) {
  const std::string text = read_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw IoError(path + ": bad JSON: " + e.what());
  }
  CheckpointMetadata m = metadata_from_json(j, path);
  // The file has no checksum of its own; its iteration must at least be its folder's (a
  // hand edit would otherwise resume at another iteration and overwrite that folder later).
  const std::string folder = std::filesystem::path(path).parent_path().filename().string();
  const std::string digits = folder.rfind("iter_", 0) == 0 ? folder.substr(5) : "";
  if (all_digits(digits) && digits.size() <= 18 && std::stoll(digits) != m.iteration)
    throw IoError(path + ": says iteration " + std::to_string(m.iteration) + ", but its folder is " + folder);
  return m;
}

PreviousCheckpoint read_previous_checkpoint(const std::filesystem::path& iteration_dir) {
  using P = PreviousCheckpoint;
  try {
    const json j = json::parse(read_file((iteration_dir / kMetadataFileName).string()));
    const json& state = j.at("trainer_state");
    if (!state.contains(kPreviousCheckpointKey)) return {P::kNotRecorded, std::nullopt};
    const json& v = state.at(kPreviousCheckpointKey);
    if (v.is_null()) return {P::kRecorded, std::nullopt};
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return {P::kRecorded, v.get<int64_t>()};
  } catch (const std::exception&) {  // missing, unreadable, not JSON, no trainer_state
  }
  return {P::kUnreadable, std::nullopt};
}

FileRecord make_file_record(const std::filesystem::path& dir, const std::string& rel) {
  const std::filesystem::path p = dir / rel;
  std::error_code ec;
  const auto size = std::filesystem::file_size(p, ec);
  if (ec) throw IoError(p.string() + ": cannot stat: " + ec.message());
  FileRecord r;
  r.path = rel;
  r.size = size;
  r.xxh3 = checksum_file(p.string());
  return r;
}

void verify_checkpoint_files(const std::filesystem::path& dir, const CheckpointMetadata& m) {
  for (const auto& f : m.files) verify_file((dir / f.path).string(), f.xxh3, static_cast<int64_t>(f.size));
}

}  // namespace trident
