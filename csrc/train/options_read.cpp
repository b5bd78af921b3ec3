// The flags into TrainOptions: the model, the length of training and the LR schedule, the
// optimizer, the precision, and the order in which every reader runs (read_train_flags). Each
// reader refuses what its flags alone can tell; the checks across them are options_validate.cpp's.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/decimal.h"
#include "core/error.h"
#include "train/option_table.h"
#include "train/options_internal.h"

namespace trident::options_internal {
using namespace train_flags;  // the flag table (option_table.h)
namespace {

constexpr float kMegatronDefaultDropout = 0.1f;

void read_model_flags(const Flags& f, ModelConfig& m) {
  f.get("num-layers", m.num_layers);
  f.get("hidden-size", m.hidden_size);
  f.get("num-attention-heads", m.num_attention_heads);
  f.get("seq-length", m.seq_length);
  m.max_position_embeddings = m.seq_length;
  f.get("max-position-embeddings", m.max_position_embeddings);
  f.get("vocab-size", m.vocab_size);
  f.get("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  f.get("init-method-std", m.init_method_std);
  if (f.has("embedding-init-method-std")) {
    f.get("embedding-init-method-std", m.embedding_init_method_std);
    if (!(m.embedding_init_method_std > 0)) throw ConfigError("--embedding-init-method-std: expected a positive std");
  }
  // Megatron-LM's (and GPT-2's) dropout unless the flags say otherwise: a Megatron script
  // that passes neither trains with 0.1, and so does trident.
  m.hidden_dropout = m.attention_dropout = kMegatronDefaultDropout;
  f.get("hidden-dropout", m.hidden_dropout);
  f.get("attention-dropout", m.attention_dropout);
  // Megatron's MLP GELU: its fused bias-GELU's tanh approximation, or without the fusion torch's
  // exact (erf) one: Megatron-core's always (but Transformer Engine's, tanh, with
  // --use-te-activation-func), the legacy model's unless --openai-gelu (the rule of the Megatron
  // import, ckpt/megatron_args.cpp). The legacy model: --use-legacy-models, or Megatron-
  // DeepSpeed's (--deepspeed), which has no other.
  m.gelu = f.has("no-bias-gelu-fusion") && !legacy_tanh_gelu(f) && !f.has("use-te-activation-func") ? Gelu::Erf
                                                                                                    : Gelu::Tanh;
}

// Megatron-DeepSpeed's token counts. `sample_warmup`: the warm-up flag in iterations or
// samples given non-zero (nullptr: none).
void read_token_flags(const Flags& f, TrainOptions& o, const char* sample_warmup) {
  const auto read = [&](const char* flag, std::optional<uint64_t>& dst) {
    if (!f.has(flag)) return;
    uint64_t v = 0;
    f.get(flag, v);
    dst = v;
  };
  read("lr-warmup-tokens", o.lr_warmup_tokens);
  read("lr-decay-tokens", o.lr_decay_tokens);
  read("train-tokens", o.train_tokens);
  if (o.lr_decay_tokens == 0u) throw ConfigError("--lr-decay-tokens must be positive");
  if (o.train_tokens == 0u) throw ConfigError("--train-tokens must be positive");
  for (const char* flag : {"lr-warmup-tokens", "lr-decay-tokens"})
    if (f.has(flag) && o.lr_decay_style == "WSD")
      throw ConfigError(std::string("--") + flag +
                        ": --lr-decay-style WSD counts in iterations or samples (Megatron-DeepSpeed's token "
                        "counts go with constant, linear, cosine and inverse-square-root)");
  if (o.lr_warmup_tokens) {
    if (sample_warmup) throw ConfigError(std::string("--lr-warmup-tokens and --") + sample_warmup + " are mutually exclusive");
    if (f.has("lr-warmup-fraction")) throw ConfigError("--lr-warmup-tokens and --lr-warmup-fraction are mutually exclusive");
    if (o.lr_decay_tokens && o.lr_decay_style != "constant" && *o.lr_warmup_tokens >= *o.lr_decay_tokens)
      throw ConfigError("--lr-decay-tokens (" + std::to_string(*o.lr_decay_tokens) + ") must exceed --lr-warmup-tokens (" +
                        std::to_string(*o.lr_warmup_tokens) + ")");
  }
  // As Megatron-DeepSpeed, --train-tokens is a second bound: the run's length in iterations or
  // samples (which also sizes the data) is still needed.
  if (o.train_tokens && !f.has("train-iters") && !f.has("train-samples"))
    throw ConfigError("--train-tokens needs --train-iters or --train-samples (the run ends at whichever comes first)");
}

// Megatron's rule: iteration-based and sample-based flags never mix.
void read_schedule_flags(const Flags& f, TrainOptions& o) {
  f.get("micro-batch-size", o.micro_batch_size);
  f.get("global-batch-size", o.global_batch_size);
  f.get("train-iters", o.train_iters);
  o.train_iters_is_default = !f.has("train-iters");
  f.get("lr", o.lr);
  f.get("min-lr", o.min_lr);
  for (auto [flag, dst] : {std::pair{"decoupled-lr", &o.decoupled_lr}, std::pair{"decoupled-min-lr", &o.decoupled_min_lr}})
    if (f.has(flag)) {
      double v = 0;
      f.get(flag, v);
      *dst = v;
    }
  f.get("lr-decay-style", o.lr_decay_style);
  f.get("lr-warmup-iters", o.lr_warmup_iters);
  f.get("lr-decay-iters", o.lr_decay_iters);
  f.get("lr-wsd-decay-style", o.lr_wsd_decay_style);
  f.get("lr-wsd-decay-iters", o.lr_wsd_decay_iters);
  // As in Megatron, WSD's flags with another style do nothing: said in the note of such flags.
  if (o.lr_decay_style != "WSD")
    for (const char* flag : {"lr-wsd-decay-iters", "lr-wsd-decay-samples", "lr-wsd-decay-style"})
      if (f.has(flag)) o.flags_without_effect.push_back(std::string("--") + flag + " (without --lr-decay-style WSD)");
  f.get("lr-warmup-fraction", o.lr_warmup_fraction);
  if (f.has("lr-warmup-fraction") && !(o.lr_warmup_fraction >= 0 && o.lr_warmup_fraction <= 1))
    throw ConfigError("--lr-warmup-fraction must be in [0, 1]");
  // Megatron asserts the other form's warm-up == 0: an explicit 0 is no conflict.
  const auto given_nonzero = [&](const char* flag) {
    double v = 0;
    f.get(flag, v);
    return f.has(flag) && v != 0;
  };
  if (f.has("train-samples")) {
    if (f.has("train-iters")) throw ConfigError("--train-samples and --train-iters are mutually exclusive");
    if (given_nonzero("lr-warmup-iters"))
      throw ConfigError("--lr-warmup-iters is iteration-based; with --train-samples use --lr-warmup-samples");
    if (f.has("lr-decay-iters"))
      throw ConfigError("--lr-decay-iters is iteration-based; with --train-samples use --lr-decay-samples");
    if (f.has("lr-wsd-decay-iters"))
      throw ConfigError("--lr-wsd-decay-iters is iteration-based; with --train-samples use --lr-wsd-decay-samples");
    o.sample_based = true;
    f.get("train-samples", o.train_samples);
    f.get("lr-warmup-samples", o.lr_warmup_samples);
    f.get("lr-decay-samples", o.lr_decay_samples);
    f.get("lr-wsd-decay-samples", o.lr_wsd_decay_samples);
  } else {
    const char* sample_based = given_nonzero("lr-warmup-samples") ? "lr-warmup-samples"
                               : f.has("lr-decay-samples")         ? "lr-decay-samples"
                               : f.has("lr-wsd-decay-samples")     ? "lr-wsd-decay-samples"
                                                                   : nullptr;
    if (sample_based)
      throw ConfigError(std::string("--") + sample_based + " needs sample-based training (--train-samples)");
  }
  const char* warmup = given_nonzero("lr-warmup-iters")     ? "lr-warmup-iters"
                       : given_nonzero("lr-warmup-samples") ? "lr-warmup-samples"
                                                            : nullptr;
  if (f.has("lr-warmup-fraction") && warmup)
    throw ConfigError(std::string("--lr-warmup-fraction and --") + warmup + " are mutually exclusive");
  read_token_flags(f, o, warmup);
}

void read_optimizer_flags(const Flags& f, TrainOptions& o) {
  f.get("weight-decay", o.weight_decay);
  f.get("start-weight-decay", o.start_weight_decay);
  f.get("end-weight-decay", o.end_weight_decay);
  f.get("weight-decay-incr-style", o.weight_decay_incr_style);
  for (const auto& [flag, value] : {std::pair{"start-weight-decay", o.start_weight_decay},
                                    std::pair{"end-weight-decay", o.end_weight_decay}})
    if (f.has(flag) && value < 0) throw ConfigError(std::string("--") + flag + " must not be negative");
  f.get("lr-warmup-init", o.lr_warmup_init);
  f.get("clip-grad", o.clip_grad);
  f.get("adam-beta1", o.adam_beta1);
  f.get("adam-beta2", o.adam_beta2);
  f.get("adam-eps", o.adam_eps);
}

void read_precision_flags(const Flags& f, TrainOptions& o) {
  if (f.has("fp16") && f.has("bf16")) throw ConfigError("--fp16 and --bf16 are mutually exclusive");
  o.model.dtype = f.has("fp16") ? DType::F16 : f.has("bf16") ? DType::BF16 : DType::F32;
  f.get("accumulate-allreduce-grads-in-fp32", o.accumulate_allreduce_grads_in_fp32);
  apply_bf16_gradient_rule(f, o);
  f.get("loss-scale", o.loss_scale);
  f.get("initial-loss-scale", o.initial_loss_scale);
  f.get("min-loss-scale", o.min_loss_scale);
  f.get("loss-scale-window", o.loss_scale_window);
  f.get("hysteresis", o.hysteresis);
  if (f.has("loss-scale") && o.model.dtype == DType::F32 && !f.has("deepspeed"))  // there: the file's precision
    throw ConfigError("--loss-scale needs --fp16 or --bf16");
  // The GEMMs' precision (backend_options).
  f.get("no-tf32", o.no_tf32);
  f.get("disable-bf16-reduced-precision-matmul", o.disable_bf16_reduced_precision_matmul);
}

// fixed_setting_defs: one line for a setting trident does not have; GPT-2's named ones join
// the flags without effect.
void check_fixed_settings(const Flags& f, TrainOptions& o) {
  for (const FixedSetting& s : fixed_setting_defs()) {
    if (!f.has(s.name)) continue;
    const std::string flag = std::string("--") + s.name;
    if (s.value == nullptr) throw ConfigError(flag + ": not supported: " + s.why);
    const std::string given = f.str(s.name);
    const std::optional<double> number = parse_decimal(given), wanted = parse_decimal(s.value);
    if (number && wanted ? *number == *wanted : given == s.value || (s.also && given == s.also)) {
      o.flags_without_effect.push_back(flag);
      continue;
    }
    throw ConfigError(flag + " " + given + ": not supported: " + s.why + " (" + flag + " " + s.value + ")");
  }
}

}  // namespace

// --openai-gelu in Megatron's legacy model, which keeps the tanh GELU without the fusion.
bool legacy_tanh_gelu(const Flags& f) {
  const bool legacy = f.has("use-legacy-models") || (f.has("deepspeed") && !f.has("use-mcore-models"));
  return f.has("openai-gelu") && legacy;
}

// Megatron-LM's validate_args: bf16 accumulates and all-reduces the gradients in fp32, flag or
// not (bf16 keeps 8 mantissa bits: summed over micro-batches and ranks in bf16, the small
// contributions would be lost), unless Megatron-core's --grad-reduce-in-bf16 asks for bf16
// gradients, whatever --accumulate-allreduce-grads-in-fp32 says.
void apply_bf16_gradient_rule(const Flags& f, TrainOptions& o) {
  if (o.model.dtype == DType::BF16) o.accumulate_allreduce_grads_in_fp32 = !f.has("grad-reduce-in-bf16");
}

void read_train_flags(const Flags& f, TrainOptions& o) {
  for (const FlagDef& d : flag_defs())
    if (f.has(d.name)) o.given_flags.insert(d.name);
  read_model_flags(f, o.model);
  // Megatron's model flags that GPT-2 fixes: checked against the shape once it is complete.
  f.get("ffn-hidden-size", o.ffn_hidden_size);
  f.get("kv-channels", o.kv_channels);
  check_fixed_settings(f, o);
  read_schedule_flags(f, o);
  read_optimizer_flags(f, o);
  read_precision_flags(f, o);
  apply_deepspeed_config(f, o);
  read_run_flags(f, o);
}

}  // namespace trident::options_internal
