#include "train/weighted_split_paths.h"

#include <cmath>
#include <optional>
#include <set>

#include "core/decimal.h"
#include "core/error.h"
#include "train/data_args_file.h"

namespace trident {
namespace {

constexpr const char* kGroupForm = "expected \"NAME: WEIGHT START:END PREFIX, WEIGHT START:END PREFIX, ...\"";

// The pieces of `text` between the separators, as Python's str.split(separator).
std::vector<std::string> split_at(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at; (at = text.find(separator, from)) != std::string::npos; from = at + separator.size())
    parts.push_back(text.substr(from, at - from));
  parts.push_back(text.substr(from));
  return parts;
}

// A number as Python's float() reads it, finite.
std::optional<double> finite_number(const std::string& word) {
  const std::optional<double> v = parse_decimal(word);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

// "0.1:0.9": BigScience's START:END, two numbers with 0 <= START < END <= 1 (its parser asserts
// START < END, its range reader START, END <= 1; a negative start would index from the end).
DocumentFractions parse_fractions(const std::string& word, const std::string& where) {
  const std::vector<std::string> ends = split_at(word, ":");
  const std::optional<double> start = ends.size() == 2 ? finite_number(ends[0]) : std::nullopt;
  const std::optional<double> end = ends.size() == 2 ? finite_number(ends[1]) : std::nullopt;
  if (!start || !end)
    throw ConfigError(where + "\"" + word + "\" is not a document range START:END (fractions, as 0:0.9)");
  if (!(*start >= 0 && *start < *end && *end <= 1))
    throw ConfigError(where + "\"" + word + "\": expected 0 <= START < END <= 1 (fractions of the documents)");
  return {*start, *end};
}

// A group whose name's ':' is missing ("WIKI 1 0:1 A") cuts its name at the range's colon
// ("WIKI 1 0") and fails on its first dataset ("1 A"): a name of several words says what went
// wrong (BigScience takes such names, so they are not refused as such).
std::string name_colon_hint(const std::string& name) {
  if (name.find_first_of(" \t") == std::string::npos) return "";
  return " (the name \"" + name + "\" has spaces: is the ':' after the group's name missing?)";
}

// One group word: "NAME: W S:E P, ...". Weights normalised.
WeightedSplitGroup parse_group(const std::string& word, const std::string& flag) {
  const std::string where = flag + ": group \"" + word + "\": ";
  const size_t colon = word.find(':');
  if (colon == std::string::npos) throw ConfigError(where + "no ':' after its name; " + kGroupForm);
  WeightedSplitGroup g;
  g.name = strip_surrounding_space(word.substr(0, colon));
  if (g.name.empty()) throw ConfigError(where + "an empty name; " + kGroupForm);
  g.blend.flag = flag + " group " + g.name;
  // Nothing after the name: most likely a group given as several words ("V: 1 0:1 A" unquoted).
  if (whitespace_words(word.substr(colon + 1)).empty())
    throw ConfigError(where + "no dataset after the name: quote each group as one word, \"NAME: WEIGHT START:END "
                      "PREFIX, ...\"");
  // BigScience cuts the rest at every comma: a trailing comma is an empty dataset, refused.
  for (const std::string& dataset : split_at(word.substr(colon + 1), ",")) {
    const std::vector<std::string> w = whitespace_words(dataset);
    if (w.size() != 3)
      throw ConfigError(where + "dataset \"" + strip_surrounding_space(dataset) + "\" is not WEIGHT START:END PREFIX" +
                        name_colon_hint(g.name));
    const std::optional<double> weight = finite_number(w[0]);
    if (!weight || *weight < 0) throw ConfigError(where + "\"" + w[0] + "\" is not a non-negative weight");
    g.blend.weights.push_back(*weight);
    g.blend.fractions.push_back(parse_fractions(w[1], where));
    g.blend.prefixes.push_back(w[2]);
  }
  // Several datasets blend by their normalised weights (BigScience asserts a positive sum);
  // a lone dataset is read alone, its weight unused.
  double sum = 0;
  for (double w : g.blend.weights) sum += w;
  if (g.blend.prefixes.size() > 1 && !(sum > 0)) throw ConfigError(where + "weights sum to zero");
  if (sum > 0)
    for (double& w : g.blend.weights) w /= sum;
  return g;
}

}  // namespace

std::vector<WeightedSplitGroup> parse_weighted_split_paths(const std::vector<std::string>& words,
                                                           const std::string& flag, bool one_group) {
  if (words.empty()) throw ConfigError(flag + ": no group; " + kGroupForm);
  if (one_group && words.size() != 1)
    throw ConfigError(flag + ": " + std::to_string(words.size()) + " groups (\"" + words[1] +
                      "\" the second): the training takes one; quote each group as one word");
  std::vector<WeightedSplitGroup> groups;
  std::set<std::string> names;
  for (const std::string& word : words) {
    groups.push_back(parse_group(word, flag));
    if (!names.insert(groups.back().name).second)
      throw ConfigError(flag + ": two groups named \"" + groups.back().name +
                        "\": each is reported under its name, give them different ones");
  }
  return groups;
}

std::vector<std::string> read_weighted_split_paths_file(const std::string& path, const std::string& flag) {
  const std::string text = read_flag_file(flag, path);
  // Python's text-mode reading (universal newlines): "\r\n" and "\r" end lines as "\n" does.
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      line += text[i];
    } else {
      line += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    }
  }
  const std::string where = flag + " " + path + ": ";
  const size_t newline = line.find('\n');
  if (line.empty() || newline + 1 != line.size())
    throw ConfigError(where + (newline == std::string::npos || line.empty()
                                   ? std::string("expected one line ended by a newline")
                                   : "expected one line, found more") +
                      " of quoted groups: \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"");
  line.pop_back();  // the newline
  if (line.size() < 2 || line.front() != '"' || line.back() != '"')
    throw ConfigError(where + "the line must start and end with '\"': \"NAME: W S:E PREFIX, ...\" \"NAME2: ...\"");
  // The groups lie between the outer quotes, separated by '" "' (BigScience's split).
  return split_at(line.substr(1, line.size() - 2), "\" \"");
}

}  // namespace trident
