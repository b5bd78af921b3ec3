// The value a flag takes from the next word of a command line. Argument parsers (cxxopts,
// Python's argparse) take whatever word follows a flag that wants a value, so a forgotten
// value swallows the next flag: "--save --mock-data" would save into ./--mock-data. Every
// trident tool refuses a separate value that begins with "--" instead; one that really does
// is written attached ("--save=--odd-name").
#pragma once

#include <string>

#include "core/error.h"

namespace trident {

inline bool looks_like_flag(const std::string& word) { return word.rfind("--", 0) == 0; }

// Throws ConfigError naming `flag` ("--save") when `next` (the word after it, or null at the
// end of the command line) cannot be its value.
inline void check_separate_value(const std::string& flag, const char* next) {
  if (!next) throw ConfigError(flag + ": expected a value");
  if (looks_like_flag(next))
    throw ConfigError(flag + ": expected a value, got the flag " + next + " (write " + flag + "=" + next +
                      " for a value that begins with --)");
}

// The checks of one known flag as written: a switch takes no "=value" (parsers would read
// "--greedy=false" as on); a flag that takes a value and has none attached takes the next word
// (check_separate_value).
inline void check_flag_word(const std::string& flag, bool is_switch, bool value_attached, const char* next) {
  if (is_switch && value_attached) throw ConfigError(flag + " takes no value (write " + flag + " alone)");
  if (!is_switch && !value_attached) check_separate_value(flag, next);
}

}  // namespace trident
