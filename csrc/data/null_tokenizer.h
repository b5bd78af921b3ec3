// Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size V), for data that is
// token ids already: a text is its ids as decimal numbers separated by spaces ("17 4 9").
// Ids are 0 .. V - 1 and V is the end of document, so vocab_size() is V + 1 and eod() is V,
// as Megatron's _NullTokenizer. Megatron splits on single spaces and fails on anything else;
// here any run of whitespace separates ids, an empty text has none, and a word that is not
// an id in [0, V] is a TokenizeError naming it.
#pragma once

#include "data/tokenizer.h"

namespace trident {

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size_without_eod);
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;  // "17 4 9"
  int64_t vocab_size() const override { return eod_ + int64_t{1}; }
  int32_t eod() const override { return eod_; }
  std::string name() const override { return "NullTokenizer"; }
  const char* token_separator() const override { return " "; }

 private:
  int32_t eod_;
};

}  // namespace trident
