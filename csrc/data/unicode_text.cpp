#include "data/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>

namespace trident::unicode {

namespace {
// utf8proc returns category 0 (Cn) for anything outside 0..0x10FFFF, including our
// invalid marker, so every helper below is safe on kInvalidCodepoint.
utf8proc_category_t category(char32_t cp) {
  if (cp > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_assigned(char32_t cp) { return category(cp) != UTF8PROC_CATEGORY_CN; }

bool is_letter(char32_t cp) {
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t cp) {
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t cp) {
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_control_category(char32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_CN || (c >= UTF8PROC_CATEGORY_CC && c <= UTF8PROC_CATEGORY_CO);
}

bool is_nonspacing_mark(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_MN; }

bool is_space_separator(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ZS; }

bool is_white_space(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return true;
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

RegexClass regex_class(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return RegexClass::kSpace;
  auto c = category(cp);
  if (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) return RegexClass::kLetter;
  if (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) return RegexClass::kNumber;
  if (c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP)
    return RegexClass::kSpace;
  return RegexClass::kOther;
}

char32_t to_lower(char32_t cp) {
  if (cp > 0x10FFFF) return cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}

namespace {
// Unicode's Cased property: Lowercase, Uppercase or titlecase (Lt).
bool is_cased(char32_t cp) {
  if (cp > 0x10FFFF) return false;
  const auto c = static_cast<utf8proc_int32_t>(cp);
  return utf8proc_islower(c) || utf8proc_isupper(c) || category(cp) == UTF8PROC_CATEGORY_LT;
}
// Unicode's Case_Ignorable property: Mn, Me, Cf, Lm, Sk, and Word_Break MidLetter,
// MidNumLet and Single_Quote (the apostrophes, full stops, colons and middle dots below).
bool is_case_ignorable(char32_t cp) {
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default: break;
  }
  switch (cp) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018:
    case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07:
    case 0xFF0E: case 0xFF1A: return true;
    default: return false;
  }
}
}  // namespace

void to_lower_word(std::u32string& word) {
  const std::u32string original = word;
  const size_t n = original.size();
  for (size_t i = 0; i < n; ++i) {
    if (original[i] != 0x3A3) {
      word[i] = to_lower(original[i]);
      continue;
    }
    size_t b = i;  // a cased letter before, past case-ignorable ones
    while (b > 0 && is_case_ignorable(original[b - 1])) --b;
    size_t a = i + 1;  // and none after
    while (a < n && is_case_ignorable(original[a])) ++a;
    const bool final_sigma = b > 0 && is_cased(original[b - 1]) && !(a < n && is_cased(original[a]));
    word[i] = final_sigma ? 0x3C2 : 0x3C3;
  }
}

std::string nfd(std::string_view utf8) {
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                        static_cast<utf8proc_ssize_t>(utf8.size()), &out,
                        static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE));
  if (n < 0) return std::string(utf8);
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace trident::unicode
