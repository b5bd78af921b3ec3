#include "train/data_args_file.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/atomic_file.h"
#include "core/error.h"

namespace trident {

std::string read_flag_file(const std::string& flag, const std::string& path) {
  try {
    return read_file(path);
  } catch (const IoError& e) {
    throw ConfigError(flag + " " + e.what());
  }
}

std::vector<std::string> whitespace_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<std::string> read_data_args_file(const std::string& path) {
  std::vector<std::string> words = whitespace_words(read_flag_file("--data-args-path", path));
  if (words.empty())
    throw ConfigError("--data-args-path " + path + ": no words (expected --data-path's: PREFIX, WEIGHT PREFIX "
                      "pairs, or prefixes)");
  return words;
}

std::array<std::vector<std::string>, 3> read_per_split_data_args_file(const std::string& path) {
  const std::string flag = "--per-split-data-args-path " + path;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_flag_file("--per-split-data-args-path", path));
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(flag + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw ConfigError(flag + ": expected an object with \"train\", \"valid\" and \"test\"");
  std::array<std::vector<std::string>, 3> out;
  const char* keys[3] = {"train", "valid", "test"};
  for (int s = 0; s < 3; ++s) {
    const auto it = j.find(keys[s]);
    if (it == j.end()) throw ConfigError(flag + ": no \"" + keys[s] + "\" (Megatron's file has train, valid and test)");
    if (it->is_null()) continue;
    if (it->is_string()) {
      out[s] = whitespace_words(it->get<std::string>());
      continue;
    }
    const bool strings = it->is_array() && std::all_of(it->begin(), it->end(), [](const auto& w) { return w.is_string(); });
    if (!strings) throw ConfigError(flag + ": \"" + keys[s] + "\": expected a string of words or a list of strings");
    for (const auto& w : *it) out[s].push_back(w.get<std::string>());
  }
  return out;
}

}  // namespace trident
