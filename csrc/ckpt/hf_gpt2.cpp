#include "ckpt/hf_gpt2.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "ckpt/atomic_file.h"
#include "core/error.h"
#include "model/param_spec.h"

namespace trident {

namespace {

using json = nlohmann::json;
constexpr const char* kPrefix = "transformer.";

// Canonical suffix inside a layer -> HF suffix, transposed?
struct LayerName {
  const char* ours;
  const char* hf;
  bool transposed;
};
constexpr LayerName kLayerNames[] = {
    {"ln_1.weight", "ln_1.weight", false},          {"ln_1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true}, {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true}, {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln_2.weight", "ln_2.weight", false},          {"ln_2.bias", "ln_2.bias", false},
    {"mlp.fc.weight", "mlp.c_fc.weight", true},      {"mlp.fc.bias", "mlp.c_fc.bias", false},
    {"mlp.proj.weight", "mlp.c_proj.weight", true},  {"mlp.proj.bias", "mlp.c_proj.bias", false},
};

// Splits "h.12.rest" into (12, "rest").
bool split_layer(const std::string& name, int* layer, std::string* rest) {
  if (name.rfind("h.", 0) != 0) return false;
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2) return false;
  const std::string num = name.substr(2, dot - 2);
  if (num.find_first_not_of("0123456789") != std::string::npos || num.size() > 6) return false;
  *layer = std::stoi(num);
  *rest = name.substr(dot + 1);
  return true;
}

const LayerName* find_layer_name(const std::string& canonical, int* layer) {
  std::string rest;
  if (!split_layer(canonical, layer, &rest)) return nullptr;
  for (const auto& n : kLayerNames)
    if (rest == n.ours) return &n;
  return nullptr;
}

// out[c][r] = in[r][c] for in [rows, cols].
std::vector<float> transpose(const std::vector<float>& in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  constexpr int64_t B = 64;
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B)
      for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + B); ++c) out[c * rows + r] = in[r * cols + c];
  return out;
}

const char* torch_dtype_name(StDType t) {
  switch (t) {
    case StDType::F32: return "float32";
    case StDType::F16: return "float16";
    case StDType::BF16: return "bfloat16";
    default: break;
  }
  throw ConfigError(std::string("HF export dtype must be F32, F16 or BF16, not ") + st_dtype_name(t));
}

bool is_mask_buffer(const std::string& stripped) {
  int layer = 0;
  std::string rest;
  return split_layer(stripped, &layer, &rest) && (rest == "attn.bias" || rest == "attn.masked_bias");
}

}  // namespace

std::string hf_gpt2_name(const std::string& canonical) {
  if (canonical == "wte") return std::string(kPrefix) + "wte.weight";
  if (canonical == "wpe") return std::string(kPrefix) + "wpe.weight";
  if (canonical == "ln_f.weight" || canonical == "ln_f.bias") return kPrefix + canonical;
  int layer = 0;
  if (const LayerName* n = find_layer_name(canonical, &layer))
    return std::string(kPrefix) + "h." + std::to_string(layer) + "." + n->hf;
  throw ConfigError("'" + canonical + "' is not a GPT-2 parameter name");
}

bool hf_gpt2_transposed(const std::string& canonical) {
  int layer = 0;
  const LayerName* n = find_layer_name(canonical, &layer);
  if (!n) (void)hf_gpt2_name(canonical);  // throws for unknown names
  return n && n->transposed;
}

TensorMap canonical_to_hf_gpt2(const ModelConfig& cfg, const TensorMap& canonical) {
  const auto specs = gpt2_param_specs(cfg, 1);
  std::set<std::string> expected;
  TensorMap out;
  for (const auto& spec : specs) {
    expected.insert(spec.name);
    auto it = canonical.find(spec.name);
    if (it == canonical.end()) throw ConfigError("HF export: missing canonical tensor '" + spec.name + "'");
    const HostTensor& t = it->second;
    std::vector<int64_t> want = shape_vec(spec.shape);
    if (is_vocab_padded(spec)) {
      // Any padding (from any tp) is accepted; only the real vocabulary rows are exported.
      if (t.shape.size() != 2 || t.shape[1] != want[1] || t.shape[0] < cfg.vocab_size)
        throw ConfigError("HF export: tensor '" + spec.name + "' has shape " + shape_str(t.shape) + ", expected [>=" +
                          std::to_string(cfg.vocab_size) + ", " + std::to_string(want[1]) + "]");
    } else if (t.shape != want) {
      throw ConfigError("HF export: tensor '" + spec.name + "' has shape " + shape_str(t.shape) + ", expected " +
                        shape_str(want));
    }
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      throw ConfigError("HF export: tensor '" + spec.name + "' holds " + std::to_string(t.data.size()) +
                        " values for shape " + shape_str(t.shape));
    HostTensor h;
    if (is_vocab_padded(spec)) {
      h.shape = {cfg.vocab_size, t.shape[1]};
      h.data = unpad_rows(t.data.data(), t.shape[0], t.shape[1], cfg.vocab_size);
    } else if (hf_gpt2_transposed(spec.name)) {
      h.shape = {t.shape[1], t.shape[0]};
      h.data = transpose(t.data, t.shape[0], t.shape[1]);
    } else {
      h = t;
    }
    out[hf_gpt2_name(spec.name)] = std::move(h);
  }
  for (const auto& [name, t] : canonical)
    if (!expected.count(name)) throw ConfigError("HF export: '" + name + "' is not a GPT-2 parameter of this config");
  return out;
}

TensorMap hf_gpt2_to_canonical(const ModelConfig& cfg, const TensorMap& hf, const std::string& source) {
  // Normalise names: drop "transformer.", skip mask buffers, keep lm_head aside.
  std::map<std::string, const HostTensor*> by_name;
  const HostTensor* lm_head = nullptr;
  for (const auto& [name, t] : hf) {
    if (name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    const std::string s = name.rfind(kPrefix, 0) == 0 ? name.substr(std::strlen(kPrefix)) : name;
    if (is_mask_buffer(s)) continue;
    if (!by_name.emplace(s, &t).second)
      throw IoError(source + ": tensor '" + name + "' appears both with and without the 'transformer.' prefix");
  }
  TensorMap out;
  std::set<std::string> used;
  for (const auto& spec : gpt2_param_specs(cfg, 1)) {
    const std::string full = hf_gpt2_name(spec.name);
    const std::string s = full.substr(std::strlen(kPrefix));
    auto it = by_name.find(s);
    if (it == by_name.end()) throw IoError(source + ": missing tensor '" + full + "'");
    used.insert(s);
    const HostTensor& t = *it->second;
    const bool tr = hf_gpt2_transposed(spec.name);
    std::vector<int64_t> ours = shape_vec(stored_shape(spec));
    std::vector<int64_t> want = ours;
    if (tr) std::swap(want[0], want[1]);
    if (t.shape != want)
      throw IoError(source + ": tensor '" + full + "' has shape " + shape_str(t.shape) + ", expected " +
                    shape_str(want));
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      throw IoError(source + ": tensor '" + full + "' holds " + std::to_string(t.data.size()) + " values");
    HostTensor c;
    c.shape = ours;
    c.data = tr ? transpose(t.data, want[0], want[1]) : t.data;
    out[spec.name] = std::move(c);
  }
  for (const auto& [s, t] : by_name)
    if (!used.count(s)) throw IoError(source + ": unexpected tensor '" + s + "' (not a GPT2LMHeadModel parameter)");
  if (lm_head) {
    const HostTensor& wte = out.at("wte");
    if (lm_head->shape != wte.shape || lm_head->data.size() != wte.data.size() ||
        std::memcmp(lm_head->data.data(), wte.data.data(), wte.data.size() * sizeof(float)) != 0)
      throw ConfigError(source + ": tensor 'lm_head.weight' differs from the word embedding; trident ties the "
                                 "LM head to wte and cannot load an untied head");
  }
  return out;
}

json hf_gpt2_config_json(const ModelConfig& cfg, StDType dtype) {
  json j = json::object();
  j["activation_function"] = cfg.gelu == Gelu::Erf ? "gelu" : "gelu_new";  // HF's names of the two forms
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["attn_pdrop"] = cfg.attention_dropout;
  j["bos_token_id"] = cfg.vocab_size - 1;  // GPT-2's <|endoftext|> is the last id
  j["embd_pdrop"] = cfg.hidden_dropout;
  j["eos_token_id"] = cfg.vocab_size - 1;
  j["initializer_range"] = cfg.init_method_std;
  j["layer_norm_epsilon"] = 1e-5;
  j["model_type"] = "gpt2";
  j["n_ctx"] = cfg.max_position_embeddings;
  j["n_embd"] = cfg.hidden_size;
  j["n_head"] = cfg.num_attention_heads;
  j["n_inner"] = nullptr;
  j["n_layer"] = cfg.num_layers;
  j["n_positions"] = cfg.max_position_embeddings;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = cfg.hidden_dropout;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["summary_activation"] = nullptr;
  j["summary_first_dropout"] = 0.1;
  j["summary_proj_to_labels"] = true;
  j["summary_type"] = "cls_index";
  j["summary_use_proj"] = true;
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  j["vocab_size"] = cfg.vocab_size;
  return j;
}

ModelConfig model_config_from_hf_gpt2(const json& j, const std::string& source, int make_vocab_size_divisible_by) {
  if (!j.is_object()) throw IoError(source + ": not a JSON object");
  auto bad = [&](const std::string& key, const std::string& what) -> IoError {
    return IoError(source + ": field '" + key + "': " + what);
  };
  auto unsupported = [&](const std::string& key, const std::string& what) -> ConfigError {
    return ConfigError(source + ": field '" + key + "': " + what);
  };
  auto integer = [&](const std::string& key, const json* fallback = nullptr) -> int64_t {
    const json* v = j.contains(key) ? &j.at(key) : fallback;
    if (!v) throw bad(key, "missing");
    if (!v->is_number_integer()) throw bad(key, "expected an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x <= 0 || x > (int64_t{1} << 31)) throw bad(key, "value " + std::to_string(x) + " out of range");
    return x;
  };
  auto number = [&](const std::string& key, double dflt) -> double {
    if (!j.contains(key) || j.at(key).is_null()) return dflt;
    if (!j.at(key).is_number()) throw bad(key, "expected a number, got " + j.at(key).dump());
    return j.at(key).get<double>();
  };
  auto boolean = [&](const std::string& key, bool dflt) -> bool {
    if (!j.contains(key) || j.at(key).is_null()) return dflt;
    if (!j.at(key).is_boolean()) throw bad(key, "expected true or false, got " + j.at(key).dump());
    return j.at(key).get<bool>();
  };
  auto string = [&](const std::string& key, const std::string& dflt) -> std::string {
    if (!j.contains(key) || j.at(key).is_null()) return dflt;
    if (!j.at(key).is_string()) throw bad(key, "expected a string, got " + j.at(key).dump());
    return j.at(key).get<std::string>();
  };

  const std::string model_type = string("model_type", "gpt2");
  if (model_type != "gpt2") throw unsupported("model_type", "'" + model_type + "' is not \"gpt2\"");
  // transformers' ACT2FN: the tanh GELU under four names (gelu_accurate is the same formula,
  // sqrt(2/pi) computed once), the exact one as "gelu" (torch's) and "gelu_python" (the same erf
  // formula in Python); others (gelu_10's clipping, quick_gelu's sigmoid, relu, ...) trident
  // does not compute.
  const std::string act = string("activation_function", "gelu_new");
  const bool erf = act == "gelu" || act == "gelu_python";
  if (!erf && act != "gelu_new" && act != "gelu_fast" && act != "gelu_pytorch_tanh" && act != "gelu_accurate")
    throw unsupported("activation_function", "'" + act + "' is not supported (trident computes the tanh GELU: "
                      "gelu_new, gelu_fast, gelu_pytorch_tanh, gelu_accurate; and the exact one: gelu, gelu_python)");
  const double eps = number("layer_norm_epsilon", 1e-5);
  if (std::fabs(eps - 1e-5) > 1e-12) throw unsupported("layer_norm_epsilon", "trident uses 1e-5, got " + j.at("layer_norm_epsilon").dump());
  if (!boolean("scale_attn_weights", true)) throw unsupported("scale_attn_weights", "false is not supported");
  if (boolean("scale_attn_by_inverse_layer_idx", false))
    throw unsupported("scale_attn_by_inverse_layer_idx", "true is not supported");
  if (boolean("add_cross_attention", false)) throw unsupported("add_cross_attention", "true is not supported");
  if (!boolean("tie_word_embeddings", true))
    throw unsupported("tie_word_embeddings", "false is not supported (the LM head is tied to wte)");

  ModelConfig c;
  c.num_layers = static_cast<int>(integer("n_layer"));
  c.hidden_size = static_cast<int>(integer("n_embd"));
  c.num_attention_heads = static_cast<int>(integer("n_head"));
  const json* n_ctx = j.contains("n_ctx") ? &j.at("n_ctx") : nullptr;
  c.max_position_embeddings = static_cast<int>(integer("n_positions", n_ctx));
  c.seq_length = c.max_position_embeddings;
  c.vocab_size = integer("vocab_size");
  if (j.contains("n_inner") && !j.at("n_inner").is_null()) {
    const int64_t inner = integer("n_inner");
    if (inner != 4 * static_cast<int64_t>(c.hidden_size))
      throw unsupported("n_inner", std::to_string(inner) + " is not 4 x n_embd (" + std::to_string(4 * c.hidden_size) + ")");
  }
  c.make_vocab_size_divisible_by = make_vocab_size_divisible_by;
  c.init_method_std = static_cast<float>(number("initializer_range", 0.02));
  c.hidden_dropout = static_cast<float>(number("resid_pdrop", 0.1));
  c.attention_dropout = static_cast<float>(number("attn_pdrop", 0.1));
  c.dtype = DType::F32;
  c.gelu = erf ? Gelu::Erf : Gelu::Tanh;
  try {
    c.validate(1);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": unsupported GPT-2 config: " + e.what());
  }
  return c;
}

WrittenFile export_hf_gpt2(const std::string& dir, const ModelConfig& cfg, const TensorMap& canonical, StDType dtype) {
  const char* torch_name = torch_dtype_name(dtype);  // validates dtype
  (void)torch_name;
  const TensorMap hf = canonical_to_hf_gpt2(cfg, canonical);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_write_failure(dir + ": cannot create export directory: " + ec.message(), ec.value());

  // Keep HF's state-dict order: the order of gpt2_param_specs.
  std::vector<std::vector<uint16_t>> converted;
  std::vector<StTensorRef> refs;
  const auto specs = gpt2_param_specs(cfg, 1);
  converted.reserve(specs.size());
  for (const auto& spec : specs) {
    const std::string name = hf_gpt2_name(spec.name);
    const HostTensor& t = hf.at(name);
    const void* data = t.data.data();
    if (dtype != StDType::F32) {
      std::vector<uint16_t> h(t.data.size());
      for (size_t i = 0; i < h.size(); ++i)
        h[i] = dtype == StDType::F16 ? float_to_half(t.data[i]) : float_to_bf16(t.data[i]);
      converted.push_back(std::move(h));
      data = converted.back().data();
    }
    refs.push_back({name, dtype, t.shape, data});
  }
  const std::string model_path = (std::filesystem::path(dir) / "model.safetensors").string();
  const WrittenFile wf = write_safetensors(model_path, refs, {{"format", "pt"}});
  write_file_atomic((std::filesystem::path(dir) / "config.json").string(), hf_gpt2_config_json(cfg, dtype).dump(2) + "\n");
  return wf;
}

HfGpt2Model import_hf_gpt2(const std::string& dir, int make_vocab_size_divisible_by) {
  const std::filesystem::path d(dir);
  const std::string cfg_path = (d / "config.json").string();
  json j;
  {
    const std::string text = read_file(cfg_path);
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw IoError(cfg_path + ": bad JSON: " + e.what());
    }
  }
  HfGpt2Model m;
  m.config = model_config_from_hf_gpt2(j, cfg_path, make_vocab_size_divisible_by);
  const std::string st_path = (d / "model.safetensors").string();
  std::error_code ec;
  if (!std::filesystem::exists(st_path, ec) && std::filesystem::exists(d / "model.safetensors.index.json", ec))
    throw IoError(st_path + ": missing; sharded Hugging Face checkpoints (model.safetensors.index.json) are not supported");
  SafetensorsReader r(st_path);
  TensorMap hf;
  for (const auto& info : r.tensors()) {
    const std::string s = info.name.rfind(kPrefix, 0) == 0 ? info.name.substr(std::strlen(kPrefix)) : info.name;
    if (is_mask_buffer(s)) continue;
    HostTensor t;
    t.shape = info.shape;
    t.data = r.read_f32(info.name);
    hf[info.name] = std::move(t);
  }
  m.tensors = hf_gpt2_to_canonical(m.config, hf, st_path);
  return m;
}

}  // namespace trident
