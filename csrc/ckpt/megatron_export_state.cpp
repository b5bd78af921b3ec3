#include "ckpt/megatron_export_state.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "ckpt/canonical_slices.h"
#include "ckpt/metadata.h"
#include "core/error.h"

namespace trident::megatron {
namespace {

using json = nlohmann::json;

double shortest(double v) { return shortest_decimal(static_cast<float>(v)); }

double number_or(const json& j, const char* key, double dflt) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : dflt;
}

// A count Megatron keeps as an int, a float where it has a fraction.
void count(pickle::Writer& w, double v) {
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) w.integer(static_cast<int64_t>(v));
  else w.real(v);
}

// One parameter's state on this rank: its shard of a full canonical tensor of `m`.
struct Shards {
  const MegatronTrainingState& st;
  const ModelConfig& cfg;
  int tp, t;

  std::vector<int64_t> shape(const std::string& name) const {
    std::vector<int64_t> s = st.master.at(name).shape;
    if (name == "wte") s[0] = cfg.padded_vocab_size(tp);
    return shard_shape(name, s, tp);
  }
  std::vector<float> of(const TensorMap& m, const std::string& name) const {
    return padded_shard_of(m.at(name), name, cfg, tp, t);
  }
};

// Megatron's param groups of a GPT-2 run: the weights (weight decay), the biases and
// LayerNorms, and with --decoupled-lr the word embedding and output layer at their own rates.
enum class Group { kDecayed, kDecoupled, kNoDecay };

bool has_decoupled_lr(const json& ts) {
  const json sched = ts.value("opt_param_scheduler", json::object());
  return sched.contains("decoupled_lr") && !sched["decoupled_lr"].is_null();
}

// The group of a parameter of canonical name `name` and `dims` dimensions ("wte" also for the
// tied head of a last stage).
Group group_of(const std::string& name, size_t dims, bool decoupled) {
  if (name == "wte" && decoupled) return Group::kDecoupled;
  return dims == 2 ? Group::kDecayed : Group::kNoDecay;
}

// The groups in the order a Megatron that loads them builds its own, which torch's
// load_state_dict pairs with the saved ones by position. Without --decoupled-lr, Megatron-LM's
// main branch sorts them, the default group first. A --decoupled-lr group is marked as
// Megatron-core 0.12 to 0.15 mark it (is_decoupled_lr; newer versions cannot tell it from the
// default group when they match groups on load): ordered as those versions order them, each
// group where its first parameter lies among the rank's `kinds` (named_parameters() order),
// then the groups only other ranks hold, empty, in rank 0's order (embedding, weights, rest).
// `kinds` empty: the order of a file every rank shares (torch_dist's common.pt).
std::vector<Group> group_order(const std::vector<Group>& kinds, bool decoupled) {
  if (!decoupled) return {Group::kDecayed, Group::kNoDecay};
  std::vector<Group> order;
  for (const Group g : kinds)
    if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
  for (const Group g : {Group::kDecoupled, Group::kDecayed, Group::kNoDecay})
    if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
  return order;
}

// 'param_groups': `groups` (group_order); with `sizes` each group's 'params', its parameters'
// indices counted through the groups (a sharded state dict saves none: Megatron-core makes them
// non-persistent).
void write_param_groups(pickle::Writer& w, const json& ts, MegatronAdam adam_kind, const std::vector<Group>& groups,
                        std::optional<std::vector<size_t>> sizes) {
  const int64_t steps = ts.value("optimizer_steps", int64_t{0});
  const json adam = ts.value(kAdamKey, json::object());
  const json sched = ts.value("opt_param_scheduler", json::object());
  w.str("param_groups");
  w.begin_list();
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool decayed = groups[g] != Group::kNoDecay, decoupled = groups[g] == Group::kDecoupled;
    const double max_lr = number_or(sched, decoupled ? "decoupled_lr" : "max_lr", 0.0);
    const double min_lr = number_or(sched, "min_lr", 0.0);
    const double group_min_lr = decoupled ? number_or(sched, "decoupled_min_lr", min_lr) : min_lr;
    w.begin_dict();
    w.str("lr");
    w.real(shortest(max_lr));
    w.str("betas");
    w.begin_tuple();
    w.real(shortest(number_or(adam, "beta1", 0.9)));
    w.real(shortest(number_or(adam, "beta2", 0.999)));
    w.end();
    w.str("eps");
    w.real(shortest(number_or(adam, "eps", 1e-8)));
    w.str("weight_decay");
    w.real(decayed ? shortest(number_or(sched, "start_wd", 0.0)) : 0.0);
    w.str("bias_correction");
    w.boolean(true);
    w.str("amsgrad");
    w.boolean(false);
    w.str("wd_mult");
    w.real(decayed ? 1.0 : 0.0);
    w.str("lr_mult");
    w.real(1.0);
    w.str("is_expert_parallel");
    w.boolean(false);
    w.str("is_decoupled_lr");
    w.boolean(decoupled);
    w.str("default_config");  // newer Megatron-core's: whether the group follows --lr
    w.boolean(!decoupled);
    w.str("max_lr");
    w.real(shortest(max_lr));
    w.str("min_lr");
    w.real(shortest(group_min_lr));
    if (adam_kind == MegatronAdam::kFused) {
      w.str("step");
      w.integer(steps);
    }
    if (sizes) {
      w.str("params");
      w.begin_list();
      for (size_t i = 0; i < (*sizes)[g]; ++i) w.integer(index++);
      w.end();
    }
    w.end();
  }
  w.end();  // param_groups
}

// 'grad_scaler' of an fp16 run with a dynamic loss scale: Megatron's DynamicGradScaler.
void write_grad_scaler(pickle::Writer& w, RankFile& file, const json& ts, DType dtype) {
  const auto scaler = ts.find("loss_scaler");
  if (dtype == DType::F16 && scaler != ts.end() && scaler->is_object()) {
    int64_t growth = scaler->value("growth_tracker", int64_t{0});
    int64_t hysteresis = scaler->value("hysteresis_tracker", int64_t{0});
    if (scaler->value("style", std::string()) == "deepspeed_fused") {
      // DeepSpeed's grows at every multiple of the window and halves at every overflow:
      // Megatron's tracker is the count within the window, one overflow from halving.
      growth %= std::max<int64_t>(1, scaler->value("window", int64_t{1}));
      hysteresis = 1;
    }
    w.str("grad_scaler");
    w.begin_dict();
    w.str("scale");
    file.tensor(w, {static_cast<float>(number_or(*scaler, "scale", 1.0))}, {1}, DType::F32);
    w.str("growth_tracker");
    w.integer(growth);
    w.str("hysteresis_tracker");
    w.integer(hysteresis);
    w.end();
  }
}

}  // namespace

void check_exportable_state(const json& trainer_state, bool mcore) {
  const json s = trainer_state.value("opt_param_scheduler", json::object());
  if (!s.is_object() || s.empty())
    throw ConfigError("--with-optimizer: the checkpoint holds no learning-rate schedule (trainer_state."
                      "opt_param_scheduler) to export");
  if (has_decoupled_lr(trainer_state) && !mcore)
    throw ConfigError("--with-optimizer: the run trained the word embedding at its own learning rate "
                      "(--decoupled-lr), which only Megatron-core's model does; export with --megatron-model mcore");
  if (s.contains("lr_decay_tokens") && !s["lr_decay_tokens"].is_null())
    throw ConfigError("--with-optimizer: the run's learning rate decays by tokens (Megatron-DeepSpeed's "
                      "--lr-decay-tokens), which Megatron-LM's scheduler does not hold; export without "
                      "--with-optimizer");
}

void write_optimizer_state(pickle::Writer& w, RankFile& file, const std::vector<std::string>& params,
                           const MegatronTrainingState& st, const ModelConfig& cfg, int tp, int t, DType dtype,
                           MegatronAdam adam_kind) {
  const json& ts = st.trainer_state;
  const Shards shards{st, cfg, tp, t};
  const int64_t steps = ts.value("optimizer_steps", int64_t{0});
  // The parameters of each of Megatron's groups (group_order), in named_parameters() order.
  const bool decoupled = has_decoupled_lr(ts);
  std::vector<Group> kinds;
  for (const std::string& p : params) kinds.push_back(group_of(p, shards.shape(p).size(), decoupled));
  const std::vector<Group> order = group_order(kinds, decoupled);
  std::vector<std::vector<std::string>> groups(order.size());
  for (size_t i = 0; i < params.size(); ++i)
    groups[static_cast<size_t>(std::find(order.begin(), order.end(), kinds[i]) - order.begin())].push_back(params[i]);
  const bool wrapped = dtype != DType::F32;  // Float16OptimizerWithFloat16Params around INNER

  w.begin_dict();
  if (wrapped) {
    w.str("optimizer");
    w.begin_dict();
  }
  w.str("state");
  w.begin_dict();
  int64_t index = 0;
  if (steps > 0)  // torch's Adam holds no state before its first step
    for (const auto& group : groups)
      for (const std::string& p : group) {
        w.integer(index++);
        w.begin_dict();
        w.str("exp_avg");
        file.tensor(w, shards.of(st.exp_avg, p), shards.shape(p), DType::F32);
        w.str("exp_avg_sq");
        file.tensor(w, shards.of(st.exp_avg_sq, p), shards.shape(p), DType::F32);
        if (adam_kind == MegatronAdam::kTorch) {
          w.str("step");
          file.tensor(w, {static_cast<float>(steps)}, {}, DType::F32);
        }
        w.end();
      }
  w.end();  // state
  std::vector<size_t> sizes;
  for (const auto& group : groups) sizes.push_back(group.size());
  write_param_groups(w, ts, adam_kind, order, sizes);
  if (!wrapped) {
    w.end();
    return;
  }
  w.end();  // the inner optimizer
  w.str("fp32_from_fp16_params");
  w.begin_list();
  for (const auto& group : groups) {
    w.begin_list();
    for (const std::string& p : group) file.tensor(w, shards.of(st.master, p), shards.shape(p), DType::F32);
    w.end();
  }
  w.end();
  write_grad_scaler(w, file, ts, dtype);
  w.end();
}

void write_sharded_optimizer_common(pickle::Writer& w, RankFile& file, const MegatronTrainingState& st, DType dtype,
                                    MegatronAdam adam_kind, bool distributed) {
  const json& ts = st.trainer_state;
  const bool wrapped = distributed || dtype != DType::F32;
  w.begin_dict();
  if (wrapped) {
    w.str("optimizer");
    w.begin_dict();
  }
  // The distributed optimizer keeps the step in each group whatever its Adam (its
  // load_state_dict reads it there); the others keep torch's Adam's per-parameter step once,
  // as state['common_step'].
  if (adam_kind == MegatronAdam::kTorch && !distributed) {
    w.str("state");
    w.begin_dict();
    w.str("common_step");
    file.tensor(w, {static_cast<float>(ts.value("optimizer_steps", int64_t{0}))}, {}, DType::F32);
    w.end();
  }
  write_param_groups(w, ts, distributed ? MegatronAdam::kFused : adam_kind, group_order({}, has_decoupled_lr(ts)),
                     std::nullopt);
  if (wrapped) w.end();
  write_grad_scaler(w, file, ts, dtype);
  if (distributed) {
    w.str("param_state_sharding_type");
    w.str(kFullyReshardable);
  }
  w.end();
}

void write_args(pickle::Writer& w, const ModelConfig& cfg, const MegatronExportOptions& o) {
  const auto i = [&](const char* k, int64_t v) { w.str(k); w.integer(v); };
  const auto b = [&](const char* k, bool v) { w.str(k); w.boolean(v); };
  const auto f = [&](const char* k, double v) { w.str(k); w.real(v); };
  const auto s = [&](const char* k, const char* v) { w.str(k); v ? w.str(v) : w.none(); };
  w.begin_namespace();
  i("num_layers", cfg.num_layers);
  i("hidden_size", cfg.hidden_size);
  i("ffn_hidden_size", cfg.ffn_hidden_size());
  i("num_attention_heads", cfg.num_attention_heads);
  i("num_key_value_heads", cfg.num_attention_heads);
  i("kv_channels", cfg.head_dim());
  i("max_position_embeddings", cfg.max_position_embeddings);
  i("seq_length", cfg.seq_length);
  i("padded_vocab_size", cfg.padded_vocab_size(o.tp));
  i("make_vocab_size_divisible_by", cfg.make_vocab_size_divisible_by);
  s("tokenizer_type", o.tokenizer_type.c_str());
  i("tensor_model_parallel_size", o.tp);
  i("pipeline_model_parallel_size", o.pp);
  const auto count_or_none = [&](const char* k, int v) { w.str(k); v > 0 ? w.integer(v) : w.none(); };
  count_or_none("virtual_pipeline_model_parallel_size", o.chunks > 1 ? o.chunks : 0);
  count_or_none("decoder_first_pipeline_num_layers", o.uneven.first_stage_layers);
  count_or_none("decoder_last_pipeline_num_layers", o.uneven.last_stage_layers);
  b("account_for_embedding_in_pipeline_split", o.uneven.embedding_as_layer);
  b("account_for_loss_in_pipeline_split", o.uneven.loss_as_layer);
  s("pipeline_model_parallel_layout", o.uneven.layout.empty() ? nullptr : o.uneven.layout.c_str());
  b("fp16", o.dtype == DType::F16);
  b("bf16", o.dtype == DType::BF16);
  w.str("params_dtype");
  w.global("torch", torch_dtype_global(o.dtype));  // check_megatron_export took only fp32, fp16, bf16
  f("layernorm_epsilon", 1e-5);
  f("norm_epsilon", 1e-5);
  s("normalization", "LayerNorm");
  s("position_embedding_type", "learned_absolute");
  b("add_position_embedding", true);
  b("add_bias_linear", true);
  // The fused bias-GELU is the tanh GELU; without it both of Megatron's models compute the
  // erf one (openai_gelu false: the legacy model's tanh GELU otherwise).
  b("bias_gelu_fusion", cfg.gelu == Gelu::Tanh);
  b("openai_gelu", false);
  b("swiglu", false);
  b("untie_embeddings_and_output_weights", false);
  b("apply_residual_connection_post_layernorm", false);
  b("group_query_attention", false);
  b("data_parallel_random_init", false);
  // Informational: --use-checkpoint-args takes neither, so a Megatron-core export still needs
  // --transformer-impl local on Megatron's command line.
  b("use_legacy_models", !o.mcore);
  s("transformer_impl", "local");
  s("ckpt_format", o.torch_dist ? "torch_dist" : "torch");
  f("hidden_dropout", shortest_decimal(cfg.hidden_dropout));
  f("attention_dropout", shortest_decimal(cfg.attention_dropout));
  f("init_method_std", shortest_decimal(cfg.init_method_std));
  w.str("embedding_init_method_std");  // None: the embeddings took init_method_std and weight decay
  cfg.embedding_init_method_std > 0 ? w.real(shortest_decimal(cfg.embedding_init_method_std)) : w.none();
  i("iteration", o.iteration);
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& ts = o.training ? o.training->trainer_state : none;
  i("consumed_train_samples", o.training ? o.training->consumed_samples : 0);
  i("consumed_valid_samples", ts.value("consumed_valid_samples", int64_t{0}));
  // --decoupled-lr, by which the import recognises newer Megatron-core's group (None without).
  const nlohmann::json sched = ts.value("opt_param_scheduler", nlohmann::json::object());
  for (const char* key : {"decoupled_lr", "decoupled_min_lr"}) {
    w.str(key);
    sched.contains(key) && sched[key].is_number() ? w.real(shortest(sched[key].get<double>())) : w.none();
  }
  i("skipped_train_samples", ts.value("skipped_train_samples", int64_t{0}));  // --iterations-to-skip's
  if (o.training) {
    b("use_distributed_optimizer", o.distributed_optimizer);
    b("no_save_rng", true);  // none is written: Megatron's load then asks for none
    i("seed", ts.value(kDataSeedKey, int64_t{1234}));
    if (ts.contains("global_batch_size")) i("global_batch_size", ts.value("global_batch_size", int64_t{0}));
  }
  w.end();
}

void write_common_fields(pickle::Writer& w, const ModelConfig& cfg, const MegatronExportOptions& o) {
  w.str("args");
  write_args(w, cfg, o);
  w.str("checkpoint_version");
  w.real(kExportCheckpointVersion);
  w.str("iteration");
  w.integer(o.iteration);
  if (o.training) {  // for Megatron's --log-progress (its default 0 where a file has none)
    w.str("num_floating_point_operations_so_far");
    w.real(o.training->trainer_state.value("num_floating_point_operations_so_far", 0.0));
  }
}

void write_scheduler_state(pickle::Writer& w, const json& trainer_state, bool mcore) {
  check_exportable_state(trainer_state, mcore);
  const json s = trainer_state.value("opt_param_scheduler", json::object());
  const auto real = [&](const char* key) {
    w.str(key);
    w.real(shortest(number_or(s, key, 0.0)));
  };
  const auto steps = [&](const char* key) {
    w.str(key);
    count(w, number_or(s, key, 0.0));
  };
  const auto text = [&](const char* key) {
    w.str(key);
    w.str(s.value(key, std::string()));
  };
  w.begin_dict();
  real("max_lr");
  steps("lr_warmup_steps");
  steps("num_steps");
  text("lr_decay_style");
  steps("lr_decay_steps");
  real("min_lr");
  real("start_wd");
  real("end_wd");
  text("wd_incr_style");
  steps("wd_incr_steps");
  if (s.value("lr_decay_style", std::string()) == "WSD") {
    steps("wsd_decay_steps");
    text("lr_wsd_decay_style");
  }
  w.end();
}

}  // namespace trident::megatron
