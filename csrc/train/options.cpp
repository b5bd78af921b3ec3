#include "train/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "core/decimal.h"
#include "core/error.h"
#include "core/flag_value.h"
#include "core/stop_signals.h"
#include "parallel/pipeline_layout.h"
#include "train/data_args_file.h"
#include "train/option_args.h"
#include "train/option_table.h"
#include "train/tensorboard_tags.h"
#include "train/timers.h"

namespace trident {
using namespace train_flags;  // the flag table and the argument gathering of option_*.h
namespace {

// Python's int() and float(), which Megatron's argparse uses, take underscores between
// digits (--train-samples 300_000_000 in the BigScience scripts); anything else stays.
std::string without_digit_underscores(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool between_digits = text[i] == '_' && i > 0 && i + 1 < text.size() &&
                                std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (!between_digits) out += text[i];
  }
  return out;
}

template <typename T>
T convert(const std::string& flag, const std::string& raw) {
  const std::string text = without_digit_underscores(strip_surrounding_space(raw));
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, int>) v = std::stoi(text, &used);
    else if constexpr (std::is_same_v<T, int64_t>) v = std::stoll(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) {
      if (text.find('-') != std::string::npos) throw std::invalid_argument("negative");
      v = std::stoull(text, &used);
    } else {  // Python's float(): decimal only (core/decimal.h)
      const std::optional<double> d = parse_decimal(text);
      if (!d) throw std::invalid_argument("not a decimal number");
      v = static_cast<T>(*d);
      used = text.size();
    }
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) throw std::invalid_argument("not finite");
    return v;
  } catch (const std::out_of_range&) {  // an integer that parses, past the type's range
    throw ConfigError("--" + flag + ": '" + raw + "' is out of range (" + std::to_string(std::numeric_limits<T>::min()) +
                      " to " + std::to_string(std::numeric_limits<T>::max()) + ")");
  } catch (const std::exception&) {
    if constexpr (std::is_same_v<T, uint64_t>)
      throw ConfigError("--" + flag + ": cannot parse '" + raw + "' as a non-negative integer");
    throw ConfigError("--" + flag + ": cannot parse '" + raw + "' as a number");
  }
}


// Typed access to the parsed flags; every conversion error names the flag.
class Flags {
 public:
  explicit Flags(cxxopts::ParseResult r) : r_(std::move(r)) {}
  bool has(const char* f) const { return r_.count(f) > 0; }
  std::string str(const char* f) const { return r_[f].as<std::string>(); }
  template <typename T>
  void get(const char* f, T& dst) const {
    if (!has(f)) return;
    if constexpr (std::is_same_v<T, std::string>) dst = str(f);
    else if constexpr (std::is_same_v<T, bool>) dst = true;
    else dst = convert<T>(f, str(f));
  }

 private:
  cxxopts::ParseResult r_;
};

constexpr float kMegatronDefaultDropout = 0.1f;

// --phase-transition-iterations "T1,T2,...": iterations from 1, sorted as Megatron sorts them.
void read_phase_transitions(TrainOptions& o, const std::string& text) {
  o.phase_transition_iterations.clear();
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string word = text.substr(begin, end - begin);
    const int64_t it = convert<int64_t>("phase-transition-iterations", word);
    if (it < 1)
      throw ConfigError("--phase-transition-iterations: " + strip_surrounding_space(word) +
                        " is not a positive iteration (a transition is the iteration a phase ends at)");
    o.phase_transition_iterations.push_back(it);
    begin = end + 1;
  }
  std::vector<int64_t>& t = o.phase_transition_iterations;
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());  // a repeated transition ends no phase of its own
}

// Megatron-DeepSpeed's --load-tag: DeepSpeed's checkpoint tag, global_stepN; trident's
// iteration folders, whatever --load's pointer says, are iter_NNNNNNN (a plain N too).
int64_t load_tag_iteration(const std::string& tag) {
  std::string digits = tag;
  for (const char* prefix : {"global_step", "iter_"})
    if (tag.rfind(prefix, 0) == 0) digits = tag.substr(std::string(prefix).size());
  const std::optional<int64_t> iteration = parse_digits(digits);
  if (!iteration)
    throw ConfigError("--load-tag " + tag + ": expected a checkpoint's iteration, as global_step1000 (DeepSpeed's "
                      "tag), iter_0001000 or 1000");
  return *iteration;
}

// BigScience's --eval-only VALUE (argparse type=bool): no training, only the validation and
// test evaluations, as --skip-train. Python's bool() of any non-empty string is True, so
// BigScience would not train on "--eval-only False" either: such a value is refused rather
// than read either way.
bool eval_only(const Flags& f) {
  std::string value;
  f.get("eval-only", value);
  std::string lower = value;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "1" || lower == "yes") return true;
  if (value.empty())  // Python's bool("") is False: BigScience trains
    throw ConfigError("--eval-only: expected True (an empty value, which BigScience reads as false: leave the flag "
                      "out to train)");
  throw ConfigError("--eval-only " + value + ": Megatron-DeepSpeed reads any value as true (Python's bool() of a "
                    "string) and would not train; give True, or leave the flag out to train");
}

// --openai-gelu in Megatron's legacy model, which keeps the tanh GELU without the fusion.
bool legacy_tanh_gelu(const Flags& f) {
  const bool legacy = f.has("use-legacy-models") || (f.has("deepspeed") && !f.has("use-mcore-models"));
  return f.has("openai-gelu") && legacy;
}

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

// Megatron-LM's validate_args: bf16 accumulates and all-reduces the gradients in fp32, flag or
// not (bf16 keeps 8 mantissa bits: summed over micro-batches and ranks in bf16, the small
// contributions would be lost), unless Megatron-core's --grad-reduce-in-bf16 asks for bf16
// gradients, whatever --accumulate-allreduce-grads-in-fp32 says.
void apply_bf16_gradient_rule(const Flags& f, TrainOptions& o) {
  if (o.model.dtype == DType::BF16) o.accumulate_allreduce_grads_in_fp32 = !f.has("grad-reduce-in-bf16");
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
}

// --data-args-path and --per-split-data-args-path (Megatron-core's): their words become
// --data-path's, or the per-split paths', and errors name the file.
void read_data_args_files(const Flags& f, TrainOptions& o) {
  if (f.has("data-args-path")) {
    if (!o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty())
      throw ConfigError("--data-args-path stands for --data-path's words: give one of them (and not the per-split "
                        "paths with it)");
    const std::string path = f.str("data-args-path");
    o.data_path = read_data_args_file(path);
    o.data_path_flag = "--data-args-path " + path;
  }
  if (f.has("per-split-data-args-path")) {
    if (f.has("data-args-path") || !o.data_path.empty() || !o.train_data_path.empty() || !o.valid_data_path.empty() ||
        !o.test_data_path.empty())
      throw ConfigError("--per-split-data-args-path stands for --train-data-path, --valid-data-path and "
                        "--test-data-path: give it alone");
    const std::string path = f.str("per-split-data-args-path");
    const auto words = read_per_split_data_args_file(path);
    if (words[0].empty() && words[1].empty() && words[2].empty())  // (not synthetic tokens: data was asked for)
      throw ConfigError("--per-split-data-args-path " + path + ": no dataset in \"train\", \"valid\" or \"test\"");
    std::vector<std::string>* splits[3] = {&o.train_data_path, &o.valid_data_path, &o.test_data_path};
    const char* names[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; ++s) {
      *splits[s] = words[s];
      o.split_data_path_flags[s] = "--per-split-data-args-path " + path + " (" + names[s] + ")";
    }
  }
}

// BigScience's --train/--valid/--test-weighted-split-paths, or their -path files: the groups
// of each split (train/weighted_split_paths.h). Its data loading mode 2, instead of mode 1
// (--data-path and --split: BigScience asserts both are None) and of the per-split paths.
void read_weighted_split_paths(const Flags& f, TrainOptions& o) {
  const char* splits[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    const std::string flag = std::string("--") + splits[s] + "-weighted-split-paths";
    const std::string file_flag = flag + "-path", file_flag_name = file_flag.substr(2);
    if (f.has(file_flag_name.c_str())) {
      if (!o.weighted_split_paths[s].empty())
        throw ConfigError(flag + " and " + file_flag + " both give the " + splits[s] + " groups: give one");
      const std::string path = f.str(file_flag_name.c_str());
      o.weighted_split_paths[s] = read_weighted_split_paths_file(path, file_flag);
      o.weighted_split_paths_flags[s] = file_flag + " " + path;
    }
    if (!o.weighted_split_paths[s].empty())
      o.weighted_split_groups[s] =
          parse_weighted_split_paths(o.weighted_split_paths[s], o.weighted_split_paths_flags[s], /*one_group=*/s == 0);
  }
  if (!o.has_weighted_split_paths()) return;
  const std::string given = o.weighted_split_paths_flags[!o.weighted_split_groups[0].empty()   ? 0
                                                         : !o.weighted_split_groups[1].empty() ? 1
                                                                                               : 2];
  const std::string mode1 = !o.data_path.empty() ? o.data_path_flag
                            : f.has("split")     ? std::string("--split")
                                                 : std::string();
  if (!mode1.empty())
    throw ConfigError(given + " and " + mode1 + " are alternatives (BigScience's data loading modes 2 and 1): give one");
  for (int s = 0; s < 3; ++s)
    if (!(s == 0 ? o.train_data_path : s == 1 ? o.valid_data_path : o.test_data_path).empty())
      throw ConfigError(given + " and " + o.split_data_path_flags[s] + " are alternatives: give one");
}

// Megatron-DeepSpeed's --deepspeed --deepspeed_config FILE: DeepSpeed's engine takes the
// precision, the fp16 loss scaler, the clipping and the ZeRO stage from the file, over
// Megatron's flags for them. Here a flag that is given must agree with the file (one line
// naming both otherwise); the file fills the rest. The batch stays Megatron's
// (resolve_global_batch_size runs DeepSpeed's check of the file's batch keys). Call after the
// batch and precision flags are read, before read_run_flags.
void apply_deepspeed_config(const Flags& f, TrainOptions& o) {
  if (!f.has("deepspeed")) {
    // Megatron-DeepSpeed reads the file only with --deepspeed.
    if (f.has("deepspeed_config")) o.flags_without_effect.push_back("--deepspeed_config (without --deepspeed)");
    return;
  }
  if (!f.has("deepspeed_config")) throw ConfigError("--deepspeed needs --deepspeed_config FILE (DeepSpeed's JSON config)");
  o.deepspeed_config = f.str("deepspeed_config");
  const DeepSpeedConfig c = read_deepspeed_config(o.deepspeed_config);
  const std::string file = "--deepspeed_config " + o.deepspeed_config;
  // A flag given with another value than the file's key.
  const auto agree = [&](const char* flag, const std::string& key, auto given, auto in_file) {
    if (f.has(flag) && given != in_file)
      throw ConfigError("--" + std::string(flag) + " " + detail::concat(given) + " differs from " + file + "'s \"" +
                        key + "\": " + detail::concat(in_file));
  };
  o.deepspeed_batch = c.batch;
  if (c.batch.train_micro_batch_size_per_gpu && !f.has("micro-batch-size"))
    o.micro_batch_size = static_cast<int>(*c.batch.train_micro_batch_size_per_gpu);
  // The engine casts the model to its precision: a precision flag must name the same one.
  const DType dtype = c.fp16 ? DType::F16 : c.bf16 ? DType::BF16 : DType::F32;
  for (const auto& [flag, flag_dtype] : {std::pair{"fp16", DType::F16}, std::pair{"bf16", DType::BF16}})
    if (f.has(flag) && dtype != flag_dtype)
      throw ConfigError("--" + std::string(flag) + " needs " + file + "'s \"" + flag + "\": {\"enabled\": true}" +
                        (dtype == DType::F32 ? "" : std::string(" (it enables ") + (c.fp16 ? "fp16" : "bf16") + ")"));
  if (f.has("loss-scale") && dtype != DType::F16)
    throw ConfigError("--loss-scale needs " + file + "'s \"fp16\": {\"enabled\": true} (DeepSpeed scales only fp16 "
                      "losses)");
  o.model.dtype = dtype;
  apply_bf16_gradient_rule(f, o);
  const int64_t stage = c.zero_stage.value_or(0);  // DeepSpeed's, whatever --zero-stage says
  if (dtype == DType::F16) {
    agree("loss-scale", "fp16.loss_scale", o.loss_scale, c.loss_scale);
    o.loss_scale = c.loss_scale;
    if (c.loss_scale == 0) {  // dynamic: at stages 1 and 2 DeepSpeed's scaler follows Megatron's rules
      const double initial = std::ldexp(1.0, static_cast<int>(c.initial_scale_power));
      agree("initial-loss-scale", "fp16.initial_scale_power", o.initial_loss_scale, initial);
      agree("loss-scale-window", "fp16.loss_scale_window", o.loss_scale_window, c.loss_scale_window);
      agree("min-loss-scale", "fp16.min_loss_scale", o.min_loss_scale, c.min_loss_scale);
      o.initial_loss_scale = initial;
      o.loss_scale_window = c.loss_scale_window;
      o.min_loss_scale = c.min_loss_scale;
      // At stage 0 the engine's FP16_Optimizer scales by its own rules, with no hysteresis.
      o.deepspeed_fp16_optimizer = stage == 0;
      if (stage == 0 && f.has("hysteresis"))
        o.flags_without_effect.push_back("--hysteresis (DeepSpeed's FP16_Optimizer, at ZeRO stage 0, has none)");
      if (stage != 0) {
        agree("hysteresis", "fp16.hysteresis", o.hysteresis, c.hysteresis);
        o.hysteresis = c.hysteresis;
      }
    }
  }
  // DeepSpeed clips by the file's value, 0 (none) when it has none, whatever --clip-grad says.
  const float clip = static_cast<float>(c.gradient_clipping.value_or(0.0));  // compared as trident keeps it
  if (c.gradient_clipping)
    agree("clip-grad", "gradient_clipping", o.clip_grad, clip);
  else if (f.has("clip-grad"))
    o.flags_without_effect.push_back("--clip-grad (" + file + " has no \"gradient_clipping\": DeepSpeed's default 0, "
                                     "no clipping)");
  o.clip_grad = clip;
  if (f.has("use-distributed-optimizer"))
    throw ConfigError("--use-distributed-optimizer is Megatron's optimizer sharding; with --deepspeed, " + file +
                      "'s \"zero_optimization\" shards");
  int given_stage = o.zero_stage;  // read_run_flags reads it next
  f.get("zero-stage", given_stage);
  if (c.zero_stage)
    agree("zero-stage", "zero_optimization.stage", int64_t{given_stage}, stage);
  else if (f.has("zero-stage") && given_stage != 0)  // Megatron-DeepSpeed only records the flag
    o.flags_without_effect.push_back("--zero-stage (" + file + " has no \"zero_optimization\": DeepSpeed's stage 0)");
  o.zero_stage = static_cast<int>(stage);
  if (!c.without_effect.empty()) {
    std::string keys;
    for (const std::string& k : c.without_effect) keys += (keys.empty() ? "" : ", ") + k;
    o.flags_without_effect.push_back(file + "'s " + keys);
  }
}

void read_run_flags(const Flags& f, TrainOptions& o) {
  f.get("seed", o.seed);
  f.get("log-interval", o.log_interval);
  f.get("log-memory-interval", o.log_memory_interval);
  f.get("log-device-memory-used", o.log_device_memory_used);
  f.get("device", o.device);
  f.get("tensor-model-parallel-size", o.tensor_model_parallel_size);
  f.get("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  f.get("num-layers-per-virtual-pipeline-stage", o.num_layers_per_virtual_pipeline_stage);
  f.get("num-virtual-stages-per-pipeline-rank", o.num_virtual_stages_per_pipeline_rank);
  f.get("microbatch-group-size-per-virtual-pipeline-stage", o.microbatch_group_size);
  if (f.has("microbatch-group-size-per-virtual-pipeline-stage")) {
    if (o.microbatch_group_size < 1)
      throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage must be positive");
    o.flags_without_effect.push_back("--microbatch-group-size-per-virtual-pipeline-stage");  // refused unless pp's
  }
  for (const auto& [flag, count] : {std::pair{"decoder-first-pipeline-num-layers", &o.uneven_pipeline.first_stage_layers},
                                    std::pair{"decoder-last-pipeline-num-layers", &o.uneven_pipeline.last_stage_layers}}) {
    f.get(flag, *count);
    if (f.has(flag) && *count < 1) throw ConfigError(std::string("--") + flag + " must be positive");
  }
  f.get("account-for-embedding-in-pipeline-split", o.uneven_pipeline.embedding_as_layer);
  f.get("account-for-loss-in-pipeline-split", o.uneven_pipeline.loss_as_layer);
  f.get("pipeline-model-parallel-layout", o.uneven_pipeline.layout);
  if (f.has("pipeline-model-parallel-layout") && o.uneven_pipeline.layout.empty())
    throw ConfigError("--pipeline-model-parallel-layout is empty");
  f.get("sequence-parallel", o.sequence_parallel);
  if (o.deepspeed_config.empty()) f.get("zero-stage", o.zero_stage);  // else the --deepspeed_config file's
  // Megatron's distributed optimizer shards the optimizer state and the fp32 master weights
  // over data parallel and reduce-scatters the gradients: ZeRO stage 1.
  if (f.has("use-distributed-optimizer")) {
    if (!f.has("zero-stage")) o.zero_stage = 1;
    else if (o.zero_stage == 0)
      throw ConfigError("--use-distributed-optimizer shards the optimizer state: --zero-stage 0 contradicts it");
  }
  if (f.has("overlap-grad-reduce") && f.has("no-overlap-grad-reduce"))
    throw ConfigError("--overlap-grad-reduce and --no-overlap-grad-reduce contradict each other");
  if (f.has("no-overlap-grad-reduce")) o.overlap_grad_reduce = false;
  f.get("overlap-param-gather", o.overlap_param_gather);
  if (o.overlap_param_gather && o.zero_stage == 0)
    throw ConfigError("--overlap-param-gather overlaps the gather of the parameters that ZeRO updates in shards: it "
                      "needs " + std::string(o.deepspeed_config.empty()
                                                 ? "--use-distributed-optimizer or --zero-stage 1|2"
                                                 : "the --deepspeed_config file's \"zero_optimization\" stage 1 or 2"));
  // As Megatron: a step whose gathers overlap the next forward but whose reductions are
  // waited for one by one is not a combination anyone measures; it is refused.
  if (o.overlap_param_gather && !o.overlap_grad_reduce)
    throw ConfigError("--overlap-param-gather needs the gradient reductions overlapped too: drop "
                      "--no-overlap-grad-reduce");
  f.get("comm", o.comm);
  f.get("no-tf32", o.no_tf32);
  f.get("disable-bf16-reduced-precision-matmul", o.disable_bf16_reduced_precision_matmul);
  f.get("recompute-granularity", o.recompute_granularity);
  f.get("recompute-method", o.recompute_method);
  f.get("recompute-num-layers", o.recompute_num_layers);
  bool checkpoint_activations = false;
  f.get("checkpoint-activations", checkpoint_activations);
  if (checkpoint_activations) {
    if (!o.recompute_granularity.empty() && o.recompute_granularity != "full")
      throw ConfigError("--checkpoint-activations means --recompute-granularity full, not '" +
                        o.recompute_granularity + "'");
    o.recompute_granularity = "full";
    if (o.recompute_method.empty()) o.recompute_method = "uniform";
  }
  if (f.has("checkpoint-num-layers")) {
    f.get("checkpoint-num-layers", o.recompute_num_layers);
    if (o.recompute_num_layers <= 0) throw ConfigError("--checkpoint-num-layers must be positive");
  }
  bool selective = false;
  f.get("recompute-activations", selective);
  if (selective) {
    if (!o.recompute_granularity.empty() && o.recompute_granularity != "selective")
      throw ConfigError("--recompute-activations means --recompute-granularity selective, not '" +
                        o.recompute_granularity + "'");
    o.recompute_granularity = "selective";
  }
  f.get("eval-interval", o.eval_interval);
  f.get("eval-iters", o.eval_iters);
  for (const auto& [flag, field] : {std::pair{"eval-micro-batch-size", &o.eval_micro_batch_size},
                                    std::pair{"eval-global-batch-size", &o.eval_global_batch_size}})
    if (f.has(flag)) {
      int64_t v = 0;
      f.get(flag, v);
      *field = v;
    }
  if (f.has("start-eval-at-iter")) {
    int64_t start = 0;
    f.get("start-eval-at-iter", start);
    if (start < 0) throw ConfigError("--start-eval-at-iter must not be negative");
    o.start_eval_at_iter = start;
  }
  f.get("tensorboard-dir", o.tensorboard_dir);
  f.get("tensorboard-log-interval", o.tensorboard_log_interval);
  f.get("tensorboard-queue-size", o.tensorboard_queue_size);
  // Megatron-DeepSpeed's scripts pass --deepspeed: their dashboards read its tags.
  if (f.has("deepspeed")) o.tensorboard_tags = "megatron-deepspeed";
  f.get("tensorboard-tags", o.tensorboard_tags);
  parse_tensorboard_tags(o.tensorboard_tags, "--tensorboard-tags");
  f.get("log-batch-size-to-tensorboard", o.log_batch_size_to_tensorboard);
  f.get("log-world-size-to-tensorboard", o.log_world_size_to_tensorboard);
  o.log_learning_rate_to_tensorboard = !f.has("no-log-learnig-rate-to-tensorboard");
  o.log_loss_scale_to_tensorboard = !f.has("no-log-loss-scale-to-tensorboard");
  f.get("log-memory-to-tensorboard", o.log_memory_to_tensorboard);
  f.get("log-optimizer-states-to-tensorboard", o.log_optimizer_states_to_tensorboard);
  f.get("log-energy", o.log_energy);
  f.get("log-throughput", o.log_throughput);
  f.get("log-params-norm", o.log_params_norm);
  f.get("log-num-zeros-in-grad", o.log_num_zeros_in_grad);
  f.get("timing-log-level", o.timing_log_level);
  f.get("timing-log-option", o.timing_log_option);
  f.get("log-timers-to-tensorboard", o.log_timers_to_tensorboard);
  f.get("log-validation-ppl-to-tensorboard", o.log_validation_ppl_to_tensorboard);
  f.get("profile", o.profile);
  f.get("profile-step-start", o.profile_step_start);
  f.get("profile-step-end", o.profile_step_end);
  for (const FlagDef& d : flags_without_effect_defs())
    if (f.has(d.name)) o.flags_without_effect.push_back(std::string("--") + d.name);
  if (f.has("no-bias-gelu-fusion") && legacy_tanh_gelu(f))  // --use-legacy-models chose the GELU
    std::erase(o.flags_without_effect, std::string("--use-legacy-models"));
  // (word lists, which the command-line parser does not see)
  for (const auto& [flag, words] : o.words_without_effect) o.flags_without_effect.push_back("--" + flag);
  f.get("peak-tflops", o.peak_tflops);
  f.get("max-nan-iterations", o.max_nan_iterations);
  if (f.has("ckpt-format")) {  // noted (flags_without_effect_defs), but one of Megatron's
    std::string format;
    f.get("ckpt-format", format);
    if (format != "torch" && format != "torch_dist" && format != "zarr" && format != "torch_dcp" &&
        format != "fsdp_dtensor")
      throw ConfigError("--ckpt-format " + format + ": not one of Megatron's formats (torch, torch_dist, zarr, "
                        "torch_dcp, fsdp_dtensor)");
  }
  f.get("check-weight-hash-across-dp-replicas-interval", o.check_weight_hash_interval);
  if (f.has("check-weight-hash-across-dp-replicas-interval") && o.check_weight_hash_interval < 1)
    throw ConfigError("--check-weight-hash-across-dp-replicas-interval must be positive");
  f.get("exit-interval", o.exit_interval);
  if (f.has("phase-transition-iterations")) {
    std::string text;
    f.get("phase-transition-iterations", text);
    read_phase_transitions(o, text);
  }
  o.skip_train = f.has("skip-train");
  o.log_progress = f.has("log-progress");
  f.get("kill-switch-path", o.kill_switch_path);
  if (f.has("exit-signal")) {
    std::string name;
    f.get("exit-signal", name);
    o.exit_signal = catchable_signal_named(name);
    if (o.exit_signal == 0)
      throw ConfigError("--exit-signal " + name + ": expected one of " + catchable_signal_names());
  }
  f.get("exit-duration-in-mins", o.exit_duration_in_mins);
  f.get("distributed-timeout-minutes", o.distributed_timeout_minutes);
  f.get("save-canonical", o.save_canonical);
  f.get("save", o.save);
  f.get("load", o.load);
  f.get("save-interval", o.save_interval);
  f.get("keep-last", o.keep_last);
  f.get("save-retain-interval", o.save_retain_interval);
  f.get("non-persistent-save-interval", o.non_persistent_save_interval);
  f.get("non-persistent-ckpt-type", o.non_persistent_ckpt_type);
  f.get("non-persistent-global-ckpt-dir", o.non_persistent_global_ckpt_dir);
  f.get("non-persistent-local-ckpt-dir", o.non_persistent_local_ckpt_dir);
  f.get("non-persistent-local-ckpt-algo", o.non_persistent_local_ckpt_algo);
  o.replication = f.has("replication");
  f.get("replication-jump", o.replication_jump);
  f.get("replication-factor", o.replication_factor);
  f.get("no-load-optim", o.no_load_optim);
  f.get("no-load-rng", o.no_load_rng);
  f.get("finetune", o.finetune);
  f.get("no-load-lr-state", o.no_load_lr_state);
  f.get("full-validation", o.full_validation);
  f.get("multiple-validation-sets", o.multiple_validation_sets);
  f.get("pretrained-checkpoint", o.pretrained_checkpoint);
  if (f.has("pretrained-checkpoint") && o.pretrained_checkpoint.empty())
    throw ConfigError("--pretrained-checkpoint: expected a directory");
  f.get("no-save-optim", o.no_save_optim);
  f.get("no-save-rng", o.no_save_rng);
  f.get("ckpt-step", o.ckpt_step);
  if (f.has("ckpt-step") && o.ckpt_step < 0) throw ConfigError("--ckpt-step must not be negative");
  if (f.has("load-tag")) {
    std::string tag;
    f.get("load-tag", tag);
    const int64_t step = load_tag_iteration(tag);
    if (f.has("ckpt-step") && o.ckpt_step != step)
      throw ConfigError("--load-tag " + tag + " and --ckpt-step " + std::to_string(o.ckpt_step) +
                        " name different checkpoints: give one");
    o.ckpt_step = step;
    if (!f.has("ckpt-step")) o.ckpt_step_flag = "--load-tag " + tag;
  }
  if (f.has("eval-only")) o.skip_train = eval_only(f);
  f.get("exit-on-missing-checkpoint", o.exit_on_missing_checkpoint);
  f.get("use-checkpoint-args", o.use_checkpoint_args);
  f.get("use-mp-args-from-checkpoint-args", o.use_mp_args_from_checkpoint_args);
  if (o.use_mp_args_from_checkpoint_args && !o.use_checkpoint_args)  // Megatron reads it only there
    o.flags_without_effect.push_back("--use-mp-args-from-checkpoint-args (without --use-checkpoint-args)");
  // Megatron's masters after --no-load-optim come from the live model unless this flag asks for
  // the checkpoint's weights; trident's come from the weights just loaded, which are those.
  if (f.has("load-main-params-from-ckpt")) {
    if (!o.no_load_optim)  // Megatron's assertion
      throw ConfigError("--load-main-params-from-ckpt must be used with --no-load-optim");
    o.flags_without_effect.push_back("--load-main-params-from-ckpt");
  }
  for (const char* name : {"ckpt-step", "load-tag", "exit-on-missing-checkpoint", "use-checkpoint-args"})
    if (f.has(name) && o.load.empty()) throw ConfigError(std::string("--") + name + " needs --load");
  // Megatron's rule for a loaded checkpoint's scheduler: the two choices exclude each other
  // (OptimizerParamScheduler asserts "both override and use-checkpoint are set"), with or
  // without --load.
  for (const char* name : {"override-opt_param-scheduler", "override-lr-scheduler"})
    if (f.has(name)) o.override_opt_param_scheduler = true;
  for (const char* name : {"use-checkpoint-opt_param-scheduler", "use-checkpoint-lr-scheduler"})
    if (f.has(name)) o.use_checkpoint_opt_param_scheduler = true;
  if (o.override_opt_param_scheduler && o.use_checkpoint_opt_param_scheduler)
    throw ConfigError(std::string("--") +
                      (f.has("override-opt_param-scheduler") ? "override-opt_param-scheduler" : "override-lr-scheduler") +
                      " and --" +
                      (f.has("use-checkpoint-opt_param-scheduler") ? "use-checkpoint-opt_param-scheduler"
                                                                   : "use-checkpoint-lr-scheduler") +
                      " are mutually exclusive");
  f.get("vocab-file", o.vocab_file);
  f.get("merge-file", o.merge_file);
  f.get("tokenizer-type", o.tokenizer_type);
  if (o.tokenizer_type == "NullTokenizer" && f.has("vocab-size")) {
    // Megatron builds the tokenizer with or without data: its vocabulary, V + 1, is the model's
    // on synthetic tokens too (make_run_tokenizer sets the same with data).
    o.null_tokenizer_vocab_size = o.model.vocab_size;
    o.model.vocab_size = o.null_tokenizer_vocab_size + 1;
    o.eod_token = static_cast<int32_t>(o.null_tokenizer_vocab_size);
  }
  f.get("split", o.split);
  if (f.has("mid-level-dataset-surplus")) {
    double surplus = 0;
    f.get("mid-level-dataset-surplus", surplus);
    o.mid_level_dataset_surplus = surplus;
  }
  f.get("data-cache-path", o.data_cache_path);
  f.get("mock-data", o.mock_data);
  f.get("eod-mask-loss", o.eod_mask_loss);
  f.get("reset-position-ids", o.reset_position_ids);
  f.get("reset-attention-mask", o.reset_attention_mask);
  f.get("calculate-per-token-loss", o.calculate_per_token_loss);
  read_data_args_files(f, o);
  read_weighted_split_paths(f, o);
  f.get("async-save", o.async_save);
  if (f.has("save") && o.save.empty()) throw ConfigError("--save: expected a directory");
  if (f.has("load") && o.load.empty()) throw ConfigError("--load: expected a directory");
  if (f.has("tensorboard-dir") && o.tensorboard_dir.empty()) throw ConfigError("--tensorboard-dir: expected a directory");
}

void check_positive(int64_t v, const char* flag) {
  if (v <= 0) throw ConfigError(std::string("--") + flag + " must be positive");
}
void check_non_negative(double v, const char* flag) {
  if (v < 0) throw ConfigError(std::string("--") + flag + " must not be negative");
}

// A word-list flag's words as one text, a space apart.
std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

// --recompute-modules' words (Megatron's list, core_attn by default): core_attn is what the
// fused attention recomputes always, so a list of it alone changes nothing; any other module
// (mlp, layernorm, ...) is refused.
void read_recompute_modules(TrainOptions& o) {
  if (o.recompute_modules.empty()) return;
  const bool other = std::any_of(o.recompute_modules.begin(), o.recompute_modules.end(),
                                 [](const std::string& w) { return w != "core_attn"; });
  if (other)
    throw ConfigError("--recompute-modules " + join_words(o.recompute_modules) + ": not supported: trident recomputes the attention's core "
                      "(the fused attention) always, and whole layers with --recompute-granularity full "
                      "(--recompute-modules core_attn)");
  o.flags_without_effect.push_back("--recompute-modules");
}

// --rampup-batch-size's words, checked as Megatron's RampupBatchsizeNumMicroBatches checks
// them (every batch of the ramp a multiple of the micro batch; the Trainer checks the
// data-parallel size too).
void read_batch_rampup(TrainOptions& o) {
  const std::vector<std::string>& w = o.rampup_batch_size;
  if (w.empty()) return;
  if (w.size() != 3)
    throw ConfigError("--rampup-batch-size: expected START INCR SAMPLES, got " + std::to_string(w.size()) + " words");
  if (!o.sample_based)
    throw ConfigError("--rampup-batch-size needs sample-based training (--train-samples), as Megatron's");
  o.rampup_start = convert<int64_t>("rampup-batch-size", w[0]);
  o.rampup_increment = convert<int64_t>("rampup-batch-size", w[1]);
  o.rampup_samples = convert<uint64_t>("rampup-batch-size", w[2]);
  const int64_t start = o.rampup_start, incr = o.rampup_increment, g = o.global_batch_size;
  if (start <= 0 || incr <= 0) throw ConfigError("--rampup-batch-size: START and INCR must be positive");
  if (o.rampup_samples == 0) throw ConfigError("--rampup-batch-size: SAMPLES must be positive");
  if (start >= g)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") must be below --global-batch-size (" +
                      std::to_string(g) + (o.global_batch_size_is_default ? ", not given)" : ")"));
  if ((g - start) % incr != 0)
    throw ConfigError("--rampup-batch-size: --global-batch-size (" + std::to_string(g) + ") - START (" +
                      std::to_string(start) + ") must be a multiple of INCR (" + std::to_string(incr) + ")");
  if (start % o.micro_batch_size != 0 || incr % o.micro_batch_size != 0)
    throw ConfigError("--rampup-batch-size: START (" + std::to_string(start) + ") and INCR (" + std::to_string(incr) +
                      ") must be multiples of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
}

// --step-batch-size-schedule's words, checked as Megatron checks them: its last batch is the
// global batch, so --global-batch-size is not given too.
void read_step_batch_schedule(TrainOptions& o) {
  const std::vector<std::string>& w = o.step_batch_size_schedule;
  if (w.empty()) return;
  if (!o.rampup_batch_size.empty())
    throw ConfigError("--step-batch-size-schedule and --rampup-batch-size: give one of them");
  if (o.given_flags.count("global-batch-size"))
    throw ConfigError("--step-batch-size-schedule and --global-batch-size: give one of them (the schedule's last batch "
                      "is the global batch)");
  if (!o.sample_based)
    throw ConfigError("--step-batch-size-schedule needs sample-based training (--train-samples), as Megatron's");
  o.batch_steps = parse_step_batch_schedule(join_words(w), o.model.seq_length);  // again in resolve_schedule
  o.global_batch_size = static_cast<int>(o.batch_steps.back().batch);
  o.global_batch_size_is_default = false;
}

void validate_batch_and_schedule(TrainOptions& o) {
  check_positive(o.micro_batch_size, "micro-batch-size");
  read_step_batch_schedule(o);
  // Not given: the micro batch x the data-parallel size (Megatron's); a given 0 is an error.
  if (o.global_batch_size == 0 && !o.given_flags.count("global-batch-size")) {  // until resolve_global_batch_size
    o.global_batch_size = o.micro_batch_size;
    o.global_batch_size_is_default = true;
  }
  check_positive(o.global_batch_size, "global-batch-size");
  if (o.global_batch_size % o.micro_batch_size != 0)
    throw ConfigError(global_batch_flag(o) + " (" + std::to_string(o.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
  if (!(std::isfinite(o.lr) && o.lr >= 0))
    throw ConfigError("--lr must be a finite number >= 0, got " + detail::concat(o.lr));
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr)) throw ConfigError("--min-lr must be in [0, --lr]");
  if (o.decoupled_lr && !(std::isfinite(*o.decoupled_lr) && *o.decoupled_lr >= 0))
    throw ConfigError("--decoupled-lr must be a finite number >= 0, got " + detail::concat(*o.decoupled_lr));
  // Megatron sets the decoupled group's floor without comparing it with its peak: one above it
  // (--min-lr, its default, over a small --decoupled-lr) makes that group's rate rise.
  if (o.decoupled_min_lr && !(std::isfinite(*o.decoupled_min_lr) && *o.decoupled_min_lr >= 0))
    throw ConfigError("--decoupled-min-lr must be a finite number >= 0, got " + detail::concat(*o.decoupled_min_lr));
  parse_lr_decay_style(o.lr_decay_style);  // throws naming --lr-decay-style
  parse_wsd_decay_style(o.lr_wsd_decay_style);
  read_batch_rampup(o);
  for (const std::string& w : o.iterations_to_skip_words) {
    const int64_t it = convert<int64_t>("iterations-to-skip", w);
    if (it < 1) throw ConfigError("--iterations-to-skip: " + w + " is not an iteration (they count from 1)");
    o.iterations_to_skip.insert(it);
  }
  o.skip_train_iteration_ranges = parse_skip_ranges(o.skip_train_iteration_range_words);
  // Each phase reads its data from its first sample on, where a skip range moves the run's.
  if (!o.skip_train_iteration_ranges.empty() && !o.phase_transition_iterations.empty())
    throw ConfigError("--skip-train-iteration-range and --phase-transition-iterations: a phase reads its data from "
                      "its own first sample, which samples read past would move; use --iterations-to-skip");
  read_recompute_modules(o);
  // A skipped iteration neither trains nor saves: the run would go on past its transition.
  for (int64_t t : o.phase_transition_iterations)
    if (o.iterations_to_skip.count(t))
      throw ConfigError("--iterations-to-skip " + std::to_string(t) + " is a --phase-transition-iterations transition, "
                        "where the run saves and exits after training that iteration: skip another");
  // The phases' boundaries count iterations of one global batch (Megatron refuses a ramp-up).
  if (!o.phase_transition_iterations.empty() && (!o.rampup_batch_size.empty() || !o.batch_steps.empty()))
    throw ConfigError(detail::concat("--phase-transition-iterations and ",
                                     o.batch_steps.empty() ? "--rampup-batch-size" : "--step-batch-size-schedule",
                                     ": the phases count iterations of one global batch, as Megatron's, which refuses "
                                     "a ramp-up"));
  if (!(o.lr_warmup_init >= 0 && o.lr_warmup_init <= o.lr))
    throw ConfigError("--lr-warmup-init must be in [0, --lr], got " + detail::concat(o.lr_warmup_init));
  resolve_schedule(o);
}

// Megatron's rules for the weight-decay schedule (validate_args, OptimizerParamScheduler):
// it only rises, and the constant style has one value.
void validate_weight_decay(const TrainOptions& o) {
  check_non_negative(o.weight_decay, "weight-decay");
  const WeightDecaySchedule wd = make_weight_decay_schedule(o);  // throws naming --weight-decay-incr-style
  if (wd.end_wd < wd.start_wd)
    throw ConfigError("--end-weight-decay (" + detail::concat(wd.end_wd) + ") must not be below " +
                      "--start-weight-decay (" + detail::concat(wd.start_wd) +
                      "): Megatron's schedule only increases the weight decay");
  if (wd.style == WdIncrStyle::Constant && wd.start_wd != wd.end_wd)
    throw ConfigError("--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (" +
                      detail::concat(wd.start_wd) + " and " + detail::concat(wd.end_wd) +
                      "); give --weight-decay-incr-style linear or cosine to change it over the run");
}

// torch.optim.AdamW's checks (Megatron hands these flags to it): betas in [0, 1), eps >= 0.
// Outside them the moments do not decay, or grow, or the update flips its sign: NaN
// parameters after one step, reported later as NaN losses.
void validate_adam(const TrainOptions& o) {
  for (const auto& [flag, beta] : {std::pair{"adam-beta1", o.adam_beta1}, std::pair{"adam-beta2", o.adam_beta2}})
    if (!(beta >= 0 && beta < 1))
      throw ConfigError(std::string("--") + flag + " must be in [0, 1), got " + detail::concat(beta));
  if (!(o.adam_eps >= 0 && std::isfinite(o.adam_eps)))
    throw ConfigError("--adam-eps must be a finite number >= 0, got " + detail::concat(o.adam_eps));
}

void validate_precision(const TrainOptions& o) {
  check_non_negative(o.loss_scale, "loss-scale");
  if (!(o.initial_loss_scale > 0)) throw ConfigError("--initial-loss-scale must be positive");
  if (!(o.min_loss_scale > 0)) throw ConfigError("--min-loss-scale must be positive");
  if (o.min_loss_scale > o.initial_loss_scale)
    throw ConfigError("--min-loss-scale must not exceed --initial-loss-scale");
  check_positive(o.loss_scale_window, "loss-scale-window");
  check_positive(o.hysteresis, "hysteresis");
}

// Megatron's rules: a method only with full granularity, and full needs a method.
void validate_recompute(const TrainOptions& o) {
  const std::string& g = o.recompute_granularity;
  if (!g.empty() && g != "full" && g != "selective")
    throw ConfigError("--recompute-granularity: unknown value '" + g + "' (expected full or selective)");
  if (!o.recompute_method.empty() && o.recompute_method != "uniform" && o.recompute_method != "block")
    throw ConfigError("--recompute-method: unknown value '" + o.recompute_method + "' (expected uniform or block)");
  if (g == "full" && o.recompute_method.empty())
    throw ConfigError("--recompute-granularity full needs --recompute-method uniform or block");
  if (g != "full" && !o.recompute_method.empty())
    throw ConfigError("--recompute-method needs --recompute-granularity full");
  check_positive(o.recompute_num_layers, "recompute-num-layers");
}

// --profile's window and ranks (whether the ranks exist is known once the job runs).
void validate_profile(TrainOptions& o) {
  const bool given = !o.profile_ranks.empty() || o.given_flags.count("profile-step-start") ||
                     o.given_flags.count("profile-step-end");
  if (!o.profile) {
    if (given) throw ConfigError("--profile-step-start, --profile-step-end and --profile-ranks need --profile");
    return;
  }
  check_non_negative(static_cast<double>(o.profile_step_start), "profile-step-start");
  if (o.profile_step_end <= o.profile_step_start)
    throw ConfigError("--profile-step-end (" + std::to_string(o.profile_step_end) +
                      ") must exceed --profile-step-start (" + std::to_string(o.profile_step_start) + ")");
  o.profile_rank_ids.clear();
  for (const std::string& w : o.profile_ranks) {
    const int64_t r = convert<int64_t>("profile-ranks", w);
    if (r < 0) throw ConfigError("--profile-ranks: rank " + w + " must not be negative");
    if (r > std::numeric_limits<int>::max()) throw ConfigError("--profile-ranks: rank " + w + " is too large");
    o.profile_rank_ids.insert(static_cast<int>(r));
  }
  if (o.profile_rank_ids.empty()) o.profile_rank_ids.insert(0);
}

// Megatron's non-persistent checkpoint flags.
void validate_non_persistent(TrainOptions& o) {
  const std::string& type = o.non_persistent_ckpt_type;
  if (type == "in_memory")  // Megatron-LM lists it, then refuses it too
    throw ConfigError("--non-persistent-ckpt-type in_memory: not supported (nor by Megatron-LM); local keeps them "
                      "on each node's storage");
  if (!type.empty() && type != "global" && type != "local")
    throw ConfigError("--non-persistent-ckpt-type " + type + ": expected global or local");
  if (type == "local" && o.non_persistent_local_ckpt_dir.empty())
    throw ConfigError("--non-persistent-ckpt-type local needs --non-persistent-local-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-local-ckpt-dir needs --non-persistent-ckpt-type local");
  if (o.non_persistent_local_ckpt_algo != "fully_parallel" && o.non_persistent_local_ckpt_algo != "atomic")
    throw ConfigError("--non-persistent-local-ckpt-algo " + o.non_persistent_local_ckpt_algo +
                      ": expected fully_parallel or atomic");
  check_non_negative(static_cast<double>(o.non_persistent_save_interval), "non-persistent-save-interval");
  if (o.non_persistent_save_interval > 0 && type.empty())
    throw ConfigError("--non-persistent-save-interval needs --non-persistent-ckpt-type global or local (without "
                      "it --load would not look for them)");
  if (o.non_persistent_save_interval > 0 && o.save.empty())
    throw ConfigError("--non-persistent-save-interval needs --save");
  if (!o.non_persistent_global_ckpt_dir.empty() && type.empty())
    throw ConfigError("--non-persistent-global-ckpt-dir needs --non-persistent-ckpt-type global");
  // Megatron writes progress.txt into --save; without it there is none.
  if (o.log_progress && o.save.empty()) o.flags_without_effect.push_back("--log-progress (without --save)");
  // The other type's folder: no effect (Megatron reads the flag of the type given only).
  if (!o.non_persistent_global_ckpt_dir.empty() && type == "local")
    o.flags_without_effect.push_back("--non-persistent-global-ckpt-dir");
  if (!o.non_persistent_local_ckpt_dir.empty() && type == "global")
    o.flags_without_effect.push_back("--non-persistent-local-ckpt-dir");
  if (o.replication && type != "local")
    throw ConfigError("--replication needs --non-persistent-ckpt-type local (it copies the local checkpoints)");
  if (o.replication && !o.given_flags.count("replication-jump"))
    throw ConfigError("--replication needs --replication-jump (the ranks of a node, so that copies lie on others)");
  check_positive(o.replication_jump, "replication-jump");
  check_positive(o.replication_factor, "replication-factor");
  if (!o.replication)  // Megatron warns and goes on
    for (const char* f : {"replication-jump", "replication-factor"})
      if (o.given_flags.count(f)) o.flags_without_effect.push_back(std::string("--") + f);
}

void validate_run(TrainOptions& o) {
  check_positive(o.log_interval, "log-interval");
  if (o.given_flags.count("log-memory-interval")) {
    check_positive(o.log_memory_interval, "log-memory-interval");
    if (o.log_memory_interval % o.log_interval != 0)  // Megatron's assertion
      throw ConfigError("--log-memory-interval (" + std::to_string(o.log_memory_interval) +
                        ") must be a multiple of --log-interval (" + std::to_string(o.log_interval) + ")");
  }
  if (o.clip_grad < 0) throw ConfigError("--clip-grad must not be negative");
  if (o.has_weighted_split_paths() && o.mock_data)
    throw ConfigError("--mock-data and --train/--valid/--test-weighted-split-paths are alternatives: give one");
  if (o.has_data() && o.mock_data)
    throw ConfigError("--mock-data and --data-path/--train-data-path/--valid-data-path/--test-data-path are "
                      "alternatives: give one");
  for (const auto& [flag, given] : {std::pair{"eod-mask-loss", o.eod_mask_loss},
                                    {"reset-position-ids", o.reset_position_ids},
                                    {"reset-attention-mask", o.reset_attention_mask}})
    if (given && !o.has_data())
      throw ConfigError(std::string("--") + flag + " works on the documents of --data-path (ended by its "
                        "tokenizer's <|endoftext|>); synthetic data has no documents");
  if (o.tokenizer_type == "NullTokenizer" && o.null_tokenizer_vocab_size == 0 && o.has_data())
    throw ConfigError("--vocab-size is required for NullTokenizer (its ids are 0 to V - 1, V the end of document)");
  if (o.has_data() && o.vocab_file.empty() && o.tokenizer_type != "NullTokenizer")
    throw ConfigError(std::string("--vocab-file is required with --") +
                      (!o.data_path.empty()              ? "data-path"
                       : o.has_weighted_split_paths() ? "train-weighted-split-paths (or --valid-/--test-)"
                                                      : "train-data-path/--valid-data-path/--test-data-path"));
  if (!o.data_path.empty() && (!o.train_data_path.empty() || !o.valid_data_path.empty() || !o.test_data_path.empty()))
    throw ConfigError("--data-path and --train-data-path/--valid-data-path/--test-data-path are alternatives: give one");
  check_positive(o.tensor_model_parallel_size, "tensor-model-parallel-size");
  check_positive(o.pipeline_model_parallel_size, "pipeline-model-parallel-size");
  if (o.zero_stage < 0 || o.zero_stage > 2) throw ConfigError("--zero-stage must be 0, 1 or 2");
  if (!o.comm.empty() && o.comm != "nccl" && o.comm != "mpi")
    throw ConfigError("--comm: unknown communicator '" + o.comm + "' (expected nccl or mpi)");
  validate_recompute(o);
  check_positive(o.eval_interval, "eval-interval");
  check_non_negative(static_cast<double>(o.eval_iters), "eval-iters");
  check_positive(o.tensorboard_log_interval, "tensorboard-log-interval");
  check_positive(o.tensorboard_queue_size, "tensorboard-queue-size");
  if (o.timing_log_level < 0 || o.timing_log_level > 2)
    throw ConfigError("--timing-log-level must be 0, 1 or 2, got " + std::to_string(o.timing_log_level));
  parse_timing_log_option(o.timing_log_option);  // throws naming --timing-log-option
  validate_profile(o);
  check_non_negative(o.peak_tflops, "peak-tflops");
  check_non_negative(static_cast<double>(o.max_nan_iterations), "max-nan-iterations");
  check_non_negative(static_cast<double>(o.exit_interval), "exit-interval");
  check_non_negative(o.exit_duration_in_mins, "exit-duration-in-mins");
  check_non_negative(o.distributed_timeout_minutes, "distributed-timeout-minutes");
  check_non_negative(static_cast<double>(o.save_interval), "save-interval");
  check_non_negative(static_cast<double>(o.keep_last), "keep-last");
  if (o.mid_level_dataset_surplus) check_non_negative(*o.mid_level_dataset_surplus, "mid-level-dataset-surplus");
  if (o.full_validation && !o.has_data())
    throw ConfigError("--full-validation reads the validation data to its end: give --data-path or --valid-data-path "
                      "(synthetic tokens have no end)");
  if (o.multiple_validation_sets && o.has_weighted_split_paths())
    throw ConfigError("--multiple-validation-sets cuts --valid-data-path into its prefixes; with " +
                      o.weighted_split_paths_flags[1] + " each group is a validation set already: give one");
  if (o.multiple_validation_sets && !o.full_validation && !o.skip_train)  // Megatron's NotImplementedError
    throw ConfigError("--multiple-validation-sets needs --full-validation (or --skip-train), as Megatron's");
  if (o.multiple_validation_sets && !o.has_data())
    throw ConfigError("--multiple-validation-sets: the validation sets are the prefixes of --valid-data-path: give it");
  // Megatron's asserts with --save: positive, a multiple of --save-interval. --keep-last (not
  // Megatron's) prunes by the chain of previous checkpoints that these deletions cut.
  if (o.save_retain_interval != 0 && o.keep_last > 0)
    throw ConfigError("--save-retain-interval and --keep-last choose the checkpoints kept in two ways: give one");
  if (o.save_retain_interval < 0 ||
      (o.save_retain_interval != 0 && !o.save.empty() &&
       (o.save_interval <= 0 || o.save_retain_interval % o.save_interval != 0)))
    throw ConfigError("--save-retain-interval " + std::to_string(o.save_retain_interval) +
                      ": must be a positive multiple of --save-interval (" + std::to_string(o.save_interval) + ")");
  validate_non_persistent(o);
  // With --use-checkpoint-args the shape is complete only once the checkpoint is read.
  if (!o.use_checkpoint_args) validate_model_options(o);
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

void read_and_validate(const Flags& f, TrainOptions& o) {
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
  // Consistency, each error naming the flags involved.
  validate_batch_and_schedule(o);
  validate_weight_decay(o);
  validate_adam(o);
  validate_precision(o);
  if (o.disable_bf16_reduced_precision_matmul && o.model.dtype != DType::BF16)  // Megatron's acts with --bf16 only
    o.flags_without_effect.push_back("--disable-bf16-reduced-precision-matmul (without --bf16)");
  validate_run(o);
}

// Megatron's assertion lr_warmup_steps < lr_decay_steps in the flags the user sets: the decay
// ends with the run unless --lr-decay-iters/--lr-decay-samples says otherwise, so a config's
// warm-up can outlast the default --train-iters (100) that the user never gave.
std::string warmup_outlasts_decay(const TrainOptions& o) {
  if (o.lr_warmup_fraction >= 0) return "--lr-warmup-fraction must be below 1";
  const bool s = o.sample_based;
  const std::string warmup = s ? "--lr-warmup-samples (" + std::to_string(o.lr_warmup_samples) + ")"
                               : "--lr-warmup-iters (" + std::to_string(o.lr_warmup_iters) + ")";
  if (s ? o.lr_decay_samples != 0 : o.lr_decay_iters != 0)
    return s ? "--lr-decay-samples (" + std::to_string(o.lr_decay_samples) + ") must exceed " + warmup
             : "--lr-decay-iters (" + std::to_string(o.lr_decay_iters) + ") must exceed " + warmup;
  const std::string run = s ? "--train-samples (" + std::to_string(o.train_samples) + ")"
                            : "--train-iters (" + std::to_string(o.train_iters) +
                                  (o.train_iters_is_default ? ", the default)" : ")");
  return run + " must exceed " + warmup + ": the learning-rate decay ends with the run unless " +
         (s ? "--lr-decay-samples" : "--lr-decay-iters") + " says otherwise; set " +
         (s ? "--train-samples or --lr-decay-samples" : "--train-iters or --lr-decay-iters");
}

// An iteration count in samples (x the global batch), which must fit 64 bits.
uint64_t samples_of(int64_t iterations, uint64_t global_batch, const char* flag) {
  uint64_t samples = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(iterations), global_batch, &samples))
    throw ConfigError(std::string("--") + flag + " (" + std::to_string(iterations) + ") x --global-batch-size (" +
                      std::to_string(global_batch) + ") does not fit 64 bits");
  return samples;
}

// WSD's anneal (Megatron requires its length with the style) must fit between the warm-up's
// end and the decay's: one that reached into the warm-up would make the rate jump down when the
// warm-up ends (Megatron does not check it).
void check_wsd_anneal(const TrainOptions& o) {
  if (o.lr_decay_style != "WSD") return;  // the anneal's flags then do nothing (read_schedule_flags notes them)
  const bool s = o.sample_based;
  const std::string flag = s ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters";
  const bool given = s ? o.lr_wsd_decay_samples != 0 : o.lr_wsd_decay_iters != 0;
  if (!given) throw ConfigError("--lr-decay-style WSD needs " + flag + " (the final anneal's length)");
  const double after_warmup = static_cast<double>(o.decay_samples) - o.warmup_samples;
  if (static_cast<double>(o.wsd_decay_samples) > after_warmup) {
    const double room = s ? after_warmup : after_warmup / static_cast<double>(o.global_batch_size);
    std::ostringstream m;
    m << flag << " (" << (s ? o.lr_wsd_decay_samples : static_cast<uint64_t>(o.lr_wsd_decay_iters))
      << ") must not exceed the decay after the warm-up (" << room << (s ? " samples)" : " iterations)");
    throw ConfigError(m.str());
  }
}

}  // namespace

std::string TrainOptions::non_persistent_dir(const std::string& base) const {
  if (!non_persistent_global_ckpt_dir.empty()) return non_persistent_global_ckpt_dir;
  return (std::filesystem::path(base) / "non_persistent").string();  // Megatron's subfolder
}

int TrainOptions::virtual_pipeline_chunks() const {
  if (!uneven_pipeline.layout.empty())
    return pipeline_layout_chunks(uneven_pipeline.layout, pipeline_model_parallel_size);
  if (num_virtual_stages_per_pipeline_rank > 0) return num_virtual_stages_per_pipeline_rank;
  if (num_layers_per_virtual_pipeline_stage > 0) {
    // Megatron counts the embedding and the loss among the layers a chunk holds where they count.
    return counted_layers(model.num_layers, uneven_pipeline) /
           (pipeline_model_parallel_size * num_layers_per_virtual_pipeline_stage);
  }
  return 1;
}

PipelineSplit TrainOptions::pipeline_split() const {
  return PipelineSplit{model.num_layers, pipeline_model_parallel_size, virtual_pipeline_chunks(), uneven_pipeline};
}

void validate_model_options(const TrainOptions& o) {
  const int P = o.pipeline_model_parallel_size, L = o.model.num_layers;
  if (L < 1) throw ConfigError("--num-layers must be positive, got " + std::to_string(L));
  const UnevenPipeline& uneven = o.uneven_pipeline;
  if (P > L && !uneven.any())
    throw ConfigError("--pipeline-model-parallel-size (" + std::to_string(P) + ") must not exceed --num-layers (" +
                      std::to_string(L) + ")");
  const int per_chunk = o.num_layers_per_virtual_pipeline_stage, chunks = o.num_virtual_stages_per_pipeline_rank;
  // Set on the command line or in the file (a given 0 included), or by hand in the options.
  const auto set = [&](const char* flag, int64_t value) { return value != 0 || o.given_flags.count(flag) > 0; };
  const bool by_layers = set("num-layers-per-virtual-pipeline-stage", per_chunk);
  const bool by_chunks = set("num-virtual-stages-per-pipeline-rank", chunks);
  if (!uneven.layout.empty() && (by_layers || by_chunks))
    throw ConfigError("--pipeline-model-parallel-layout gives the model chunks a stage itself: "
                      "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank go without it");
  if (by_layers || by_chunks) {
    const std::string flag =
        by_layers ? "--num-layers-per-virtual-pipeline-stage" : "--num-virtual-stages-per-pipeline-rank";
    const int value = by_layers ? per_chunk : chunks;
    if (by_layers && by_chunks)
      throw ConfigError("--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank are "
                        "alternatives: give one");
    if (value < 1) throw ConfigError(flag + " must be positive");
    if (P == 1) throw ConfigError(flag + " needs --pipeline-model-parallel-size above 1");
    if (by_layers && (uneven.first_stage_layers > 0 || uneven.last_stage_layers > 0))
      throw ConfigError("--decoder-first/last-pipeline-num-layers with an interleaved schedule take "
                        "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
    const int counted = counted_layers(L, uneven);
    if (!uneven.any() || by_layers) {
      if (counted % (P * value) != 0)
        throw ConfigError("--num-layers (" + std::to_string(L) +
                          (counted != L ? ", " + std::to_string(counted) + " with " + counted_as_layers(uneven)
                                        : std::string()) +
                          ") must be a multiple of " +
                          "--pipeline-model-parallel-size (" + std::to_string(P) + ") x " + flag + " (" +
                          std::to_string(value) + ")");
    }
  }
  if (const std::string why = pipeline_split_error(o.pipeline_split()); !why.empty())
    throw ConfigError("pipeline split: " + why);
  if (o.microbatch_group_size > 0 && o.microbatch_group_size != P)
    throw ConfigError("--microbatch-group-size-per-virtual-pipeline-stage " + std::to_string(o.microbatch_group_size) +
                      ": not supported: trident's interleaved schedule runs a chunk's micro-batches in groups of "
                      "--pipeline-model-parallel-size (" + std::to_string(P) + "), Megatron's default");
  const int tp = o.tensor_model_parallel_size;
  if (o.sequence_parallel && tp > 1) {
    // Each TP rank takes a contiguous 1/tp of the micro-batch's B x T rows.
    const int64_t rows = static_cast<int64_t>(o.micro_batch_size) * o.model.seq_length;
    if (rows % tp != 0)
      throw ConfigError("--sequence-parallel: --micro-batch-size (" + std::to_string(o.micro_batch_size) +
                        ") x --seq-length (" + std::to_string(o.model.seq_length) +
                        ") must be a multiple of --tensor-model-parallel-size (" + std::to_string(tp) + ")");
    if (o.model.hidden_size % 4 != 0)
      throw ConfigError("--sequence-parallel: --hidden-size (" + std::to_string(o.model.hidden_size) +
                        ") must be a multiple of 4");
  }
  const int64_t H = o.model.hidden_size, heads = o.model.num_attention_heads;
  if (set("ffn-hidden-size", o.ffn_hidden_size) && o.ffn_hidden_size != 4 * H)
    throw ConfigError("--ffn-hidden-size (" + std::to_string(o.ffn_hidden_size) + ") must be 4 x --hidden-size " +
                      std::to_string(H) + " (" + std::to_string(4 * H) + "): GPT-2's MLP");
  if (set("kv-channels", o.kv_channels) && (heads <= 0 || o.kv_channels * heads != H))
    throw ConfigError("--kv-channels (" + std::to_string(o.kv_channels) + ") must be --hidden-size / " +
                      "--num-attention-heads (" + (heads > 0 ? std::to_string(H / heads) : std::string("?")) +
                      "): GPT-2's head width");
  o.model.validate(o.tensor_model_parallel_size);
}

void resolve_schedule(TrainOptions& o) {
  if (o.global_batch_size <= 0) throw ConfigError("--global-batch-size must be positive");
  const uint64_t gbs = static_cast<uint64_t>(o.global_batch_size);
  if (o.lr_warmup_fraction > 1) throw ConfigError("--lr-warmup-fraction must be in [0, 1]");
  if (o.sample_based) {
    // The token thresholds in samples at the sequence length the run has now (--use-checkpoint-args
    // may have taken it from the checkpoint since the flags were read).
    if (!o.step_batch_size_schedule.empty())
      o.batch_steps = parse_step_batch_schedule(join_words(o.step_batch_size_schedule), o.model.seq_length);
    const BatchSchedule batches = make_batch_schedule(o);
    if (!o.batch_steps.empty() && o.train_samples < static_cast<uint64_t>(batches.global_batch(0)))
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) + ") must be at least the first batch "
                        "of --step-batch-size-schedule (" + std::to_string(batches.global_batch(0)) + ")");
    if (o.batch_steps.empty() && o.train_samples < gbs)
      throw ConfigError("--train-samples (" + std::to_string(o.train_samples) +
                        ") must be at least --global-batch-size (" + std::to_string(gbs) + ")");
    o.train_iters = batches.varies() ? train_iters_of_samples(batches, o.train_samples)
                                     : static_cast<int64_t>(o.train_samples / gbs);
    o.decay_samples = o.lr_decay_samples != 0 ? o.lr_decay_samples : o.train_samples;
    o.warmup_samples = static_cast<double>(o.lr_warmup_samples);
    o.wsd_decay_samples = o.lr_wsd_decay_samples;
  } else {
    if (o.train_iters <= 0) throw ConfigError("--train-iters must be positive");
    if (o.lr_warmup_iters < 0) throw ConfigError("--lr-warmup-iters must not be negative");
    if (o.lr_decay_iters < 0) throw ConfigError("--lr-decay-iters must not be negative");
    const int64_t decay_iters = o.lr_decay_iters != 0 ? o.lr_decay_iters : o.train_iters;
    o.train_samples = samples_of(o.train_iters, gbs, "train-iters");
    o.decay_samples = samples_of(decay_iters, gbs, o.lr_decay_iters != 0 ? "lr-decay-iters" : "train-iters");
    o.warmup_samples = static_cast<double>(o.lr_warmup_iters) * static_cast<double>(gbs);
    if (o.lr_wsd_decay_iters < 0) throw ConfigError("--lr-wsd-decay-iters must not be negative");
    o.wsd_decay_samples = samples_of(o.lr_wsd_decay_iters, gbs, "lr-wsd-decay-iters");
  }
  if (o.lr_warmup_fraction >= 0) o.warmup_samples = o.lr_warmup_fraction * static_cast<double>(o.decay_samples);
  // Megatron asserts warm-up < decay; a constant schedule never decays, so only the
  // decaying styles need it here.
  if (o.lr_decay_style != "constant" && !(o.warmup_samples < static_cast<double>(o.decay_samples)))
    throw ConfigError(warmup_outlasts_decay(o));
  check_wsd_anneal(o);
  // The validation samples the run reads: every periodic evaluation and the final one.
  const auto evaluations = static_cast<uint64_t>(sized_validations(o));
  uint64_t valid_samples = 0;
  if (o.eval_iters > 0 && __builtin_mul_overflow(samples_of(o.eval_iters, gbs, "eval-iters"), evaluations, &valid_samples))
    throw ConfigError("--eval-iters (" + std::to_string(o.eval_iters) + ") x --global-batch-size x the " +
                      std::to_string(evaluations) + " evaluations does not fit 64 bits");
}

uint64_t run_training_samples(const TrainOptions& o) {
  return std::max<uint64_t>(o.train_samples, make_batch_schedule(o).samples_in(o.train_iters));
}

int64_t sized_validations(const TrainOptions& o) {
  if (o.eval_interval <= 0) return 1;
  int64_t n = o.train_iters / o.eval_interval + 1;
  // (at least the final validation's, which always runs: Megatron's rule gives none when
  // --start-eval-at-iter lies past the run)
  if (o.start_eval_at_iter) n = std::max<int64_t>(1, n - *o.start_eval_at_iter / o.eval_interval);
  return n;
}

bool validates_after(const TrainOptions& o, int64_t iteration) {
  return o.eval_interval > 0 && iteration % o.eval_interval == 0 &&
         (!o.start_eval_at_iter || iteration >= *o.start_eval_at_iter);
}

int64_t periodic_validations(const TrainOptions& o, int64_t after, int64_t upto) {
  const int64_t E = o.eval_interval;
  if (E <= 0) return 0;
  // The multiples k E with k E > after and k E >= --start-eval-at-iter, up to upto.
  const int64_t first = std::max<int64_t>(after / E + 1, o.start_eval_at_iter ? (*o.start_eval_at_iter + E - 1) / E : 1);
  return std::max<int64_t>(0, upto / E - first + 1);
}

// Megatron's evaluation batch sizes, which trident takes only equal to the training's.
static void check_evaluation_batches(const TrainOptions& o) {
  const auto check = [](const std::optional<int64_t>& given, int64_t training, const char* flag, const char* of) {
    if (given && *given != training)
      throw ConfigError(std::string("--") + flag + " " + std::to_string(*given) + ": trident evaluates with the "
                        "training's batches (" + of + " " + std::to_string(training) + ")");
  };
  check(o.eval_micro_batch_size, o.micro_batch_size, "eval-micro-batch-size", "--micro-batch-size");
  check(o.eval_global_batch_size, o.global_batch_size, "eval-global-batch-size", global_batch_flag(o).c_str());
}

void resolve_global_batch_size(TrainOptions& o, int data_parallel_size) {
  if (!o.deepspeed_config.empty())
    check_deepspeed_batch(o.deepspeed_batch, o.micro_batch_size, data_parallel_size, o.deepspeed_config);
  if (o.global_batch_size_is_default) {
    o.global_batch_size = o.micro_batch_size * data_parallel_size;
    resolve_schedule(o);
  }
  check_evaluation_batches(o);
}

std::string global_batch_flag(const TrainOptions& o) {
  return o.step_batch_size_schedule.empty() ? "--global-batch-size" : "the last batch of --step-batch-size-schedule";
}

BackendOptions backend_options(const TrainOptions& o) {
  return {.allow_tf32 = !o.no_tf32,
          .bf16_reduction_in_fp32 = o.disable_bf16_reduced_precision_matmul && o.model.dtype == DType::BF16};
}

LrSchedule make_lr_schedule(const TrainOptions& o) {
  LrSchedule s;
  s.max_lr = o.lr;
  s.min_lr = o.min_lr;
  if (o.decoupled_lr) {
    s.decoupled_max_lr = o.decoupled_lr;
    s.decoupled_min_lr = o.decoupled_min_lr.value_or(o.min_lr);
  }
  s.init_lr = o.lr_warmup_init;
  s.style = parse_lr_decay_style(o.lr_decay_style);
  s.warmup_samples = o.warmup_samples;
  s.decay_samples = static_cast<double>(o.decay_samples);
  s.wsd_decay_samples = static_cast<double>(o.wsd_decay_samples);
  s.wsd_style = parse_wsd_decay_style(o.lr_wsd_decay_style);
  s.warmup_tokens = o.lr_warmup_tokens;
  s.decay_tokens = o.lr_decay_tokens;
  return s;
}

BatchSchedule make_batch_schedule(const TrainOptions& o) {
  BatchSchedule r;
  r.global = o.global_batch_size;
  r.start = o.rampup_start > 0 ? o.rampup_start : o.global_batch_size;
  r.increment = o.rampup_increment;
  r.samples = o.rampup_samples;
  r.steps = o.batch_steps;
  return r;
}

WeightDecaySchedule make_weight_decay_schedule(const TrainOptions& o) {
  WeightDecaySchedule s;
  s.start_wd = o.start_weight_decay >= 0 ? o.start_weight_decay : o.weight_decay;
  s.end_wd = o.end_weight_decay >= 0 ? o.end_weight_decay : o.weight_decay;
  s.incr_samples = static_cast<double>(o.train_samples);
  s.style = parse_wd_incr_style(o.weight_decay_incr_style);
  return s;
}

LossScalerConfig make_loss_scaler_config(const TrainOptions& o) {
  LossScalerConfig c;
  const DType t = o.model.dtype;
  if (t != DType::F16 && t != DType::BF16) return c;  // None
  if (o.loss_scale > 0) {
    c.kind = LossScaleKind::Constant;
    c.constant_scale = o.loss_scale;
  } else if (t == DType::F16) {
    c.kind = o.deepspeed_fp16_optimizer ? LossScaleKind::DeepSpeedFused : LossScaleKind::Dynamic;
    c.initial_scale = o.initial_loss_scale;
    c.min_scale = o.min_loss_scale;
    c.growth_interval = o.loss_scale_window;
    c.hysteresis = o.hysteresis;
  }
  return c;
}

namespace {

// The shortest text that reads back as the same value: values that differ print differently.
std::string shortest_text(double value) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, value).ptr - buf);
}

}  // namespace

std::string flags_every_rank_shares(const TrainOptions& o) {
  std::ostringstream s;
  s << std::boolalpha;
  const ModelConfig& m = o.model;
  const auto line = [&](const char* flag, const auto& value) {
    s << "--" << flag << ' ';
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) {
      s << shortest_text(value);
    } else {
      s << value;
    }
    s << '\n';
  };
  line("tensor-model-parallel-size", o.tensor_model_parallel_size);
  line("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  line("num-virtual-stages-per-pipeline-rank", o.virtual_pipeline_chunks());
  line("decoder-first-pipeline-num-layers", o.uneven_pipeline.first_stage_layers);
  line("decoder-last-pipeline-num-layers", o.uneven_pipeline.last_stage_layers);
  line("account-for-embedding-in-pipeline-split", o.uneven_pipeline.embedding_as_layer);
  line("account-for-loss-in-pipeline-split", o.uneven_pipeline.loss_as_layer);
  line("pipeline-model-parallel-layout", o.uneven_pipeline.layout);
  line("sequence-parallel", o.sequence_parallel);
  line("zero-stage", o.zero_stage);
  line("overlap-grad-reduce", o.overlap_grad_reduce);
  line("overlap-param-gather", o.overlap_param_gather);
  line("comm", o.comm);
  line("device", o.device);
  line("num-layers", m.num_layers);
  line("hidden-size", m.hidden_size);
  line("num-attention-heads", m.num_attention_heads);
  line("seq-length", m.seq_length);
  line("max-position-embeddings", m.max_position_embeddings);
  line("vocab-size", m.vocab_size);
  line("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  line("hidden-dropout", m.hidden_dropout);
  line("attention-dropout", m.attention_dropout);
  line("init-method-std", m.init_method_std);
  line("embedding-init-method-std", m.embedding_init_method_std);  // also the embeddings' weight decay
  line("precision", dtype_name(m.dtype));
  line("gelu", gelu_name(m.gelu));
  line("micro-batch-size", o.micro_batch_size);
  line("global-batch-size", o.global_batch_size);
  line("train-iters", o.train_iters);
  line("train-samples", o.train_samples);
  line("rampup-batch-size", join_words(o.rampup_batch_size));
  std::string steps;
  for (const BatchStep& b : o.batch_steps) steps += std::to_string(b.samples) + ":" + std::to_string(b.batch) + " ";
  line("step-batch-size-schedule (samples)", steps);
  std::string skips;
  for (int64_t it : o.iterations_to_skip) {
    if (!skips.empty()) skips += ' ';
    skips += std::to_string(it);
  }
  line("iterations-to-skip", skips);
  std::string ranges;
  for (const IterationRange& r : o.skip_train_iteration_ranges) ranges += range_text(r) + " ";
  line("skip-train-iteration-range", ranges);
  std::string transitions;
  for (int64_t it : o.phase_transition_iterations) {
    if (!transitions.empty()) transitions += ',';
    transitions += std::to_string(it);
  }
  line("phase-transition-iterations", transitions);
  line("recompute-granularity", o.recompute_granularity);
  line("recompute-method", o.recompute_method);
  line("recompute-num-layers", o.recompute_num_layers);
  line("seed", o.seed);
  line("lr", o.lr);
  line("min-lr", o.min_lr);
  line("decoupled-lr (-1: none)", o.decoupled_lr.value_or(-1.0));
  line("decoupled-min-lr (-1: none)", o.decoupled_min_lr.value_or(-1.0));
  line("lr-decay-style", o.lr_decay_style);
  line("lr-wsd-decay-style", o.lr_wsd_decay_style);
  line("lr-wsd-decay-samples", o.wsd_decay_samples);
  line("lr-warmup-init", o.lr_warmup_init);
  line("warm-up samples", o.warmup_samples);
  line("decay samples", o.decay_samples);
  line("clip-grad", o.clip_grad);
  line("weight-decay", o.weight_decay);
  line("adam-beta1", o.adam_beta1);
  line("adam-beta2", o.adam_beta2);
  line("adam-eps", o.adam_eps);
  line("accumulate-allreduce-grads-in-fp32", o.accumulate_allreduce_grads_in_fp32);
  line("loss-scale", o.loss_scale);
  line("initial-loss-scale", o.initial_loss_scale);
  line("min-loss-scale", o.min_loss_scale);
  line("loss-scale-window", o.loss_scale_window);
  line("hysteresis", o.hysteresis);
  line("eval-interval", o.eval_interval);
  line("start-eval-at-iter", o.start_eval_at_iter.value_or(-1));
  line("eval-iters", o.eval_iters);
  line("log-interval", o.log_interval);
  line("log-params-norm", o.log_params_norm);
  line("log-num-zeros-in-grad", o.log_num_zeros_in_grad);
  line("log-optimizer-states-to-tensorboard", o.log_optimizer_states_to_tensorboard);  // collective
  line("log-energy", o.log_energy);  // collective
  line("timing-log-level", o.timing_log_level);
  line("timing-log-option", o.timing_log_option);
  line("log-timers-to-tensorboard", o.log_timers_to_tensorboard);
  line("max-nan-iterations", o.max_nan_iterations);
  line("check-weight-hash-across-dp-replicas-interval", o.check_weight_hash_interval);
  line("log-progress", o.log_progress);  // its start is collective
  line("tensorboard-dir given", !o.tensorboard_dir.empty());
  line("tensorboard-log-interval", o.tensorboard_log_interval);
  line("tensorboard-queue-size", o.tensorboard_queue_size);
  line("tensorboard-tags", o.tensorboard_tags);
  line("data-path given", !o.data_path.empty());
  line("train-data-path given", !o.train_data_path.empty());
  line("valid-data-path given", !o.valid_data_path.empty());
  line("test-data-path given", !o.test_data_path.empty());
  // The groups without their prefixes (nodes may mount the data elsewhere): names, weights, ranges.
  const char* weighted_flags[3] = {"train-weighted-split-paths (names, weights, ranges)",
                                   "valid-weighted-split-paths (names, weights, ranges)",
                                   "test-weighted-split-paths (names, weights, ranges)"};
  for (int split = 0; split < 3; ++split) {
    std::ostringstream groups;
    for (const WeightedSplitGroup& g : o.weighted_split_groups[split]) {
      groups << g.name << ":";
      for (size_t k = 0; k < g.blend.prefixes.size(); ++k)
        groups << " " << shortest_text(g.blend.weights[k]) << " " << shortest_text(g.blend.fractions[k].start) << ":"
               << shortest_text(g.blend.fractions[k].end);
      groups << "; ";
    }
    line(weighted_flags[split], groups.str());
  }
  line("split", o.split);
  line("mid-level-dataset-surplus", o.mid_level_dataset_surplus ? std::to_string(*o.mid_level_dataset_surplus) : "");
  line("eod-mask-loss", o.eod_mask_loss);
  line("reset-position-ids", o.reset_position_ids);
  line("reset-attention-mask", o.reset_attention_mask);
  line("calculate-per-token-loss", o.calculate_per_token_loss);
  line("save given", !o.save.empty());
  line("save-interval", o.save_interval);
  line("save-retain-interval", o.save_retain_interval);
  line("non-persistent-save-interval", o.non_persistent_save_interval);
  line("non-persistent-ckpt-type", o.non_persistent_ckpt_type);
  line("non-persistent-local-ckpt-algo", o.non_persistent_local_ckpt_algo);
  line("async-save", o.async_save);
  line("load given", !o.load.empty());
  line("pretrained-checkpoint given", !o.pretrained_checkpoint.empty());
  line("no-load-lr-state", o.no_load_lr_state);
  line("full-validation", o.full_validation);
  line("multiple-validation-sets", o.multiple_validation_sets);
  line("exit-interval", o.exit_interval);
  line("skip-train", o.skip_train);
  line("kill-switch-path given", !o.kill_switch_path.empty());  // a collective after every iteration
  const auto tokens = [](const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : std::string("none"); };
  line("lr-warmup-tokens", tokens(o.lr_warmup_tokens));
  line("lr-decay-tokens", tokens(o.lr_decay_tokens));
  line("train-tokens", tokens(o.train_tokens));
  line("exit-duration-in-mins given", o.exit_duration_in_mins > 0);  // each rank may have its own limit
  return s.str();
}

bool parse_train_options(int argc, const char* const* argv, TrainOptions& o) {
  const GatheredArgs gathered = gather_args(argc, argv, o);
  const std::vector<std::string>& args = gathered.args;
  cxxopts::Options options("trident-train", "Train GPT-2 (Megatron-compatible flags)");
  for (const FlagDef& d : flag_defs()) {
    if (d.is_bool)
      options.add_options()(d.name, d.help);
    else
      options.add_options()(d.name, d.help, cxxopts::value<std::string>());
  }
  // Name the unknown flags exactly as the user typed them, all in the one line (a script
  // brought over from Megatron would otherwise take one try per flag).
  std::string unknown;
  int unknown_count = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagDef* def = find_flag(name);
    if (!def) {
      unknown += (unknown.empty() ? "--" : ", --") + name;
      ++unknown_count;
      continue;
    }
    check_flag_word("--" + name, def->is_bool, eq != std::string::npos,
                    i + 1 < args.size() ? args[i + 1].c_str() : nullptr);
  }
  if (unknown_count > 0)
    throw ConfigError((unknown_count == 1 ? "unknown flag " : "unknown flags ") + unknown + " (see --help)");
  std::vector<const char*> cargv;
  for (const std::string& s : args) cargv.push_back(s.c_str());
  cxxopts::ParseResult r;
  try {
    r = options.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (!r.unmatched().empty()) throw ConfigError("unexpected argument '" + r.unmatched()[0] + "'");
  if (r.count("help")) {
    std::cout << options.help() << std::endl;
    return false;
  }
  try {
    read_and_validate(Flags(std::move(r)), o);
  } catch (const ConfigError& e) {
    throw ConfigError(with_config_origins(e.what(), gathered.from_config));
  }
  return true;
}

}  // namespace trident
