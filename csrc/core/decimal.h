// Numbers in flags as Python's float() reads them (Megatron's argparse type=float): the whole
// text a decimal number ("1e-4", "-0.5", "inf"), not C's hexadecimal floats ("0x1p-1"),
// which std::stod also takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trident {

// Python's int() and float() ignore whitespace around the number (" 5" and "5 "); C's
// std::sto* skip only the leading kind. The text without it.
inline std::string strip_surrounding_space(const std::string& text) {
  constexpr const char* kSpace = " \t\n\v\f\r";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(kSpace) - first + 1);
}

inline std::optional<double> parse_decimal(const std::string& raw) {
  const std::string text = strip_surrounding_space(raw);
  if (text.empty() || text.find_first_of("xX") != std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// A count or an iteration as digits only ("1000"; no sign, space or exponent), at most 18 of
// them so that it fits int64_t; nullopt otherwise.
inline std::optional<int64_t> parse_digits(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(text);
}

}  // namespace trident
