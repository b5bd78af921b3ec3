// Numbers in flags as Python's float() reads them (Megatron's argparse type=float): the whole
// text a decimal number ("1e-4", "-0.5", "inf"), not C's hexadecimal floats ("0x1p-1"),
// which std::stod also takes.
#pragma once

#include <optional>
#include <string>

namespace trident {

inline std::optional<double> parse_decimal(const std::string& text) {
  if (text.empty() || text.find_first_of("xX") != std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace trident
