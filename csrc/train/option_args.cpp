#include "train/option_args.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/flag_value.h"
#include "train/option_table.h"

namespace trident::train_flags {
namespace {

// The flags that take a list of words (Megatron's nargs='*'): on the command line every word
// up to the next flag, in the config file a list, a plain string of words split at
// whitespace (data-path: 0.3 A 0.7 B, as the shell splits a launcher's $DATA_PATH), or a
// quoted string, one word.
std::vector<std::string>* word_list(TrainOptions& o, const std::string& flag) {
  if (flag == "data-path") return &o.data_path;
  if (flag == "train-data-path") return &o.train_data_path;
  if (flag == "valid-data-path") return &o.valid_data_path;
  if (flag == "test-data-path") return &o.test_data_path;
  if (flag == "train-weighted-split-paths") return &o.weighted_split_paths[0];
  if (flag == "valid-weighted-split-paths") return &o.weighted_split_paths[1];
  if (flag == "test-weighted-split-paths") return &o.weighted_split_paths[2];
  if (flag == "rampup-batch-size") return &o.rampup_batch_size;
  if (flag == "step-batch-size-schedule") return &o.step_batch_size_schedule;
  if (flag == "iterations-to-skip") return &o.iterations_to_skip_words;
  if (flag == "skip-train-iteration-range") return &o.skip_train_iteration_range_words;
  if (flag == "profile-ranks") return &o.profile_ranks;
  if (flag == "recompute-modules") return &o.recompute_modules;
  if (is_list_flag_without_effect(flag)) return &o.words_without_effect[flag];
  return nullptr;
}

// BigScience's weighted split paths take groups, each one word with spaces inside ("NAME: 1
// 0:1 P"): in the config file a plain string is one group too, not words split at whitespace.
bool is_group_list(const std::string& flag) {
  return flag == "train-weighted-split-paths" || flag == "valid-weighted-split-paths" ||
         flag == "test-weighted-split-paths";
}

bool is_word_list(const std::string& flag) {
  TrainOptions probe;
  return word_list(probe, flag) != nullptr;
}

std::string yaml_scalar_to_string(const YAML::Node& n) { return n.as<std::string>(); }

// One key of the --config file.
struct ConfigValue {
  std::string flag;                // the key with '_' written as '-'
  std::vector<std::string> args;   // "--flag=value", "--flag" for true, nothing for false
  std::vector<std::string> words;  // the words of a word-list flag (is_word_list)
  std::string where;               // "file:line"
};

ConfigValue yaml_value(const std::string& flag, const FlagDef& def, const YAML::Node& value, const std::string& where) {
  ConfigValue v{flag, {}, {}, where};
  // A list or mapping where one value belongs (split: [98, 2]) is one line naming the key.
  auto scalar = [&](const YAML::Node& n) {
    if (!n.IsScalar())
      throw ConfigError("--config: " + where + ": key '" + flag + "' expects a single value" +
                        (is_word_list(flag) ? " or a list of words" : "") + ", not a " +
                        (n.IsSequence() ? "list" : n.IsMap() ? "mapping" : "null value"));
    return yaml_scalar_to_string(n);
  };
  if (is_list_flag_without_effect(flag) && value.IsNull()) {
    // no words: the flag is noted all the same
  } else if (is_word_list(flag)) {
    if (value.IsSequence()) {
      for (const auto& item : value) v.words.push_back(scalar(item));
    } else if (value.Tag() == "!" || is_group_list(flag)) {  // quoted: one word, spaces and all (a path with a space)
      v.words.push_back(scalar(value));
    } else {
      std::istringstream words(scalar(value));
      for (std::string w; words >> w;) v.words.push_back(w);
    }
    // As on the command line, where the flag without words is an error ("" or [] would
    // otherwise leave the run on synthetic tokens).
    if (v.words.empty() && !is_list_flag_without_effect(flag))
      throw ConfigError("--config: " + where + ": key '" + flag + "' has no words");
  } else if (def.is_bool) {
    bool on = false;
    try {
      on = value.as<bool>();
    } catch (const YAML::Exception&) {
      throw ConfigError("--config: " + where + ": key '" + flag + "' expects true or false");
    }
    if (on) v.args.push_back("--" + flag);
  } else {
    v.args.push_back("--" + flag + "=" + scalar(value));
  }
  return v;
}

// The keys of the YAML file in file order. A key given twice (also as num_layers and
// num-layers) is an error naming both lines, rather than a silent last-one-wins.
std::vector<ConfigValue> read_config_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError("--config: file not found: " + path);
  if (std::filesystem::is_directory(path)) throw ConfigError("--config: " + path + " is a directory");
  YAML::Node root;
  try {
    // All of the file's documents: a second one ("---") would otherwise be ignored silently.
    const std::vector<YAML::Node> documents = YAML::LoadAllFromFile(path);
    if (documents.size() > 1)
      throw ConfigError("--config: " + path + ":" + std::to_string(documents[1].Mark().line + 1) +
                        ": a second YAML document; put every key in one mapping");
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::Exception& e) {
    throw ConfigError("--config: " + path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (!root.IsMap()) throw ConfigError("--config: " + path + ": expected a mapping of flag: value");
  std::vector<ConfigValue> values;
  std::map<std::string, int> first_line;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar())
      throw ConfigError("--config: " + path + ":" + std::to_string(kv.first.Mark().line + 1) +
                        ": a key must be a flag's name");
    std::string key = kv.first.as<std::string>();
    for (char& c : key)
      if (c == '_') c = '-';
    key = megatron_spelling(key);
    const int line = kv.first.Mark().line + 1;
    const std::string where = path + ":" + std::to_string(line);
    const FlagDef* def = find_flag(key);
    if (!def || key == "config" || key == "help")
      throw ConfigError("--config: " + where + ": unknown key '" + key + "'");
    if (const auto [it, fresh] = first_line.emplace(key, line); !fresh)
      throw ConfigError("--config: " + where + ": duplicate key '" + key + "' (first set at line " +
                        std::to_string(it->second) + ")");
    values.push_back(yaml_value(key, *def, kv.second, where));
  }
  return values;
}

// The flag names a command line gives ("--lr=1" and "--lr 1" both give "lr").
std::set<std::string> flag_names(const std::vector<std::string>& args) {
  std::set<std::string> names;
  for (const std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    names.insert(a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2));
  }
  return names;
}

// Megatron and DeepSpeed refuse a flag given under both of its names (validate_args: "cannot
// have both num-layers and encoder-num-layers specified"), except --save-interval's argparse
// alias --persistent-save-interval, where the last one wins as in argparse.
void check_one_name(std::map<std::string, std::string>& typed_names, const std::string& typed,
                    const std::string& flag) {
  if (flag == "save-interval") return;
  const auto dashed = [](std::string n) {
    std::replace(n.begin(), n.end(), '_', '-');
    return n;
  };
  const auto [it, fresh] = typed_names.emplace(flag, typed);  // the first name as typed
  if (!fresh && dashed(it->second) != dashed(typed))
    throw ConfigError("--" + it->second + " and --" + typed + " are one setting under two names: give one");
}

// Records --config's file: one file, so a second --config is an error naming both files
// rather than a silent last-one-wins (a file's own keys and the command line already layer).
void take_config_path(std::optional<std::string>& config_path, const std::string& path) {
  if (config_path)
    throw ConfigError("--config given twice (" + *config_path + " and " + path + "): give one file");
  config_path = path;
}

}  // namespace

GatheredArgs gather_args(int argc, const char* const* argv, TrainOptions& o) {
  std::map<std::string, std::string> typed_names;  // a flag -> the name it was typed under
  std::vector<std::string> rest;
  std::map<std::string, std::vector<std::string>> cli_words;  // word-list flag -> its words
  std::optional<std::string> config_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {  // a value
      rest.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string typed = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string name = megatron_spelling(typed);
    check_one_name(typed_names, typed, name);
    const std::optional<std::string> value =
        eq == std::string::npos ? std::nullopt : std::optional<std::string>(a.substr(eq + 1));
    if (is_word_list(name)) {
      if (cli_words.count(name)) throw ConfigError("--" + name + " given twice: give its words once");
      std::vector<std::string>& words = cli_words[name];
      if (value) words.push_back(*value);
      else
        while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) words.push_back(argv[++i]);
      if (words.empty() && !is_list_flag_without_effect(name))
        throw ConfigError("--" + name + (name == "profile-ranks"       ? ": expected one or more global ranks"
                                         : name == "rampup-batch-size" ? ": expected START INCR SAMPLES"
                                         : name == "step-batch-size-schedule" ? ": expected THRESHOLD:BATCH ..."
                                         : name == "iterations-to-skip" ? ": expected one or more iterations"
                                         : name == "skip-train-iteration-range" ? ": expected one or more ranges FIRST-LAST"
                                         : name == "recompute-modules" ? ": expected one or more modules (core_attn)"
                                         : is_group_list(name) ? ": expected one or more groups \"NAME: W S:E PREFIX, ...\""
                                                                       : ": expected a prefix"));
    } else if (name == "config") {
      if (!value) check_separate_value("--config", i + 1 < argc ? argv[i + 1] : nullptr);
      take_config_path(config_path, value ? *value : argv[++i]);
    } else {  // Megatron-LM's other spellings of a flag become the flag list's
      rest.push_back("--" + name + (value ? "=" + *value : ""));
    }
  }
  std::set<std::string> cli_flags = flag_names(rest);
  for (const auto& [flag, words] : cli_words) cli_flags.insert(flag);
  GatheredArgs g;
  g.args = {"trident-train"};
  if (config_path) {
    for (ConfigValue& v : read_config_file(*config_path)) {
      if (overridden_by_command_line(v.flag, cli_flags)) continue;
      g.args.insert(g.args.end(), v.args.begin(), v.args.end());
      if (auto* words = word_list(o, v.flag)) *words = std::move(v.words);
      g.from_config[v.flag] = v.where;
    }
  }
  for (auto& [flag, words] : cli_words) *word_list(o, flag) = std::move(words);
  g.args.insert(g.args.end(), rest.begin(), rest.end());
  return g;
}

// An error message with the config file's line of each flag it names whose value came
// from the file: "--lr: cannot parse '1e-3x' as a number (from gpt2.yaml:10)", and for a
// flag other than the message's first, "(--micro-batch-size from gpt2.yaml:8)".
std::string with_config_origins(const std::string& msg, const std::map<std::string, std::string>& from_config) {
  std::vector<std::string> named;
  for (size_t at = msg.find("--"); at != std::string::npos; at = msg.find("--", at + 2)) {
    size_t end = at + 2;
    while (end < msg.size() && (std::islower(static_cast<unsigned char>(msg[end])) ||
                                std::isdigit(static_cast<unsigned char>(msg[end])) || msg[end] == '-' ||
                                msg[end] == '_'))
      ++end;
    const std::string flag = msg.substr(at + 2, end - at - 2);
    if (find_flag(flag) && std::find(named.begin(), named.end(), flag) == named.end()) named.push_back(flag);
  }
  std::string origins;
  for (const std::string& flag : named) {
    const auto it = from_config.find(flag);
    if (it == from_config.end()) continue;
    origins += origins.empty() ? "" : ", ";
    origins += (flag == named.front() ? "from " : "--" + flag + " from ") + it->second;
  }
  return origins.empty() ? msg : msg + " (" + origins + ")";
}

}  // namespace trident::train_flags
