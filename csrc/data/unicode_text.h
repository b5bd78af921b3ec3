// UTF-8 decoding and the few Unicode character classes the tokenizers need, on top of
// utf8proc's character database (no hand-made category tables here).
//
// Invalid UTF-8: decode_utf8() is strict (no overlongs, no encoded surrogates D800-DFFF,
// nothing above U+10FFFF, no truncated sequences). A byte that does not start a valid
// sequence is reported as one invalid unit of length 1 (cp = kInvalidCodepoint), and
// decoding resumes at the next byte. Callers decide what an invalid unit means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trident::unicode {

inline constexpr char32_t kInvalidCodepoint = 0xFFFFFFFFu;

struct Decoded {
  char32_t cp;     // the code point, or kInvalidCodepoint
  uint32_t len;    // bytes consumed (1..4); 1 for an invalid unit
};

// Decodes the code point starting at s[pos]; requires pos < s.size().
inline Decoded decode_utf8(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  const size_t left = s.size() - pos;
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  auto cont = [&](size_t i) { return i < left && (p[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1)) return {char32_t((b0 & 0x1F) << 6 | (p[1] & 0x3F)), 2};
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (cont(1) && cont(2)) {
      char32_t cp = (b0 & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F);
      if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (cont(1) && cont(2) && cont(3)) {
      char32_t cp = (b0 & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F);
      if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
    }
  }
  return {kInvalidCodepoint, 1};
}

// Appends the UTF-8 encoding of a valid code point.
void append_utf8(std::string& out, char32_t cp);

// General category groups (utf8proc). Invalid units and unassigned code points are none.
bool is_assigned(char32_t cp);     // any category but Cn
bool is_letter(char32_t cp);       // L*: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);       // N*: Nd Nl No
bool is_punctuation(char32_t cp);  // P*
bool is_control_category(char32_t cp);  // C*: Cc Cf Cs Co Cn
bool is_nonspacing_mark(char32_t cp);   // Mn
bool is_space_separator(char32_t cp);   // Zs

// The Unicode White_Space property (PropList.txt), which is what `\s` means in the Python
// `regex` module GPT-2 used. utf8proc has no binary properties, so it is derived: every
// Zs, Zl and Zp character, plus the controls U+0009..U+000D and U+0085. This equals
// White_Space in every Unicode version since 6.3 (when U+180E left Zs). Note Python's
// str.isspace() differs: it also accepts U+001C..U+001F.
bool is_white_space(char32_t cp);

// The four classes GPT-2's pre-tokenisation pattern distinguishes: \p{L}, \p{N}, \s
// (is_white_space) and everything else. One utf8proc lookup; kInvalidCodepoint is kOther.
enum class RegexClass : uint8_t { kLetter, kNumber, kSpace, kOther };
RegexClass regex_class(char32_t cp);

// Simple (1:1) lower-case mapping.
char32_t to_lower(char32_t cp);

// Lower-cases a word as Python's str.lower() does where the result can differ after NFD and
// dropping the marks (what BERT's lower-casing does next): code point by code point, except
// a capital sigma in Unicode's Final_Sigma context (after a cased letter, not before one,
// case-ignorable characters skipped) becomes the final sigma U+03C2, not U+03C3.
void to_lower_word(std::u32string& word);

// Canonical decomposition (NFD) of valid UTF-8 text; invalid input is returned unchanged.
std::string nfd(std::string_view utf8);

}  // namespace trident::unicode
