// BERT WordPiece (--tokenizer-type BertWordPieceLowerCase / BertWordPieceCase), following
// Google BERT's tokenization.py (BasicTokenizer + WordpieceTokenizer).
//
// vocab.txt: one token per line, id = line number (from 0); "\r\n" endings accepted.
// [UNK] and [SEP] must be present; [CLS], [PAD], [MASK] are looked up (-1 when absent).
//
// encode(text):
//  1. Clean: drop NUL, U+FFFD and control characters (category C*, except \t \n \r);
//     whitespace (' ', \t, \n, \r, Zs) becomes ' '. Invalid UTF-8 bytes count as U+FFFD,
//     so they are dropped.
//  2. Put spaces around CJK ideographs (the CJK Unified/Compatibility blocks BERT lists).
//  3. Split on whitespace (' ', Zl, Zp after cleaning, like Python's str.split()).
//  4. Lower-case variant only: lower-case each word (utf8proc's simple 1:1 mapping;
//     Python's str.lower() differs for a few characters: U+0130 ends the same once accents
//     are stripped, but a word-final capital sigma gives σ here and ς in Python), then NFD
//     and drop nonspacing marks (Mn; this also drops e.g. the kana voicing mark U+3099).
//  5. Split each punctuation character off as its own word; punctuation = P* categories
//     plus the ASCII symbols 33-47, 58-64, 91-96, 123-126.
//  6. WordPiece each word: a word over 100 characters is [UNK]; else greedy
//     longest-match-first, continuation pieces prefixed "##"; if some position matches
//     nothing the whole word is [UNK].
// decode(ids): tokens joined by spaces, a "##" piece glued to the one before it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace trident {

class BertWordPieceTokenizer final : public Tokenizer {
 public:
  // Throws IoError naming the file when it is missing or lacks [UNK] / [SEP].
  BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t eod() const override { return sep_id_; }
  std::string name() const override {
    return lower_case_ ? "BertWordPieceLowerCase" : "BertWordPieceCase";
  }

  // Steps 1-5: the words WordPiece sees (exposed for tests).
  std::vector<std::string> basic_tokenize(std::string_view text) const;

  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t mask_id() const { return mask_id_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  int32_t lookup(std::string_view token) const;  // -1 when absent
  void wordpiece(std::string_view word, std::vector<int32_t>& out) const;

  bool lower_case_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  int32_t unk_id_ = -1, sep_id_ = -1, cls_id_ = -1, pad_id_ = -1, mask_id_ = -1;
};

}  // namespace trident
