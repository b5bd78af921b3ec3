// Flag parsing shared by the tools built on cxxopts: parse errors and bad numbers become
// ConfigError lines that name the flag (tool_main.h prints them and exits 2). Numbers are
// declared as string options and converted here, so "--workers x" names --workers
// instead of failing inside cxxopts.
#pragma once

#include <cxxopts.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/decimal.h"
#include "core/error.h"
#include "core/flag_value.h"
#include "tools/integer_flag.h"

namespace trident {

// cxxopts reads "--greedy=false" as the switch on and takes the word after a value flag even
// when it is another flag (core/flag_value.h): both are errors here, before cxxopts runs.
inline void check_flag_words(const cxxopts::Options& options, int argc, const char* const* argv) {
  std::map<std::string, bool> is_switch;  // long name -> takes no value
  for (const std::string& group : options.groups())
    for (const cxxopts::HelpOptionDetails& d : options.group_help(group).options)
      for (const std::string& name : d.l) is_switch[name] = d.is_boolean;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!looks_like_flag(a)) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const auto it = is_switch.find(name);
    if (it == is_switch.end()) continue;  // cxxopts names unknown flags
    check_flag_word("--" + name, it->second, eq != std::string::npos, i + 1 < argc ? argv[i + 1] : nullptr);
  }
}

inline cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, const char* const* argv) {
  check_flag_words(options, argc, argv);
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::no_such_option& e) {
    throw ConfigError(std::string("unknown flag (") + e.what() + ")");
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (!r.unmatched().empty()) throw ConfigError("unexpected argument '" + r.unmatched().front() + "' (see --help)");
  return r;
}

// Every value of a flag that may be repeated, in command-line order, each whole. (Declare
// such a flag as a string, not cxxopts::value<std::vector<std::string>>: cxxopts splits a
// vector's values at commas, so --prompt "Hello, world" would become two.)
inline std::vector<std::string> repeated_flag(const cxxopts::ParseResult& r, const std::string& flag) {
  std::vector<std::string> values;
  for (const cxxopts::KeyValue& kv : r.arguments())
    if (kv.key() == flag) values.push_back(kv.value());
  return values;
}

// The value of a flag that must be given.
inline std::string required_flag(const cxxopts::ParseResult& r, const std::string& flag) {
  if (!r.count(flag)) throw ConfigError("--" + flag + " is required");
  return r[flag].as<std::string>();
}

// The whole text of --flag as an integer in [lo, hi] (integer_flag.h).
inline long long integer_flag(const cxxopts::ParseResult& r, const std::string& flag, long long lo, long long hi) {
  return parse_integer_flag(flag, r[flag].as<std::string>(), lo, hi);
}

// The whole text of --flag as a number (core/decimal.h).
inline double number_flag(const cxxopts::ParseResult& r, const std::string& flag) {
  const std::string text = r[flag].as<std::string>();
  const std::optional<double> v = parse_decimal(text);
  if (!v) throw ConfigError("--" + flag + ": expected a number, got \"" + text + "\"");
  return *v;
}

}  // namespace trident
