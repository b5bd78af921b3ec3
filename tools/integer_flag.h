// The one checked conversion of a flag's text to an integer, for every tool (cxxopts-based
// or hand-parsed): the whole text must be a decimal integer within [lo, hi]. Anything else,
// a value past the range or past 64 bits included, is a ConfigError naming the flag and the
// text as typed, so nothing is narrowed silently (--target-tp 4294967298 is not tp 2).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "core/decimal.h"
#include "core/error.h"

namespace trident {

// The largest --iteration a tool accepts (iter_NNNNNNN names have 7 digits; this is far past).
constexpr long long kMaxIterationFlag = 1ll << 40;

// Megatron's --ckpt-step and the tools' --iteration choose one checkpoint: one of them.
inline void check_one_iteration_flag(bool ckpt_step_given, bool iteration_given) {
  if (ckpt_step_given && iteration_given) throw ConfigError("--ckpt-step and --iteration name one thing: give one");
}

inline long long parse_integer_flag(const std::string& flag, const std::string& text, long long lo, long long hi) {
  const std::string number = strip_surrounding_space(text);  // as Python's int()
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != number.size() || v < lo || v > hi)
    throw ConfigError("--" + flag + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                      ", got \"" + text + "\"");
  return v;
}

}  // namespace trident
