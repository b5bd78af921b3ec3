// Megatron's saved args -> ModelConfig: Megatron's defaults for fields older versions lack,
// its vocabulary padding rule (make_vocab_size_divisible_by x tensor-parallel size), dtypes,
// and one-line refusals naming the arg for models trident's GPT-2 cannot represent.
#include <gtest/gtest.h>

#include <map>
#include <variant>

#include "ckpt/megatron_gpt2.h"
#include "core/error.h"

namespace trident {
namespace {

using pickle::Kind;
using pickle::Ref;
using ArgValue = std::variant<int64_t, double, bool, std::string>;

// argparse.Namespace(**fields) as the pickle reader returns it: an Object with a dict state.
Ref namespace_of(const std::map<std::string, ArgValue>& fields) {
  Ref ns = pickle::make(Kind::Object);
  ns->callable = pickle::make(Kind::Global);
  ns->callable->module = "argparse";
  ns->callable->name = "Namespace";
  ns->args = pickle::make(Kind::Tuple);
  ns->state = pickle::make(Kind::Dict);
  for (const auto& [k, v] : fields) {
    Ref key = pickle::make(Kind::Str), val;
    key->text = k;
    if (const auto* i = std::get_if<int64_t>(&v)) {
      val = pickle::make(Kind::Int);
      val->integer = *i;
    } else if (const auto* d = std::get_if<double>(&v)) {
      val = pickle::make(Kind::Float);
      val->real = *d;
    } else if (const auto* b = std::get_if<bool>(&v)) {
      val = pickle::make(Kind::Bool);
      val->boolean = *b;
    } else {
      val = pickle::make(Kind::Str);
      val->text = std::get<std::string>(v);
    }
    ns->state->entries.emplace_back(key, val);
  }
  return ns;
}

// GPT-2 345M as Megatron's example script trains it, with only the fields every version has.
std::map<std::string, ArgValue> gpt2_345m() {
  return {{"num_layers", int64_t{24}},       {"hidden_size", int64_t{1024}},
          {"num_attention_heads", int64_t{16}}, {"max_position_embeddings", int64_t{1024}},
          {"padded_vocab_size", int64_t{50304}}, {"tokenizer_type", std::string("GPT2BPETokenizer")}};
}

ModelConfig config(const std::map<std::string, ArgValue>& fields, std::optional<int64_t> vocab = std::nullopt) {
  return model_config_from_megatron_args(*namespace_of(fields), "ck.pt", vocab);
}

std::string config_error(std::map<std::string, ArgValue> fields, const std::string& key, ArgValue value,
                         std::optional<int64_t> vocab = std::nullopt) {
  fields[key] = value;
  try {
    config(fields, vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MegatronArgs, DefaultsOfOlderVersions) {
  const ModelConfig c = config(gpt2_345m());
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.seq_length, 1024);  // no seq_length: the positions
  EXPECT_EQ(c.vocab_size, 50257);  // GPT2BPETokenizer
  EXPECT_EQ(c.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(c.padded_vocab_size(1), 50304);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_FLOAT_EQ(c.hidden_dropout, 0.1f);
  EXPECT_FLOAT_EQ(c.attention_dropout, 0.1f);
  EXPECT_FLOAT_EQ(c.init_method_std, 0.02f);
  EXPECT_EQ(c.embedding_init_method_std, 0.0f);  // none: the embeddings took init_method_std
}

TEST(MegatronArgs, EmbeddingInitStd) {
  auto a = gpt2_345m();
  a["embedding_init_method_std"] = 1.0;
  EXPECT_EQ(config(a).embedding_init_method_std, 1.0f);
}

TEST(MegatronArgs, DtypeShapeAndPadding) {
  auto a = gpt2_345m();
  a["bf16"] = true;
  a["seq_length"] = int64_t{512};
  a["hidden_dropout"] = 0.0;
  a["ffn_hidden_size"] = int64_t{4096};
  a["kv_channels"] = int64_t{64};
  a["norm_epsilon"] = 1e-5;
  EXPECT_EQ(config(a).dtype, DType::BF16);
  EXPECT_EQ(config(a).seq_length, 512);
  EXPECT_EQ(config(a).hidden_dropout, 0.0f);
  a.erase("bf16");
  a["fp16"] = true;
  EXPECT_EQ(config(a).dtype, DType::F16);
  // Padding to 128 x tp: 50257 -> 50432 at tp 2 (also through the old model_parallel_size).
  a["padded_vocab_size"] = int64_t{50432};
  a["tensor_model_parallel_size"] = int64_t{2};
  EXPECT_EQ(config(a).vocab_size, 50257);
  a.erase("tensor_model_parallel_size");
  a["model_parallel_size"] = int64_t{2};
  EXPECT_EQ(config(a).vocab_size, 50257);
  // GPT2BPETokenizer's 50257 tokens padded otherwise: named as the file's, not as a flag never given.
  EXPECT_EQ(config_error(a, "padded_vocab_size", int64_t{512}),
            "ck.pt's tokenizer_type GPT2BPETokenizer (GPT-2's 50257 tokens) pads to 50432 (make_vocab_size_divisible_by "
            "128 x tp 2), not ck.pt's padded_vocab_size 512: give --vocab-size");
  // Another tokenizer: --vocab-size is required and must pad to padded_vocab_size.
  a["tokenizer_type"] = std::string("BertWordPieceLowerCase");
  a["padded_vocab_size"] = int64_t{30720};
  EXPECT_EQ(config(a, 30522).vocab_size, 30522);
  EXPECT_EQ(config_error(a, "padded_vocab_size", int64_t{30720}),
            "--vocab-size: required: ck.pt holds only the padded vocabulary (30720) and its tokenizer_type is "
            "'BertWordPieceLowerCase', not GPT2BPETokenizer (50257)");
  EXPECT_EQ(config_error(a, "padded_vocab_size", int64_t{30720}, 30000),
            "--vocab-size 30000 pads to 30208 (make_vocab_size_divisible_by 128 x tp 2), not ck.pt's padded_vocab_size 30720");
  // The fused bias-GELU off is fine with openai_gelu (both the tanh form).
  a["bias_gelu_fusion"] = false;
  a["openai_gelu"] = true;
  EXPECT_EQ(config(a, 30522).gelu, Gelu::Tanh);
}

// Megatron's GELU: the fused bias-GELU (the default) is the tanh approximation; without it the
// legacy model computes openai_gelu's tanh one when asked, else torch's erf one, and Megatron-
// core's the erf one whatever openai_gelu says (Transformer Engine's activation: tanh).
TEST(MegatronArgs, GeluForm) {
  auto a = gpt2_345m();
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["bias_gelu_fusion"] = true;
  a["openai_gelu"] = true;
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["bias_gelu_fusion"] = false;
  a["openai_gelu"] = false;
  EXPECT_EQ(config(a).gelu, Gelu::Erf);  // neither model field: the legacy model (Megatron-DeepSpeed's too)
  a["openai_gelu"] = true;
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["use_mcore_models"] = true;  // Megatron-LM before use_legacy_models
  EXPECT_EQ(config(a).gelu, Gelu::Erf);
  a["use_legacy_models"] = true;  // the newer field decides
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["use_legacy_models"] = false;
  EXPECT_EQ(config(a).gelu, Gelu::Erf);
  a["use_te_activation_func"] = true;  // Transformer Engine's GELU: the tanh approximation
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["use_te_activation_func"] = false;
  a["bias_gelu_fusion"] = true;
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
}

// Args from before the fused bias-GELU (Megatron-LM 1.x): with openai_gelu, F.gelu (erf) unless
// it is set; the first 1.0 args, without openai_gelu either, OpenAI's tanh GELU.
TEST(MegatronArgs, GeluOfArgsBeforeTheFusedBiasGelu) {
  auto a = gpt2_345m();
  a.erase("bias_gelu_fusion");
  a.erase("openai_gelu");
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
  a["openai_gelu"] = false;
  EXPECT_EQ(config(a).gelu, Gelu::Erf);
  a["openai_gelu"] = true;
  EXPECT_EQ(config(a).gelu, Gelu::Tanh);
}

TEST(MegatronArgs, RefusesWhatTridentCannotRepresent) {
  const auto a = gpt2_345m();
  EXPECT_EQ(config_error(a, "untie_embeddings_and_output_weights", true),
            "ck.pt: args.untie_embeddings_and_output_weights: true: trident ties the LM head to the word embedding");
  EXPECT_EQ(config_error(a, "normalization", std::string("RMSNorm")),
            "ck.pt: args.normalization: 'RMSNorm' (trident's GPT-2 uses LayerNorm)");
  EXPECT_EQ(config_error(a, "swiglu", true), "ck.pt: args.swiglu: true is not supported by trident's GPT-2");
  EXPECT_EQ(config_error(a, "add_bias_linear", false),
            "ck.pt: args.add_bias_linear: false: trident's linear layers have biases");
  EXPECT_EQ(config_error(a, "position_embedding_type", std::string("rope")),
            "ck.pt: args.position_embedding_type: 'rope' (trident's GPT-2 has learned absolute positions)");
  EXPECT_EQ(config_error(a, "ffn_hidden_size", int64_t{2816}),
            "ck.pt: args.ffn_hidden_size: 2816 is not 4 x hidden_size (4096)");
  EXPECT_EQ(config_error(a, "kv_channels", int64_t{128}), "ck.pt: args.kv_channels: 128 is not hidden_size / num_attention_heads");
  EXPECT_EQ(config_error(a, "layernorm_epsilon", 1e-6), "ck.pt: args.layernorm_epsilon: 0.000001 (trident's LayerNorm uses 1e-5)");
  EXPECT_EQ(config_error(a, "num_experts", int64_t{8}), "ck.pt: args.num_experts: mixture of experts is not supported");
  auto gqa = a;
  gqa["group_query_attention"] = true;
  EXPECT_EQ(config_error(gqa, "num_query_groups", int64_t{4}),
            "ck.pt: args.num_query_groups: 4 groups: grouped-query attention is not supported");
  EXPECT_NO_THROW(config(gqa));  // the flag without groups
  EXPECT_EQ(config_error(a, "num_key_value_heads", int64_t{2}),
            "ck.pt: args.num_key_value_heads: 2 key/value heads: grouped-query attention is not supported");
  EXPECT_EQ(config_error(a, "num_key_value_heads", int64_t{16}), "no error");  // as many as the heads
  auto no_groups_flag = a;
  no_groups_flag["num_query_groups"] = int64_t{4};  // ignored by Megatron without group_query_attention
  EXPECT_NO_THROW(config(no_groups_flag));
  auto missing = a;
  missing.erase("padded_vocab_size");
  EXPECT_THROW(config(missing), IoError);
  EXPECT_EQ(config_error(a, "num_layers", std::string("24")), "ck.pt: args.num_layers is str '24'");
}

}  // namespace
}  // namespace trident
