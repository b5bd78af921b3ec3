#include "data/wordpiece.h"

#include <fstream>

#include "core/error.h"
#include "data/unicode_text.h"

namespace trident {

namespace {

constexpr size_t kMaxCharsPerWord = 100;

bool is_bert_whitespace(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || unicode::is_space_separator(cp);
}

bool is_bert_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  return unicode::is_control_category(cp);
}

bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  return unicode::is_punctuation(cp);
}

// The CJK Unified Ideographs blocks (and extensions, compatibility ideographs) that
// BERT's _is_chinese_char lists; Hangul, Hiragana and Katakana are not among them.
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// After cleaning, the separators Python's str.split() would still split on.
bool splits_words(char32_t cp) {
  return cp == ' ' || cp == 0x2028 || cp == 0x2029;
}

std::u32string decode_all(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    const unicode::Decoded d = unicode::decode_utf8(s, pos);
    out.push_back(d.cp == unicode::kInvalidCodepoint ? char32_t{0xFFFD} : d.cp);
    pos += d.len;
  }
  return out;
}

std::string to_utf8(const std::u32string& cps) {
  std::string out;
  for (char32_t cp : cps) unicode::append_utf8(out, cp);
  return out;
}

}  // namespace

BertWordPieceTokenizer::BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case)
    : lower_case_(lower_case) {
  std::ifstream in(vocab_file, std::ios::binary);
  if (!in) throw IoError(detail::concat("cannot open BERT vocab file ", vocab_file));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ids_.emplace(line, static_cast<int32_t>(tokens_.size()));  // first occurrence wins
    tokens_.push_back(line);
  }
  if (tokens_.empty()) throw IoError(detail::concat("BERT vocab file ", vocab_file, " is empty"));
  unk_id_ = lookup("[UNK]");
  sep_id_ = lookup("[SEP]");
  cls_id_ = lookup("[CLS]");
  pad_id_ = lookup("[PAD]");
  mask_id_ = lookup("[MASK]");
  if (unk_id_ < 0 || sep_id_ < 0)
    throw IoError(detail::concat("BERT vocab file ", vocab_file, " lacks [UNK] or [SEP]"));
}

int32_t BertWordPieceTokenizer::lookup(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::string> BertWordPieceTokenizer::basic_tokenize(std::string_view text) const {
  // Steps 1-3: clean, space out CJK ideographs, split into words.
  std::vector<std::u32string> words;
  std::u32string cur;
  auto flush = [&] {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  for (char32_t cp : decode_all(text)) {
    if (cp == 0 || cp == 0xFFFD || is_bert_control(cp)) continue;
    if (is_bert_whitespace(cp) || splits_words(cp)) {
      flush();
    } else if (is_cjk_ideograph(cp)) {
      flush();
      cur.push_back(cp);
      flush();
    } else {
      cur.push_back(cp);
    }
  }
  flush();

  // Steps 4-5: lower-case and strip accents, then split punctuation off.
  std::vector<std::string> out;
  for (std::u32string& w : words) {
    if (lower_case_) {
      unicode::to_lower_word(w);
      std::u32string stripped;
      for (char32_t cp : decode_all(unicode::nfd(to_utf8(w))))
        if (!unicode::is_nonspacing_mark(cp)) stripped.push_back(cp);
      w = std::move(stripped);
    }
    std::u32string piece;
    for (char32_t cp : w) {
      if (is_bert_punctuation(cp)) {
        if (!piece.empty()) out.push_back(to_utf8(piece));
        piece.clear();
        out.push_back(to_utf8(std::u32string(1, cp)));
      } else {
        piece.push_back(cp);
      }
    }
    if (!piece.empty()) out.push_back(to_utf8(piece));
  }
  return out;
}

void BertWordPieceTokenizer::wordpiece(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<size_t> bounds;  // byte offsets of character starts, plus the end
  for (size_t pos = 0; pos < word.size();) {
    bounds.push_back(pos);
    pos += unicode::decode_utf8(word, pos).len;
  }
  const size_t nchars = bounds.size();
  bounds.push_back(word.size());
  if (nchars > kMaxCharsPerWord) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  std::string candidate;
  for (size_t start = 0; start < nchars;) {
    int32_t found = -1;
    size_t stop = nchars;
    for (; stop > start; --stop) {
      candidate.assign(start > 0 ? "##" : "");
      candidate.append(word.substr(bounds[start], bounds[stop] - bounds[start]));
      found = lookup(candidate);
      if (found >= 0) break;
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = stop;
  }
}

std::vector<int32_t> BertWordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (const std::string& word : basic_tokenize(text)) wordpiece(word, out);
  return out;
}

std::string BertWordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size())
      throw Error(detail::concat("BERT token id ", id, " is outside [0, ", tokens_.size(), ")"));
    const std::string& t = tokens_[id];
    if (t.size() > 2 && t[0] == '#' && t[1] == '#' && !out.empty()) {
      out.append(t, 2);
    } else {
      if (!out.empty()) out.push_back(' ');
      out += t;
    }
  }
  return out;
}

}  // namespace trident
