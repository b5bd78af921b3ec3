// A flag's text as a number, as Megatron's argparse reads it, and a word list as one text
// (options_internal.h).
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/decimal.h"
#include "core/error.h"
#include "train/options_internal.h"

namespace trident::options_internal {
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

}  // namespace

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

// The types of TrainOptions' (and ModelConfig's) numeric fields.
template int convert<int>(const std::string&, const std::string&);
template int64_t convert<int64_t>(const std::string&, const std::string&);
template uint64_t convert<uint64_t>(const std::string&, const std::string&);
template float convert<float>(const std::string&, const std::string&);
template double convert<double>(const std::string&, const std::string&);

std::string join_words(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : " ") + word;
  return text;
}

}  // namespace trident::options_internal
