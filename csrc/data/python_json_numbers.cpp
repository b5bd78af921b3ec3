#include "data/python_json_numbers.h"

#include <cctype>

namespace trident {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// JSON's number grammar, which Python's json module takes whatever the magnitude:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool is_json_number(std::string_view a) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < a.size() && is_digit(a[i])) ++i;
    return i > start;
  };
  if (i < a.size() && a[i] == '-') ++i;
  if (i < a.size() && a[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < a.size() && a[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < a.size() && (a[i] == 'e' || a[i] == 'E')) {
    ++i;
    if (i < a.size() && (a[i] == '+' || a[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == a.size();
}

bool is_python_number(std::string_view a) {
  return a == "NaN" || a == "Infinity" || a == "-Infinity" || is_json_number(a);
}

// Characters that end a bare value (a number, true, false, null, or something invalid).
bool ends_atom(char c) {
  return c == '"' || c == ',' || c == ':' || c == '[' || c == ']' || c == '{' || c == '}' ||
         std::isspace(static_cast<unsigned char>(c));
}

}  // namespace

std::optional<std::string> zero_python_numbers(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  bool replaced = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (c == '"') {  // a string, copied as it is (its escapes included)
      size_t j = i + 1;
      while (j < line.size() && line[j] != '"') j += line[j] == '\\' ? 2 : 1;
      j = j < line.size() ? j + 1 : line.size();
      out.append(line.substr(i, j - i));
      i = j;
    } else if (ends_atom(c)) {
      out.push_back(c);
      ++i;
    } else {
      size_t j = i;
      while (j < line.size() && !ends_atom(line[j])) ++j;
      const std::string_view atom = line.substr(i, j - i);
      if (is_python_number(atom)) {
        out.push_back('0');
        replaced = true;
      } else {
        out.append(atom);
      }
      i = j;
    }
  }
  if (!replaced) return std::nullopt;
  return out;
}

}  // namespace trident
