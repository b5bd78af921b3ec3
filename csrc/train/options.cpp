#include "train/options.h"

#include <yaml-cpp/yaml.h>

#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <map>

#include "core/error.h"

namespace trident {
namespace {

// Every flag is declared as a string; typed conversion below names the flag on error.
struct FlagDef {
  const char* name;
  const char* help;
  bool is_bool = false;
};

const std::vector<FlagDef>& flag_defs() {
  static const std::vector<FlagDef> defs = {
      {"config", "YAML file with flag values (command line wins)"},
      {"num-layers", "transformer layers"},
      {"hidden-size", "hidden size"},
      {"num-attention-heads", "attention heads"},
      {"seq-length", "sequence length"},
      {"max-position-embeddings", "learned positions"},
      {"vocab-size", "vocabulary size for synthetic data (default 50257)"},
      {"make-vocab-size-divisible-by", "pad the vocabulary to a multiple of this x tp (128)"},
      {"init-method-std", "std of the normal init (0.02)"},
      {"hidden-dropout", "dropout on hidden states (0)"},
      {"attention-dropout", "dropout on attention probabilities (0)"},
      {"micro-batch-size", "samples per micro-batch"},
      {"global-batch-size", "samples per iteration (a multiple of the micro batch)"},
      {"train-iters", "iterations"},
      {"lr", "peak learning rate"},
      {"min-lr", "learning rate after decay"},
      {"lr-decay-style", "constant, linear or cosine"},
      {"lr-warmup-iters", "warm-up iterations"},
      {"lr-decay-iters", "decay iterations (default: train-iters)"},
      {"weight-decay", "AdamW decoupled weight decay (0.01)"},
      {"clip-grad", "clip gradients to this global norm (1.0; 0 off)"},
      {"adam-beta1", "0.9"},
      {"adam-beta2", "0.999"},
      {"adam-eps", "1e-8"},
      {"seed", "random seed (1234)"},
      {"log-interval", "iterations between log lines"},
      {"device", "auto, cpu or cuda"},
      {"tensor-model-parallel-size", "tensor-parallel ranks (1)"},
      {"pipeline-model-parallel-size", "pipeline stages (1)"},
      {"zero-stage", "0: all-reduce gradients; 1: shard optimizer state over data parallel; 2: also shard gradients"},
      {"data-path", "dataset prefix, or weights and prefixes: 0.3 A 0.7 B"},
      {"vocab-file", "gpt2-vocab.json"},
      {"merge-file", "gpt2-merges.txt"},
      {"tokenizer-type", "GPT2BPETokenizer"},
      {"split", "train, valid, test weights (969, 30, 1)"},
      {"data-cache-path", "where dataset index maps are cached (default: beside the data)"},
      {"help", "print this help", true},
  };
  return defs;
}

std::string yaml_scalar_to_string(const YAML::Node& n) { return n.as<std::string>(); }

// YAML keys become "--key=value" arguments placed before the command line's.
std::vector<std::string> yaml_to_args(const std::string& path, std::vector<std::string>& data_path) {
  if (!std::filesystem::exists(path)) throw ConfigError("--config: file not found: " + path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--config: " + path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  std::vector<std::string> args;
  if (!root.IsMap()) throw ConfigError("--config: " + path + ": expected a mapping of flag: value");
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    for (char& c : key)
      if (c == '_') c = '-';
    bool known = false;
    bool is_bool = false;
    for (const FlagDef& d : flag_defs())
      if (key == d.name) known = true, is_bool = d.is_bool;
    if (!known || key == "config" || key == "help")
      throw ConfigError("--config: " + path + ":" + std::to_string(kv.first.Mark().line + 1) + ": unknown key '" +
                        key + "'");
    if (key == "data-path") {
      data_path.clear();
      if (kv.second.IsSequence())
        for (const auto& item : kv.second) data_path.push_back(yaml_scalar_to_string(item));
      else
        data_path.push_back(yaml_scalar_to_string(kv.second));
      continue;
    }
    if (is_bool) {
      if (kv.second.as<bool>()) args.push_back("--" + key);
      continue;
    }
    args.push_back("--" + key + "=" + yaml_scalar_to_string(kv.second));
  }
  return args;
}

template <typename T>
T convert(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_same_v<T, int>) v = std::stoi(text, &used);
    else if constexpr (std::is_same_v<T, int64_t>) v = std::stoll(text, &used);
    else if constexpr (std::is_same_v<T, uint64_t>) v = std::stoull(text, &used);
    else if constexpr (std::is_same_v<T, float>) v = std::stof(text, &used);
    else v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    return v;
  } catch (const std::exception&) {
    throw ConfigError("--" + flag + ": cannot parse '" + text + "' as a number");
  }
}

}  // namespace

bool parse_train_options(int argc, const char* const* argv, TrainOptions& o) {
  // Pull out --data-path's list (Megatron takes several words) and --config first.
  std::vector<std::string> rest;
  std::vector<std::string> cli_data_path;
  bool cli_has_data_path = false;
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--data-path") {
      cli_has_data_path = true;
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) cli_data_path.push_back(argv[++i]);
      if (cli_data_path.empty()) throw ConfigError("--data-path: expected a prefix");
      continue;
    }
    if (a.rfind("--data-path=", 0) == 0) {
      cli_has_data_path = true;
      cli_data_path.push_back(a.substr(12));
      continue;
    }
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
      continue;
    }
    if (a.rfind("--config=", 0) == 0) {
      config_path = a.substr(9);
      continue;
    }
    rest.push_back(a);
  }
  std::vector<std::string> args = {"trident-train"};
  if (!config_path.empty()) {
    std::vector<std::string> from_yaml = yaml_to_args(config_path, o.data_path);
    args.insert(args.end(), from_yaml.begin(), from_yaml.end());
  }
  if (cli_has_data_path) o.data_path = cli_data_path;
  args.insert(args.end(), rest.begin(), rest.end());

  cxxopts::Options options("trident-train", "Train GPT-2 (Megatron-compatible flags)");
  for (const FlagDef& d : flag_defs()) {
    if (d.is_bool)
      options.add_options()(d.name, d.help);
    else
      options.add_options()(d.name, d.help, cxxopts::value<std::string>());
  }
  // Name an unknown flag exactly as the user typed it.
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    bool known = false;
    for (const FlagDef& d : flag_defs()) known = known || name == d.name;
    if (!known) throw ConfigError("unknown flag --" + name + " (see --help)");
  }
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
  auto has = [&](const char* f) { return r.count(f) > 0; };
  auto str = [&](const char* f) { return r[f].as<std::string>(); };
  auto get = [&](const char* f, auto& dst) {
    if (has(f)) dst = convert<std::decay_t<decltype(dst)>>(f, str(f));
  };
  ModelConfig& m = o.model;
  get("num-layers", m.num_layers);
  get("hidden-size", m.hidden_size);
  get("num-attention-heads", m.num_attention_heads);
  get("seq-length", m.seq_length);
  m.max_position_embeddings = m.seq_length;
  get("max-position-embeddings", m.max_position_embeddings);
  get("vocab-size", m.vocab_size);
  get("make-vocab-size-divisible-by", m.make_vocab_size_divisible_by);
  get("init-method-std", m.init_method_std);
  get("hidden-dropout", m.hidden_dropout);
  get("attention-dropout", m.attention_dropout);
  get("micro-batch-size", o.micro_batch_size);
  get("global-batch-size", o.global_batch_size);
  get("train-iters", o.train_iters);
  get("lr", o.lr);
  get("min-lr", o.min_lr);
  if (has("lr-decay-style")) o.lr_decay_style = str("lr-decay-style");
  get("lr-warmup-iters", o.lr_warmup_iters);
  get("lr-decay-iters", o.lr_decay_iters);
  get("weight-decay", o.weight_decay);
  get("clip-grad", o.clip_grad);
  get("adam-beta1", o.adam_beta1);
  get("adam-beta2", o.adam_beta2);
  get("adam-eps", o.adam_eps);
  get("seed", o.seed);
  get("log-interval", o.log_interval);
  if (has("device")) o.device = str("device");
  get("tensor-model-parallel-size", o.tensor_model_parallel_size);
  get("pipeline-model-parallel-size", o.pipeline_model_parallel_size);
  get("zero-stage", o.zero_stage);
  if (has("vocab-file")) o.vocab_file = str("vocab-file");
  if (has("merge-file")) o.merge_file = str("merge-file");
  if (has("tokenizer-type")) o.tokenizer_type = str("tokenizer-type");
  if (has("split")) o.split = str("split");
  if (has("data-cache-path")) o.data_cache_path = str("data-cache-path");

  // Consistency, each error naming the flags involved.
  if (o.global_batch_size == 0) o.global_batch_size = o.micro_batch_size;
  if (o.micro_batch_size <= 0) throw ConfigError("--micro-batch-size must be positive");
  if (o.global_batch_size <= 0) throw ConfigError("--global-batch-size must be positive");
  if (o.global_batch_size % o.micro_batch_size != 0)
    throw ConfigError("--global-batch-size (" + std::to_string(o.global_batch_size) +
                      ") must be a multiple of --micro-batch-size (" + std::to_string(o.micro_batch_size) + ")");
  if (o.train_iters <= 0) throw ConfigError("--train-iters must be positive");
  if (o.log_interval <= 0) throw ConfigError("--log-interval must be positive");
  if (o.lr < 0 || o.min_lr < 0 || o.min_lr > o.lr) throw ConfigError("--min-lr must be in [0, --lr]");
  if (o.lr_warmup_iters < 0) throw ConfigError("--lr-warmup-iters must not be negative");
  if (o.lr_decay_iters == 0) o.lr_decay_iters = o.train_iters;
  if (o.lr_decay_iters <= o.lr_warmup_iters && o.lr_decay_style != "constant")
    throw ConfigError("--lr-decay-iters must exceed --lr-warmup-iters");
  if (o.clip_grad < 0) throw ConfigError("--clip-grad must not be negative");
  if (!o.data_path.empty() && o.vocab_file.empty())
    throw ConfigError("--vocab-file is required with --data-path");
  if (o.tensor_model_parallel_size < 1) throw ConfigError("--tensor-model-parallel-size must be positive");
  if (o.pipeline_model_parallel_size < 1) throw ConfigError("--pipeline-model-parallel-size must be positive");
  if (o.pipeline_model_parallel_size > m.num_layers)
    throw ConfigError("--pipeline-model-parallel-size (" + std::to_string(o.pipeline_model_parallel_size) +
                      ") must not exceed --num-layers (" + std::to_string(m.num_layers) + ")");
  if (o.zero_stage < 0 || o.zero_stage > 2) throw ConfigError("--zero-stage must be 0, 1 or 2");
  m.validate(o.tensor_model_parallel_size);
  return true;
}

}  // namespace trident
