// model_config_from_megatron_args (megatron_gpt2.h): the model shape from the argparse
// Namespace Megatron-LM and Megatron-DeepSpeed save as 'args', with Megatron's defaults for
// the fields older versions did not have.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "ckpt/megatron_gpt2.h"
#include "core/error.h"

namespace trident {

namespace {

using pickle::Kind;
using pickle::Value;


class Args {
 public:
  Args(const Value& args, const std::string& source) : args_(args), source_(source) {
    if (args.kind != Kind::Dict && !(args.kind == Kind::Object && args.get("num_layers")))
      throw IoError(source + ": 'args' is " + args.describe() + ", not Megatron's argparse.Namespace");
  }

  std::optional<int64_t> integer(const char* key) const {
    const Value* v = present(key);
    if (!v) return std::nullopt;
    if (v->kind == Kind::Bool) return v->boolean ? 1 : 0;
    if (v->kind != Kind::Int) throw bad(key, v);
    return v->integer;
  }
  int64_t required_integer(const char* key) const {
    const std::optional<int64_t> v = integer(key);
    if (!v) throw IoError(source_ + ": args." + key + " missing");
    if (*v <= 0 || *v > (int64_t{1} << 31)) throw IoError(source_ + ": args." + key + " = " + std::to_string(*v) + " out of range");
    return *v;
  }
  std::optional<bool> boolean(const char* key) const {
    const Value* v = present(key);
    if (!v) return std::nullopt;
    if (v->kind == Kind::Bool) return v->boolean;
    if (v->kind == Kind::Int) return v->integer != 0;
    throw bad(key, v);
  }
  bool flag(const char* key, bool dflt) const { return boolean(key).value_or(dflt); }
  std::optional<double> number(const char* key) const {
    const Value* v = present(key);
    if (!v) return std::nullopt;
    if (v->kind == Kind::Float) return v->real;
    if (v->kind == Kind::Int) return static_cast<double>(v->integer);
    throw bad(key, v);
  }
  // A string setting; nullopt when absent or None.
  std::optional<std::string> text(const char* key) const {
    const Value* v = present(key);
    if (!v) return std::nullopt;
    if (v->kind != Kind::Str) throw bad(key, v);
    return v->text;
  }
  // An enum member's name, or a string: Megatron-DeepSpeed pickles PositionEmbeddingType
  // members, as Enum(value) before Python 3.11 and as getattr(Enum, name) after.
  std::optional<std::string> enum_name(const char* key, const std::map<int64_t, std::string>& int_values) const {
    const Value* v = present(key);
    if (!v || v->kind == Kind::Str) return text(key);
    const auto& a = v->args ? v->args->items : std::vector<pickle::Ref>{};
    if (v->kind == Kind::Object && v->callable && a.size() == 2 && a[1]->is_str() &&
        (v->callable->is_global("builtins", "getattr") || v->callable->is_global("__builtin__", "getattr")))
      return a[1]->text;
    if (v->kind == Kind::Object && a.size() == 1 && a[0]->is_str()) return a[0]->text;
    if (v->kind == Kind::Object && a.size() == 1 && a[0]->kind == Kind::Int && int_values.count(a[0]->integer))
      return int_values.at(a[0]->integer);
    throw bad(key, v);
  }
  // The largest of an int or a list of ints (Megatron-DeepSpeed's --num-experts takes a list).
  std::optional<int64_t> largest(const char* key) const {
    const Value* v = present(key);
    if (!v || v->kind != Kind::List) return integer(key);
    int64_t m = 0;
    for (const pickle::Ref& x : v->items) {
      if (x->kind != Kind::Int) throw bad(key, v);
      m = std::max(m, x->integer);
    }
    return m;
  }

  [[noreturn]] void unsupported(const std::string& key, const std::string& what) const {
    throw ConfigError(source_ + ": args." + key + ": " + what);
  }

 private:
  const Value* present(const char* key) const {
    const Value* v = args_.get(key);
    return v && v->kind != Kind::None ? v : nullptr;
  }
  IoError bad(const char* key, const Value* v) const {
    return IoError(source_ + ": args." + key + " is " + v->describe());
  }

  const Value& args_;
  const std::string& source_;
};

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void check_architecture(const Args& a, int64_t hidden, int64_t heads) {
  if (a.flag("untie_embeddings_and_output_weights", false))
    a.unsupported("untie_embeddings_and_output_weights", "true: trident ties the LM head to the word embedding");
  if (const auto n = a.text("normalization"); n && lowercase(*n) != "layernorm")  // Megatron-DeepSpeed: 'layernorm'
    a.unsupported("normalization", "'" + *n + "' (trident's GPT-2 uses LayerNorm)");
  if (const auto g = a.text("glu_activation")) a.unsupported("glu_activation", "'" + *g + "' is not supported");
  if (a.flag("apply_layernorm_1p", false)) a.unsupported("apply_layernorm_1p", "true is not supported");
  for (const char* k : {"swiglu", "squared_relu", "apply_residual_connection_post_layernorm",
                        "use_rotary_position_embeddings", "onnx_safe"})
    if (a.flag(k, false)) a.unsupported(k, "true is not supported by trident's GPT-2");
  if (!a.flag("add_bias_linear", true)) a.unsupported("add_bias_linear", "false: trident's linear layers have biases");
  if (!a.flag("add_position_embedding", true))
    a.unsupported("add_position_embedding", "false: trident's GPT-2 has learned positions");
  // Megatron-DeepSpeed's PositionEmbeddingType: rotary 1, absolute 2, alibi 3.
  if (const auto p = a.enum_name("position_embedding_type", {{1, "rotary"}, {2, "absolute"}, {3, "alibi"}});
      p && *p != "learned_absolute" && *p != "absolute")
    a.unsupported("position_embedding_type", "'" + *p + "' (trident's GPT-2 has learned absolute positions)");
  if (const auto e = a.largest("num_experts"); e && *e > 1) a.unsupported("num_experts", "mixture of experts is not supported");
  if (const auto kv = a.integer("num_key_value_heads"); kv && *kv != heads)  // Megatron-DeepSpeed's grouped-query attention
    a.unsupported("num_key_value_heads", std::to_string(*kv) + " key/value heads: grouped-query attention is not supported");
  if (const auto g = a.integer("num_query_groups"); g && a.flag("group_query_attention", false) && *g != heads)
    a.unsupported("num_query_groups", std::to_string(*g) + " groups: grouped-query attention is not supported");
  if (const auto f = a.integer("ffn_hidden_size"); f && *f != 4 * hidden)
    a.unsupported("ffn_hidden_size", std::to_string(*f) + " is not 4 x hidden_size (" + std::to_string(4 * hidden) + ")");
  if (const auto kv = a.integer("kv_channels"); kv && *kv * heads != hidden)
    a.unsupported("kv_channels", std::to_string(*kv) + " is not hidden_size / num_attention_heads");
  const std::optional<double> eps = a.number("layernorm_epsilon") ? a.number("layernorm_epsilon") : a.number("norm_epsilon");
  if (eps && std::fabs(*eps - 1e-5) > 1e-12)
    a.unsupported(a.number("layernorm_epsilon") ? "layernorm_epsilon" : "norm_epsilon",
                  std::to_string(*eps) + " (trident's LayerNorm uses 1e-5)");
}

// Whether the args are of Megatron's legacy GPT model: use_legacy_models says so in Megatron-LM
// since Megatron-core's GPTModel became its default, use_mcore_models (its opposite) before
// that; without either (older Megatron-LM, Megatron-DeepSpeed) there was only the legacy one.
bool legacy_model(const Args& a) {
  if (const std::optional<bool> legacy = a.boolean("use_legacy_models")) return *legacy;
  return !a.flag("use_mcore_models", false);
}

// Megatron's MLP activation. The legacy model's: openai_gelu, else the fused bias-GELU (the
// default), both the tanh approximation, else torch's exact erf GELU. Megatron-core's ignores
// openai_gelu: the fused bias-GELU (tanh) or torch's F.gelu (erf), or with
// use_te_activation_func Transformer Engine's GELU, the tanh approximation.
// Args older than the fused bias-GELU (Megatron-LM 1.x, 2020): those that know openai_gelu
// ("for backward compatibility") computed F.gelu unless it was set; the first ones, without
// either field, OpenAI's tanh GELU, as the 2019 code and NVIDIA's released 345M did
// (Hugging Face's converter takes a checkpoint without args as gelu_new too).
Gelu megatron_gelu(const Args& a) {
  const std::optional<bool> fused_bias_gelu = a.boolean("bias_gelu_fusion");
  if (!fused_bias_gelu) return a.flag("openai_gelu", true) ? Gelu::Tanh : Gelu::Erf;  // before it existed
  if (*fused_bias_gelu || a.flag("use_te_activation_func", false)) return Gelu::Tanh;
  return a.flag("openai_gelu", false) && legacy_model(a) ? Gelu::Tanh : Gelu::Erf;
}

}  // namespace

ModelConfig model_config_from_megatron_args(const Value& args, const std::string& source,
                                            std::optional<int64_t> vocab_size) {
  const Args a(args, source);
  ModelConfig c;
  c.num_layers = static_cast<int>(a.required_integer("num_layers"));
  c.hidden_size = static_cast<int>(a.required_integer("hidden_size"));
  c.num_attention_heads = static_cast<int>(a.required_integer("num_attention_heads"));
  c.max_position_embeddings = static_cast<int>(a.required_integer("max_position_embeddings"));
  c.seq_length = a.integer("seq_length") ? static_cast<int>(a.required_integer("seq_length")) : c.max_position_embeddings;
  check_architecture(a, c.hidden_size, c.num_attention_heads);
  const int64_t padded = a.required_integer("padded_vocab_size");
  const int64_t divisor = a.integer("make_vocab_size_divisible_by") ? a.required_integer("make_vocab_size_divisible_by") : 128;
  const int64_t tp = a.integer("tensor_model_parallel_size") ? a.required_integer("tensor_model_parallel_size")
                     : a.integer("model_parallel_size")      ? a.required_integer("model_parallel_size")
                                                             : 1;
  const bool given = vocab_size.has_value();
  if (!given) {
    const std::optional<std::string> tok = a.enum_name("tokenizer_type", {});
    if (tok != "GPT2BPETokenizer")
      throw ConfigError("--vocab-size: required: " + source + " holds only the padded vocabulary (" +
                        std::to_string(padded) + ") and its tokenizer_type is " + (tok ? "'" + *tok + "'" : "not given") +
                        ", not GPT2BPETokenizer (50257)");
    vocab_size = kGpt2VocabSize;
  }
  const int64_t multiple = divisor * tp;
  const int64_t pads_to = (*vocab_size + multiple - 1) / multiple * multiple;
  if (pads_to != padded)
    throw ConfigError((given ? "--vocab-size " + std::to_string(*vocab_size)
                             : source + "'s tokenizer_type GPT2BPETokenizer (GPT-2's " + std::to_string(*vocab_size) +
                                   " tokens)") +
                      " pads to " + std::to_string(pads_to) + " (make_vocab_size_divisible_by " +
                      std::to_string(divisor) + " x tp " + std::to_string(tp) + "), not " + source +
                      "'s padded_vocab_size " + std::to_string(padded) + (given ? "" : ": give --vocab-size"));
  c.vocab_size = *vocab_size;
  c.make_vocab_size_divisible_by = static_cast<int>(divisor);
  c.dtype = a.flag("bf16", false) ? DType::BF16 : a.flag("fp16", false) ? DType::F16 : DType::F32;
  c.init_method_std = static_cast<float>(a.number("init_method_std").value_or(0.02));
  c.embedding_init_method_std = static_cast<float>(a.number("embedding_init_method_std").value_or(0.0));
  c.hidden_dropout = static_cast<float>(a.number("hidden_dropout").value_or(0.1));
  c.attention_dropout = static_cast<float>(a.number("attention_dropout").value_or(0.1));
  c.gelu = megatron_gelu(a);
  try {
    c.validate(1);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": unsupported GPT model in args: " + e.what());
  }
  return c;
}

}  // namespace trident
