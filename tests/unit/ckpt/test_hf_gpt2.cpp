// Hugging Face GPT-2 mapping: export/import round trip, the Conv1D transpose and the c_attn
// column order checked element by element against HF's documented computation, file
// contents, and clear errors for unsupported configs and tensors.
#include "ckpt/hf_gpt2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ckpt/safetensors.h"
#include "ckpt_test_util.h"

namespace trident {
namespace {

using testing::small_config;

using json = nlohmann::json;
using testing::expect_io_error;
using testing::ScratchDir;
using testing::slurp;
using testing::spit;

// Random canonical tensors as the model holds them at `tp` (wte padded, padding zero).
TensorMap random_canonical(const ModelConfig& cfg, int tp, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 0.5f);
  TensorMap m;
  for (const auto& spec : gpt2_param_specs(cfg, tp)) {
    HostTensor t;
    t.shape = shape_vec(spec.shape);
    t.data.resize(static_cast<size_t>(spec.shape.numel()));
    for (auto& x : t.data) x = d(g);
    if (is_vocab_padded(spec))
      std::fill(t.data.begin() + stored_rows(spec) * t.shape[1], t.data.end(), 0.f);
    m[spec.name] = std::move(t);
  }
  return m;
}

void expect_bit_equal(const HostTensor& a, const HostTensor& b, const std::string& what) {
  EXPECT_EQ(a.shape, b.shape) << what;
  ASSERT_EQ(a.data.size(), b.data.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float))) << what;
}

TEST(HfGpt2, Names) {
  EXPECT_EQ(hf_gpt2_name("wte"), "transformer.wte.weight");
  EXPECT_EQ(hf_gpt2_name("wpe"), "transformer.wpe.weight");
  EXPECT_EQ(hf_gpt2_name("h.11.attn.qkv.weight"), "transformer.h.11.attn.c_attn.weight");
  EXPECT_EQ(hf_gpt2_name("h.0.attn.proj.bias"), "transformer.h.0.attn.c_proj.bias");
  EXPECT_EQ(hf_gpt2_name("h.3.mlp.fc.weight"), "transformer.h.3.mlp.c_fc.weight");
  EXPECT_EQ(hf_gpt2_name("h.3.mlp.proj.bias"), "transformer.h.3.mlp.c_proj.bias");
  EXPECT_EQ(hf_gpt2_name("h.2.ln_2.weight"), "transformer.h.2.ln_2.weight");
  EXPECT_EQ(hf_gpt2_name("ln_f.bias"), "transformer.ln_f.bias");
  EXPECT_TRUE(hf_gpt2_transposed("h.0.attn.qkv.weight"));
  EXPECT_TRUE(hf_gpt2_transposed("h.0.mlp.proj.weight"));
  EXPECT_FALSE(hf_gpt2_transposed("h.0.attn.qkv.bias"));
  EXPECT_FALSE(hf_gpt2_transposed("wte"));
  EXPECT_THROW(hf_gpt2_name("h.0.attn.qkv"), ConfigError);
  EXPECT_THROW(hf_gpt2_name("lm_head"), ConfigError);
}

TEST(HfGpt2, ExportImportBitIdentical) {
  ScratchDir d;
  const ModelConfig cfg = small_config();
  const TensorMap canon = random_canonical(cfg, 2, 42);  // wte padded to 304 rows
  const WrittenFile wf = export_hf_gpt2(d.path(), cfg, canon);
  EXPECT_EQ(wf.path, d / "model.safetensors");
  const HfGpt2Model m = import_hf_gpt2(d.path(), cfg.make_vocab_size_divisible_by);
  ASSERT_EQ(m.tensors.size(), canon.size());
  for (const auto& [name, t] : canon) {
    SCOPED_TRACE(name);
    const HostTensor& got = m.tensors.at(name);
    if (name == "wte") {
      HostTensor unpadded{{300, 16}, std::vector<float>(t.data.begin(), t.data.begin() + 300 * 16)};
      expect_bit_equal(got, unpadded, name);
    } else {
      expect_bit_equal(got, t, name);
    }
  }
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.num_layers, cfg.num_layers);
  EXPECT_EQ(c.hidden_size, cfg.hidden_size);
  EXPECT_EQ(c.num_attention_heads, cfg.num_attention_heads);
  EXPECT_EQ(c.max_position_embeddings, cfg.max_position_embeddings);
  EXPECT_EQ(c.seq_length, cfg.max_position_embeddings);
  EXPECT_EQ(c.vocab_size, cfg.vocab_size);
  EXPECT_EQ(c.make_vocab_size_divisible_by, 8);
  EXPECT_EQ(c.init_method_std, cfg.init_method_std);
  EXPECT_EQ(c.hidden_dropout, cfg.hidden_dropout);
  EXPECT_EQ(c.attention_dropout, cfg.attention_dropout);
  // Export of the imported tensors reproduces the same file byte for byte.
  ScratchDir d2;
  const WrittenFile wf2 = export_hf_gpt2(d2.path(), c, m.tensors);
  EXPECT_EQ(wf2.xxh3, wf.xxh3);
  EXPECT_EQ(slurp(d2 / "model.safetensors"), slurp(d / "model.safetensors"));
}

// The GELU's form travels as activation_function: the exact one as "gelu" (and back), the
// tanh one as "gelu_new"; HF's other spellings of each read as it.
TEST(HfGpt2, GeluFormRoundTrip) {
  for (const Gelu form : {Gelu::Erf, Gelu::Tanh}) {
    SCOPED_TRACE(gelu_name(form));
    ScratchDir d;
    ModelConfig cfg = small_config();
    cfg.gelu = form;
    export_hf_gpt2(d.path(), cfg, random_canonical(cfg, 1, 9));
    EXPECT_EQ(json::parse(slurp(d / "config.json"))["activation_function"], form == Gelu::Erf ? "gelu" : "gelu_new");
    EXPECT_EQ(import_hf_gpt2(d.path(), cfg.make_vocab_size_divisible_by).config.gelu, form);
  }
  json j = hf_gpt2_config_json(small_config());
  for (const auto& [name, form] : std::vector<std::pair<std::string, Gelu>>{{"gelu", Gelu::Erf},
                                                                             {"gelu_python", Gelu::Erf},
                                                                             {"gelu_new", Gelu::Tanh},
                                                                             {"gelu_fast", Gelu::Tanh},
                                                                             {"gelu_pytorch_tanh", Gelu::Tanh},
                                                                             {"gelu_accurate", Gelu::Tanh}}) {
    j["activation_function"] = name;
    EXPECT_EQ(model_config_from_hf_gpt2(j, "x").gelu, form) << name;
  }
  j.erase("activation_function");  // GPT2Config's default: gelu_new
  EXPECT_EQ(model_config_from_hf_gpt2(j, "x").gelu, Gelu::Tanh);
}

TEST(HfGpt2, FileContents) {
  ScratchDir d;
  const ModelConfig cfg = small_config();
  export_hf_gpt2(d.path(), cfg, random_canonical(cfg, 1, 3));
  SafetensorsReader r(d / "model.safetensors");
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.tensors().size(), 2u + 12u * 2 + 2u);  // no lm_head.weight: tied, as HF saves it
  EXPECT_FALSE(r.contains("lm_head.weight"));
  EXPECT_EQ(r.info("transformer.wte.weight").shape, (std::vector<int64_t>{300, 16}));
  EXPECT_EQ(r.info("transformer.wpe.weight").shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(r.info("transformer.h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(r.info("transformer.h.1.attn.c_attn.bias").shape, (std::vector<int64_t>{48}));
  EXPECT_EQ(r.info("transformer.h.1.attn.c_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(r.info("transformer.h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(r.info("transformer.h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(r.info("transformer.ln_f.weight").shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(r.tensors().front().name, "transformer.wte.weight");  // state-dict order
  EXPECT_EQ(r.info("transformer.h.0.ln_1.bias").dtype, StDType::F32);
  const json j = json::parse(slurp(d / "config.json"));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(j["activation_function"], "gelu_new");
  EXPECT_EQ(j["n_embd"], 16);
  EXPECT_EQ(j["n_layer"], 2);
  EXPECT_EQ(j["n_head"], 4);
  EXPECT_EQ(j["n_positions"], 12);
  EXPECT_EQ(j["n_ctx"], 12);
  EXPECT_EQ(j["vocab_size"], 300);
  EXPECT_EQ(j["layer_norm_epsilon"], 1e-5);
  EXPECT_TRUE(j["n_inner"].is_null());
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["torch_dtype"], "float32");
}

// Tiny model, C = 4, 2 heads of 2. HF computes c_attn as y = x W + b with W [in=4, out=12],
// then q, k, v = y.split(4) and views each as [heads=2, head_dim=2]. Our model computes
// y_ours = qkv.weight x + qkv.bias with rows Q (head 0, head 1), K, V. Both must give the
// same per-head q, k, v, element by element.
TEST(HfGpt2, TransposeAndCAttnColumnOrderByHand) {
  ModelConfig cfg;
  cfg.num_layers = 1;
  cfg.hidden_size = 4;
  cfg.num_attention_heads = 2;
  cfg.seq_length = 3;
  cfg.max_position_embeddings = 3;
  cfg.vocab_size = 5;
  cfg.make_vocab_size_divisible_by = 1;
  TensorMap canon = random_canonical(cfg, 1, 9);
  const int C = 4, H = 2, D = 2;
  // qkv.weight[row][col] = 100 row + col (our [out, in] layout), bias[row] = 0.5 + row.
  auto& w = canon["h.0.attn.qkv.weight"].data;
  for (int r = 0; r < 3 * C; ++r)
    for (int c = 0; c < C; ++c) w[r * C + c] = static_cast<float>(100 * r + c);
  auto& b = canon["h.0.attn.qkv.bias"].data;
  for (int r = 0; r < 3 * C; ++r) b[r] = 0.5f + static_cast<float>(r);
  const TensorMap hf = canonical_to_hf_gpt2(cfg, canon);
  const HostTensor& W = hf.at("transformer.h.0.attn.c_attn.weight");
  const HostTensor& B = hf.at("transformer.h.0.attn.c_attn.bias");
  ASSERT_EQ(W.shape, (std::vector<int64_t>{4, 12}));
  // Conv1D stores [in, out]: W[i][o] is our weight[o][i] = 100 o + i.
  EXPECT_EQ(W.data[0 * 12 + 5], 500.f);
  EXPECT_EQ(W.data[3 * 12 + 11], 1103.f);
  EXPECT_EQ(W.data[2 * 12 + 4], 402.f);  // column 4: K block, head 0, dim 0
  const float x[4] = {0.25f, -1.5f, 2.0f, 0.75f};
  for (int which = 0; which < 3; ++which) {  // q, k, v
    for (int h = 0; h < H; ++h) {
      for (int dd = 0; dd < D; ++dd) {
        // HF: column which*C + h*D + dd of x W + b.
        const int col = which * C + h * D + dd;
        float hf_val = B.data[col];
        for (int i = 0; i < C; ++i) hf_val += x[i] * W.data[i * 12 + col];
        // Ours, from the documented layout: row which*C + h*D + dd.
        const int row = which * C + h * D + dd;
        float our_val = b[row];
        for (int i = 0; i < C; ++i) our_val += w[row * C + i] * x[i];
        EXPECT_EQ(hf_val, our_val) << "which " << which << " head " << h << " dim " << dd;
        // And the numbers themselves: sum_i x_i (100 row + i) + 0.5 + row.
        EXPECT_FLOAT_EQ(hf_val, 100.f * row * 1.5f + (-1.5f + 4.0f + 2.25f) + 0.5f + row);
      }
    }
  }
  // mlp.c_fc and mlp.c_proj: y_hf[o] = sum_i x_i W[i][o] equals our W x.
  const auto& fc = canon["h.0.mlp.fc.weight"].data;  // [16, 4]
  const HostTensor& Wfc = hf.at("transformer.h.0.mlp.c_fc.weight");
  ASSERT_EQ(Wfc.shape, (std::vector<int64_t>{4, 16}));
  for (int o = 0; o < 16; ++o)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(Wfc.data[i * 16 + o], fc[o * 4 + i]);
  const auto& pr = canon["h.0.mlp.proj.weight"].data;  // [4, 16]
  const HostTensor& Wpr = hf.at("transformer.h.0.mlp.c_proj.weight");
  ASSERT_EQ(Wpr.shape, (std::vector<int64_t>{16, 4}));
  for (int o = 0; o < 4; ++o)
    for (int i = 0; i < 16; ++i) EXPECT_EQ(Wpr.data[i * 4 + o], pr[o * 16 + i]);
  const auto& ap = canon["h.0.attn.proj.weight"].data;  // [4, 4]
  const HostTensor& Wap = hf.at("transformer.h.0.attn.c_proj.weight");
  for (int o = 0; o < 4; ++o)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(Wap.data[i * 4 + o], ap[o * 4 + i]);
  // wte is exported without its padding (vocab 5, padded rows would be 5 at divisor 1).
  EXPECT_EQ(hf.at("transformer.wte.weight").shape, (std::vector<int64_t>{5, 4}));
}

TEST(HfGpt2, ImportsHubStyleFiles) {
  const ModelConfig cfg = small_config();
  const TensorMap hf = canonical_to_hf_gpt2(cfg, random_canonical(cfg, 1, 77));
  // Names without "transformer.", mask buffers, a tied lm_head.
  TensorMap hub;
  for (const auto& [name, t] : hf) hub[name.substr(std::strlen("transformer."))] = t;
  hub["h.0.attn.bias"] = HostTensor{{1, 1, 12, 12}, std::vector<float>(144, 1.f)};
  hub["h.1.attn.masked_bias"] = HostTensor{{}, std::vector<float>{-1e4f}};
  hub["lm_head.weight"] = hf.at("transformer.wte.weight");
  const TensorMap a = hf_gpt2_to_canonical(cfg, hub, "hub");
  const TensorMap b = hf_gpt2_to_canonical(cfg, hf, "hf");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) expect_bit_equal(t, b.at(name), name);

  TensorMap untied = hub;
  untied["lm_head.weight"].data[7] += 1.f;
  EXPECT_THROW(hf_gpt2_to_canonical(cfg, untied, "f"), ConfigError);
  TensorMap missing = hf;
  missing.erase("transformer.h.1.mlp.c_fc.bias");
  expect_io_error([&] { hf_gpt2_to_canonical(cfg, missing, "f.safetensors"); },
                  {"f.safetensors", "missing tensor 'transformer.h.1.mlp.c_fc.bias'"});
  TensorMap shaped = hf;
  shaped["transformer.h.0.attn.c_attn.weight"].shape = {48, 16};  // our layout, not HF's
  expect_io_error([&] { hf_gpt2_to_canonical(cfg, shaped, "f"); }, {"c_attn.weight", "[48, 16]", "[16, 48]"});
  TensorMap extra = hf;
  extra["transformer.h.2.ln_1.weight"] = HostTensor{{16}, std::vector<float>(16)};
  expect_io_error([&] { hf_gpt2_to_canonical(cfg, extra, "f"); }, {"unexpected tensor 'h.2.ln_1.weight'"});
  TensorMap both = hf;
  both["wpe.weight"] = hf.at("transformer.wpe.weight");
  expect_io_error([&] { hf_gpt2_to_canonical(cfg, both, "f"); }, {"wpe.weight", "prefix"});
}

TEST(HfGpt2, HalfPrecisionExport) {
  ScratchDir d;
  const ModelConfig cfg = small_config();
  const TensorMap canon = random_canonical(cfg, 1, 5);
  export_hf_gpt2(d.path(), cfg, canon, StDType::BF16);
  EXPECT_EQ(json::parse(slurp(d / "config.json"))["torch_dtype"], "bfloat16");
  EXPECT_EQ(SafetensorsReader(d / "model.safetensors").info("transformer.wpe.weight").dtype, StDType::BF16);
  const HfGpt2Model m = import_hf_gpt2(d.path(), 8);
  const auto& a = canon.at("h.1.mlp.proj.weight").data;
  const auto& g = m.tensors.at("h.1.mlp.proj.weight").data;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(g[i], bf16_to_float(float_to_bf16(a[i])));
  EXPECT_THROW(export_hf_gpt2(d / "x", cfg, canon, StDType::I32), ConfigError);
}

TEST(HfGpt2, ConfigErrors) {
  const json good = hf_gpt2_config_json(small_config());
  auto check = [&](auto edit, bool config_error, std::vector<std::string> parts) {
    json j = good;
    edit(j);
    parts.push_back("config.json");
    try {
      model_config_from_hf_gpt2(j, "dir/config.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const ConfigError& e) {
      EXPECT_TRUE(config_error) << e.what();
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    } catch (const IoError& e) {
      EXPECT_FALSE(config_error) << e.what();
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  for (const char* act : {"relu", "gelu_10", "quick_gelu", "silu"})
    check([&](json& j) { j["activation_function"] = act; }, true,
          {"field 'activation_function'", "'" + std::string(act) + "' is not supported", "gelu_pytorch_tanh", "gelu"});
  check([](json& j) { j["n_inner"] = 100; }, true, {"field 'n_inner'", "4 x n_embd"});
  check([](json& j) { j["layer_norm_epsilon"] = 1e-6; }, true, {"field 'layer_norm_epsilon'"});
  check([](json& j) { j["tie_word_embeddings"] = false; }, true, {"field 'tie_word_embeddings'"});
  check([](json& j) { j["scale_attn_by_inverse_layer_idx"] = true; }, true, {"scale_attn_by_inverse_layer_idx"});
  check([](json& j) { j["model_type"] = "gpt_neox"; }, true, {"field 'model_type'"});
  check([](json& j) { j["n_head"] = 5; }, true, {"num-attention-heads"});
  check([](json& j) { j.erase("n_embd"); }, false, {"field 'n_embd'", "missing"});
  check([](json& j) { j["n_layer"] = "2"; }, false, {"field 'n_layer'", "integer"});
  check([](json& j) { j["vocab_size"] = -3; }, false, {"field 'vocab_size'"});
  // Accepted variants: other tanh GELU names, n_inner = 4 C, legacy n_ctx only.
  json j = good;
  j["activation_function"] = "gelu_pytorch_tanh";
  j["n_inner"] = 64;
  j.erase("n_positions");
  const ModelConfig c = model_config_from_hf_gpt2(j, "x");
  EXPECT_EQ(c.max_position_embeddings, 12);
  EXPECT_EQ(c.hidden_size, 16);
  // The real GPT-2 (124M) config.
  const json gpt2 = json::parse(R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null, "summary_first_dropout": 0.1,
    "summary_proj_to_labels": true, "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257})");
  const ModelConfig g = model_config_from_hf_gpt2(gpt2, "gpt2/config.json");
  EXPECT_EQ(g.num_layers, 12);
  EXPECT_EQ(g.hidden_size, 768);
  EXPECT_EQ(g.num_attention_heads, 12);
  EXPECT_EQ(g.vocab_size, 50257);
  EXPECT_EQ(g.padded_vocab_size(1), 50304);
  EXPECT_EQ(g.num_parameters(1) - (50304 - 50257) * 768, 124439808);  // GPT-2 small, tied head
  // Missing files.
  ScratchDir d;
  expect_io_error([&] { import_hf_gpt2(d.path()); }, {"config.json", "cannot open"});
  spit(d / "config.json", good.dump());
  expect_io_error([&] { import_hf_gpt2(d.path()); }, {"model.safetensors"});
  spit(d / "config.json", "{");
  expect_io_error([&] { import_hf_gpt2(d.path()); }, {"config.json", "bad JSON"});
}

}  // namespace
}  // namespace trident
